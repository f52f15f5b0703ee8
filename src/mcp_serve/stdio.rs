//! `mcp serve` on stdin/stdout, within the bounds `--listen` keeps. rmcp reads any line
//! under its 16 MiB limit and parses it whole: one 15 MiB `tools/call` of zeros took the
//! server from 21 MB to 1.82 GB (eighth sandbox review). So each line is read here first,
//! never more than [`MAX_REQUEST_BYTES`] of it kept, its JSON values counted (a scan, no
//! parse), and only lines within the HTTP front's bounds are passed on to rmcp. A line over
//! them is answered, not dropped: it becomes a [`REFUSED`] request with the client's id and
//! the reason, which the handler answers with an `invalid request` error, so the client's
//! call ends at once with the reason instead of waiting for its timeout. Lines that are not
//! JSON are passed on, and rmcp ignores them as the official SDKs do (an answer to noise
//! can start an error storm with a peer that echoes).

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use super::{MAX_OPENING_BYTES, MAX_REQUEST_BYTES, MAX_REQUEST_VALUES, is_initialize};

/// The method a refused line becomes; its `params.reason` says why.
pub const REFUSED: &str = "toolsearch/refused";

/// Requests passed on to rmcp and not answered yet, at most. rmcp reads lines as fast as
/// they come and starts a handler for each: a client writing 50-byte `ping`s, reading
/// nothing, took the server to 3.5 GB in 20 s (ninth sandbox review). Past this, the next
/// request waits in the client's pipe until one is answered. Each may hold a line of
/// [`MAX_REQUEST_BYTES`].
pub const MAX_IN_FLIGHT: usize = 64;

/// The requests rmcp has and has not answered: a place each, taken when a request is
/// passed on, given back when its answer is written (or the client cancels it, as the
/// official SDK does on its timeout: no answer follows).
pub struct InFlight {
    places: std::sync::Arc<tokio::sync::Semaphore>,
    /// Places held, by the id's JSON text.
    held: parking_lot::Mutex<std::collections::HashMap<String, usize>>,
}

impl InFlight {
    pub fn new() -> std::sync::Arc<InFlight> {
        std::sync::Arc::new(InFlight {
            places: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            held: parking_lot::Mutex::new(std::collections::HashMap::new()),
        })
    }

    async fn enter(&self, id: &Value) {
        if let Ok(place) = self.places.acquire().await {
            place.forget();
        }
        *self.held.lock().entry(id.to_string()).or_insert(0) += 1;
    }

    fn left(&self, id: &Value) {
        let mut held = self.held.lock();
        let key = id.to_string();
        if let Some(n) = held.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&key);
            }
            self.places.add_permits(1);
        }
    }
}

/// rmcp's writer, as it is, watched for answers: each gives its request's place back.
pub fn answers<W: AsyncWrite + Unpin>(out: W, in_flight: std::sync::Arc<InFlight>) -> Answers<W> {
    Answers {
        out,
        in_flight,
        scan: IdScan::default(),
    }
}

pub struct Answers<W> {
    out: W,
    in_flight: std::sync::Arc<InFlight>,
    /// The line being written (rmcp writes one message a line; a raw line feed is only
    /// ever a line's end in JSON).
    scan: IdScan,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Answers<W> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let written = std::pin::Pin::new(&mut this.out).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &written {
            for &b in &buf[..*n] {
                if b != b'\n' {
                    this.scan.byte(b);
                    continue;
                }
                let line = std::mem::take(&mut this.scan);
                if line.answer
                    && let Some(id) = line.id()
                {
                    this.in_flight.left(&id);
                }
            }
        }
        written
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().out).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().out).poll_shutdown(cx)
    }
}

