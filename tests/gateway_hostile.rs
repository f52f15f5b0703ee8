//! The gateway against a provider that misbehaves on purpose: one that repeats the key in
//! every form and every kind of error, redirects, floods, never ends a line, nests
//! values, says its text only in its closing events, counts absurd tokens, or asks for
//! hundreds of tool calls at once. What must hold: no secret reaches a client or a log,
//! nothing is followed elsewhere, memory stays bounded, and every failure is a clear
//! answer, never a hang or a panic.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

mod common;
mod gateway_support;
use gateway_support::*;

const KEY: &str = "sk-SECRET-UPSTREAM-KEY-0123456789abcdef";

/// Whether `text` holds the key or any 8-character run of it, in any case, or the URL's
/// secrets.
fn leaks(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let key = KEY.to_lowercase();
    for i in 0..=key.len() - 8 {
        if lower.contains(&key[i..i + 8]) {
            return Some(key[i..i + 8].to_string());
        }
    }
    lower.contains("urlsecret").then(|| "urlsecret".into())
}

fn message(text: &str) -> Value {
    json!({"output": [{"type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": text}]}]})
}

/// The mode a request asks the provider for: the word after `MODE:` in its body.
fn mode_of(body: &Value) -> String {
    let text = body.to_string();
    text.split("MODE:")
        .nth(1)
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect()
        })
        .unwrap_or_default()
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A provider that leaks the key it was sent, in the way the request's mode asks.
fn leaking_provider() -> String {
    scripted_provider(|_, head, body| {
        let key = head
            .lines()
            .find_map(|l| l.strip_prefix("authorization: bearer "))
            .unwrap_or("")
            .to_string();
        // The head is lowercased; the key the gateway sent is KEY.
        assert_eq!(key, KEY.to_lowercase());
        let key = KEY;
        match mode_of(body).as_str() {
            "ok200" => Reply::json(200, &json!({"error": {"message": format!("your key {key} is bad"), "type": "x"}})),
            "cut" => Reply::with_type(400, "text/plain", format!("{}{key} tail", "A".repeat(280))),
            "forms" => Reply::json(403, &json!({"error": {"message": format!(
                "b64 {} basic {} upper {}",
                base64(key.as_bytes()),
                base64(format!("user:{key}").as_bytes()),
                key.to_uppercase()
            ), "type": "x", "code": key}})),
            "stream" => Reply::sse(&[json!({"type": "error", "error": {"message": format!("bad key {key}"), "type": "auth"}})]),
            "refused" => Reply::json(401, &json!({"error": {"message": format!("Incorrect API key provided: {key}."), "type": "invalid_request_error", "code": "invalid_api_key"}})),
            "toolarg" => Reply::json(200, &json!({"output": [{"type": "function_call", "call_id": "c1", "name": "tool_search", "arguments": format!("{{\"q\": {key}")}]})),
            _ => Reply::json(200, &message("plain")),
        }
    })
    .0
}

#[test]
fn no_secret_reaches_a_client_or_a_session_log() {
    let dir = tempfile::tempdir().unwrap();
    let url = leaking_provider();
    // The base URL carries secrets of its own, in its userinfo and its query.
    let base = url.replace("http://", "http://user:pw-URLSECRET@") + "?api-key=URLSECRET123";
    let (_gw, gw) = gateway_env(
        "tools",
        &base,
        dir.path(),
        "api_key_env = \"TS_HOSTILE_KEY\"\nmax_retries = 0\n",
        &[("TS_HOSTILE_KEY", KEY)],
    );
    for mode in ["ok200", "cut", "forms", "stream", "refused", "toolarg"] {
        for stream in [false, true] {
            let (status, text) = post(
                &gw,
                "/v1/responses",
                &json!({"input": format!("MODE:{mode}"), "stream": stream,
                        "metadata": {"session_key": "leaks"}}),
            );
            assert!(status >= 400, "{mode}: {status} {text}");
            assert_eq!(leaks(&text), None, "{mode} stream {stream}: {text}");
        }
    }
    // A provider that cannot be reached: the message names its URL without the secrets.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let sub = dir.path().join("closed");
    std::fs::create_dir_all(&sub).unwrap();
    let (_gw2, gw2) = gateway_env(
        "tools",
        &format!("http://user:pw-URLSECRET@{closed}/v1?api-key=URLSECRET123"),
        &sub,
        "api_key_env = \"TS_HOSTILE_KEY\"\nmax_retries = 0\n",
        &[("TS_HOSTILE_KEY", KEY)],
    );
    let (status, text) = post(&gw2, "/v1/responses", &json!({"input": "hello"}));
    assert_eq!(status, 502, "{text}");
    assert!(text.contains(&closed.to_string()), "{text}");
    assert_eq!(leaks(&text), None, "{text}");

    let log = std::fs::read_to_string(dir.path().join("state/sessions/leaks.jsonl")).unwrap();
    assert!(log.contains("turn_error"), "{log}");
    assert_eq!(leaks(&log), None, "{log}");
}

#[test]
fn a_redirect_is_not_followed_with_the_key_or_the_conversation() {
    let (elsewhere, taken) = scripted_provider(|_, _, _| Reply::json(200, &message("stolen")));
    for kind in ["openai-responses", "anthropic"] {
        let target = elsewhere.clone();
        let (redirecting, _) = scripted_provider(move |path, _, _| {
            Reply::with_type(307, "text/plain", "").header(&format!("location: {target}{path}"))
        });
        let dir = tempfile::tempdir().unwrap();
        let (_gw, gw) = gateway_env(
            "tools",
            &redirecting,
            dir.path(),
            &format!("kind = \"{kind}\"\napi_key_env = \"TS_HOSTILE_KEY\"\nmax_retries = 0\n"),
            &[("TS_HOSTILE_KEY", KEY)],
        );
        let (status, text) = post(&gw, "/v1/responses", &json!({"input": "my secret plans"}));
        assert_eq!(status, 502, "{kind}: {text}");
        assert!(text.contains("redirect"), "{kind}: {text}");
        assert_eq!(
            taken.load(Ordering::SeqCst),
            0,
            "{kind}: followed the redirect"
        );
    }
}

#[test]
fn what_a_provider_floods_is_cut_at_the_bound_and_memory_stays_bounded() {
    let (url, _) = scripted_provider(|_, _, body| match mode_of(body).as_str() {
        // An SSE line that never ends: 300 MiB of it.
        "endless" => Reply::with_type(200, "text/event-stream", "data: ")
            .then_repeat(vec![b'x'; 1 << 20], 300),
        // Many small events: 300 MiB of text deltas.
        "flood" => {
            let event = format!(
                "data: {}\n\n",
                json!({"type": "response.output_text.delta", "delta": "y".repeat(60_000)})
            );
            Reply::with_type(200, "text/event-stream", "").then_repeat(event.into_bytes(), 5000)
        }
        // A whole answer just under the byte bound, made of nothing but tiny values.
        "nested" => {
            let pad = vec!["[]"; 10_000_000].join(",");
            Reply::with_type(
                200,
                "application/json",
                format!("{{\"output\": [], \"pad\": [{pad}]}}"),
            )
        }
        _ => Reply::json(200, &message("plain")),
    });
    let dir = tempfile::tempdir().unwrap();
    let (gw_guard, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    for (mode, stream) in [("endless", true), ("flood", true), ("nested", false)] {
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"input": format!("MODE:{mode}"), "stream": stream}),
        );
        // A stream that has begun ends with `response.failed`; else the status says it.
        assert!(
            status == 502 || (status == 200 && text.contains("response.failed")),
            "{mode}: {status} {}",
            &text[..text.len().min(500)]
        );
        // The error's message (a failed stream's last event also carries what streamed).
        let at = text.rfind("\"error\":").unwrap_or(0);
        let end = &text[at..text.len().min(at + 2000)];
        assert!(
            end.contains("larger than") || end.contains("JSON values"),
            "{mode}: {end}"
        );
    }
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "still here"}));
    assert_eq!(status, 200, "{text}");
    // The bound is 32 MiB of answer; a debug build at rest takes some tens of MiB.
    let peak = peak_rss_mib(gw_guard.0.id());
    assert!(peak < 200, "the gateway peaked at {peak} MiB");
}

