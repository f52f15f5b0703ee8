//! What a model is to the loop: the request it is sent each round, its reply or its
//! failure, and the stream the answer's text takes to a client that streams. A model is a
//! provider client (the gateway's), the mock, or a script in tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Message;
use crate::provider::{RequestOptions, ToolCall, ToolSpec, Usage};

/// What the model is sent each round.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    pub system: String,
    pub tools: Vec<ToolSpec>,
    pub messages: Vec<Message>,
    /// The client's options for this round, its tool choice mapped onto `tools`.
    pub options: Arc<RequestOptions>,
    /// Where the answer's text goes as it arrives, when the client streams.
    pub text: Option<TextStream>,
}

/// What the model answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelReply {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// The text already went to [`ModelRequest::text`] as it came.
    pub streamed: bool,
    /// Tokens, when the provider counted them.
    pub usage: Option<Usage>,
    /// The answer's bytes' place in the provider client's pool, held as long as anything
    /// made of them is (through the turn, to the last byte of its response).
    pub held: Held,
}

/// Places in a bounded pool (the provider answers in flight), let go when the last copy
/// is dropped. Equal to any other: they hold memory, not meaning.
#[derive(Debug, Clone, Default)]
pub struct Held(Vec<Arc<tokio::sync::OwnedSemaphorePermit>>);

impl Held {
    pub fn new(permit: tokio::sync::OwnedSemaphorePermit) -> Self {
        Held(vec![Arc::new(permit)])
    }

    /// `other`'s places too.
    pub fn add(&mut self, other: Held) {
        self.0.extend(other.0);
    }
}

impl PartialEq for Held {
    fn eq(&self, _: &Held) -> bool {
        true
    }
}

/// A provider's failure: what it said and, when it answered with an error status, that
/// status and its error's type and code, for the client to get the same.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelError {
    pub message: String,
    pub status: Option<u16>,
    pub kind: Option<String>,
    pub code: Option<String>,
    /// The provider's `Retry-After`, as it sent it.
    pub retry_after: Option<String>,
}

impl From<String> for ModelError {
    fn from(message: String) -> Self {
        ModelError {
            message,
            ..ModelError::default()
        }
    }
}

pub type ModelFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ModelReply, ModelError>> + Send + 'a>>;
pub type ModelsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Value>, ModelError>> + Send + 'a>>;

/// A model: a provider client, the mock provider, or a script in tests.
pub trait Model: Send + Sync {
    fn respond<'a>(&'a self, request: &'a ModelRequest) -> ModelFuture<'a>;

    /// The models the provider lists, as OpenAI's `{id, object: "model", created,
    /// owned_by}`; none unless the model can ask.
    fn models(&self) -> ModelsFuture<'_> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// What joins the texts of two rounds in the answer.
pub const ROUND_SEPARATOR: &str = "\n\n";

/// The answer's text on its way to a client that streams: a bounded channel, so a client
/// that reads slowly slows the turn down; one that stops reading for `stall`, or is gone,
/// aborts it (nothing would take the answer).
#[derive(Debug, Clone)]
pub struct TextStream {
    tx: mpsc::Sender<String>,
    /// The next text starts a new round's: [`ROUND_SEPARATOR`] goes first.
    separate: Arc<AtomicBool>,
    abort: CancellationToken,
    stall: Duration,
}

impl TextStream {
    pub fn new(tx: mpsc::Sender<String>, abort: CancellationToken, stall: Duration) -> Self {
        TextStream {
            tx,
            separate: Arc::new(AtomicBool::new(false)),
            abort,
            stall,
        }
    }

    /// Sends a piece of the answer (nothing for an empty one).
    pub async fn send(&self, delta: &str) {
        if delta.is_empty() {
            return;
        }
        let text = if self.separate.swap(false, Ordering::SeqCst) {
            format!("{ROUND_SEPARATOR}{delta}")
        } else {
            delta.to_string()
        };
        match tokio::time::timeout(self.stall, self.tx.send(text)).await {
            Ok(Ok(())) => {}
            _ => self.abort.cancel(),
        }
    }

    pub(super) fn separate_next(&self) {
        self.separate.store(true, Ordering::SeqCst);
    }
}
