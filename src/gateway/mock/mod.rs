//! The scripted mock model provider: an OpenAI-compatible server that
//! records every request it receives and answers like a model would, from a script. QA
//! and the tests run the gateway against it; it is a stand-in for the provider, so it
//! reads requests from any client and never calls the agent loop or the dispatcher.
//!
//! Routes:
//! - `POST /v1/responses` (OpenAI Responses), `POST /v1/chat/completions` (Chat
//!   Completions) and `POST /v1/messages` (Anthropic Messages), each streamed as SSE
//!   (`data: {json}` events, Chat ending with `data: [DONE]`, the others naming each
//!   event's type) when the body says `"stream": true`;
//! - `GET /v1/models`: one model, [`MODEL`];
//! - `GET /debug/requests`: every request body received, in order, as a JSON array;
//! - `GET /healthz`: `{"ok": true}`.
//!
//! A request goes through four parts, in order:
//! - `http`: the routes, the body limit, recording, errors;
//! - `conversation`: what the request says: its turns and declared tools;
//! - `play`: the reply, decided from the request alone (the QA play, a [`Scenario`], or
//!   the echo), so the same request always gets the same reply;
//! - `encode`: the reply as a Responses, Chat Completions or Anthropic body or stream,
//!   with deterministic ids.

mod conversation;
mod encode;
mod http;
mod play;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use http::{MAX_BODY_BYTES, MODEL};
pub use play::{
    QA_OUTPUT_CHARS, QA_PROMPT, Reply, Scenario, ScriptedCall, Step, qa_code, qa_marker,
};

/// How the mock provider is run.
#[derive(Debug, Clone, Default)]
pub struct MockOptions {
    /// The script for conversations without the QA prompt.
    pub scenario: Option<Scenario>,
    /// A file each request body is appended to, as one JSON line.
    pub record: Option<PathBuf>,
}

/// The mock provider: its options and every request it has received.
#[derive(Debug)]
pub struct MockProvider {
    options: MockOptions,
    requests: Mutex<Vec<Value>>,
    /// Requests answered, for the `resp_<k>` / `chatcmpl-<k>` ids.
    answered: AtomicU64,
}

impl MockProvider {
    pub fn new(options: MockOptions) -> Arc<Self> {
        Arc::new(MockProvider {
            options,
            requests: Mutex::new(Vec::new()),
            answered: AtomicU64::new(0),
        })
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().clone()
    }
}

/// Serves the mock provider on `listener` until `shutdown` is cancelled; requests in
/// flight are finished first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    provider: Arc<MockProvider>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, provider.router())
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
mod tests;