#[test]
fn text_sent_only_in_closing_events_is_the_answer() {
    let (url, _) = scripted_provider(|_, _, body| {
        let done = message("TEXT ONLY IN DONE EVENTS");
        if body["stream"] == true {
            Reply::sse(&[
                json!({"type": "response.output_item.done", "output_index": 0, "item": done["output"][0]}),
                json!({"type": "response.output_text.done", "output_index": 0, "content_index": 0, "text": "TEXT ONLY IN DONE EVENTS"}),
                json!({"type": "response.completed", "response": done}),
            ])
        } else {
            Reply::json(200, &done)
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "");
    for stream in [false, true] {
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"input": "hello", "stream": stream}),
        );
        assert_eq!(status, 200, "{text}");
        let said: String = if stream {
            toolsearch::provider::parse_sse(&text)
                .iter()
                .filter(|e| e["type"] == "response.output_text.delta")
                .filter_map(|e| e["delta"].as_str().map(str::to_string))
                .collect()
        } else {
            toolsearch::provider::normalize::responses_output_text(
                &serde_json::from_str(&text).unwrap(),
            )
        };
        assert_eq!(said, "TEXT ONLY IN DONE EVENTS", "stream {stream}: {text}");
    }
}

#[test]
fn absurd_token_counts_saturate() {
    let (url, _) = scripted_provider(|_, _, _| {
        let mut answer = message("hi");
        answer["usage"] = json!({"input_tokens": u64::MAX, "output_tokens": 5});
        Reply::json(200, &answer)
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "");
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "count"}));
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["usage"]["total_tokens"], json!(u64::MAX), "{v}");
    let (status, text) = post(
        &gw,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "count"}]}),
    );
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["usage"]["total_tokens"], json!(u64::MAX), "{v}");
}

#[test]
fn an_answer_with_hundreds_of_calls_is_refused_not_run() {
    let (url, asked) = scripted_provider(|_, _, _| {
        let calls: Vec<Value> = (0..500)
            .map(|i| json!({"type": "function_call", "call_id": format!("c{i}"), "name": "tool_search", "arguments": "{\"query\": \"issue\"}"}))
            .collect();
        Reply::json(200, &json!({"output": calls}))
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "search a lot"}));
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("500 tool calls"), "{text}");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "no second round ran");
}

/// A provider that streams `pieces` text deltas `gap` apart, then completes; when `stall`,
/// it says nothing more after the first piece and keeps the connection open.
fn trickling_provider(pieces: usize, gap: std::time::Duration, stall: bool) -> String {
    let mut events: Vec<Value> = (0..pieces)
        .map(|i| json!({"type": "response.output_text.delta", "delta": format!("p{i} ")}))
        .collect();
    events.push(json!({"type": "response.completed", "response": {"output": []}}));
    // Stalled: an hour's silence after the first piece, longer than any test.
    let gap = if stall {
        std::time::Duration::from_secs(3600)
    } else {
        gap
    };
    scripted_provider(move |_, _, _| Reply::sse_paced(&events, gap)).0
}

/// `[provider] timeout_ms` is how long the provider may be silent, not how long an answer
/// may take: a stream whose pieces keep coming outlives it (as reqwest's total timeout it
/// was cut at the limit, front round 10 F1), and one that goes quiet fails, said as a
/// timeout.
#[test]
fn a_stream_still_arriving_outlives_the_provider_timeout_and_a_silent_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let config = "max_retries = 0\nstream = true\ntimeout_ms = 1000\n";
    // Twelve pieces 250 ms apart: three seconds of answer, never a second of silence.
    let steady = trickling_provider(12, std::time::Duration::from_millis(250), false);
    let sub = dir.path().join("steady");
    std::fs::create_dir_all(&sub).unwrap();
    let (_steady_gw, gw) = gateway_with(&steady, &sub, config);
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "slowly"}));
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("p11"), "{text}");

    let silent = trickling_provider(3, std::time::Duration::ZERO, true);
    let sub = dir.path().join("silent");
    std::fs::create_dir_all(&sub).unwrap();
    let (_silent_gw, gw) = gateway_with(&silent, &sub, config);
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "then nothing"}));
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("timed out"), "{text}");
}

/// An upstream stream must reach the event that ends an answer, and every event must be
/// read: for each upstream kind, a stream whose body ends before that event fails the turn
/// (front round 13 F1: it was answered `completed`, stored and continued), and so does an
/// event that is not JSON (F4: a delta serde could not read was dropped, its text lost,
/// and the turn said it succeeded; a lone surrogate escape is read as U+FFFD since, as
/// JavaScript reads it). The same stream whole is answered.
#[test]
fn a_stream_cut_before_its_end_or_with_an_unreadable_event_fails_the_turn() {
    let cases: [(&str, Vec<Value>, Value, &str); 3] = [
        (
            "openai-responses",
            vec![json!({"type": "response.output_text.delta", "delta": "The answer is: 4"})],
            json!({"type": "response.completed", "response": {"output": []}}),
            r#"{"type": "response.output_text.delta", "delta": "\x41 B"}"#,
        ),
        (
            "openai-completions",
            vec![json!({"choices": [{"index": 0, "delta": {"content": "The answer is: 4"}}]})],
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            r#"{"choices": [{"index": 0, "delta": {"content": "\x41 B"}}]}"#,
        ),
        (
            "anthropic",
            vec![
                json!({"type": "message_start", "message": {"id": "m1", "role": "assistant", "content": []}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "The answer is: 4"}}),
            ],
            json!({"type": "message_stop"}),
            r#"{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "\x41 B"}}"#,
        ),
    ];
    for (kind, body, end, unreadable) in cases {
        let sse = |events: &[Value]| -> String {
            events.iter().map(|e| format!("data: {e}\n\n")).collect()
        };
        let cut = sse(&body);
        let whole = format!("{cut}{}", sse(std::slice::from_ref(&end)));
        let bad = format!("{cut}data: {unreadable}\n\n{}", sse(&[end]));
        let (url, _) = scripted_provider(move |_, _, request| {
            let text = match request["model"].as_str() {
                Some("cut") => cut.clone(),
                Some("bad") => bad.clone(),
                _ => whole.clone(),
            };
            Reply::with_type(200, "text/event-stream", text)
        });
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "max_retries = 0\nstream = true\nkind = \"{kind}\"\napi_key_env = \"TS_TEST_KEY\"\n"
        );
        let (_gw, gw) = gateway_env("tools", &url, dir.path(), &config, &[("TS_TEST_KEY", "k")]);
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"model": "whole", "input": "hi"}),
        );
        assert_eq!(status, 200, "{kind}: {text}");
        assert!(text.contains("The answer is: 4"), "{kind}: {text}");
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"model": "cut", "input": "hi"}),
        );
        assert_eq!(status, 502, "{kind}: {text}");
        assert!(text.contains("cut short"), "{kind}: {text}");
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"model": "bad", "input": "hi"}),
        );
        assert_eq!(status, 502, "{kind}: {text}");
        assert!(text.contains("not JSON"), "{kind}: {text}");
    }
}

