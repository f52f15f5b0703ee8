//! The gateway and the QA end-to-end over real HTTP and real child processes.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::{BIN, Guard, start_listening};

/// Starts `toolsearch ARGS` in `dir` and waits for `listening on URL`.
fn start(args: &[&str], dir: &std::path::Path) -> (Guard, String) {
    start_listening(
        Command::new(BIN)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null()),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Live sandbox children (their command line holds the runtime, which names
/// `tool_search_code`).
fn sandbox_children() -> usize {
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

#[test]
fn the_qa_end_to_end_passes_on_every_lane() {
    let before = sandbox_children();
    let out = Command::new(BIN)
        .args(["qa", "tool-search-gateway-e2e", "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success(),
        "{report:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["pass"], true);
    let lanes: Vec<&str> = report["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lane"].as_str().unwrap())
        .collect();
    assert_eq!(lanes, ["direct", "code", "tools", "directory"]);
    for l in report["lanes"].as_array().unwrap() {
        assert_eq!(l["pass"], true, "{l:#}");
    }
    let code = &report["lanes"][1];
    assert!(code["ratio_to_direct"].as_f64().unwrap() <= 0.5, "{code:#}");
    // No gateway, mock or sandbox child (spares included) is left behind.
    let started = Instant::now();
    while sandbox_children() > before {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "sandbox children left behind"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn gateway_with(provider_url: &str, dir: &std::path::Path, extra: &str) -> (Guard, String) {
    let config = dir.join("toolsearch.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nbase_url = \"{provider_url}\"\nmax_retries = 3\ntimeout_ms = 5000\n{extra}"
        ),
    )
    .unwrap();
    start(
        &[
            "--config",
            config.to_str().unwrap(),
            "--mode",
            "tools",
            "--state-dir",
            dir.join("state").to_str().unwrap(),
            "gateway",
            "--listen",
            "127.0.0.1:0",
        ],
        dir,
    )
}

#[test]
fn bad_input_is_a_4xx_with_a_json_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with("http://127.0.0.1:9/v1", dir.path(), "");
    runtime().block_on(async {
        let http = reqwest::Client::new();
        let health: Value = http
            .get(format!("{url}/healthz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(health["ok"], true);
        for (body, what) in [
            ("{not json".to_string(), "malformed"),
            (
                json!({"input": "x", "surprise": 1}).to_string(),
                "unknown field",
            ),
            (json!({"input": 42}).to_string(), "input type"),
            (json!({"input": "x", "stream": true}).to_string(), "stream"),
            // A key of the gateway's own making would gather the requests that sent none.
            (
                json!({"input": "x", "metadata": {"session_key": "gw-7"}}).to_string(),
                "generated key",
            ),
        ] {
            let r = http
                .post(format!("{url}/v1/responses"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{what}");
            let v: Value = r.json().await.unwrap();
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{what}: {v}"
            );
        }
        let big = format!("{{\"input\": \"{}\"}}", "x".repeat(5 * 1024 * 1024));
        let r = http
            .post(format!("{url}/v1/responses"))
            .body(big)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 413);
    });
}

/// A provider that answers each request with the next canned reply, counting requests.
fn canned_provider(
    replies: Vec<(u16, &'static str)>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for (status, body) in replies {
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
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(reply.as_bytes());
        }
    });
    (url, count)
}

#[test]
fn a_provider_that_fails_then_rate_limits_then_answers_garbage_is_retried_then_named() {
    let dir = tempfile::tempdir().unwrap();
    let (provider, count) =
        canned_provider(vec![(500, "{}"), (429, "{}"), (200, "this is not json")]);
    let (_gw, url) = gateway_with(&provider, dir.path(), "");
    let (status, v) = say_hello(&url);
    assert_eq!(status, 502);
    let m = v["error"]["message"].as_str().unwrap();
    assert!(m.contains("openai-responses"), "{m}");
    assert!(m.contains("not a response"), "{m}");
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 3);

    let (provider, _) = canned_provider(vec![(401, "{\"error\": \"bad key\"}")]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(&provider, dir.path(), "");
    let (_, v) = say_hello(&url);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("401"),
        "{v}"
    );
}

/// `POST {gateway}/v1/responses` with the input `hello`: the status and the JSON answer.
fn say_hello(gateway: &str) -> (u16, Value) {
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

#[test]
fn the_gateway_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut gw, _) = gateway_with("http://127.0.0.1:9/v1", dir.path(), "");
    let pid = nix::unistd::Pid::from_raw(gw.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let started = Instant::now();
    loop {
        if gw.0.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
