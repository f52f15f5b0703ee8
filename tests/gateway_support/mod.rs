//! What the gateway's integration tests share: the binary started on a free port, a
//! gateway on a given provider, hand-made providers (canned answers, one that never
//! answers), the sandbox children alive now. Each test file includes it with `mod
//! gateway_support;` and uses what it needs, hence the `dead_code` allowance.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::common::{BIN, Guard, start_listening};

/// Starts `toolsearch ARGS` in `dir` and waits for `listening on URL`.
pub fn start(args: &[&str], dir: &std::path::Path) -> (Guard, String) {
    start_with(&[], args, dir)
}

/// The same with variables set in its environment.
pub fn start_with(env: &[(&str, &str)], args: &[&str], dir: &std::path::Path) -> (Guard, String) {
    start_listening(
        Command::new(BIN)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdin(Stdio::null()),
    )
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Live sandbox children (their command line holds the runtime, which names
/// `tool_search_code`).
pub fn sandbox_children() -> usize {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let status =
                        std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
                    let zombie = status
                        .lines()
                        .any(|l| l.starts_with("State:") && l.contains('Z'));
                    let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                    !zombie && {
                        let cmd = String::from_utf8_lossy(&cmd);
                        cmd.contains("tool_search_code") || cmd.contains("--snapshot-blob")
                    }
                })
                .count()
        })
        .unwrap_or(0)
}

/// A gateway in tools mode on the provider at `provider_url` (retries 3 unless `extra`
/// says, timeout 5 s),
/// `extra` appended to its config (more `[provider]` keys, or other tables).
pub fn gateway_with(provider_url: &str, dir: &std::path::Path, extra: &str) -> (Guard, String) {
    gateway_in("tools", provider_url, dir, extra)
}

/// The same in `mode`.
pub fn gateway_in(
    mode: &str,
    provider_url: &str,
    dir: &std::path::Path,
    extra: &str,
) -> (Guard, String) {
    gateway_env(mode, provider_url, dir, extra, &[])
}

/// The same with variables set in the gateway's environment.
pub fn gateway_env(
    mode: &str,
    provider_url: &str,
    dir: &std::path::Path,
    extra: &str,
    env: &[(&str, &str)],
) -> (Guard, String) {
    let config = dir.join("toolsearch.toml");
    // `extra` may set its own retries; TOML takes a key once.
    let retries = if extra.contains("max_retries") {
        ""
    } else {
        "max_retries = 3\n"
    };
    let timeout = if extra.contains("timeout_ms") {
        ""
    } else {
        "timeout_ms = 5000\n"
    };
    std::fs::write(
        &config,
        format!("[provider]\nbase_url = \"{provider_url}\"\n{retries}{timeout}{extra}"),
    )
    .unwrap();
    start_with(
        env,
        &[
            "--config",
            config.to_str().unwrap(),
            "--mode",
            mode,
            "--state-dir",
            dir.join("state").to_str().unwrap(),
            "gateway",
            "--listen",
            "127.0.0.1:0",
        ],
        dir,
    )
}

/// A provider that answers each request with the next canned reply, counting requests.
pub fn canned_provider(
    replies: Vec<(u16, &'static str)>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    canned_provider_with(replies.into_iter().map(|(s, b)| (s, "", b)).collect())
}

/// The same, each reply with extra header lines (`name: value\r\n`).
pub fn canned_provider_with(
    replies: Vec<(u16, &'static str, &'static str)>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for (status, headers, body) in replies {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Read headers and the body (Content-Length).
            loop {
                let n = s.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| {
                            l.strip_prefix("content-length: ")
                                .and_then(|v| v.trim().parse::<usize>().ok())
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(reply.as_bytes());
        }
    });
    (url, count)
}

/// `POST {gateway}/v1/responses` with the input `hello`: the status and the JSON answer.
pub fn say_hello(gateway: &str) -> (u16, Value) {
    runtime().block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{gateway}/v1/responses"))
            .json(&json!({"input": "hello"}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    })
}

/// A provider that takes requests and never answers, counting them; its connections stay
/// open until the test process ends.
pub fn silent_provider() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(s);
        }
    });
    (url, count)
}

/// Waits (at most [`super::common::GENEROUS`]) until `done` holds; false if it never did.
pub fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < super::common::GENEROUS {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    done()
}