/// A streamed turn that fails after text went out says in `response.failed` that it is
/// not stored (front round 13 F5: it said `store: true`, and GET found nothing).
#[test]
fn a_streamed_turn_failing_after_text_says_it_is_not_stored() {
    let (url, _) = scripted_provider(|_, _, _| {
        Reply::sse(&[
            json!({"type": "response.output_text.delta", "delta": "Partial "}),
            json!({"type": "response.failed", "response": {"error": {"message": "upstream broke"}}}),
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\nstream = true\n");
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "stream": true}),
    );
    assert_eq!(status, 200, "{text}");
    let failed = sse_events(&text)
        .pop()
        .unwrap_or_else(|| panic!("no events: {text}"));
    assert_eq!(failed["type"], "response.failed", "{text}");
    assert_eq!(failed["response"]["store"], false, "{text}");
    assert!(text.contains("Partial "), "{text}");
}

/// An error the provider reports inside an answer (a stream's `error` event, a failed
/// response, a Chat chunk that is an error) keeps its type and the status that type has
/// over HTTP: a rate limit is a 429, streamed or not, from every upstream kind. It was a
/// 502 `server_error`, which an SDK cannot tell from a broken gateway.
#[test]
fn a_rate_limit_reported_inside_an_answer_stays_a_rate_limit() {
    for kind in ["openai-responses", "openai-completions", "anthropic"] {
        let (url, _) = scripted_provider(move |_, _, request| {
            let streamed = request["stream"] == json!(true);
            match (kind, streamed) {
                ("openai-responses", false) => Reply::json(
                    200,
                    &json!({"status": "failed", "output": [], "error": {"code": "rate_limit_exceeded", "message": "slow down"}}),
                ),
                ("openai-responses", true) => Reply::sse(&[
                    json!({"type": "response.created", "response": {"status": "in_progress", "output": []}}),
                    json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null}),
                ]),
                ("openai-completions", false) => Reply::json(
                    200,
                    &json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
                ),
                ("openai-completions", true) => Reply::sse(&[
                    json!({"error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", "message": "slow down"}}),
                ]),
                (_, false) => Reply::json(
                    200,
                    &json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
                ),
                (_, true) => Reply::sse(&[
                    json!({"type": "message_start", "message": {"id": "m1", "role": "assistant", "content": []}}),
                    json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
                ]),
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let config = format!("max_retries = 0\nkind = \"{kind}\"\napi_key_env = \"TS_TEST_KEY\"\n");
        let (_gw, gw) = gateway_env("tools", &url, dir.path(), &config, &[("TS_TEST_KEY", "k")]);
        for stream in [false, true] {
            for (path, body) in [
                ("/v1/responses", json!({"input": "hi", "stream": stream})),
                (
                    "/v1/chat/completions",
                    json!({"messages": [{"role": "user", "content": "hi"}], "stream": stream}),
                ),
            ] {
                let (status, text) = post(&gw, path, &body);
                assert_eq!(status, 429, "{kind} {path} stream {stream}: {text}");
                let v: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{kind} {path} stream {stream}: {e}: {text}"));
                // The type matches the status even when the provider gave a code alone
                // (front round 28 F1: a 429 typed `invalid_request_error`).
                assert_eq!(
                    v["error"]["type"], "rate_limit_error",
                    "{kind} {path}: {text}"
                );
                assert!(text.contains("slow down"), "{kind} {path}: {text}");
            }
        }
    }
}

/// A provider's error whose body is past what is read still says what went wrong: its
/// start reaches the client (a 20 MB message left "answered 400: " and nothing more: front
/// round 28 F2).
#[test]
fn a_huge_provider_error_keeps_its_start() {
    let (url, _) = scripted_provider(|_, _, _| {
        Reply::json(
            400,
            &json!({"error": {"type": "invalid_request_error", "message": format!("the prompt is too long: {}", "A".repeat(1_000_000))}}),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "hi"}));
    assert_eq!(status, 400, "{}", &text[..text.len().min(500)]);
    assert!(
        text.contains("the prompt is too long"),
        "{}",
        &text[..text.len().min(500)]
    );
    assert!(text.len() < 4096, "{} bytes", text.len());
}

/// A provider's error that is JSON of another shape is shown with its strings unescaped,
/// so a key spelled in `\u` escapes is redacted (front round 30 F3).
#[test]
fn a_key_in_json_escapes_is_redacted() {
    let escaped: String = KEY
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let (url, _) = scripted_provider(move |_, _, _| {
        Reply::with_type(
            401,
            "application/json",
            format!(r#"{{"detail": "bad key {escaped}"}}"#),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_env(
        "tools",
        &url,
        dir.path(),
        "api_key_env = \"TS_HOSTILE_KEY\"\nmax_retries = 0\n",
        &[("TS_HOSTILE_KEY", KEY)],
    );
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "hi"}));
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("[redacted]"), "{text}");
    assert!(!text.contains("\\u0073\\u006b"), "{text}");
}

/// A provider's JSON error longer than what a message shows keeps its type, code and
/// `param` (front round 29 F1: past 2,000 characters they were lost, the body cut before it
/// was parsed).
#[test]
fn a_long_provider_error_keeps_its_type_code_and_param() {
    let (url, _) = scripted_provider(|_, _, _| {
        Reply::json(
            400,
            &json!({"error": {"message": format!("Invalid schema: {}", "x".repeat(5000)), "type": "invalid_request_error", "param": "tools[0].parameters", "code": "invalid_function_parameters"}}),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "hi"}));
    assert_eq!(status, 400, "{}", &text[..text.len().min(500)]);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["error"]["code"], "invalid_function_parameters", "{v}");
    assert_eq!(v["error"]["param"], "tools[0].parameters", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(text.contains("Invalid schema: xxx"), "{v}");
}

/// The provider's own ending reaches the client: an answer cut at the token limit is
/// `incomplete` (`max_output_tokens`) on the Responses front, streamed (closing with
/// `response.incomplete`) and not, and `finish_reason: "length"` on Chat; a refusal is a
/// `refusal` part and Chat's `message.refusal` (front round 13 F2, F3: both were said
/// `completed` / `"stop"`, the refusal text lost). For each upstream kind, whole and
/// streamed from the provider.
#[test]
fn a_cut_answer_is_incomplete_and_a_refusal_is_a_refusal_on_both_fronts() {
    let refusal = "I can't help with that.";
    for kind in ["openai-responses", "openai-completions", "anthropic"] {
        let (url, _) = scripted_provider(move |_, _, request| {
            let streamed = request["stream"] == json!(true);
            let refused = request["model"] == json!("refusal");
            match (kind, streamed, refused) {
                ("openai-completions", false, false) => Reply::json(
                    200,
                    &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Half an ans"}, "finish_reason": "length"}]}),
                ),
                ("openai-completions", true, false) => Reply::sse(&[
                    json!({"choices": [{"index": 0, "delta": {"content": "Half an ans"}}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
                ]),
                ("openai-completions", false, true) => Reply::json(
                    200,
                    &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": refusal}, "finish_reason": "stop"}]}),
                ),
                ("openai-completions", true, true) => Reply::sse(&[
                    json!({"choices": [{"index": 0, "delta": {"refusal": "I can't "}}]}),
                    json!({"choices": [{"index": 0, "delta": {"refusal": "help with that."}}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                ]),
                ("openai-responses", false, false) => Reply::json(
                    200,
                    &json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Half an ans"}]}]}),
                ),
                ("openai-responses", true, false) => Reply::sse(&[
                    json!({"type": "response.output_text.delta", "delta": "Half an ans"}),
                    json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}}),
                ]),
                ("openai-responses", false, true) => Reply::json(
                    200,
                    &json!({"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": refusal}]}]}),
                ),
                ("openai-responses", true, true) => Reply::sse(&[
                    json!({"type": "response.refusal.delta", "delta": "I can't "}),
                    json!({"type": "response.refusal.delta", "delta": "help with that."}),
                    json!({"type": "response.completed", "response": {"status": "completed", "output": []}}),
                ]),
                (_, false, _) => Reply::json(
                    200,
                    &json!({"content": [{"type": "text", "text": "Half an ans"}], "stop_reason": "max_tokens"}),
                ),
                (_, true, _) => Reply::sse(&[
                    json!({"type": "message_start", "message": {"id": "m1", "role": "assistant", "content": []}}),
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Half an ans"}}),
                    json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}),
                    json!({"type": "message_stop"}),
                ]),
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let config = format!("max_retries = 0\nkind = \"{kind}\"\napi_key_env = \"TS_TEST_KEY\"\n");
        let (_gw, gw) = gateway_env("tools", &url, dir.path(), &config, &[("TS_TEST_KEY", "k")]);
        // Cut at the limit: Responses whole and streamed, Chat.
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"model": "cut", "input": "hi"}),
        );
        assert_eq!(status, 200, "{kind}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], "incomplete", "{kind}: {text}");
        assert_eq!(
            v["incomplete_details"]["reason"], "max_output_tokens",
            "{kind}: {text}"
        );
        assert_eq!(v["output"][0]["status"], "incomplete", "{kind}: {text}");
        let (_, text) = post(
            &gw,
            "/v1/responses",
            &json!({"model": "cut", "input": "hi", "stream": true}),
        );
        let last = sse_events(&text)
            .pop()
            .unwrap_or_else(|| panic!("{kind}: no events: {text}"));
        assert_eq!(last["type"], "response.incomplete", "{kind}: {text}");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"], "max_output_tokens",
            "{kind}"
        );
        let (_, text) = post(
            &gw,
            "/v1/chat/completions",
            &json!({"model": "cut", "messages": [{"role": "user", "content": "hi"}]}),
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{kind}: {text}");
        let (_, text) = post(
            &gw,
            "/v1/chat/completions",
            &json!({"model": "cut", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        );
        assert!(
            text.contains(r#""finish_reason":"length""#),
            "{kind}: {text}"
        );
        if kind == "anthropic" {
            continue;
        }
        // A refusal: its text, on both fronts, whole and streamed from the provider.
        for stream in [false, true] {
            let (_, text) = post(
                &gw,
                "/v1/responses",
                &json!({"model": "refusal", "input": "hi", "stream": stream}),
            );
            assert!(
                text.contains(r#"{"type":"refusal","refusal":"I can't help with that."}"#)
                    || text.contains(r#"{"refusal":"I can't help with that.","type":"refusal"}"#),
                "{kind} stream {stream}: {text}"
            );
            let (_, text) = post(
                &gw,
                "/v1/chat/completions",
                &json!({"model": "refusal", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
            );
            assert!(
                text.contains(r#""refusal":"I can't help with that.""#),
                "{kind} stream {stream}: {text}"
            );
        }
    }
}

/// Endings said only in unusual places still reach the client (front round 14 F1-F3): a
/// stop reason this gateway does not list is a cut (Anthropic's
/// `model_context_window_exceeded`, Mistral's `model_length`), a Responses stream that
/// says `incomplete` only in its closing object is incomplete, and a refusal given only in
/// the closing object is the answer's refusal.
#[test]
fn endings_said_only_in_closing_objects_or_unknown_reasons_reach_the_client() {
    let refusal = "I can't help with that.";
    for kind in ["openai-responses", "openai-completions", "anthropic"] {
        let (url, _) = scripted_provider(move |_, _, request| {
            let refused = request["model"] == json!("refusal");
            match (kind, refused) {
                ("openai-responses", false) => Reply::sse(&[
                    json!({"type": "response.output_text.delta", "delta": "Half an ans"}),
                    json!({"type": "response.completed", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}}),
                ]),
                ("openai-responses", true) => Reply::sse(&[
                    json!({"type": "response.completed", "response": {"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": refusal}]}]}}),
                ]),
                ("openai-completions", _) => Reply::sse(&[
                    json!({"choices": [{"index": 0, "delta": {"content": "Half an ans"}}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "model_length"}]}),
                ]),
                _ => Reply::sse(&[
                    json!({"type": "message_start", "message": {"id": "m1", "role": "assistant", "content": []}}),
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Half an ans"}}),
                    json!({"type": "message_delta", "delta": {"stop_reason": "model_context_window_exceeded"}}),
                    json!({"type": "message_stop"}),
                ]),
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "max_retries = 0\nstream = true\nkind = \"{kind}\"\napi_key_env = \"TS_TEST_KEY\"\n"
        );
        let (_gw, gw) = gateway_env("tools", &url, dir.path(), &config, &[("TS_TEST_KEY", "k")]);
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"model": "cut", "input": "hi"}),
        );
        assert_eq!(status, 200, "{kind}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], "incomplete", "{kind}: {text}");
        let (_, text) = post(
            &gw,
            "/v1/chat/completions",
            &json!({"model": "cut", "messages": [{"role": "user", "content": "hi"}]}),
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{kind}: {text}");
        if kind == "openai-responses" {
            let (_, text) = post(
                &gw,
                "/v1/chat/completions",
                &json!({"model": "refusal", "messages": [{"role": "user", "content": "hi"}]}),
            );
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["choices"][0]["message"]["refusal"], refusal, "{text}");
        }
    }
}

/// `GET /v1/models` answers the configured model only when the provider has no list (404,
/// or an empty one); a provider that refuses the key or fails keeps its status, as a
/// turn's failure does (front round 14 F7: every failure was a 200 with the configured
/// model).
#[test]
fn the_model_list_falls_back_only_when_the_provider_has_none() {
    let (url, _) = scripted_provider(|path, head, _| {
        let key = head
            .lines()
            .find_map(|l| l.strip_prefix("authorization: bearer "))
            .unwrap_or_default()
            .trim()
            .to_string();
        match (path.ends_with("/models"), key.as_str()) {
            (true, "refused") => Reply::json(
                401,
                &json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}),
            ),
            (true, "down") => Reply::json(
                503,
                &json!({"error": {"message": "overloaded", "type": "server_error"}}),
            ),
            (true, _) => Reply::json(404, &json!({"error": {"message": "no such route"}})),
            _ => Reply::json(200, &json!({"output": []})),
        }
    });
    for (key, want) in [("refused", 401), ("down", 502), ("none", 200)] {
        let dir = tempfile::tempdir().unwrap();
        let (_gw, gw) = gateway_env(
            "tools",
            &url,
            dir.path(),
            "api_key_env = \"TS_TEST_KEY\"\nmodel = \"configured-model\"\n",
            &[("TS_TEST_KEY", key)],
        );
        let (status, text) = get(&gw, "/v1/models");
        assert_eq!(status, want, "{key}: {text}");
        if want == 200 {
            assert!(text.contains("configured-model"), "{text}");
        } else {
            assert!(!text.contains("configured-model"), "{text}");
        }
    }
}

