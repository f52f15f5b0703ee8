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

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::mpsc;

use super::errors::ApiError;
use super::turn::{Running, settled};
use crate::agent::TurnOutcome;

/// A front's events for one streamed turn.
pub trait Encoder: Send + 'static {
    /// What opens the stream.
    fn start(&mut self) -> Vec<Bytes>;
    /// A piece of the answer's text.
    fn text(&mut self, delta: &str) -> Vec<Bytes>;
    /// The end: the outcome, or why the turn failed.
    fn finish(&mut self, result: Result<TurnOutcome, ApiError>) -> Vec<Bytes>;
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
    if let Some(result) = ended {
        first.extend(encoder.finish(result));
        return sse_response(Body::from(Bytes::from(concat(first))));
    }
    let state = Streaming {
        first: Some(first),
        text,
        running: Some(running),
        encoder,
    };
    let body = futures::stream::unfold(state, |mut st| async move {
        if let Some(first) = st.first.take() {
            return Some((Ok::<_, Infallible>(Bytes::from(concat(first))), st));
        }
        let running = st.running.as_mut()?;
        let frames = match st.text.recv().await {
            Some(delta) => st.encoder.text(&delta),
            None => {
                let result = settled((&mut running.turn).await);
                // The guard goes with it: the turn is over.
                st.running = None;
                st.encoder.finish(result)
            }
        };
        Some((Ok(Bytes::from(concat(frames))), st))
    });
    sse_response(Body::from_stream(body))
}

/// The stream's state: what is still to send, and the turn (with its cancel guard) until
/// it has ended.
struct Streaming<E> {
    first: Option<Vec<Bytes>>,
    text: mpsc::Receiver<String>,
    running: Option<Running>,
    encoder: E,
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