/// The events of a session's log under `state`.
pub fn session_log(state: &std::path::Path, key: &str) -> Vec<Value> {
    std::fs::read_to_string(state.join("sessions").join(format!("{key}.jsonl")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// What a [`scripted_provider`] answers one request with: a status line, headers, a body,
/// and optionally a chunk written `times` more times after it (a flood, or a line that
/// never ends), or pieces written `gap` apart (a stream still arriving, or one that went
/// quiet). The connection closes after it.
pub struct Reply {
    pub status: u16,
    pub headers: String,
    pub body: Vec<u8>,
    pub then: Option<(Vec<u8>, usize)>,
    pub paced: Option<(Vec<Vec<u8>>, std::time::Duration)>,
}

impl Reply {
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply::with_type(status, "application/json", body.to_string())
    }

    pub fn with_type(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            headers: format!("content-type: {content_type}\r\n"),
            body: body.into(),
            then: None,
            paced: None,
        }
    }

    /// Server-sent events: each value as one `data:` event.
    pub fn sse(events: &[Value]) -> Reply {
        let text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        Reply::with_type(200, "text/event-stream", text)
    }

    /// Server-sent events, each written on its own `gap` after the one before.
    pub fn sse_paced(events: &[Value], gap: std::time::Duration) -> Reply {
        let mut reply = Reply::with_type(200, "text/event-stream", Vec::new());
        let pieces = events
            .iter()
            .map(|e| format!("data: {e}\n\n").into_bytes())
            .collect();
        reply.paced = Some((pieces, gap));
        reply
    }

    pub fn header(mut self, line: &str) -> Reply {
        self.headers.push_str(line);
        self.headers.push_str("\r\n");
        self
    }

    pub fn then_repeat(mut self, chunk: Vec<u8>, times: usize) -> Reply {
        self.then = Some((chunk, times));
        self
    }
}

/// A provider that answers each request with `answer(path, headers, body)`, one thread per
/// connection; it counts requests. The body is the request's JSON (`null` when it is not).
pub fn scripted_provider(
    answer: impl Fn(&str, &str, &Value) -> Reply + Send + Sync + 'static,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        while let Ok((mut s, _)) = listener.accept() {
            let seen = seen.clone();
            let answer = answer.clone();
            std::thread::spawn(move || {
                let Some((head, body)) = read_request(&mut s) else {
                    return;
                };
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let path = head
                    .lines()
                    .next()
                    .and_then(|l| l.split(' ').nth(1))
                    .unwrap_or("")
                    .to_string();
                let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let reply = answer(&path, &head, &json);
                let length = if reply.then.is_none() && reply.paced.is_none() {
                    format!("content-length: {}\r\n", reply.body.len())
                } else {
                    String::new()
                };
                let head = format!(
                    "HTTP/1.1 {} X\r\n{}{length}connection: close\r\n\r\n",
                    reply.status, reply.headers
                );
                if s.write_all(head.as_bytes()).is_err() || s.write_all(&reply.body).is_err() {
                    return;
                }
                if let Some((chunk, times)) = reply.then {
                    for _ in 0..times {
                        if s.write_all(&chunk).is_err() {
                            return;
                        }
                    }
                }
                if let Some((pieces, gap)) = reply.paced {
                    for (i, piece) in pieces.iter().enumerate() {
                        if i > 0 {
                            std::thread::sleep(gap);
                        }
                        if s.write_all(piece).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, count)
}

/// One HTTP request's head (lowercased) and body (by `content-length`).
fn read_request(s: &mut std::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length: ")
                        .and_then(|v| v.trim().parse::<usize>().ok())
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some((head, buf[end + 4..end + 4 + len].to_vec()));
        }
    }
}

/// The peak resident memory of process `pid` so far, in MiB (`VmHWM`).
pub fn peak_rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// `POST {gateway}{path}` with `body`: the status and the answer's text.
pub fn post(gateway: &str, path: &str, body: &Value) -> (u16, String) {
    runtime().block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{gateway}{path}"))
            .json(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

pub fn get(gateway: &str, path: &str) -> (u16, String) {
    runtime().block_on(async {
        let r = reqwest::Client::new()
            .get(format!("{gateway}{path}"))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

/// The mock provider, scripted with `scenario` (JSON text) when given, recording to
/// `dir/requests.jsonl`.
pub fn mock(dir: &std::path::Path, scenario: Option<&str>) -> (Guard, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["mock-provider", "--listen", "127.0.0.1:0", "--record"])
        .arg(dir.join("requests.jsonl"))
        .stdin(Stdio::null());
    if let Some(text) = scenario {
        let path = dir.join("scenario.json");
        std::fs::write(&path, text).unwrap();
        cmd.arg("--scenario").arg(path);
    }
    start_listening(&mut cmd)
}

/// The JSON values of a gateway's event stream, its `data:` lines in order (Chat's
/// `[DONE]` left out); a line that is not JSON fails the test.
pub fn sse_events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| d.trim() != "[DONE]")
        .map(|d| {
            serde_json::from_str(d)
                .unwrap_or_else(|e| panic!("an event that is not JSON ({e}): {d}"))
        })
        .collect()
}

/// The request bodies a provider got, in order.
pub type Seen = std::sync::Arc<std::sync::Mutex<Vec<Value>>>;

/// A scripted provider that answers each request body with `answer` and keeps every body.
pub fn recording_provider(
    answer: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> (String, Seen) {
    let seen: Seen = Default::default();
    let keep = seen.clone();
    let (url, _) = scripted_provider(move |_, _, request| {
        keep.lock().unwrap().push(request.clone());
        answer(request)
    });
    (url, seen)
}