/// What `line` (within the bounds, `scan` read from it) asks of [`InFlight`]: a place for a
/// request rmcp will answer (valid JSON, an id, not itself an answer), or a place given
/// back for a request the client cancelled.
async fn account(line: &[u8], scan: &IdScan, in_flight: &InFlight) {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let body = line.strip_prefix(BOM).unwrap_or(line);
    if scan.answer || serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        return;
    }
    if let Some(id) = scan.id() {
        in_flight.enter(&id).await;
    } else if scan.method && body.len() <= 64 * 1024 {
        #[derive(serde::Deserialize)]
        struct Cancelled {
            method: String,
            params: Option<Value>,
        }
        if let Ok(n) = serde_json::from_slice::<Cancelled>(body)
            && n.method == "notifications/cancelled"
            && let Some(id) = n.params.as_ref().and_then(|p| p.get("requestId"))
        {
            in_flight.left(id);
        }
    }
}

/// What rmcp reads instead of stdin: stdin's lines within the bounds, the others as
/// [`REFUSED`] requests, a request only while fewer than [`MAX_IN_FLIGHT`] are unanswered.
/// Runs until stdin ends or rmcp stops reading.
pub fn filtered(
    input: impl AsyncRead + Unpin + Send + 'static,
    in_flight: std::sync::Arc<InFlight>,
) -> impl AsyncRead + Send + Unpin {
    // Small: a line waits here until rmcp has taken the one before (back-pressure to the
    // client's pipe, not a queue of lines in memory).
    let (reader, mut writer) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        let mut line = Vec::new();
        let mut id = IdScan::default();
        loop {
            line.clear();
            let Ok(Some(total)) =
                read_line(&mut input, &mut line, &mut id, MAX_REQUEST_BYTES).await
            else {
                return;
            };
            let passed = match refusal(&line, total) {
                None => {
                    account(&line, &id, &in_flight).await;
                    line.push(b'\n');
                    writer.write_all(&line).await
                }
                Some(reason) => {
                    tracing::warn!("mcp serve: a request refused: {reason}");
                    match refused_request(id.id(), &reason) {
                        Some(request) => {
                            if let Some(id) = id.id() {
                                in_flight.enter(&id).await;
                            }
                            writer.write_all(request.as_bytes()).await
                        }
                        // No id to answer: nothing to pass on (rmcp would drop it too).
                        None => Ok(()),
                    }
                }
            };
            if passed.is_err() {
                return;
            }
        }
    });
    reader
}

/// Reads one line (without its `\n`) into `line`, keeping at most `max + 1` bytes of it
/// and the top-level `id` of all of it (an SDK writes the id last, after the arguments);
/// returns its whole length, or `None` at the end of input (an unfinished last line is
/// dropped, as rmcp drops it).
async fn read_line(
    input: &mut (impl AsyncBufReadExt + Unpin),
    line: &mut Vec<u8>,
    id: &mut IdScan,
    max: usize,
) -> std::io::Result<Option<usize>> {
    let mut total = 0usize;
    *id = IdScan::default();
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(None);
        }
        let (piece, ended) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], true),
            None => (available, false),
        };
        let room = (max + 1).saturating_sub(line.len());
        line.extend_from_slice(&piece[..piece.len().min(room)]);
        id.feed(piece);
        total = total.saturating_add(piece.len());
        let used = piece.len() + usize::from(ended);
        input.consume(used);
        if ended {
            return Ok(Some(total));
        }
    }
}

/// Why `line` (`total` bytes long, of which `line` holds at most the bound and one more)
/// is not passed on, if it is not.
fn refusal(line: &[u8], total: usize) -> Option<String> {
    if total > MAX_REQUEST_BYTES {
        return Some(format!(
            "the request is {total} bytes; at most {MAX_REQUEST_BYTES} are read"
        ));
    }
    let values = crate::provider::bounded::count_values(line);
    if values > MAX_REQUEST_VALUES {
        return Some(format!(
            "the request holds about {values} JSON values; at most {MAX_REQUEST_VALUES} are read"
        ));
    }
    // rmcp keeps an `initialize`'s parameters for the session's life.
    if line.len() > MAX_OPENING_BYTES && is_initialize(line) {
        return Some(format!(
            "an initialize may have at most {MAX_OPENING_BYTES} bytes"
        ));
    }
    None
}