/// A stored response's replay sends a refusal part as the live stream did: its own part
/// with `response.refusal.*` events (front round 14 F4: replayed as an empty output_text).
#[test]
fn a_replayed_refusal_is_a_refusal_part_with_its_events() {
    let (url, _) = scripted_provider(|_, _, _| {
        Reply::sse(&[
            json!({"type": "response.refusal.delta", "delta": "I can't help with that."}),
            json!({"type": "response.completed", "response": {"status": "completed", "output": []}}),
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\nstream = true\n");
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "stream": true}),
    );
    assert_eq!(status, 200, "{text}");
    let types = |text: &str| -> Vec<String> {
        sse_events(text)
            .iter()
            .map(|e| e["type"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let live = types(&text);
    assert!(
        live.contains(&"response.refusal.done".to_string()),
        "{live:?}"
    );
    let id = sse_events(&text)
        .iter()
        .find_map(|e| e["response"]["id"].as_str().map(str::to_string))
        .unwrap();
    let (status, replay) = get(&gw, &format!("/v1/responses/{id}?stream=true"));
    assert_eq!(status, 200, "{replay}");
    let replayed = types(&replay);
    assert!(
        replayed.contains(&"response.refusal.delta".to_string()),
        "{replayed:?}"
    );
    assert!(
        replayed.contains(&"response.refusal.done".to_string()),
        "{replayed:?}"
    );
    assert!(
        replay.contains(r#""refusal":"I can't help with that.""#),
        "{replay}"
    );
}

/// Fields the gateway cannot honour are refused, not answered as if they had been (front
/// round 15 F2, F9): Chat `n` above 1, an audio modality, and `tool_choice`
/// `allowed_tools` on both fronts (taking only its mode let the model call, and the
/// gateway run, tools outside the list). Their honourable values pass.
#[test]
fn fields_the_gateway_cannot_honour_are_refused() {
    let (url, _) = canned_provider(vec![
        (
            200,
            r#"{"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]}"#
        );
        8
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        post(&gw, "/v1/chat/completions", &body)
    };
    for (extra, param) in [
        (json!({"n": 3}), "n"),
        (json!({"modalities": ["text", "audio"]}), "modalities"),
        (
            json!({"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "pick"}}]}}}),
            "tool_choice",
        ),
    ] {
        let (status, text) = chat(extra.clone());
        assert_eq!(status, 400, "{extra}: {text}");
        assert!(
            text.contains(&format!(r#""param":"{param}""#)),
            "{extra}: {text}"
        );
    }
    for extra in [json!({"n": 1}), json!({"modalities": ["text"]})] {
        let (status, text) = chat(extra.clone());
        assert_eq!(status, 200, "{extra}: {text}");
    }
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "pick"}]}}),
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("allowed_tools"), "{text}");
}

/// A client tool's `strict` reaches the provider for that tool (front round 15 F1: it was
/// dropped, and `strict: false` sent in its place): Responses keeps `strict` per tool,
/// Chat Completions marks the function strict; a tool without it stays as before.
#[test]
fn a_client_tool_s_strict_reaches_the_provider() {
    for kind in ["openai-responses", "openai-completions"] {
        let (url, seen) = recording_provider(move |request| {
            if request.get("messages").is_some() {
                Reply::json(
                    200,
                    &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}),
                )
            } else {
                Reply::json(
                    200,
                    &json!({"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]}),
                )
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let config = format!("max_retries = 0\nkind = \"{kind}\"\napi_key_env = \"TS_TEST_KEY\"\n");
        let (_gw, gw) = gateway_env("tools", &url, dir.path(), &config, &[("TS_TEST_KEY", "k")]);
        let schema = json!({"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"], "additionalProperties": false});
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"input": "hi", "tools": [
                {"type": "function", "name": "pick_strictly", "parameters": schema, "strict": true},
                {"type": "function", "name": "pick_loosely", "parameters": schema},
            ]}),
        );
        assert_eq!(status, 200, "{kind}: {text}");
        let sent = seen.lock().unwrap().last().cloned().unwrap();
        let tool = |name: &str| {
            sent["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == name || t["function"]["name"] == name)
                .cloned()
                .unwrap_or_else(|| panic!("{kind}: no {name} in {sent}"))
        };
        let strict = tool("pick_strictly");
        let loose = tool("pick_loosely");
        if kind == "openai-responses" {
            assert_eq!(strict["strict"], true, "{strict}");
            assert_eq!(loose["strict"], false, "{loose}");
        } else {
            assert_eq!(strict["function"]["strict"], true, "{strict}");
            assert!(loose["function"].get("strict").is_none(), "{loose}");
        }
    }
}

/// An answer cut short by the provider inside a tool call is said `incomplete` / `length`,
/// and none of its calls is run or handed over (front round 15 F4: arguments cut mid-JSON
/// were a 502 the SDKs sent again three times; Anthropic's `max_tokens` inside a client
/// `tool_use` handed the call over as `completed`). Per upstream kind, whole and streamed;
/// the client's tool `pick` and the catalog's `tool_search` alike.
#[test]
fn a_call_cut_short_is_incomplete_and_neither_run_nor_handed_over() {
    for kind in ["openai-responses", "openai-completions", "anthropic"] {
        let (url, asked) = scripted_provider(move |_, _, request| {
            let streamed = request["stream"] == json!(true);
            let tool = request["model"].as_str().unwrap_or_default().to_string();
            let half = "{\"pattern\": \"ab";
            match (kind, streamed) {
                ("openai-completions", false) => Reply::json(
                    200,
                    &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": tool, "arguments": half}}]}, "finish_reason": "length"}]}),
                ),
                ("openai-completions", true) => Reply::sse(&[
                    json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": tool, "arguments": half}}]}}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
                ]),
                ("openai-responses", false) => Reply::json(
                    200,
                    &json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": [{"type": "function_call", "call_id": "c1", "name": tool, "arguments": half}]}),
                ),
                ("openai-responses", true) => Reply::sse(&[
                    json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "id": "fc1", "call_id": "c1", "name": tool, "arguments": ""}}),
                    json!({"type": "response.function_call_arguments.delta", "item_id": "fc1", "output_index": 0, "delta": half}),
                    json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}}),
                ]),
                // Anthropic gives the input it has, whole: the cut is in the stop reason.
                (_, false) => Reply::json(
                    200,
                    &json!({"content": [{"type": "tool_use", "id": "c1", "name": tool, "input": {}}], "stop_reason": "max_tokens"}),
                ),
                (_, true) => Reply::sse(&[
                    json!({"type": "message_start", "message": {"id": "m1", "role": "assistant", "content": []}}),
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "c1", "name": tool, "input": {}}}),
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": half}}),
                    json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}),
                    json!({"type": "message_stop"}),
                ]),
            }
        });
        for upstream_stream in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let config = format!(
                "max_retries = 0\nstream = {upstream_stream}\nkind = \"{kind}\"\napi_key_env = \"TS_TEST_KEY\"\n"
            );
            let (_gw, gw) =
                gateway_env("tools", &url, dir.path(), &config, &[("TS_TEST_KEY", "k")]);
            let pick = json!({"type": "function", "name": "pick", "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}});
            for tool in ["pick", "tool_search"] {
                let at = format!("{kind} stream {upstream_stream} {tool}");
                let before = asked.load(Ordering::SeqCst);
                let (status, text) = post(
                    &gw,
                    "/v1/responses",
                    &json!({"model": tool, "input": "hi", "tools": [pick]}),
                );
                assert_eq!(status, 200, "{at}: {text}");
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["status"], "incomplete", "{at}: {text}");
                assert_eq!(
                    v["incomplete_details"]["reason"], "max_output_tokens",
                    "{at}: {text}"
                );
                assert!(!text.contains("function_call"), "{at}: {text}");
                // One round: the cut call was not run and answered to the model.
                assert_eq!(asked.load(Ordering::SeqCst) - before, 1, "{at}");
                let (status, text) = post(
                    &gw,
                    "/v1/chat/completions",
                    &json!({"model": tool, "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "pick", "parameters": pick["parameters"]}}]}),
                );
                assert_eq!(status, 200, "{at}: {text}");
                let v: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["choices"][0]["finish_reason"], "length", "{at}: {text}");
                assert!(
                    v["choices"][0]["message"].get("tool_calls").is_none(),
                    "{at}: {text}"
                );
            }
        }
    }
}

