//! The gateway and the QA end-to-end over real HTTP and real child processes: the QA with
//! each upstream format, bad input, a failing provider, SIGTERM.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
mod gateway_support;
use common::BIN;
use gateway_support::*;

#[test]
fn the_qa_end_to_end_passes_on_every_lane_with_each_upstream_format() {
    for provider in ["openai-responses", "openai-completions", "anthropic"] {
        qa_passes(provider);
    }
}

/// Options for the gateways it starts itself are refused, not ignored (front round 17 F6).
#[test]
fn qa_refuses_options_that_would_not_apply() {
    let out = Command::new(BIN)
        .args(["--mode", "tools", "qa", "tool-search-gateway-e2e"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--mode") && err.contains("do not apply"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["qa", "tool-search-gateway-e2e", "--tools", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 1"));
}

fn qa_passes(provider: &str) {
    let before = sandbox_children();
    let out = Command::new(BIN)
        .args([
            "qa",
            "tool-search-gateway-e2e",
            "--json",
            "--provider",
            provider,
        ])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success(),
        "{report:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["pass"], true);
    assert_eq!(report["provider"], provider);
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
    // The turn's requests counted whole too: every round resends the tools (front round
    // 17 F6: only the last request was counted).
    let direct = &report["lanes"][0];
    assert!(
        direct["turn_request_bytes"].as_u64().unwrap() > direct["request_bytes"].as_u64().unwrap(),
        "{direct:#}"
    );
    assert!(
        code["turn_ratio_to_direct"].as_f64().unwrap() <= 0.5,
        "{code:#}"
    );
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
            (json!({"input": "x", "temperature": "hot"}).to_string(), "a field's type"),
            (json!({"model": "m"}).to_string(), "no input"),
            (
                json!({"input": "x", "conversation": "conv_1"}).to_string(),
                "server-side conversation",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}).to_string(),
                "an image",
            ),
            (
                json!({"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}).to_string(),
                "a result without its call",
            ),
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
            assert_eq!(v["error"]["type"], "invalid_request_error", "{what}");
        }
        for (path, body, what) in [
            ("/v1/chat/completions", json!({"model": "m"}), "chat without messages"),
            (
                "/v1/chat/completions",
                json!({"messages": [{"role": "user", "content": "x"}], "stop": 3}),
                "chat stop",
            ),
            (
                "/v1/chat/completions",
                json!({"messages": [{"role": "tool", "tool_call_id": "c", "content": "x"}]}),
                "a tool message without its call",
            ),
        ] {
            let r = http
                .post(format!("{url}{path}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{what}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["type"], "invalid_request_error", "{what}: {v}");
        }
        let r = http.get(format!("{url}/v1/embeddings")).send().await.unwrap();
        assert_eq!(r.status(), 404);
        let v: Value = r.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains("/v1/embeddings"));
        let big = format!("{{\"input\": \"{}\"}}", "x".repeat(5 * 1024 * 1024));
        let r = http
            .post(format!("{url}/v1/responses"))
            .header("content-type", "application/json")
            .body(big)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 413);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    });
}

/// A POST with no body and no Content-Type reaches routing: the OpenAI SDK's
/// `responses.cancel(id)` sends one to a route the gateway does not serve, and gets its
/// 404 in OpenAI's error shape (it got the guard's 415); a route that reads a JSON body
/// answers one it lacks with a 400. A body of another type is still refused.
#[test]
fn a_bodiless_post_is_routed_not_refused_for_its_content_type() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = start(&["mock-provider", "--listen", "127.0.0.1:0"], dir.path());
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    runtime().block_on(async {
        let http = reqwest::Client::new();
        let r = http
            .post(format!("{url}/v1/responses/resp_x/cancel"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("/v1/responses/resp_x/cancel")),
            "{v}"
        );
        let r = http
            .post(format!("{url}/v1/responses"))
            .header("content-length", "0")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        let r = http
            .post(format!("{url}/v1/responses/resp_x/cancel"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415, "a body without its type");
    });
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
    let (status, v) = say_hello(&url);
    assert_eq!(status, 401, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("401"),
        "{v}"
    );
}

const KEY: &str = "sk-test-7f3a9c1e5b";

