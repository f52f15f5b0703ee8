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
//!   latest [`RECORD_MAX_BYTES`] of them, streamed from the bodies kept (no copy per
//!   reader), to at most [`DEBUG_READERS`] readers at once (then `429`); the record file
//!   holds every one, the latest [`RECORD_FILE_MAX_BYTES`] in it and the rest in
//!   `<file>.1`;
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

/// `GET /debug/requests` answered at once: each may hold a list of bodies the record has
/// since let go, so readers are bounded, not only the record.
pub const DEBUG_READERS: usize = 4;

/// The record file's size before it is moved to `<file>.1` (replacing the one there) and
/// started again: a load test against a mock with `--record` filled the disk.
pub const RECORD_FILE_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The mock provider: its options and the latest requests it has received.
#[derive(Debug)]
pub struct MockProvider {
    options: MockOptions,
    requests: Mutex<Recorded>,
    /// Requests answered, for the `resp_<k>` / `chatcmpl-<k>` ids.
    answered: AtomicU64,
    /// Places for `GET /debug/requests` readers.
    readers: Arc<tokio::sync::Semaphore>,
}

impl MockProvider {
    pub fn new(options: MockOptions) -> Arc<Self> {
        Arc::new(MockProvider {
            options,
            requests: Mutex::new(Recorded::default()),
            answered: AtomicU64::new(0),
            readers: Arc::new(tokio::sync::Semaphore::new(DEBUG_READERS)),
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

/// Request bodies as text, within [`RECORD_MAX_BYTES`], and the record file's size.
#[derive(Debug, Default)]
struct Recorded {
    bodies: std::collections::VecDeque<Arc<str>>,
    bytes: usize,
    /// Bytes in the record file, once it was first written.
    file_bytes: Option<u64>,
}

impl Recorded {
    fn push(&mut self, body: Arc<str>, max_bytes: usize) {
        self.bytes += body.len();
        self.bodies.push_back(body);
        while self.bytes > max_bytes
            && let Some(old) = self.bodies.pop_front()
        {
            self.bytes -= old.len();
        }
    }

    /// The bodies as they are now, shared with the record: a reader copies none.
    fn snapshot(&self) -> Vec<Arc<str>> {
        self.bodies.iter().cloned().collect()
    }

    /// Appends `line` to the record file at `path`, moving a full file to `<path>.1`
    /// first.
    fn append(
        &mut self,
        path: &std::path::Path,
        line: &str,
        max_bytes: u64,
    ) -> std::io::Result<()> {
        use std::io::Write;
        let size = match self.file_bytes {
            Some(n) => n,
            None => std::fs::metadata(path).map_or(0, |m| m.len()),
        };
        let size = if size > 0 && size + line.len() as u64 > max_bytes {
            let mut older = path.as_os_str().to_owned();
            older.push(".1");
            std::fs::rename(path, older)?;
            0
        } else {
            size
        };
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| file.write_all(line.as_bytes()))?;
        self.file_bytes = Some(size + line.len() as u64);
        Ok(())
    }
}

/// `bodies` as one JSON array, a chunk a body, without parsing them again.
fn json_array(
    bodies: Vec<Arc<str>>,
) -> impl futures::Stream<Item = Result<axum::body::Bytes, std::convert::Infallible>> {
    use axum::body::Bytes;
    let count = bodies.len();
    let items = bodies.into_iter().enumerate().map(move |(i, body)| {
        let mut chunk = String::with_capacity(body.len() + 2);
        chunk.push(if i == 0 { '[' } else { ',' });
        chunk.push_str(&body);
        if i + 1 == count {
            chunk.push(']');
        }
        Ok(Bytes::from(chunk))
    });
    let empty = (count == 0).then(|| Ok(Bytes::from_static(b"[]")));
    futures::stream::iter(empty.into_iter().chain(items))
}

/// Serves the mock provider on `listener` until `shutdown` is cancelled; requests in
/// flight are finished first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    provider: Arc<MockProvider>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let limits = crate::host::serve::Limits::default();
    // A web page must not reach the mock any more than the gateway it stands behind.
    let guard = crate::host::guard::Guard::at(listener.local_addr()?, &[], http::refused);
    crate::host::serve::serve(listener, provider.router(), guard, limits, async move {
        shutdown.cancelled().await
    })
    .await
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod recorded_tests {
    use super::*;
    use futures::StreamExt;

    async fn array(bodies: Vec<Arc<str>>) -> String {
        let chunks: Vec<_> = json_array(bodies).collect().await;
        chunks
            .into_iter()
            .map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn the_record_keeps_the_latest_within_its_bytes() {
        let mut r = Recorded::default();
        for i in 0..10 {
            r.push(Arc::from(format!("{{\"n\":{i}}}")), 20);
        }
        assert_eq!(array(r.snapshot()).await, r#"[{"n":8},{"n":9}]"#);
        assert!(r.bytes <= 20);
        assert_eq!(array(Vec::new()).await, "[]");
        assert_eq!(array(vec![Arc::from("1")]).await, "[1]");
    }

    #[test]
    fn a_full_record_file_moves_aside_and_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut r = Recorded::default();
        for i in 0..10 {
            r.append(&path, &format!("{i}\n"), 6).unwrap();
        }
        let now = std::fs::read_to_string(&path).unwrap();
        let before = std::fs::read_to_string(dir.path().join("r.jsonl.1")).unwrap();
        assert_eq!((before.as_str(), now.as_str()), ("6\n7\n8\n", "9\n"));
        // A file already there counts from its size.
        let mut again = Recorded::default();
        for line in ["x\n", "y\n", "z\n"] {
            again.append(&path, line, 6).unwrap();
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "z\n");
        let before = std::fs::read_to_string(dir.path().join("r.jsonl.1")).unwrap();
        assert_eq!(before, "9\nx\ny\n");
    }
}
