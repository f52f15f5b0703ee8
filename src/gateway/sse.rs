//! A streamed answer: the turn's text as server-sent events while the provider streams it,
//! then the end of the answer, in the shape an [`Encoder`] gives them (Responses events,
//! Chat chunks).
//!
//! Nothing is sent until the turn has text or has ended, or for one keep-alive period
//! (`[gateway] stream_keepalive_ms`): a turn that fails before saying anything (a
//! provider's 429, a bad request the provider refused) is answered with that HTTP status
//! and error, as a non-streamed request would be, instead of a 200 stream that fails.
//! After that the events follow the turn as it goes, and a period without one sends an SSE
//! comment (`: keep-alive`), which the SDKs' parsers skip: a turn whose tool rounds took
//! minutes used to send nothing at all until its text, so the SDKs' read timeout or a
//! proxy's idle timeout cut it, and the SDKs retried the whole turn.
//!
//! The body owns the turn's cancel guard: a client that goes away drops the body, and with
//! it the turn. One that stops reading fills the text buffer, and the turn waits for it
//! at most [`super::turn::CLIENT_STALL`], then ends.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

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

/// Bytes of a JSON answer sent as one piece: each piece is its own allocation, freed
/// once sent, and lets its share of the places go.
const JSON_PIECE_BYTES: usize = 256 * 1024;

/// `body` as a JSON answer that holds `held` (the provider answers' places it was made
/// from) for what its client has not read yet: the places go in step with the pieces sent,
/// and the memory with them. Held to the last byte, a client reading a 33 MB answer at
/// 190 KB/s, and asking again when done, kept the pool full for as long as it liked
/// (front round 8 F2).
pub fn json_holding(body: &Value, held: Held) -> Response {
    let mut pieces = Pieces(VecDeque::new());
    // Writing to memory fails only for a value serde cannot write; a `Value` always can.
    let _ = serde_json::to_writer(&mut pieces, body);
    let bytes: usize = pieces.0.iter().map(Vec::len).sum();
    let body = PiecesBody {
        pieces: pieces.0,
        left: bytes as u64,
        last: 0,
        held: held.let_go_over(bytes),
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::new(body),
    )
        .into_response()
}

/// A JSON text written as pieces of at most [`JSON_PIECE_BYTES`].
struct Pieces(VecDeque<Vec<u8>>);

impl std::io::Write for Pieces {
    fn write(&mut self, mut buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len();
        while !buf.is_empty() {
            let full = self.0.back().is_none_or(|p| p.len() >= JSON_PIECE_BYTES);
            if full {
                self.0
                    .push_back(Vec::with_capacity(JSON_PIECE_BYTES.min(64 * 1024)));
            }
            let Some(piece) = self.0.back_mut() else {
                break;
            };
            let room = JSON_PIECE_BYTES - piece.len();
            let (now, later) = buf.split_at(room.min(buf.len()));
            piece.extend_from_slice(now);
            buf = later;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The pieces as a body of a known length: each piece's places go when the next is asked
/// for (the one before is then with the connection), the rest when the body is dropped.
struct PiecesBody {
    pieces: VecDeque<Vec<u8>>,
    left: u64,
    last: usize,
    held: crate::agent::LettingGo,
}

impl http_body::Body for PiecesBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let last = std::mem::take(&mut self.last);
        self.held.sent(last);
        let Some(piece) = self.pieces.pop_front() else {
            return std::task::Poll::Ready(None);
        };
        self.last = piece.len();
        self.left -= piece.len() as u64;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(piece)))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
    }
}

/// The shortest keep-alive period: a config's 0 would send comments without end.
const MIN_KEEPALIVE: Duration = Duration::from_millis(100);

/// A comment line: an event the SDKs' parsers skip, sent to show the turn is alive.
const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// The streamed answer of `running`, whose text arrives on `text`; `keepalive` is the
/// longest the client goes without an event.
pub async fn respond<E: Encoder>(
    mut running: Running,
    mut text: mpsc::Receiver<String>,
    mut encoder: E,
    keepalive: Duration,
) -> Response {
    let keepalive = keepalive.max(MIN_KEEPALIVE);
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
        // A long turn: the stream opens now, and keeps alive until the text comes.
        () = tokio::time::sleep(keepalive) => {}
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
        held: None,
        encoder,
        keepalive,
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
                // The event before this one is with the connection now.
                if let Some(held) = &mut st.held {
                    held.sent(1);
                }
                let frame = later(&mut st.encoder);
                return Some((Ok(frame), st));
            }
            let running = st.running.as_mut()?;
            // `recv` is cancel-safe: a delta that comes as the period ends is the next one.
            let Ok(next) = tokio::time::timeout(st.keepalive, st.text.recv()).await else {
                return Some((Ok(Bytes::from_static(KEEPALIVE)), st));
            };
            match next {
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
    /// The places of what the end is made from (the provider answers', the echoed
    /// request's), let go an equal part per end event the client takes. Kept to the
    /// last event, a client reading at a legal rate held a streamed answer's whole share
    /// for as long as the end took it, five times the text (front round 9 F3).
    held: Option<crate::agent::LettingGo>,
    encoder: E,
    keepalive: Duration,
}

impl<E: Encoder> Streaming<E> {
    fn finish(&mut self, mut result: Result<TurnOutcome, ApiError>) {
        let held = match &mut result {
            Ok(outcome) => std::mem::take(&mut outcome.held),
            Err(_) => Held::default(),
        };
        self.end = self.encoder.finish(result).into();
        self.held = Some(held.let_go_over(self.end.len() + 1));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A JSON answer's places go as its pieces are taken, and its length is known ahead.
    #[tokio::test]
    async fn a_json_answer_lets_its_places_go_as_it_is_sent() {
        let pool = std::sync::Arc::new(tokio::sync::Semaphore::new(4096));
        let permit = std::sync::Arc::clone(&pool)
            .try_acquire_many_owned(2048)
            .unwrap();
        let text = "x".repeat(2 << 20);
        let response = json_holding(&serde_json::json!({ "text": text }), Held::new(permit));
        let mut body = response.into_body();
        let whole = serde_json::to_vec(&serde_json::json!({ "text": text })).unwrap();
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(whole.len() as u64)
        );
        let mut got = Vec::new();
        let mut free = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| {
            http_body::Body::poll_frame(std::pin::Pin::new(&mut body), cx)
        })
        .await
        {
            got.extend_from_slice(frame.unwrap().data_ref().unwrap());
            free.push(pool.available_permits());
        }
        assert_eq!(got, whole);
        // Nine pieces of at most 256 KiB: the places went a piece behind, all at the end.
        assert!(free.len() >= 8, "{free:?}");
        assert!(free.windows(2).all(|w| w[0] <= w[1]), "{free:?}");
        assert!(
            free[free.len() / 2] > 2048 && free[free.len() / 2] < 4096,
            "{free:?}"
        );
        drop(body);
        assert_eq!(pool.available_permits(), 4096);
    }

    #[test]
    fn pieces_are_bounded_and_whole() {
        use std::io::Write;
        let mut p = Pieces(VecDeque::new());
        p.write_all(&vec![b'a'; JSON_PIECE_BYTES + 10]).unwrap();
        p.write_all(b"bc").unwrap();
        let lens: Vec<usize> = p.0.iter().map(Vec::len).collect();
        assert_eq!(lens, [JSON_PIECE_BYTES, 12]);
    }
}