#[test]
fn a_provider_refusal_keeps_its_status_and_type_and_never_shows_the_key() {
    // OpenAI's shape, repeating the key as some servers do.
    let (provider, _) = canned_provider(vec![(
        401,
        r#"{"error": {"message": "Incorrect API key provided: sk-test-7f3a9c1e5b.", "type": "invalid_request_error", "code": "invalid_api_key"}}"#,
    )]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_env(
        "tools",
        &provider,
        dir.path(),
        "max_retries = 0\napi_key_env = \"TS_GATEWAY_KEY\"\n",
        &[("TS_GATEWAY_KEY", KEY)],
    );
    let (status, v) = say_hello(&url);
    assert_eq!(status, 401, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert_eq!(v["error"]["code"], "invalid_api_key", "{v}");
    assert!(!v.to_string().contains(KEY), "the key was echoed: {v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Incorrect API key")
    );
}

#[test]
fn a_rate_limit_stays_429_with_retry_after_streamed_or_not_and_from_anthropic() {
    let limited =
        r#"{"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}"#;
    let (provider, _) = canned_provider_with(vec![
        (429, "retry-after: 7\r\n", limited),
        (429, "retry-after: 7\r\n", limited),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(
        &provider,
        dir.path(),
        "max_retries = 0\nkind = \"anthropic\"\n",
    );
    for stream in [false, true] {
        let (status, headers, body) = hello(&url, stream);
        assert_eq!(status, 429, "stream {stream}");
        assert_eq!(headers["retry-after"], "7", "stream {stream}");
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "stream {stream}: an error before any text is not a stream"
        );
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["type"], "rate_limit_error", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("slow down")
        );
    }
}

/// A provider that asks for a longer wait than the gateway gives one (5 s) is not asked
/// again early: its 429 and the wait it asked for go to the client at once, streamed or
/// not, as `Retry-After` (whole seconds) and `retry-after-ms`. The gateway retried after 5 s
/// when told 10, three times, and a streamed client got a 200 stream that failed after 15 s
/// instead of the 429 its SDK obeys (front round 19 F1); a fraction, `retry-after-ms` alone
/// and a number too large for an integer were read as no wait at all, and the provider was
/// asked again after 100 ms (front round 27 F1).
#[test]
fn a_provider_that_asks_for_a_long_wait_is_answered_to_the_client_at_once() {
    let limited = r#"{"error": {"type": "rate_limit_error", "message": "slow down"}}"#;
    for (asks, seconds, ms) in [
        ("retry-after: 10\r\n", "10", "10000"),
        ("retry-after: 7.5\r\n", "8", "7500"),
        ("retry-after-ms: 10000\r\n", "10", "10000"),
        ("retry-after: 99999999999999999999\r\n", "86400", "86400000"),
    ] {
        let (provider, asked) = canned_provider_with(vec![(429, asks, limited); 8]);
        let dir = tempfile::tempdir().unwrap();
        let (_gw, url) = gateway_with(&provider, dir.path(), "");
        for stream in [false, true] {
            let started = Instant::now();
            let (status, headers, _) = hello(&url, stream);
            assert_eq!(status, 429, "{asks} stream {stream}");
            assert_eq!(headers["retry-after"], seconds, "{asks} stream {stream}");
            assert_eq!(headers["retry-after-ms"], ms, "{asks} stream {stream}");
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{asks} stream {stream}"
            );
        }
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2, "{asks}");
    }
}

/// A short wait given as a fraction is waited whole before the provider is asked again
/// (it was read as none, and the retry came after 100 ms).
#[test]
fn a_fractional_retry_after_is_waited_before_the_retry() {
    let limited = r#"{"error": {"type": "rate_limit_error", "message": "slow down"}}"#;
    let ok = r#"{"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]}"#;
    let (provider, asked) =
        canned_provider_with(vec![(429, "retry-after: 1.5\r\n", limited), (200, "", ok)]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(&provider, dir.path(), "max_retries = 1\n");
    let started = Instant::now();
    let (status, v) = say_hello(&url);
    assert_eq!(status, 200, "{v}");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "retried after {:?}",
        started.elapsed()
    );
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A streamed `hello` to the gateway at `url`: its status, `Retry-After` and body.
fn streamed_hello(url: &str) -> (u16, Option<String>, String) {
    let (status, headers, body) = hello(url, true);
    let retry_after = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, retry_after, body)
}