/// `max_tool_calls` bounds the calls the gateway runs in its own loop (front round 15 F6:
/// `max_tool_calls: 1` ran three): the call past it is answered as not run, and the next
/// round is sent `tool_choice: none`, so the model answers.
#[test]
fn max_tool_calls_bounds_the_gateway_s_own_loop() {
    let (url, seen) = recording_provider(move |request| {
        if request["tool_choice"] == "none" {
            return Reply::json(200, &message("done"));
        }
        let call = |id: &str| json!({"type": "function_call", "call_id": id, "name": "tool_search", "arguments": "{\"query\": \"issue\"}"});
        Reply::json(200, &json!({"output": [call("c1"), call("c2")]}))
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "max_tool_calls": 1}),
    );
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["max_tool_calls"], 1, "{text}");
    assert_eq!(v["output"][0]["content"][0]["text"], "done", "{text}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].get("max_tool_calls").is_none(), "{}", seen[0]);
    assert_ne!(seen[0]["tool_choice"], "none", "{}", seen[0]);
    let results: Vec<&Value> = seen[1]["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(results.len(), 2, "{}", seen[1]);
    assert!(
        !results[0]["output"].as_str().unwrap().contains("Not run"),
        "{}",
        seen[1]
    );
    assert!(
        results[1]["output"]
            .as_str()
            .unwrap()
            .contains("max_tool_calls"),
        "{}",
        seen[1]
    );
    // Not a count: refused with its path.
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "max_tool_calls": "one"}),
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("max_tool_calls"), "{text}");
}

/// A refusal stays in the conversation (front round 15 F7): the gateway's Chat answer
/// `{content: null, refusal}` sent back as history reaches the provider as the model's
/// words, for each upstream kind; and a session continued after a refused turn still has
/// it.
#[test]
fn a_refusal_stays_in_the_conversation() {
    let refusal = "I can't help with that.";
    for kind in ["openai-responses", "openai-completions", "anthropic"] {
        let (url, seen) = recording_provider(move |_| match kind {
            "openai-completions" => Reply::json(
                200,
                &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": refusal}, "finish_reason": "stop"}]}),
            ),
            "openai-responses" => Reply::json(
                200,
                &json!({"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": refusal}]}]}),
            ),
            _ => Reply::json(
                200,
                &json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}),
            ),
        });
        let dir = tempfile::tempdir().unwrap();
        let config = format!("max_retries = 0\nkind = \"{kind}\"\napi_key_env = \"TS_TEST_KEY\"\n");
        let (_gw, gw) = gateway_env("tools", &url, dir.path(), &config, &[("TS_TEST_KEY", "k")]);
        let (status, text) = post(
            &gw,
            "/v1/chat/completions",
            &json!({"messages": [
                {"role": "user", "content": "do the bad thing"},
                {"role": "assistant", "content": null, "refusal": refusal},
                {"role": "user", "content": "why not?"},
            ]}),
        );
        assert_eq!(status, 200, "{kind}: {text}");
        let sent = seen.lock().unwrap().last().cloned().unwrap();
        assert!(sent.to_string().contains(refusal), "{kind}: {sent}");
        if kind == "anthropic" {
            continue;
        }
        // The gateway's own refused turn, continued by session key.
        let ask = |input: &str| {
            post(
                &gw,
                "/v1/responses",
                &json!({"input": input, "metadata": {"session_key": "refused"}}),
            )
        };
        let (status, text) = ask("do the bad thing");
        assert_eq!(status, 200, "{kind}: {text}");
        let (status, text) = ask("why not?");
        assert_eq!(status, 200, "{kind}: {text}");
        let sent = seen.lock().unwrap().last().cloned().unwrap();
        assert!(sent.to_string().contains(refusal), "{kind}: {sent}");
    }
}

/// The request's tools and the gateway's own together stay within the 128 a provider
/// takes (front round 15 F8: 128 client tools became 131 in code mode); the 400 says how
/// many the client may send.
#[test]
fn client_tools_and_the_gateway_s_own_stay_within_the_provider_s_limit() {
    let (url, asked) = scripted_provider(|_, _, _| Reply::json(200, &message("ok")));
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let tools = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"type": "function", "name": format!("client_tool_{i}"), "parameters": {"type": "object"}}))
            .collect()
    };
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "tools": tools(128)}),
    );
    assert_eq!(status, 400, "{text}");
    // tools mode: tool_search, tool_describe, tool_call and two direct-only tools.
    assert!(text.contains("the 5 this gateway declares"), "{text}");
    assert!(text.contains("send at most 123"), "{text}");
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "tools": tools(123)}),
    );
    assert_eq!(status, 200, "{text}");
}

/// Anthropic needs `max_tokens`: a request that names none gets 8192, or `[provider]
/// max_output_tokens` (front round 15: 1024 cut ordinary answers short); one that names
/// its own keeps it.
#[test]
fn anthropic_s_output_bound_is_roomy_configurable_and_the_request_s_first() {
    let (url, seen) = recording_provider(move |_| {
        Reply::json(
            200,
            &json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}),
        )
    });
    for (config, asked, sent) in [
        ("", None, 8192),
        ("max_output_tokens = 300\n", None, 300),
        ("max_output_tokens = 300\n", Some(77), 77),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("max_retries = 0\nkind = \"anthropic\"\n{config}");
        let (_gw, gw) = gateway_with(&url, dir.path(), &config);
        let mut body = json!({"input": "hi"});
        if let Some(n) = asked {
            body["max_output_tokens"] = json!(n);
        }
        let (status, text) = post(&gw, "/v1/responses", &body);
        assert_eq!(status, 200, "{text}");
        let last = seen.lock().unwrap().last().cloned().unwrap();
        assert_eq!(last["max_tokens"], sent, "{config}: {last}");
    }
}

