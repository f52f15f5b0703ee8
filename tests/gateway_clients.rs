//! What one client can make the gateway hold or do, bounded and meaning one thing: the
//! tools a request may declare (how many, which names), named sessions (kept within their
//! bound, their log files closed between turns, never written by Chat, never jammed by
//! calls left unanswered), connections that never finish a request, and the routes an
//! OpenAI SDK calls besides create (delete, retrieve as a stream, one model, any other
//! method a 404 in OpenAI's shape).

use std::io::{Read, Write};

use serde_json::{Value, json};

mod common;
mod gateway_support;
use gateway_support::*;

/// The request bodies the provider got, as text, oldest first.
fn recorded(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn request(method: &str, url: &str) -> (u16, String) {
    runtime().block_on(async {
        let r = reqwest::Client::new()
            .request(method.parse().unwrap(), url)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

/// The text of a Responses answer's message items.
fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["type"] == "message")
        .flat_map(|o| o["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_string))
        .collect()
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The files under `dir` that process `pid` holds open.
fn open_under(pid: u32, dir: &std::path::Path) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|target| target.starts_with(dir))
                .count()
        })
        .unwrap_or(0)
}

fn tool(name: &str) -> Value {
    json!({"type": "function", "name": name, "parameters": {"type": "object"}})
}

#[test]
fn a_request_declares_at_most_128_tools_and_none_named_like_a_control_tool() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let many: Vec<Value> = (0..129).map(|i| tool(&format!("t{i}"))).collect();
    let (status, text) = post(
        &url,
        "/v1/responses",
        &json!({"input": "hi", "tools": many}),
    );
    assert_eq!(status, 400, "{text}");
    let e = json_of(&text);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 128"),
        "{e}"
    );
    assert_eq!(e["error"]["param"], "tools");

    for name in ["tool_call", "tool_search", "tool_describe"] {
        let (status, text) = post(
            &url,
            "/v1/responses",
            &json!({"input": "hi", "tools": [tool(name)]}),
        );
        assert_eq!(status, 400, "{name}: {text}");
        let e = json_of(&text);
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{name}`")),
            "{e}"
        );
    }
    let (status, text) = post(
        &url,
        "/v1/responses",
        &json!({"input": "hi", "tools": [tool("pick")]}),
    );
    assert_eq!(status, 200, "{text}");
    assert!(
        recorded(dir.path()).len() == 1,
        "nothing refused reached the provider"
    );
}

#[test]
fn sessions_are_bounded_and_hold_no_file_open_between_turns() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let (gw, url) = gateway_with(
        &format!("{mock_url}/v1"),
        dir.path(),
        "[gateway]\nsessions = 3\n",
    );
    let pid = gw.0.id();
    let say = |key: &str, text: &str| {
        let (status, body) = post(
            &url,
            "/v1/responses",
            &json!({"input": text, "metadata": {"session_key": key}, "store": false}),
        );
        assert_eq!(status, 200, "{body}");
    };
    let logs = dir.path().join("state/sessions");
    for i in 0..40 {
        say(&format!("k{i}"), "hello");
    }
    assert_eq!(
        open_under(pid, &logs),
        0,
        "session logs held open between turns"
    );
    assert!(
        std::fs::read_dir(&logs).unwrap().count() >= 40,
        "each session has its own log"
    );

    // Three sessions kept: the oldest of four goes, with its history.
    say("a", "remember the apple");
    say("a", "and the pear");
    let sent = recorded(dir.path());
    assert!(
        sent.last().unwrap().contains("remember the apple"),
        "a's history is read"
    );
    say("b", "one");
    say("c", "two");
    say("d", "three");
    say("a", "what did I say?");
    let last = recorded(dir.path()).pop().unwrap();
    assert!(last.contains("what did I say?"));
    assert!(
        !last.contains("remember the apple"),
        "an evicted session's history is gone: {last}"
    );
}

#[test]
fn refused_requests_push_no_session_out() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let (_gw, url) = gateway_with(
        &format!("{mock_url}/v1"),
        dir.path(),
        "[gateway]\nsessions = 2\n",
    );
    let say = |key: &str, input: Value| {
        post(
            &url,
            "/v1/responses",
            &json!({"input": input, "metadata": {"session_key": key}, "store": false}),
        )
    };
    let (status, body) = say("victim", json!("remember the apple"));
    assert_eq!(status, 200, "{body}");
    // Each names a new session and is refused after its key was read: a result
    // answering no call.
    for i in 0..50 {
        let orphan = json!([{"type": "function_call_output", "call_id": "c1", "output": "x"}]);
        let (status, body) = say(&format!("flood-{i}"), orphan);
        assert_eq!(status, 400, "{body}");
    }
    let (status, body) = say("victim", json!("what did I say?"));
    assert_eq!(status, 200, "{body}");
    let last = recorded(dir.path()).pop().unwrap();
    assert!(
        last.contains("remember the apple"),
        "refused requests evicted a session: {last}"
    );
}

#[test]
fn chat_neither_reads_nor_writes_a_sessions_history() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let (status, text) = post(
        &url,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "said in chat"}],
                "metadata": {"session_key": "s"}}),
    );
    assert_eq!(status, 200, "{text}");
    let (status, text) = post(
        &url,
        "/v1/responses",
        &json!({"input": "said in responses", "metadata": {"session_key": "s"}}),
    );
    assert_eq!(status, 200, "{text}");
    let last = recorded(dir.path()).pop().unwrap();
    assert!(last.contains("said in responses"));
    assert!(
        !last.contains("said in chat"),
        "Chat wrote the history: {last}"
    );
}

#[test]
fn a_new_question_after_unanswered_client_calls_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = r#"{"steps": [
        {"when": "choose", "reply": {"tool_calls": [{"name": "pick", "arguments": {"n": 1}}]}},
        {"reply": {"text": "fine"}}
    ]}"#;
    let (_mock, mock_url) = mock(dir.path(), Some(scenario));
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let ask = |text: &str| {
        post(
            &url,
            "/v1/responses",
            &json!({"input": text, "tools": [tool("pick")], "metadata": {"session_key": "j"}}),
        )
    };
    let (status, text) = ask("choose one");
    assert_eq!(status, 200, "{text}");
    let v = json_of(&text);
    assert!(
        v["output"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["type"] == "function_call" && o["name"] == "pick"),
        "{v}"
    );
    // The client never runs `pick` and asks something else: answered, not a 400.
    let (status, text) = ask("never mind, hello");
    assert_eq!(status, 200, "{text}");
    assert_eq!(output_text(&json_of(&text)), "fine", "{text}");
}

#[test]
fn a_connection_that_never_finishes_its_request_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let addr = url.trim_start_matches("http://");
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.write_all(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .unwrap();
    // Far longer than the gateway's 10 s for a request head.
    slow.set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    let mut rest = Vec::new();
    let ended = slow.read_to_end(&mut rest);
    assert!(
        !matches!(&ended, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
        "the gateway kept a half-sent request open: {ended:?}"
    );
}

#[test]
fn the_sdk_routes_besides_create_answer_in_openais_shape() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let (status, text) = post(&url, "/v1/responses", &json!({"input": "keep this"}));
    assert_eq!(status, 200, "{text}");
    let created = json_of(&text);
    let id = created["id"].as_str().unwrap().to_string();

    // Retrieved as a stream: the events that built it, ending with it.
    let (status, text) = request("GET", &format!("{url}/v1/responses/{id}?stream=true"));
    assert_eq!(status, 200, "{text}");
    let events = toolsearch::provider::parse_sse(&text);
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(deltas, output_text(&created));
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["id"], id.as_str());
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");

    // Deleted: then unknown, to GET and DELETE alike.
    let (status, text) = request("DELETE", &format!("{url}/v1/responses/{id}"));
    assert_eq!(status, 200, "{text}");
    let v = json_of(&text);
    assert_eq!(
        (v["id"].as_str(), v["deleted"].as_bool()),
        (Some(id.as_str()), Some(true))
    );
    for method in ["GET", "DELETE"] {
        let (status, text) = request(method, &format!("{url}/v1/responses/{id}"));
        assert_eq!(status, 404, "{method}: {text}");
        assert_eq!(json_of(&text)["error"]["param"], "response_id");
    }

    // One model, as the list has it; an unknown one is a 404.
    let (_, text) = request("GET", &format!("{url}/v1/models"));
    let first = json_of(&text)["data"][0].clone();
    let model = first["id"].as_str().unwrap();
    let (status, text) = request("GET", &format!("{url}/v1/models/{model}"));
    assert_eq!((status, json_of(&text)), (200, first.clone()));
    let (status, text) = request("GET", &format!("{url}/v1/models/no-such-model"));
    assert_eq!(status, 404, "{text}");
    assert_eq!(json_of(&text)["error"]["code"], "model_not_found");

    // Any other method or path: a 404 with an error body, never an empty 405.
    for (method, path) in [
        ("PUT", "/v1/responses"),
        ("PATCH", "/v1/models"),
        ("GET", "/v2/x"),
    ] {
        let (status, text) = request(method, &format!("{url}{path}"));
        assert_eq!(status, 404, "{method} {path}: {text}");
        let e = json_of(&text);
        assert!(
            e["error"]["message"].as_str().unwrap().contains(path),
            "{e}"
        );
    }
}

#[test]
fn legacy_functions_ask_for_one_call_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = r#"{"steps": [
        {"reply": {"tool_calls": [{"name": "f", "arguments": {"n": 1}}, {"name": "f", "arguments": {"n": 2}}]}}
    ]}"#;
    let (_mock, mock_url) = mock(dir.path(), Some(scenario));
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let (status, text) = post(
        &url,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "go"}],
                "functions": [{"name": "f", "parameters": {"type": "object"}}]}),
    );
    assert_eq!(status, 200, "{text}");
    let v = json_of(&text);
    let message = &v["choices"][0]["message"];
    assert_eq!(message["function_call"]["name"], "f", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "function_call", "{v}");
    let sent = json_of(&recorded(dir.path()).pop().unwrap());
    assert_eq!(sent["parallel_tool_calls"], false, "{sent}");
}

/// A streamed response replayed is its live stream again, event for event and number for
/// number: a client that lost the connection after any sequence number resumes with
/// `starting_after` and gets exactly what it missed. Replayed as one delta, the live
/// numbers were not the replay's, and a resumed text lost its middle (front round 10 F2).
#[test]
fn a_streamed_response_replays_as_it_was_sent_and_resumes_from_any_number() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, mock_url) = mock(dir.path(), None);
    let (_gw, url) = gateway_with(&format!("{mock_url}/v1"), dir.path(), "");
    let (_, live_text) = post(
        &url,
        "/v1/responses",
        &json!({"input": "stream this, please", "stream": true}),
    );
    let live = toolsearch::provider::parse_sse(&live_text);
    let deltas = live
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .count();
    assert!(deltas >= 2, "the mock streams in pieces: {live_text}");
    let id = live[0]["response"]["id"].as_str().unwrap().to_string();
    for after in [
        None,
        Some(0),
        Some(3),
        Some(4),
        Some(5),
        Some(live.len() as u64 - 2),
    ] {
        let query = after.map_or(String::new(), |a| format!("&starting_after={a}"));
        let (status, text) = request(
            "GET",
            &format!("{url}/v1/responses/{id}?stream=true{query}"),
        );
        assert_eq!(status, 200, "{text}");
        let replayed = toolsearch::provider::parse_sse(&text);
        let missed: Vec<&serde_json::Value> = live
            .iter()
            .filter(|e| after.is_none_or(|a| e["sequence_number"].as_u64().unwrap() > a))
            .collect();
        let shape = |e: &serde_json::Value| {
            (
                e["sequence_number"].as_u64(),
                e["type"].as_str().map(str::to_string),
                e["delta"].as_str().map(str::to_string),
            )
        };
        assert_eq!(
            replayed.iter().map(shape).collect::<Vec<_>>(),
            missed.iter().map(|e| shape(e)).collect::<Vec<_>>(),
            "after {after:?}"
        );
        // And each event whole, not only its number, type and delta: the replayed opening
        // carried the finished turn's `toolsearch` summary, and the parts lacked the live
        // `logprobs` (front round 24).
        for (replayed, live) in replayed.iter().zip(&missed) {
            assert_eq!(replayed, *live, "after {after:?}");
        }
    }
    let (status, _) = request(
        "GET",
        &format!("{url}/v1/responses/{id}?stream=true&stream=false"),
    );
    assert_eq!(status, 400, "a parameter given twice is refused");
    // An array, as the SDKs write `include`, is not (front round 25 F2).
    let include = "include[]=message.output_text.logprobs&include[]=reasoning.encrypted_content";
    for stream in ["", "&stream=true"] {
        let (status, text) = request("GET", &format!("{url}/v1/responses/{id}?{include}{stream}"));
        assert_eq!(status, 200, "{text}");
    }
}

/// A response whose turn still runs is known by its id (the client has it from
/// `response.created`): `GET` gives it `in_progress`, a continuation is refused as early,
/// and a `DELETE` holds: the response is not stored when the turn ends. Unknown while it
/// ran, it was a 404 to both, and a `DELETE` then had no effect (front round 17 F4).
#[test]
fn a_running_response_is_in_progress_and_deleted_for_good() {
    let (provider, _) = scripted_provider(|_, _, body| {
        std::thread::sleep(std::time::Duration::from_millis(2_500));
        let done = json!({"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]});
        if body["stream"] == true {
            Reply::sse(&[
                json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "done"}),
                json!({"type": "response.completed", "response": done}),
            ])
        } else {
            Reply::json(200, &done)
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(
        &provider,
        dir.path(),
        "[gateway]\nstream_keepalive_ms = 200\n",
    );
    runtime().block_on(async {
        let client = reqwest::Client::new();
        // Two streamed turns; each stream opens before its text, with the response's id.
        let mut turns = Vec::new();
        for _ in 0..2 {
            let mut r = client
                .post(format!("{url}/v1/responses"))
                .json(&json!({"input": "hello", "stream": true}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let mut seen = String::new();
            while !seen.contains("response.in_progress") {
                seen.push_str(&String::from_utf8_lossy(&r.chunk().await.unwrap().unwrap()));
            }
            let created = toolsearch::provider::parse_sse(&seen)[0].clone();
            let id = created["response"]["id"].as_str().unwrap().to_string();
            turns.push((id, r, seen));
        }
        let ask = |method: &str, id: &str| {
            client
                .request(method.parse().unwrap(), format!("{url}/v1/responses/{id}"))
                .send()
        };
        for (id, _, _) in &turns {
            let r = ask("GET", id).await.unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            assert_eq!(
                (v["id"].as_str(), v["status"].as_str()),
                (Some(id.as_str()), Some("in_progress")),
                "{v}"
            );
        }
        let r = client
            .post(format!("{url}/v1/responses"))
            .json(&json!({"input": "more", "previous_response_id": turns[0].0}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let text = r.text().await.unwrap();
        assert!(text.contains("still in progress"), "{text}");

        let r = ask("DELETE", &turns[0].0).await.unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["deleted"], true, "{v}");
        for method in ["GET", "DELETE"] {
            assert_eq!(
                ask(method, &turns[0].0).await.unwrap().status(),
                404,
                "{method}"
            );
        }

        // Both turns end as they would have; only the one not deleted is stored.
        for (i, (id, mut r, mut seen)) in turns.into_iter().enumerate() {
            while let Some(chunk) = r.chunk().await.unwrap() {
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
            assert!(seen.contains("response.completed"), "{seen}");
            let got = ask("GET", &id).await.unwrap();
            let status = got.status().as_u16();
            let body = got.text().await.unwrap();
            if i == 0 {
                assert_eq!(status, 404, "{id}: {body}");
            } else {
                assert_eq!(status, 200, "{id}: {body}");
                assert_eq!(json_of(&body)["status"], "completed", "{body}");
            }
        }
    });
}

/// Anthropic's model list comes in pages: every page is followed (the first alone was
/// answered), asked 1,000 models at a time.
#[test]
fn anthropic_s_model_list_is_followed_page_after_page() {
    let (provider, _) = scripted_provider(|path, _, _| {
        let page = |ids: &[&str], more: bool| {
            let data: Vec<Value> = ids
                .iter()
                .map(|id| json!({"id": id, "type": "model"}))
                .collect();
            Reply::json(
                200,
                &json!({"data": data, "has_more": more, "first_id": ids[0], "last_id": ids[ids.len() - 1]}),
            )
        };
        match path {
            "/v1/models?limit=1000" => page(&["claude-a", "claude-b"], true),
            "/v1/models?limit=1000&after_id=claude-b" => page(&["claude-c"], false),
            other => Reply::json(404, &json!({"error": {"message": other}})),
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, url) = gateway_with(&provider, dir.path(), "kind = \"anthropic\"\n");
    let (status, text) = request("GET", &format!("{url}/v1/models"));
    assert_eq!(status, 200, "{text}");
    let ids: Vec<String> = json_of(&text)["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["claude-a", "claude-b", "claude-c"], "{text}");
}

/// An answer with annotations and logprobs replays them as its live stream sent them:
/// the annotation events, the logprobs of `output_text.done`, and every later event under
/// its live number (front round 23 F1: the annotation events were left out, so a client
/// resuming after a live number lost `output_text.done`).
#[test]
fn a_replay_keeps_the_annotation_events_and_the_live_numbers() {
    let (url, _) = scripted_provider(|_, _, _| {
        Reply::json(
            200,
            &json!({"output": [{"type": "message", "role": "assistant", "content": [{
                "type": "output_text", "text": "Hello world",
                "annotations": [{"type": "url_citation", "start_index": 0, "end_index": 5, "url": "https://a", "title": "a"}],
                "logprobs": [{"token": "Hello", "logprob": -0.1, "bytes": [72], "top_logprobs": []}]
            }]}]}),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
    let (_, live_text) = post(
        &gw,
        "/v1/responses",
        &json!({"input": "cite", "stream": true}),
    );
    let live = toolsearch::provider::parse_sse(&live_text);
    assert!(
        live.iter()
            .any(|e| e["type"] == "response.output_text.annotation.added"),
        "{live_text}"
    );
    let id = live[0]["response"]["id"].as_str().unwrap().to_string();
    let (status, text) = get(&gw, &format!("/v1/responses/{id}?stream=true"));
    assert_eq!(status, 200, "{text}");
    let replayed = toolsearch::provider::parse_sse(&text);
    let shape = |e: &Value| {
        (
            e["sequence_number"].as_u64(),
            e["type"].as_str().map(str::to_string),
            e["annotation"].clone(),
            e["logprobs"].clone(),
        )
    };
    assert_eq!(
        replayed.iter().map(shape).collect::<Vec<_>>(),
        live.iter().map(shape).collect::<Vec<_>>()
    );
    assert_eq!(replayed, live, "every event whole (front round 24)");
}
