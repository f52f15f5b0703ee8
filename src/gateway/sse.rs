//! A streamed answer: the turn's text as server-sent events while the provider streams it,
//! then the end of the answer, in the shape an [`Encoder`] gives them (Responses events,
//! Chat chunks).
//!
//! Nothing is sent until the turn has text or has ended: a turn that fails before saying
//! anything (a provider's 429, a bad request the provider refused) is answered with that
//! HTTP status and error, as a non-streamed request would be, instead of a 200 stream
//! that fails. After that the events follow the turn as it goes.
//!
//! The body owns the turn's cancel guard: a client that goes away drops the body, and with
//! it the turn. One that stops reading fills the text buffer, and the turn waits for it
//! at most [`super::turn::CLIENT_STALL`], then ends.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::mpsc;

use super::errors::ApiError;
use super::turn::{Running, settled};
use crate::agent::{Held, TurnOutcome};

/// A front's events for one streamed turn.
pub trait Encoder: Send + 'static {
    /// What opens the stream.
    fn start(&mut self) -> Vec<Bytes>;
    /// A piece of the answer's text.
    fn text(&mut self, delta: &str) -> Vec<Bytes>;
    /// The end: the outcome, or why the turn failed, as events each made only when the
    /// client is ready for it. The end of a Responses stream repeats the whole answer four
    /// times (the text done, the part done, the item done, the response completed): made
    /// ahead, all four sat in memory for as long as a client that does not read kept its
    /// connection (~100 MB for a 32 MiB answer); made one at a time, one is.
    fn finish(&mut self, result: Result<TurnOutcome, ApiError>) -> Vec<Later<Self>>;
}

/// An event of the end of a stream, made when the client takes it (see [`Encoder::finish`]).
pub type Later<E> = Box<dyn FnOnce(&mut E) -> Bytes + Send>;

/// An event already made, as one of the end's.
pub fn made<E>(frame: Bytes) -> Later<E> {
    Box::new(move |_| frame)
}

/// One event: `event: NAME` (when given) and its JSON data.
pub fn event(name: Option<&str>, data: &Value) -> Bytes {
    let mut frame = String::new();
    if let Some(name) = name {
        frame.push_str("event: ");
        frame.push_str(name);
        frame.push('\n');
    }
    frame.push_str("data: ");
    frame.push_str(&data.to_string());
    frame.push_str("\n\n");
    Bytes::from(frame)
}

/// `body` as a JSON answer that keeps `held` (the provider answers' places it was made
/// from) until its last byte is sent, or its client gone: a client that does not read
/// holds its places, not more than them.
pub fn json_holding(body: &Value, held: Held) -> Response {
    struct Holding {
        bytes: Vec<u8>,
        _held: Held,
    }
    impl AsRef<[u8]> for Holding {
        fn as_ref(&self) -> &[u8] {
            &self.bytes
        }
    }
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(Bytes::from_owner(Holding { bytes, _held: held })),
    )
        .into_response()
}

/// The streamed answer of `running`, whose text arrives on `text`.
pub async fn respond<E: Encoder>(
    mut running: Running,
    mut text: mpsc::Receiver<String>,
    mut encoder: E,
) -> Response {
    let mut early = Vec::new();
    let mut ended = None;
    tokio::select! {
        biased;
        first = text.recv() => match first {
            Some(delta) => early.push(delta),
            // Every sender is gone: the turn is over.
            None => ended = Some(settled((&mut running.turn).await)),
        },
        joined = &mut running.turn => ended = Some(settled(joined)),
    }
    if ended.is_some() {
        while let Ok(delta) = text.try_recv() {
            early.push(delta);
        }
    }
    if early.is_empty()
        && let Some(Err(e)) = &ended
    {
        return e.clone().into_response();
    }
    let mut first: Vec<Bytes> = encoder.start();
    for delta in &early {
        first.extend(encoder.text(delta));
    }
    let mut st = Streaming {
        first: Some(first),
        text,
        running: Some(running),
        end: VecDeque::new(),
        held: Held::default(),
        encoder,
    };
    if let Some(result) = ended {
        st.running = None;
        st.finish(result);
    }
    let body = futures::stream::unfold(st, |mut st| async move {
        if let Some(first) = st.first.take() {
            return Some((Ok::<_, Infallible>(Bytes::from(concat(first))), st));
        }
        loop {
            if let Some(later) = st.end.pop_front() {
                let frame = later(&mut st.encoder);
                return Some((Ok(frame), st));
            }
            let running = st.running.as_mut()?;
            match st.text.recv().await {
                Some(delta) => {
                    let frames = st.encoder.text(&delta);
                    return Some((Ok(Bytes::from(concat(frames))), st));
                }
                None => {
                    let result = settled((&mut running.turn).await);
                    // The guard goes with it: the turn is over.
                    st.running = None;
                    st.finish(result);
                }
            }
        }
    });
    sse_response(Body::from_stream(body))
}

/// The stream's state: what is still to send, and the turn (with its cancel guard) until
/// it has ended.
struct Streaming<E> {
    first: Option<Vec<Bytes>>,
    text: mpsc::Receiver<String>,
    running: Option<Running>,
    /// The end's events not yet made, once the turn has ended.
    end: VecDeque<Later<E>>,
    /// The provider answers' places, kept until the stream is sent or dropped.
    held: Held,
    encoder: E,
}

impl<E: Encoder> Streaming<E> {
    fn finish(&mut self, mut result: Result<TurnOutcome, ApiError>) {
        if let Ok(outcome) = &mut result {
            self.held = std::mem::take(&mut outcome.held);
        }
        self.end = self.encoder.finish(result).into();
    }
}

/// Events made one at a time as the client reads them (a stored response replayed), as
/// one streamed answer; `held` (a place among the requests answered at once) is let go
/// when the last is sent or the client goes.
pub fn replay(
    frames: impl Iterator<Item = Bytes> + Send + 'static,
    held: impl Send + Sync + 'static,
) -> Response {
    let frames = futures::stream::iter(frames.map(Ok::<_, Infallible>));
    sse_response(Body::from_stream(crate::host::serve::holding(frames, held)))
}

fn concat(frames: Vec<Bytes>) -> Vec<u8> {
    let mut out = Vec::with_capacity(frames.iter().map(Bytes::len).sum());
    for f in frames {
        out.extend_from_slice(&f);
    }
    out
}

fn sse_response(body: Body) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