/// Upstream quirks that lost text or failed every turn (front round 16 F3, F5, F9, F11):
/// a line that is not UTF-8 fails the turn instead of dropping its text; lone-CR line
/// endings with a stray line lose nothing; a stream closed by `response.incomplete` keeps
/// its usage and the text only its closing object had; a server that answers one JSON
/// document (with a byte-order mark, even) to `stream: true` is read as one; a chunk that
/// lists choice 1 before choice 0 keeps choice 0's text.
#[test]
fn upstream_quirks_lose_no_text_and_fail_no_good_turn() {
    let (url, _) = scripted_provider(move |_, _, request| {
        let model = request["model"].as_str().unwrap_or_default().to_string();
        let chat = |delta: Value, finish: Value| {
            format!(
                "data: {}",
                json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            )
        };
        match model.as_str() {
            "not-utf8" => {
                let mut body =
                    format!("{}\n\n", chat(json!({"content": "AAA-"}), Value::Null)).into_bytes();
                body.extend_from_slice(b"data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"\xff\xfe\"}}]}\n\n");
                body.extend_from_slice(
                    format!(
                        "{}\n\ndata: [DONE]\n\n",
                        chat(json!({"content": "ZZZ"}), json!("stop"))
                    )
                    .as_bytes(),
                );
                Reply::with_type(200, "text/event-stream", body)
            }
            "lone-cr" => Reply::with_type(
                200,
                "text/event-stream",
                format!(
                    "{}\r\rstray: line\r{}\r\r{}\r\rdata: [DONE]\r\r",
                    chat(json!({"content": "AAA-"}), Value::Null),
                    chat(json!({"content": "ZZZ"}), Value::Null),
                    chat(json!({}), json!("stop")),
                ),
            ),
            "choices-out-of-order" => Reply::sse(&[
                json!({"choices": [{"index": 1, "delta": {"content": "other"}}, {"index": 0, "delta": {"content": "mine"}}]}),
                json!({"choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}, {"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            ]),
            "plain-json" => Reply::with_type(
                200,
                "application/json",
                format!(
                    "\u{feff}{}",
                    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
                ),
            ),
            _ => Reply::sse(&[
                json!({"choices": [{"index": 0, "delta": {"content": "?"}, "finish_reason": "stop"}]}),
            ]),
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = "max_retries = 0\nstream = true\nkind = \"openai-completions\"\n";
    let (_gw, gw) = gateway_with(&url, dir.path(), config);
    let ask = |model: &str| {
        post(
            &gw,
            "/v1/chat/completions",
            &json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
        )
    };
    let (status, text) = ask("not-utf8");
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("not UTF-8"), "{text}");
    for (model, answer) in [
        ("lone-cr", "AAA-ZZZ"),
        ("choices-out-of-order", "mine"),
        ("plain-json", "whole"),
    ] {
        let (status, text) = ask(model);
        assert_eq!(status, 200, "{model}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["choices"][0]["message"]["content"], answer,
            "{model}: {text}"
        );
    }
    // Streamed to the client too.
    let (status, text) = post(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "plain-json", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("whole"), "{text}");

    // A Responses stream closed by `response.incomplete`: usage and closing-only text.
    let (url, _) = scripted_provider(|_, _, _| {
        Reply::sse(&[
            json!({"type": "response.incomplete", "response": {"status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "closing only"}]}],
            "usage": {"input_tokens": 111, "output_tokens": 222}}}),
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\nstream = true\n");
    let (status, text) = post(&gw, "/v1/responses", &json!({"input": "hi"}));
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "incomplete", "{text}");
    assert_eq!(v["usage"]["output_tokens"], 222, "{text}");
    assert_eq!(
        v["output"][0]["content"][0]["text"], "closing only",
        "{text}"
    );
}

/// What a client sends is read as written or refused, never read as something else
/// (front round 16 F4, F8, F10): an input item of a kind the gateway does not read is a 400
/// naming it (reasoning and hosted tools' calls are skipped, as documented); arguments that
/// are not a string and a text part that is not a string are 400s; text parts are separate
/// paragraphs to the model; Chat's errors name `messages`, a tool of an unknown type `tools`.
#[test]
fn client_input_is_read_as_written_or_refused() {
    let (url, seen) = recording_provider(move |_| Reply::json(200, &message("ok")));
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let user = json!({"role": "user", "content": "hi"});
    for (item, says) in [
        (
            json!({"type": "custom_tool_call_output", "call_id": "c1", "output": "x"}),
            "`custom_tool_call_output` items are not supported",
        ),
        (
            json!({"type": "mesage", "role": "user", "content": "hi"}),
            "`mesage` items are not supported",
        ),
        (
            json!({"type": "input_text", "text": "hi"}),
            "`input_text` items are not supported",
        ),
        (
            json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": {"a": 1}}),
            "arguments: must be a string",
        ),
        (
            json!({"role": "user", "content": [{"type": "input_text", "text": 5}]}),
            "content[0].text: must be a string",
        ),
    ] {
        let (status, text) = post(&gw, "/v1/responses", &json!({"input": [item, user]}));
        assert_eq!(status, 400, "{item}: {text}");
        assert!(text.contains(says), "{item}: {text}");
        assert!(text.contains(r#""param":"input""#), "{item}: {text}");
    }
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}, {"role": "user", "content": [
            {"type": "input_text", "text": "First part."}, {"type": "input_text", "text": "Second part."}]}]}),
    );
    assert_eq!(status, 200, "{text}");
    let sent = seen.lock().unwrap().last().cloned().unwrap();
    assert!(
        sent.to_string().contains(r"First part.\n\nSecond part."),
        "{sent}"
    );
    // Chat: the conversation's errors name `messages`; arguments must be a string.
    for (messages, says, param) in [
        (
            json!([{"role": "assistant", "content": "hi"}]),
            "",
            "messages",
        ),
        (
            json!([user, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}, {"role": "tool", "tool_call_id": "c1", "content": "x"}]),
            "must be a string",
            "messages",
        ),
    ] {
        let (status, text) = post(&gw, "/v1/chat/completions", &json!({"messages": messages}));
        assert_eq!(status, 400, "{messages}: {text}");
        assert!(text.contains(says), "{messages}: {text}");
        assert!(
            text.contains(&format!(r#""param":"{param}""#)),
            "{messages}: {text}"
        );
    }
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "tools": [{"type": "custom", "name": "freeform"}]}),
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains(r#""param":"tools""#), "{text}");
}

/// A system or developer message in the input is part of the conversation (front round
/// 16 F1: it held for one turn, and the continued turns ran without it): a continuation by
/// `previous_response_id` or by session key still sends it to the provider, in its system
/// prompt, while `instructions` hold for their own request only.
#[test]
fn input_system_messages_continue_with_the_conversation() {
    for kind in ["openai-responses", "anthropic"] {
        let (url, seen) = recording_provider(move |_| {
            if kind == "anthropic" {
                Reply::json(
                    200,
                    &json!({"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}),
                )
            } else {
                Reply::json(200, &message("ok"))
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let config = format!("max_retries = 0\nkind = \"{kind}\"\n");
        let (_gw, gw) = gateway_with(&url, dir.path(), &config);
        let system_of = |sent: &Value| -> String {
            if kind == "anthropic" {
                sent["system"].as_str().unwrap_or_default().to_string()
            } else {
                sent["instructions"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            }
        };
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"instructions": "ONE-TURN", "input": [
                {"role": "developer", "content": "ALWAYS-FRENCH"},
                {"role": "user", "content": "hi"}]}),
        );
        assert_eq!(status, 200, "{kind}: {text}");
        let first = seen.lock().unwrap().last().cloned().unwrap();
        assert!(system_of(&first).contains("ONE-TURN"), "{kind}: {first}");
        assert!(
            system_of(&first).contains("ALWAYS-FRENCH"),
            "{kind}: {first}"
        );
        let id = serde_json::from_str::<Value>(&text).unwrap()["id"].clone();
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"previous_response_id": id, "input": "and now?"}),
        );
        assert_eq!(status, 200, "{kind}: {text}");
        let next = seen.lock().unwrap().last().cloned().unwrap();
        assert!(system_of(&next).contains("ALWAYS-FRENCH"), "{kind}: {next}");
        assert!(!system_of(&next).contains("ONE-TURN"), "{kind}: {next}");
        // By session key.
        let session = |input: Value| {
            post(
                &gw,
                "/v1/responses",
                &json!({"input": input, "metadata": {"session_key": "kept-system"}}),
            )
        };
        let (status, _) = session(
            json!([{"role": "system", "content": "SESSION-RULE"}, {"role": "user", "content": "hi"}]),
        );
        assert_eq!(status, 200);
        let (status, _) = session(json!("again"));
        assert_eq!(status, 200);
        let next = seen.lock().unwrap().last().cloned().unwrap();
        assert!(system_of(&next).contains("SESSION-RULE"), "{kind}: {next}");
    }
}

/// A structured answer is the last round's text alone, streamed or not (front round 16
/// F2: a turn of two rounds answered two JSON documents joined, which the SDK's `parse()`
/// refused); and the client's output bound holds for the whole turn (F6: 40 allowed 55 over
/// two rounds, said completed): each round is asked for what is left, and a turn with too
/// little left ends incomplete.
#[test]
fn a_structured_answer_is_the_last_round_s_and_the_output_bound_the_turn_s() {
    let (url, seen) = recording_provider(move |request| {
        let answered = request["input"]
            .as_array()
            .is_some_and(|i| i.iter().any(|x| x["type"] == "function_call_output"));
        let usage = json!({"input_tokens": 10, "output_tokens": 30});
        if answered {
            Reply::json(
                200,
                &json!({"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "{\"b\": 2}"}]}], "usage": usage}),
            )
        } else {
            Reply::json(
                200,
                &json!({"output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "{\"a\": 1}"}]},
                {"type": "function_call", "call_id": "c1", "name": "tool_search", "arguments": "{\"query\": \"issue\"}"}], "usage": usage}),
            )
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let format =
        json!({"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}});
    for stream in [false, true] {
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"input": "hi", "text": format, "stream": stream}),
        );
        assert_eq!(status, 200, "{text}");
        assert!(!text.contains("\\\"a\\\""), "stream {stream}: {text}");
        assert!(text.contains("\\\"b\\\""), "stream {stream}: {text}");
        if !stream {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["output"][0]["content"][0]["text"], "{\"b\": 2}", "{text}");
        }
    }
    // A bound of 50: round one writes 30, round two may write 20.
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "max_output_tokens": 50}),
    );
    assert_eq!(status, 200, "{text}");
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last["max_output_tokens"], 20, "{last}");
    // A bound of 40: 10 left after round one is too little for a round.
    let asked = seen.lock().unwrap().len();
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "max_output_tokens": 40}),
    );
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "incomplete", "{text}");
    assert_eq!(
        v["incomplete_details"]["reason"], "max_output_tokens",
        "{text}"
    );
    assert_eq!(seen.lock().unwrap().len(), asked + 1);
}

