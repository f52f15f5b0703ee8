//! Turns through the gateway as clients run them: many streams at once, a client that goes
//! away mid-turn (its turn ends and its sandbox child with it), SIGTERM during a turn (a
//! 503, not a completed answer), the request's tools declared in every mode, and the
//! gateway's own failures (no key: it never says it listens; no session log: a 500 that
//! names no path).

use std::process::Command;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

mod common;
mod gateway_support;
use common::BIN;
use gateway_support::*;

fn recorded(dir: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The text of a Responses event stream: its `response.output_text.delta`s.
fn streamed_text(body: &str) -> String {
    toolsearch::provider::parse_sse(body)
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

#[test]
fn many_streamed_turns_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let n = 24;
    let answers = multi_thread().block_on(async {
        let http = reqwest::Client::new();
        let turns = (0..n).map(|i| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let (path, body) = if i % 2 == 0 {
                    (
                        "/v1/responses",
                        json!({"input": format!("hello {i}"), "stream": true}),
                    )
                } else {
                    (
                        "/v1/chat/completions",
                        json!({"messages": [{"role": "user", "content": format!("hello {i}")}], "stream": true}),
                    )
                };
                let r = http
                    .post(format!("{url}{path}"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                (i, r.text().await.unwrap())
            }
        });
        futures::future::join_all(turns).await
    });
    for (i, body) in answers {
        let text = if i % 2 == 0 {
            assert!(body.contains("response.completed"), "{body}");
            streamed_text(&body)
        } else {
            assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
            toolsearch::provider::parse_sse(&body)
                .iter()
                .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
                .collect()
        };
        assert_eq!(text, format!("mock: hello {i}"), "turn {i}");
    }
}

#[test]
fn a_client_that_goes_away_ends_its_turn_and_its_sandbox_child() {
    let dir = tempfile::tempdir().unwrap();
    // The model runs code that would run far longer than this test may take (the sandbox
    // has no timers: a loop it is).
    let scenario = json!({"steps": [{"when": "wait", "reply": {"tool_calls": [{
        "name": "tool_search_code",
        "arguments": {"code": "while (true) {}"}
    }]}}]});
    let (_mock, mock_url) = mock(dir.path(), Some(&scenario.to_string()));
    let extra = "\n[tools.toolSearch]\ncodeTimeoutMs = 60000\n\n[sandbox]\nspares = 0\n";
    let (_gw, url) = gateway_in("code", &format!("{mock_url}/v1"), dir.path(), extra);
    for stream in [true, false] {
        let before = sandbox_children();
        let key = format!("gone-{stream}");
        multi_thread().block_on(async {
            let request = reqwest::Client::new()
                .post(format!("{url}/v1/responses"))
                .json(&json!({"input": "wait for it", "stream": stream, "metadata": {"session_key": key}}))
                .send();
            let turn = tokio::spawn(request);
            let started = tokio::task::spawn_blocking(move || {
                eventually(|| sandbox_children() > before)
            });
            assert!(started.await.unwrap(), "the code never started");
            // The client goes: its connection closes with the request unanswered.
            turn.abort();
            let _ = turn.await;
        });
        assert!(
            eventually(|| sandbox_children() <= before),
            "stream {stream}: the sandbox child outlived its client"
        );
        let state = dir.path().join("state");
        assert!(
            eventually(|| session_log(&state, &key)
                .iter()
                .any(|e| e["event"] == "turn" && e["stop"] == "aborted")),
            "stream {stream}: the turn was not ended: {:?}",
            session_log(&state, &key)
        );
    }
}

#[test]
fn sigterm_during_a_turn_answers_503_not_completed() {
    let dir = tempfile::tempdir().unwrap();
    let (provider, asked) = silent_provider();
    let (mut gw, url) = gateway_with(&provider, dir.path(), "");
    let answer = std::thread::spawn(move || say_hello(&url));
    assert!(eventually(|| asked.load(Ordering::SeqCst) > 0));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(gw.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let (status, v) = answer.join().unwrap();
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["code"], "aborted", "{v}");
    assert!(eventually(|| gw.0.try_wait().unwrap().is_some()));
}

#[test]
fn the_request_tools_are_declared_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let ask = json!({"type": "function", "name": "ask_user", "description": "Ask the user a question",
                     "parameters": {"type": "object", "properties": {"question": {"type": "string"}}}});
    for mode in ["code", "tools", "directory", "direct"] {
        let sub = dir.path().join(mode);
        std::fs::create_dir_all(&sub).unwrap();
        let (_gw, url) = gateway_in(mode, &format!("{mock_url}/v1"), &sub, "");
        let (status, v) = runtime().block_on(async {
            let r = reqwest::Client::new()
                .post(format!("{url}/v1/responses"))
                .json(&json!({"input": format!("hello from {mode}"), "tools": [ask]}))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        });
        assert!(status.is_success(), "{mode}: {v}");
        let requests = recorded(dir.path());
        let sent = requests
            .iter()
            .rfind(|r| r.to_string().contains(&format!("hello from {mode}")))
            .unwrap();
        let names: Vec<&str> = sent["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert!(names.contains(&"ask_user"), "{mode}: {names:?}");
    }
}

#[test]
fn a_gateway_without_its_key_never_says_it_is_listening() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolsearch.toml");
    std::fs::write(
        &config,
        "[provider]\napi_key_env = \"TS_GATEWAY_KEY_NEVER_SET\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["--mode", "tools", "gateway", "--listen", "127.0.0.1:0"])
        .env_remove("TS_GATEWAY_KEY_NEVER_SET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TS_GATEWAY_KEY_NEVER_SET"));
}

