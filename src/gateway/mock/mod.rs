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
//! - `GET /debug/requests`: the request bodies received, in order, as a JSON array: the
//!   latest [`RECORD_MAX_BYTES`] of them (the record file holds every one);
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

use crate::gateway::json::Budget;
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

/// The request bodies the mock keeps in memory, as compact JSON text: the oldest go once
/// the latest take more. A mock left running under a load test kept every body, 890 MB.
pub const RECORD_MAX_BYTES: usize = 64 * 1024 * 1024;

/// The mock provider: its options and the latest requests it has received.
#[derive(Debug)]
pub struct MockProvider {
    options: MockOptions,
    requests: Mutex<Recorded>,
    /// Requests answered, for the `resp_<k>` / `chatcmpl-<k>` ids.
    answered: AtomicU64,
}

impl MockProvider {
    pub fn new(options: MockOptions) -> Arc<Self> {
        Arc::new(MockProvider {
            options,
            requests: Mutex::new(Recorded::default()),
            answered: AtomicU64::new(0),
        })
    }

    /// The request bodies received so far (the latest [`RECORD_MAX_BYTES`]), in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests
            .lock()
            .bodies
            .iter()
            .filter_map(|b| Budget::default().parse(b).ok())
            .collect()
    }
}

/// Request bodies as text, within [`RECORD_MAX_BYTES`].
#[derive(Debug, Default)]
struct Recorded {
    bodies: std::collections::VecDeque<String>,
    bytes: usize,
}

impl Recorded {
    fn push(&mut self, body: String, max_bytes: usize) {
        self.bytes += body.len();
        self.bodies.push_back(body);
        while self.bytes > max_bytes
            && let Some(old) = self.bodies.pop_front()
        {
            self.bytes -= old.len();
        }
    }

    /// The bodies as one JSON array, without parsing them again.
    fn as_json_array(&self) -> String {
        let mut out = String::with_capacity(self.bytes + self.bodies.len() + 2);
        out.push('[');
        for (i, b) in self.bodies.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(b);
        }
        out.push(']');
        out
    }
}

/// Serves the mock provider on `listener` until `shutdown` is cancelled; requests in
/// flight are finished first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    provider: Arc<MockProvider>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let limits = crate::host::serve::Limits::default();
    crate::host::serve::serve(listener, provider.router(), limits, async move {
        shutdown.cancelled().await
    })
    .await
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod recorded_tests {
    use super::*;

    #[test]
    fn the_record_keeps_the_latest_within_its_bytes() {
        let mut r = Recorded::default();
        for i in 0..10 {
            r.push(format!("{{\"n\":{i}}}"), 20);
        }
        assert_eq!(r.as_json_array(), r#"[{"n":8},{"n":9}]"#);
        assert!(r.bytes <= 20);
    }
}