/// A request's tool named like a tool of the gateway's catalog is a 400 that names the
/// catalog's tool and says what to do, in every mode (review 18: it said "directory mode"
/// whatever the mode).
#[test]
fn a_client_tool_named_like_a_catalog_tool_is_refused_in_words_for_the_client() {
    let (url, asked) = scripted_provider(|_, _, _| Reply::json(200, &message("ok")));
    for mode in ["code", "tools", "direct"] {
        let dir = tempfile::tempdir().unwrap();
        let (_gw, gw) = gateway_in(mode, &url, dir.path(), "max_retries = 0\n");
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"input": "hi", "tools": [{"type": "function", "name": "create_issue", "parameters": {"type": "object"}}]}),
        );
        assert_eq!(status, 400, "{mode}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], "name-collision", "{mode}: {text}");
        assert_eq!(v["error"]["param"], "tools", "{mode}: {text}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains("openclaw:github:create_issue"), "{mode}: {m}");
        assert!(m.contains("rename the request's tool"), "{mode}: {m}");
        assert!(!m.contains("directory mode"), "{mode}: {m}");
    }
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

/// What the provider says of the answer's text reaches the client (front round 15 F5: it
/// was dropped): log probabilities and URL citations, from a whole answer and a stream,
/// on both fronts, each in its front's shape (Chat nests a citation under `url_citation`).
#[test]
fn log_probabilities_and_citations_reach_the_client() {
    let token = json!({"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []});
    let flat = json!({"type": "url_citation", "url": "https://example.com/", "title": "Ex", "start_index": 0, "end_index": 2});
    let nested = json!({"type": "url_citation", "url_citation": {"url": "https://example.com/", "title": "Ex", "start_index": 0, "end_index": 2}});
    for kind in ["openai-completions", "openai-responses"] {
        let (t, f, n) = (token.clone(), flat.clone(), nested.clone());
        let (url, _) = scripted_provider(move |_, _, request| {
            let streamed = request["stream"] == json!(true);
            match (kind, streamed) {
                ("openai-completions", false) => Reply::json(
                    200,
                    &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "annotations": [n]}, "logprobs": {"content": [t]}, "finish_reason": "stop"}]}),
                ),
                ("openai-completions", true) => Reply::sse(&[
                    json!({"choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": {"content": [t]}}]}),
                    json!({"choices": [{"index": 0, "delta": {"annotations": [n]}, "finish_reason": "stop"}]}),
                ]),
                (_, false) => Reply::json(
                    200,
                    &json!({"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hi", "annotations": [f], "logprobs": [t]}]}]}),
                ),
                (_, true) => Reply::sse(&[
                    json!({"type": "response.output_text.delta", "delta": "Hi", "logprobs": [t]}),
                    json!({"type": "response.output_text.annotation.added", "annotation": f}),
                    json!({"type": "response.completed", "response": {"status": "completed", "output": []}}),
                ]),
            }
        });
        for upstream_stream in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let config =
                format!("max_retries = 0\nstream = {upstream_stream}\nkind = \"{kind}\"\n");
            let (_gw, gw) = gateway_with(&url, dir.path(), &config);
            let at = format!("{kind} stream {upstream_stream}");
            let (status, text) = post(
                &gw,
                "/v1/chat/completions",
                &json!({"messages": [{"role": "user", "content": "hi"}]}),
            );
            assert_eq!(status, 200, "{at}: {text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(
                v["choices"][0]["logprobs"]["content"][0], token,
                "{at}: {text}"
            );
            assert_eq!(
                v["choices"][0]["message"]["annotations"][0], nested,
                "{at}: {text}"
            );
            let (_, text) = post(
                &gw,
                "/v1/chat/completions",
                &json!({"stream": true, "messages": [{"role": "user", "content": "hi"}]}),
            );
            let events = sse_events(&text);
            assert!(
                events
                    .iter()
                    .any(|e| e["choices"][0]["logprobs"]["content"][0] == token),
                "{at}: {text}"
            );
            assert!(
                events
                    .iter()
                    .any(|e| e["choices"][0]["delta"]["annotations"][0] == nested),
                "{at}: {text}"
            );
            let (status, text) = post(&gw, "/v1/responses", &json!({"input": "hi"}));
            assert_eq!(status, 200, "{at}: {text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            let part = &v["output"][0]["content"][0];
            assert_eq!(part["annotations"][0], flat, "{at}: {text}");
            assert_eq!(part["logprobs"][0], token, "{at}: {text}");
            let (_, text) = post(
                &gw,
                "/v1/responses",
                &json!({"input": "hi", "stream": true}),
            );
            let events = sse_events(&text);
            assert!(
                events
                    .iter()
                    .any(|e| e["type"] == "response.output_text.annotation.added"
                        && e["annotation"] == flat),
                "{at}: {text}"
            );
            let done = events
                .iter()
                .find(|e| e["type"] == "response.completed")
                .unwrap();
            assert_eq!(
                done["response"]["output"][0]["content"][0]["annotations"][0], flat,
                "{at}"
            );
        }
    }
}

