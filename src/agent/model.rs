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
    /// The conversation, shared with the turn: a copy per round held every earlier
    /// answer once more for as long as the next was read (front round 9 F2).
    pub messages: Arc<Vec<Message>>,
    /// The client's options for this round, its tool choice mapped onto `tools`.
    pub options: Arc<RequestOptions>,
    /// Where the answer's text goes as it arrives, when the client streams.
    pub text: Option<TextStream>,
    /// The turn's places from its earlier rounds' answers, for this one to take its first
    /// places from ([`Held`]): a turn holds its largest answer's places, not the sum of all
    /// its rounds'. Each round's kept to the end, 64 turns of 4 MiB answers filled the pool
    /// and every next round waited 30 s for the others to give up (front round 9). What the
    /// model does not take stays the turn's.
    pub held: Arc<parking_lot::Mutex<Held>>,
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
    /// Whether the provider cut the answer short, and any refusal it gave.
    pub ending: crate::provider::normalize::Ending,
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

    /// The places no other copy holds, as permits of their own, and the rest.
    pub fn into_owned(self) -> (Vec<tokio::sync::OwnedSemaphorePermit>, Held) {
        let mut owned = Vec::new();
        let mut shared = Vec::new();
        for p in self.0 {
            match Arc::try_unwrap(p) {
                Ok(p) => owned.push(p),
                Err(p) => shared.push(p),
            }
        }
        (owned, Held(shared))
    }

    /// These places let go in step with `bytes` bytes as they are sent
    /// ([`LettingGo::sent`]): a response read slowly holds what its client has not read
    /// yet, not the whole answer to its last byte. Places another copy of this holds too
    /// stay held until the end.
    pub fn let_go_over(self, bytes: usize) -> LettingGo {
        let (owned, shared) = self.into_owned();
        let places = owned.iter().map(|p| p.num_permits()).sum();
        LettingGo {
            owned,
            _shared: shared,
            places,
            bytes,
            sent: 0,
            gone: 0,
        }
    }
}

/// Places let go as the bytes they stand for are sent: see [`Held::let_go_over`].
#[derive(Debug)]
pub struct LettingGo {
    owned: Vec<tokio::sync::OwnedSemaphorePermit>,
    _shared: Held,
    places: usize,
    bytes: usize,
    sent: usize,
    gone: usize,
}

impl LettingGo {
    /// `n` more bytes sent: their share of the places goes.
    pub fn sent(&mut self, n: usize) {
        self.sent = (self.sent + n).min(self.bytes);
        let due = if self.sent >= self.bytes {
            self.places
        } else {
            // u128: places (KiB, up to 2^32) times bytes would overflow 64 bits.
            (self.places as u128 * self.sent as u128 / self.bytes.max(1) as u128) as usize
        };
        let mut go = due.saturating_sub(self.gone);
        self.gone = self.gone.max(due);
        while go > 0 {
            let Some(last) = self.owned.last_mut() else {
                return;
            };
            let have = last.num_permits();
            if have <= go {
                go -= have;
                self.owned.pop();
            } else {
                drop(last.split(go));
                go = 0;
            }
        }
    }
}

/// `more` places of the same pool joined to those in `slot`: how a holder that takes its
/// places as bytes arrive (an answer, a turn's results) keeps them as one permit.
pub fn join_places(
    slot: &mut Option<tokio::sync::OwnedSemaphorePermit>,
    more: tokio::sync::OwnedSemaphorePermit,
) {
    match slot {
        Some(p) => p.merge(more),
        None => *slot = Some(more),
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
    /// The request field the provider's error names (`param`), as it named it (boxed:
    /// the error is the `Err` of every model call, and clippy bounds its size).
    pub param: Option<Box<str>>,
    /// The wait the provider asked for (`retry-after-ms` or `Retry-After`), as read.
    pub retry_after: Option<std::time::Duration>,
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