#[test]
fn a_gateway_failure_is_a_500_server_error_that_names_no_path() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    // The state directory is a file: no session log can be opened under it.
    let state = dir.path().join("state");
    std::fs::write(&state, "not a directory").unwrap();
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let (status, v) = say_hello(&url);
    assert_eq!(status, 500, "{v}");
    assert_eq!(v["error"]["type"], "server_error", "{v}");
    let text = v.to_string();
    assert!(!text.contains(dir.path().to_str().unwrap()), "{text}");
}

/// What a request's body becomes while its turn runs (its tools parsed, joined to its
/// catalog and index, written into each provider request; its instructions and input the
/// same) takes places in one pool, before the turn runs: past it, a 429 that runs nothing.
/// Uncounted, 128 requests of 3.85 MB of tools held 4.3 GB (front round 10 F3).
#[test]
fn requests_heavy_with_tools_past_the_pool_are_refused_before_they_run() {
    let dir = tempfile::tempdir().unwrap();
    let (provider, asked) = silent_provider();
    let (_gw, url) = gateway_with(&provider, dir.path(), "max_retries = 0\n");
    let tools: Vec<Value> = (0..60)
        .map(|i| {
            json!({"type": "function", "name": format!("heavy_{i}"),
                   "description": format!("tool {i} {}", "lorem ipsum ".repeat(5_000)),
                   "parameters": {"type": "object", "properties": {}}})
        })
        .collect();
    let body = json!({"input": "hello", "tools": tools});
    assert!(body.to_string().len() > 3_500_000);
    let statuses = runtime().block_on(async {
        let http = reqwest::Client::new();
        let asks = (0..24).map(|_| {
            let (http, url, body) = (http.clone(), url.clone(), body.clone());
            tokio::spawn(async move {
                let r = http
                    .post(format!("{url}/v1/responses"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            })
        });
        futures::future::join_all(asks).await
    });
    let refused: Vec<&String> = statuses
        .iter()
        .map(|r| r.as_ref().unwrap())
        .filter(|(s, _)| *s == 429)
        .map(|(_, t)| t)
        .collect();
    // 512 MiB / (9 × 3.6 MB of body + the echo): about 14 at once; the rest refused.
    assert!(refused.len() >= 6, "{statuses:?}");
    assert!(
        refused[0].contains("what is made of their bodies"),
        "{}",
        refused[0]
    );
    // Those refused never reached the provider.
    assert_eq!(asked.load(Ordering::SeqCst), 24 - refused.len());
}