/// A `hello` to the gateway at `url`, streamed or not: its status, headers and body.
fn hello(url: &str, stream: bool) -> (u16, reqwest::header::HeaderMap, String) {
    runtime().block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{url}/v1/responses"))
            .json(&json!({"input": "hello", "stream": stream}))
            .send()
            .await
            .unwrap();
        let (status, headers) = (r.status().as_u16(), r.headers().clone());
        (status, headers, r.text().await.unwrap())
    })
}

/// Retries wait at most two thirds of the keep-alive in all, so a provider's 429 reaches a
/// streamed client as a 429 before the keep-alive opens its stream (front round 20 F2: with
/// a 2 s keep-alive, the 10 s budget turned it into a 200 stream that failed).
#[test]
fn retries_end_before_a_short_keep_alive_opens_the_stream() {
    let limited = r#"{"error": {"type": "rate_limit_error", "message": "slow down"}}"#;
    let (provider, asked) = canned_provider_with(vec![(429, "retry-after: 2\r\n", limited); 8]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(
        &provider,
        dir.path(),
        "[gateway]\nstream_keepalive_ms = 4000\n",
    );
    let (status, retry_after, body) = streamed_hello(&url);
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry_after.as_deref(), Some("2"));
    // One retry of 2 s fits in the 2.67 s budget; a second would not.
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// Waits after refused connections count against the same budget (review 26 F6: they did
/// not, and eight retries of a provider that was down held a streamed answer past its
/// keep-alive, which then opened as a 200 stream that failed).
#[test]
fn retries_of_refused_connections_end_before_the_keep_alive_opens_the_stream() {
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", down.local_addr().unwrap());
    drop(down);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw_url) = gateway_with(
        &url,
        dir.path(),
        "max_retries = 8\n[gateway]\nstream_keepalive_ms = 1500\n",
    );
    // Waits of 100 + 200 + 400 ms fit in the 1 s budget; with 800 ms more the stream
    // would have opened.
    let (status, _, body) = streamed_hello(&gw_url);
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("the request failed"), "{body}");
}

/// The attempts count against the budget as well as the waits, the retry's own included
/// (front round 25 F1: a provider that took 4.5 s to answer 429 was asked four times, 21 s
/// in all; round 26 F1: a retry that started within the budget and took as long again ended
/// after the keep-alive): the streamed client gets the 429, not a 200 stream that fails.
#[test]
fn retries_of_a_slow_provider_end_before_the_keep_alive_opens_the_stream() {
    let (provider, asked) = scripted_provider(|_, _, _| {
        std::thread::sleep(Duration::from_millis(2_750));
        Reply::json(
            429,
            &json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
        )
        .header("retry-after: 1")
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(
        &provider,
        dir.path(),
        "max_retries = 4\n[gateway]\nstream_keepalive_ms = 6000\n",
    );
    // A retry 1 s after the first 2.75 s attempt starts within the 4 s budget, but taking
    // 2.75 s again it ends at 6.5 s, after the 6 s keep-alive.
    let (status, retry_after, body) = streamed_hello(&url);
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
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

/// A compressed answer the gateway never asked for is named as such, not as garbage (front
/// round 28 F3: "expected value at line 1 column 1").
#[test]
fn an_unasked_content_encoding_is_named() {
    // A whole answer, and an error's body (its status kept).
    let (provider, _) = canned_provider_with(vec![
        (200, "content-encoding: gzip\r\n", "\u{1f}"),
        (429, "content-encoding: gzip\r\n", "\u{1f}"),
        // Every header counts, not the first (front round 30 F4).
        (
            200,
            "content-encoding: identity\r\ncontent-encoding: gzip\r\n",
            "\u{1f}",
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(&provider, dir.path(), "max_retries = 0\n");
    for expected in [502, 429, 502] {
        let (status, v) = say_hello(&url);
        assert_eq!(status, expected, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("Content-Encoding: gzip"),
            "{v}"
        );
    }
}
