//! What a slow, greedy or foreign client can make the gateway's HTTP server do, through
//! the binary: a body never finished, a response never read, a stop while both are held,
//! a web page's request (foreign Host or Origin, a text/plain body), JSON hidden in
//! argument strings, a flood of refused requests leaving session files, stored responses
//! sent to many readers that read nothing, and the same guard on the mock provider.
//! Timeouts are set small through `[server]`; each check allows a minute.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
mod gateway_support;
use gateway_support::*;

const ANSWER: &str = r#"{"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]}"#;

const MINUTE: Duration = Duration::from_secs(60);

fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Whether the gateway process ended within a minute of SIGTERM.
fn stops_on_sigterm(gw: &mut common::Guard) -> bool {
    let pid = nix::unistd::Pid::from_raw(gw.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let started = Instant::now();
    while started.elapsed() < MINUTE {
        if gw.0.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A connection that sent a request head promising 1000 bytes of body, and one byte.
fn half_sent_body(url: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr(url)).unwrap();
    s.write_all(
        b"POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{",
    )
    .unwrap();
    s
}

/// The id of a stored response of 3 MiB instructions (echoed: over any socket buffer).
fn big_stored_response(url: &str) -> String {
    let (status, body) = post(
        url,
        "/v1/responses",
        &json!({"input": "hello", "instructions": "x".repeat(3 << 20)}),
    );
    assert_eq!(status, 200, "{}", &body[..body.len().min(300)]);
    serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A big stored response asked for as its event stream (each of three events repeats the
/// instructions) on a connection with a small receive buffer that then reads nothing.
fn unread_big_response(url: &str) -> TcpStream {
    let id = big_stored_response(url);
    unread_get(url, &format!("/v1/responses/{id}?stream=true"))
}

#[test]
fn a_body_never_finished_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(
        "http://127.0.0.1:9/v1",
        dir.path(),
        "\n[server]\nbody_timeout_s = 1\n",
    );
    let mut slow = half_sent_body(&url);
    slow.set_read_timeout(Some(MINUTE)).unwrap();
    let mut out = Vec::new();
    let ended = slow.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(ended.is_ok(), "the half-sent body was not cut: {ended:?}");
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(out.contains("not sent within 1 s"), "{out}");
}

#[test]
fn sigterm_ends_the_gateway_whatever_clients_hold() {
    // Default timeouts: the stop's grace, not the clients, decides when it ends.
    let (provider, _) = canned_provider(vec![(200, ANSWER)]);
    let dir = tempfile::tempdir().unwrap();
    let (mut gw, url) = gateway_with(&provider, dir.path(), "");
    let _unread = unread_big_response(&url);
    let _half = half_sent_body(&url);
    // Both are in the server's hands once it answers another request.
    assert_eq!(say_hello_status(&url), 200);
    assert!(
        stops_on_sigterm(&mut gw),
        "still running a minute after SIGTERM"
    );
}

#[test]
fn a_response_never_read_is_dropped() {
    // The stop waits for requests in flight for five minutes here: only the write
    // timeout can end the unread response's connection, and with it the stop.
    let (provider, _) = canned_provider(vec![(200, ANSWER)]);
    let dir = tempfile::tempdir().unwrap();
    let (mut gw, url) = gateway_with(
        &provider,
        dir.path(),
        "\n[server]\nwrite_timeout_s = 1\nshutdown_grace_s = 300\n",
    );
    let _unread = unread_big_response(&url);
    assert!(
        stops_on_sigterm(&mut gw),
        "an unread response held its connection (and the stop) past the write timeout"
    );
}

fn say_hello_status(url: &str) -> u16 {
    runtime().block_on(async {
        reqwest::Client::new()
            .get(format!("{url}/healthz"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    })
}

/// `method path` with `headers`, raw: the status.
fn status_of(url: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let mut r = client.request(method.parse().unwrap(), format!("{url}{path}"));
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    })
}

#[test]
fn a_web_page_cannot_use_the_gateway() {
    let (provider, count) = canned_provider(vec![(200, ANSWER)]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(&provider, dir.path(), "");
    let body = r#"{"input": "hi", "metadata": {"session_key": "chosen"}}"#;
    let json = ("content-type", "application/json");
    // A cross-site form or fetch without a preflight: text/plain.
    assert_eq!(
        status_of(
            &url,
            "POST",
            "/v1/responses",
            &[("content-type", "text/plain")],
            body
        ),
        415
    );
    assert_eq!(
        status_of(
            &url,
            "POST",
            "/v1/responses",
            &[json, ("origin", "http://evil.example")],
            body
        ),
        403
    );
    // DNS rebinding: the page's own name, resolved to loopback.
    assert_eq!(
        status_of(
            &url,
            "GET",
            "/v1/models",
            &[("host", "evil.example:80")],
            ""
        ),
        403
    );
    assert_eq!(
        status_of(
            &url,
            "POST",
            "/v1/responses",
            &[json, ("host", "evil.example")],
            body
        ),
        403
    );
    assert_eq!(
        count.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a refused request reached the provider"
    );
    assert!(!dir.path().join("state/sessions/chosen.jsonl").exists());
    // A local client is served.
    assert_eq!(status_of(&url, "POST", "/v1/responses", &[json], body), 200);
}

#[test]
fn json_hidden_in_argument_strings_counts_against_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with("http://127.0.0.1:9/v1", dir.path(), "");
    // One string value in the body; parsed, 300,000 values.
    let arguments = format!("{{\"a\": [{}]}}", vec!["0"; 300_000].join(","));
    let (status, text) = post(
        &url,
        "/v1/responses",
        &json!({"input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]}),
    );
    assert_eq!(status, 400, "{}", &text[..text.len().min(300)]);
    assert!(text.contains("JSON values"), "{text}");
    let (status, text) = post(
        &url,
        "/v1/chat/completions",
        &json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]}),
    );
    assert_eq!(status, 400, "{}", &text[..text.len().min(300)]);
    assert!(text.contains("JSON values"), "{text}");
}

#[test]
fn refused_requests_leave_no_session_file_and_keyless_ones_share_one() {
    let (provider, _) = canned_provider(vec![(200, ANSWER), (200, ANSWER)]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(&provider, dir.path(), "");
    for i in 0..20 {
        let (status, _) = post(&url, "/v1/responses", &json!({"input": []}));
        assert_eq!(status, 400);
        let key = format!("refused-{i}");
        let (status, _) = post(
            &url,
            "/v1/responses",
            &json!({"input": [], "metadata": {"session_key": key}}),
        );
        assert_eq!(status, 400);
    }
    let files = || -> Vec<String> {
        std::fs::read_dir(dir.path().join("state/sessions"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        files().is_empty(),
        "refused requests left files: {:?}",
        files()
    );
    for _ in 0..2 {
        assert_eq!(say_hello(&url).0, 200);
    }
    let made = files();
    assert_eq!(made.len(), 1, "two keyless requests: {made:?}");
    assert!(made[0].starts_with("gw-"), "{made:?}");
}

#[test]
fn the_mock_provider_is_guarded_like_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, url) = mock(dir.path(), None);
    let body = r#"{"model": "m", "input": "hi"}"#;
    let json = ("content-type", "application/json");
    let refused = [
        (vec![("content-type", "text/plain")], 415),
        (vec![json, ("origin", "http://evil.example")], 403),
        (vec![json, ("host", "evil.example")], 403),
    ];
    for (headers, status) in refused {
        assert_eq!(
            status_of(&url, "POST", "/v1/responses", &headers, body),
            status,
            "{headers:?}"
        );
    }
    assert_eq!(
        status_of(
            &url,
            "GET",
            "/debug/requests",
            &[("host", "evil.example")],
            ""
        ),
        403
    );
    assert_eq!(status_of(&url, "POST", "/v1/responses", &[json], body), 200);
    let (status, text) = runtime().block_on(async {
        let r = reqwest::get(format!("{url}/debug/requests")).await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    });
    assert_eq!(status, 200);
    let recorded: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(recorded.len(), 1, "a refused request was recorded: {text}");
}

/// A connection with a small receive buffer that asked for `path` and reads nothing.
fn unread_get(url: &str, path: &str) -> TcpStream {
    let to: std::net::SocketAddr = addr(url).parse().unwrap();
    let mut s = runtime().block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(to).await.unwrap().into_std().unwrap()
    });
    s.set_nonblocking(false).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").as_bytes())
        .unwrap();
    s
}

#[test]
fn stored_responses_go_to_a_bounded_number_of_readers_at_once() {
    let (provider, _) = canned_provider(vec![(200, ANSWER)]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(&provider, dir.path(), "");
    let id = big_stored_response(&url);
    // Streamed and not, each holding a 3 MiB response it does not read.
    let held: Vec<TcpStream> = (0..16)
        .map(|i| {
            let query = if i % 2 == 0 { "?stream=true" } else { "" };
            unread_get(&url, &format!("/v1/responses/{id}{query}"))
        })
        .collect();
    let over = || status_of(&url, "GET", &format!("/v1/responses/{id}"), &[], "");
    // Each was let in before the next check: its answer has begun.
    for s in &held {
        let mut s = s.try_clone().unwrap();
        s.set_read_timeout(Some(MINUTE)).unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "a held reader was refused");
    }
    assert_eq!(over(), 429, "a 17th reader was let in");
    // Others are still served, and the places come back with the readers.
    assert_eq!(say_hello_status(&url), 200);
    drop(held);
    assert!(eventually(|| over() == 200), "the places never came back");
    // A replay read whole is the response's events, the stored response last.
    let (status, text) = runtime().block_on(async {
        let r = reqwest::get(format!("{url}/v1/responses/{id}?stream=true"))
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    });
    assert_eq!(status, 200);
    let events = sse_events(&text);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.completed"), "{kinds:?}");
    assert_eq!(events[0]["response"]["status"], "in_progress");
    assert_eq!(events[0]["response"]["output"], json!([]));
    let completed = &events[events.len() - 1];
    assert_eq!(completed["response"]["id"], id.as_str());
    assert_eq!(completed["response"]["status"], "completed");
    for (n, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], n, "{e}");
    }
}

#[test]
fn one_session_key_cannot_hold_every_request_place() {
    let (provider, asked) = silent_provider();
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(&provider, dir.path(), "max_retries = 0\n");
    let body = json!({"input": "hi", "metadata": {"session_key": "jam"}, "store": false});
    // One turn runs (its provider never answers) and four wait for it.
    let held: Vec<_> = (0..5)
        .map(|_| {
            let (url, body) = (url.clone(), body.clone());
            std::thread::spawn(move || post(&url, "/v1/responses", &body))
        })
        .collect();
    assert!(eventually(|| asked
        .load(std::sync::atomic::Ordering::SeqCst)
        == 1));
    // A try that is let in waits (the provider never answers): given up after 2 s.
    let jammed = || {
        runtime().block_on(async {
            let sent = reqwest::Client::new()
                .post(format!("{url}/v1/responses"))
                .json(&body)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            match sent {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(_) => (0, String::new()),
            }
        })
    };
    assert!(
        eventually(|| {
            let (status, text) = jammed();
            status == 429 && text.contains("wait for its turn")
        }),
        "a sixth request of one session was queued"
    );
    drop(held);
}