/// A session's history is its own line of turns (front round 17 F3): a turn continuing a
/// stored response by `previous_response_id` leaves it as it was (it replaced it with the
/// fork); `store: false` concerns stored responses, and the session keeps the turn.
#[test]
fn a_session_s_history_is_written_only_by_its_own_stored_turns() {
    let (url, seen) = recording_provider(move |_| Reply::json(200, &message("ok")));
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let ask = |body: Value| {
        let (status, text) = post(&gw, "/v1/responses", &body);
        assert_eq!(status, 200, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()
    };
    let key = json!({"session_key": "line"});
    let elsewhere = ask(json!({"input": "FORK-BASE"}));
    ask(json!({"input": "SESSION-ONE", "metadata": key}));
    ask(json!({"input": "FORKED", "previous_response_id": elsewhere["id"], "metadata": key}));
    ask(json!({"input": "UNSTORED", "store": false, "metadata": key}));
    ask(json!({"input": "SESSION-TWO", "metadata": key}));
    let last = seen.lock().unwrap().last().unwrap().to_string();
    assert!(last.contains("SESSION-ONE"), "{last}");
    assert!(!last.contains("FORK"), "{last}");
    assert!(last.contains("UNSTORED"), "{last}");
}

/// An option the upstream kind cannot take, whose loss would answer another question, is
/// refused naming it and the upstream (front round 17 F2: dropped, and answered 200).
#[test]
fn options_an_upstream_cannot_take_are_refused_not_dropped() {
    let (url, asked) = scripted_provider(|_, _, _| Reply::json(200, &message("ok")));
    let schema =
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}});
    for (kind, path, body, param) in [
        (
            "anthropic",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "response_format": schema}),
            "text.format",
        ),
        (
            "anthropic",
            "/v1/responses",
            json!({"input": "hi", "text": {"format": {"type": "json_object"}}}),
            "text.format",
        ),
        (
            "openai-responses",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "stop": ["END"]}),
            "stop",
        ),
        (
            "openai-completions",
            "/v1/responses",
            json!({"input": "hi", "prompt": {"id": "pmpt_1"}}),
            "prompt",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (_gw, gw) = gateway_with(
            &url,
            dir.path(),
            &format!("max_retries = 0\nkind = \"{kind}\"\n"),
        );
        let (status, text) = post(&gw, path, &body);
        assert_eq!(status, 400, "{kind} {path}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], param, "{kind}: {text}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(kind),
            "{text}"
        );
    }
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

/// The turn's output bound holds when the provider counts no tokens: what the model wrote
/// is estimated (four bytes a token) (front round 17 F8: every round was asked for the
/// whole bound).
#[test]
fn the_output_bound_holds_without_the_provider_s_counts() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let keep = seen.clone();
    let (url, _) = scripted_provider(move |_, _, request| {
        keep.lock().unwrap().push(request.clone());
        Reply::json(
            200,
            &json!({"output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x".repeat(80)}]},
            {"type": "function_call", "call_id": format!("c{}", keep.lock().unwrap().len()), "name": "tool_search", "arguments": "{\"query\": \"issue\"}"}]}),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    // 80 bytes of text and 18 of arguments: about 25 tokens of 100; then about 50.
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "max_output_tokens": 100}),
    );
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "incomplete", "{text}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0]["max_output_tokens"], 100);
    assert_eq!(seen[1]["max_output_tokens"], 75);
    assert!(seen.len() <= 4, "{} rounds", seen.len());
}

/// A call whose arguments the model wrote badly is answered to the model, which can call
/// again, instead of failing the turn (front round 17 F7: a 502, the earlier rounds' work
/// lost); a client tool's is not handed to the client either.
#[test]
fn a_call_with_unreadable_arguments_is_answered_to_the_model() {
    let (url, seen) = recording_provider(move |request| {
        let answered = request["input"]
            .as_array()
            .is_some_and(|i| i.iter().any(|x| x["type"] == "function_call_output"));
        if answered {
            return Reply::json(200, &message("fixed it"));
        }
        let tool = request["model"]
            .as_str()
            .unwrap_or("tool_search")
            .to_string();
        Reply::json(
            200,
            &json!({"output": [{"type": "function_call", "call_id": "c1", "name": tool, "arguments": "{\"query\": \"unterminated"}]}),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let pick = json!({"type": "function", "name": "pick", "parameters": {"type": "object"}});
    for tool in ["tool_search", "pick"] {
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"model": tool, "input": "hi", "tools": [pick]}),
        );
        assert_eq!(status, 200, "{tool}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], "completed", "{tool}: {text}");
        assert_eq!(
            v["output"][0]["content"][0]["text"], "fixed it",
            "{tool}: {text}"
        );
        assert!(!text.contains("\"function_call\""), "{tool}: {text}");
        let last = seen.lock().unwrap().last().unwrap().to_string();
        assert!(
            last.contains("not valid JSON") && last.contains("again"),
            "{last}"
        );
    }
}

/// In code mode, the catalog calls of a `tool_search_code` body take from the same
/// `max_tool_calls` as the model's own calls (front round 18 F1: `max_tool_calls: 1`, and
/// one body ran `create_issue` five times): the body's own call takes one, its first two
/// catalog calls the rest, and the calls past them fail with `call-limit`, run by nothing.
#[test]
fn max_tool_calls_bounds_the_calls_of_code_bodies_too() {
    let code = r#"
        const got = [];
        for (let i = 0; i < 4; i++) {
            try {
                await openclaw.tools.call("openclaw:github:create_issue", {title: "t" + i});
                got.push("ran");
            } catch (e) {
                got.push(e.code);
            }
        }
        return got;
    "#;
    let (url, seen) = recording_provider(move |request| {
        if request.to_string().contains("function_call_output") {
            return Reply::json(200, &message("done"));
        }
        Reply::json(
            200,
            &json!({"output": [{"type": "function_call", "call_id": "c1", "name": "tool_search_code", "arguments": json!({"code": code}).to_string()}]}),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_in("code", &url, dir.path(), "max_retries = 0\n");
    let (status, text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "hi", "max_tool_calls": 3}),
    );
    assert_eq!(status, 200, "{text}");
    let seen = seen.lock().unwrap();
    let output = seen[1]["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .unwrap()["output"]
        .as_str()
        .unwrap()
        .to_string();
    let result: Value = serde_json::from_str(&output).unwrap();
    assert_eq!(
        result["value"],
        json!(["ran", "ran", "call-limit", "call-limit"]),
        "{output}"
    );
    assert_eq!(result["telemetry"]["call_count"], 2, "{output}");
    // Every call made: the round after is held to answering.
    assert_eq!(seen[1]["tool_choice"], "none", "{}", seen[1]);
}

/// A provider that sends a whole streamed answer and then holds its connection open: the
/// answer ends at its last event (`response.completed`, `[DONE]`), not at `timeout_ms` as a
/// failure (front round 20 F1: text streamed, then
/// `response.failed` "timed out", on every upstream kind).
#[test]
fn a_stream_held_open_after_its_answer_ends_with_it() {
    for kind in ["openai-responses", "openai-completions"] {
        let (url, _) = scripted_provider(move |_, _, _| {
            let mut reply = if kind == "openai-responses" {
                let done = json!({"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "all here"}]}]});
                Reply::sse(&[
                    json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "all here"}),
                    json!({"type": "response.completed", "response": done}),
                ])
            } else {
                let mut reply = Reply::sse(&[
                    json!({"choices": [{"index": 0, "delta": {"content": "all here"}}]}),
                    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
                ]);
                reply.body.extend_from_slice(b"data: [DONE]\n\n");
                reply
            };
            reply.paced = Some((
                vec![Vec::new(), b": still here\n\n".to_vec()],
                std::time::Duration::from_secs(30),
            ));
            reply
        });
        let dir = tempfile::tempdir().unwrap();
        let (_gw, gw) = gateway_with(
            &url,
            dir.path(),
            &format!("max_retries = 0\nkind = \"{kind}\"\n"),
        );
        let (status, text) = post(
            &gw,
            "/v1/responses",
            &json!({"input": "hi", "stream": true}),
        );
        assert_eq!(status, 200, "{kind}: {text}");
        assert!(text.contains("response.completed"), "{kind}: {text}");
        assert!(!text.contains("response.failed"), "{kind}: {text}");
    }
}

/// An empty `model` is none: the configured model is sent, and the answer names it, on both
/// endpoints (front rounds 21 and 23: `""` was sent on, then echoed).
#[test]
fn an_empty_model_is_the_configured_one() {
    let (url, seen) = recording_provider(move |_| Reply::json(200, &message("ok")));
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(
        &url,
        dir.path(),
        "max_retries = 0\nmodel = \"configured-model\"\n",
    );
    let (status, text) = post(&gw, "/v1/responses", &json!({"model": "", "input": "hi"}));
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["model"], "configured-model", "{text}");
    let (status, text) = post(
        &gw,
        "/v1/chat/completions",
        &json!({"model": "", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["model"], "configured-model", "{text}");
    for request in seen.lock().unwrap().iter() {
        assert_eq!(request["model"], "configured-model", "{request}");
    }
}

/// A route's id that is not UTF-8 once decoded, or a query that cannot be read, is answered
/// in OpenAI's error shape (front round 23 F4: axum's plain-text 400).
#[test]
fn an_unreadable_id_or_query_is_an_openai_error() {
    let (url, _) = recording_provider(move |_| Reply::json(200, &message("ok")));
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    for path in [
        "/v1/responses/%FF",
        "/v1/responses/%ED%A0%80?stream=true",
        "/v1/models/%ED%A0%80",
        "/v1/responses/resp_x?stream=%FF",
    ] {
        let (status, text) = get(&gw, path);
        assert!(status == 404 || status == 400, "{path}: {status} {text}");
        let error: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: not JSON: {text}"));
        assert!(error["error"]["message"].is_string(), "{path}: {text}");
    }
}