/// A [`REFUSED`] request answering `id`, or `None` when the refused line had no id.
fn refused_request(id: Option<Value>, reason: &str) -> Option<String> {
    let request = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id?,
        "method": REFUSED,
        "params": {"reason": reason},
    });
    Some(format!("{request}\n"))
}

/// The top-level `id` of a JSON object read a piece at a time, in constant memory: only
/// the id's own text is kept (at most [`IdScan::MAX_ID`] bytes). Only a number or a
/// string is an id; anything else (or malformed text) gives none.
#[derive(Default)]
struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At the top level, between `{` or `,` and the next key.
    expect_key: bool,
    reading_key: bool,
    key: Vec<u8>,
    /// In the value of the key `id`, whose text is kept.
    in_id: bool,
    text: Vec<u8>,
    found: Option<Vec<u8>>,
    /// A top-level `method` (a request or a notification) was seen.
    method: bool,
    /// A top-level `result` or `error` (an answer) was seen.
    answer: bool,
}

impl IdScan {
    const MAX_ID: usize = 256;

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        let top = self.depth == 1;
        if self.in_id && top && self.text.len() <= Self::MAX_ID {
            self.text.push(b);
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                self.reading_key = false;
            }
            if self.reading_key {
                // Only short keys matter (`id`, `method`, `result`, `error`); a longer one
                // is kept as a mark no key is.
                if self.key.len() < 8 {
                    self.key.push(b);
                } else {
                    self.key = vec![0];
                    self.reading_key = false;
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if top && self.expect_key {
                    self.expect_key = false;
                    self.reading_key = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 && b == b'{' {
                    self.expect_key = true;
                }
            }
            b'}' | b']' => {
                if top {
                    self.end_value();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if top => {
                self.in_id = self.key == b"id";
                match self.key.as_slice() {
                    b"method" => self.method = true,
                    b"result" | b"error" => self.answer = true,
                    _ => {}
                }
                self.text.clear();
            }
            b',' if top => {
                self.end_value();
                self.expect_key = true;
            }
            _ => {}
        }
    }

    fn end_value(&mut self) {
        if self.in_id {
            self.in_id = false;
            // The `,` or `}` that ended it was kept too.
            self.text.pop();
            self.found = Some(std::mem::take(&mut self.text));
        }
    }

    fn id(&self) -> Option<Value> {
        let text = self.found.as_ref().filter(|t| t.len() <= Self::MAX_ID)?;
        let id: Value = serde_json::from_slice(text).ok()?;
        matches!(id, Value::Number(_) | Value::String(_)).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    fn scan_id(text: &[u8]) -> Option<Value> {
        let mut scan = IdScan::default();
        // In pieces, as read.
        for piece in text.chunks(3) {
            scan.feed(piece);
        }
        scan.id()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_is_and_only_a_number_or_string_is_one() {
        assert_eq!(
            scan_id(br#"{"jsonrpc":"2.0","id":7,"params":{"a":[1,2]}}"#),
            Some(serde_json::json!(7))
        );
        assert_eq!(
            scan_id(
                br#" { "method" : "x" , "params": {"id": 1, "deep": [[["s\"}"]]]}, "id" : "a-1" }"#
            ),
            Some(serde_json::json!("a-1"))
        );
        assert_eq!(scan_id(br#"{"params":{"id":3},"id":null}"#), None);
        assert_eq!(scan_id(br#"{"params":{"id":3}}"#), None);
        assert_eq!(scan_id(br#"{"idx":3,"params":[0,0,0]}"#), None);
        assert_eq!(
            scan_id(br#"{"params":"\"id\":4","id":-2.5e3}"#),
            Some(serde_json::json!(-2.5e3))
        );
        assert_eq!(scan_id(b"[1]"), None);
        assert_eq!(scan_id(b""), None);
        assert_eq!(scan_id(br#"{"id":{"x":1}}"#), None);
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(300));
        assert_eq!(scan_id(long.as_bytes()), None);
    }

    /// A client that writes requests and reads nothing gets [`MAX_IN_FLIGHT`] of them to
    /// rmcp, the next only once one is answered or cancelled.
    #[tokio::test]
    async fn requests_past_the_bound_wait_for_an_answer_or_a_cancel() {
        use tokio::io::AsyncBufReadExt;
        let ping = |i: usize| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}\n");
        let mut input = String::new();
        for i in 0..MAX_IN_FLIGHT + 1 {
            input.push_str(&ping(i));
        }
        input.push_str(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
        );
        input.push('\n');
        input.push_str(&ping(1000));
        let in_flight = InFlight::new();
        let mut lines =
            tokio::io::BufReader::new(filtered(std::io::Cursor::new(input), in_flight.clone()))
                .lines();
        for i in 0..MAX_IN_FLIGHT {
            let line = lines.next_line().await.unwrap().unwrap();
            assert!(line.contains(&format!("\"id\":{i},")), "{line}");
        }
        let next = tokio::time::timeout(Duration::from_millis(300), lines.next_line()).await;
        assert!(
            next.is_err(),
            "a request past the bound went through: {next:?}"
        );
        // An answer written gives its place back; the waiting request goes on.
        let mut out = answers(Vec::new(), in_flight.clone());
        out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}\n")
            .await
            .unwrap();
        let line = lines.next_line().await.unwrap().unwrap();
        assert!(line.contains(&format!("\"id\":{MAX_IN_FLIGHT},")), "{line}");
        // The cancel passes and gives request 3's place back: the last request follows.
        assert!(
            lines
                .next_line()
                .await
                .unwrap()
                .unwrap()
                .contains("cancelled")
        );
        let line = lines.next_line().await.unwrap().unwrap();
        assert!(line.contains("\"id\":1000,"), "{line}");
    }

    /// Lines within the bounds pass as they are; one over them becomes a refusal with its
    /// id, and one without an id is dropped; the lines after are read as usual.
    #[tokio::test]
    async fn lines_over_the_bounds_become_refusals_with_their_ids() {
        let ok = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec();
        let mut big =
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"x":""#
                .to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_REQUEST_BYTES + 10));
        big.extend(br#""}}}"#);
        let mut dense =
            br#"{"jsonrpc":"2.0","id":"d","method":"tools/call","params":{"arguments":{"x":["#
                .to_vec();
        dense.extend(std::iter::repeat_n(&b"0,"[..], MAX_REQUEST_VALUES + 5).flatten());
        dense.extend(br#"0]}}}"#);
        let mut no_id = br#"{"jsonrpc":"2.0","method":"x","params":["#.to_vec();
        no_id.extend(std::iter::repeat_n(&b"0,"[..], MAX_REQUEST_VALUES + 5).flatten());
        no_id.extend(b"0]}");
        let mut input = Vec::new();
        for line in [&ok, &big, &dense, &no_id, &b"not json".to_vec(), &ok] {
            input.extend_from_slice(line);
            input.push(b'\n');
        }
        input.extend_from_slice(b"{\"unfinished\":");
        let mut out = String::new();
        filtered(std::io::Cursor::new(input), InFlight::new())
            .read_to_string(&mut out)
            .await
            .unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out:.300}");
        assert_eq!(lines[0].as_bytes(), &ok[..]);
        let refused: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(refused["id"], 2);
        assert_eq!(refused["method"], REFUSED);
        assert!(
            refused["params"]["reason"]
                .as_str()
                .unwrap()
                .contains("bytes")
        );
        let refused: Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(refused["id"], "d");
        assert!(
            refused["params"]["reason"]
                .as_str()
                .unwrap()
                .contains("JSON values")
        );
        assert_eq!(lines[3], "not json");
        assert_eq!(lines[4].as_bytes(), &ok[..]);
    }
}
