//! The mock provider over real HTTP: a server on `127.0.0.1:0`, requests built turn by
//! turn, answers read back with the project's own normaliser.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::encode::fragments;
use super::play::qa_target_in;
use super::*;
use crate::provider::{Provider, StreamAssembler, ToolCall, parse_sse, payload, tool_calls};
use crate::surface::{TOOL_CALL, TOOL_SEARCH, TOOL_SEARCH_CODE};

const RESPONSES: Provider = Provider::OpenaiResponses;
const CHAT: Provider = Provider::OpenaiCompletions;
const ANTHROPIC: Provider = Provider::Anthropic;

/// Every format, streamed and not.
const MODES: [(Provider, bool); 6] = [
    (RESPONSES, false),
    (RESPONSES, true),
    (CHAT, false),
    (CHAT, true),
    (ANTHROPIC, false),
    (ANTHROPIC, true),
];

const TARGET: &str = "demo.echo";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/scenarios")
        .join(name)
}

struct Server {
    provider: Arc<MockProvider>,
    base: String,
    client: reqwest::Client,
    shutdown: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

async fn start(options: MockOptions) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let provider = MockProvider::new(options);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(listener, Arc::clone(&provider), shutdown.clone()));
    Server {
        provider,
        base,
        client: reqwest::Client::new(),
        shutdown,
        task,
    }
}

impl Server {
    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = response.text().await.unwrap();
        Answer {
            status,
            content_type,
            body,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(self.client.get(format!("{}{path}", self.base)))
            .await
    }

    async fn post_bytes(&self, path: &str, body: Vec<u8>) -> Answer {
        self.send(
            self.client
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/json")
                .body(body),
        )
        .await
    }

    async fn post(&self, path: &str, body: &Value) -> Answer {
        self.post_bytes(path, body.to_string().into_bytes()).await
    }

    /// One model turn for `conversation`, read back with the normaliser.
    async fn ask(&self, conversation: &Convo) -> Turn {
        let answer = self
            .post(path_of(conversation.format), &conversation.body())
            .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        read_turn(conversation.format, conversation.stream, &answer)
    }
}

fn path_of(format: Provider) -> &'static str {
    match format {
        CHAT => "/v1/chat/completions",
        ANTHROPIC => "/v1/messages",
        _ => "/v1/responses",
    }
}

/// A model turn as a client sees it.
#[derive(Debug)]
struct Turn {
    calls: Vec<ToolCall>,
    text: String,
}

fn read_turn(format: Provider, stream: bool, answer: &Answer) -> Turn {
    if !stream {
        assert!(
            answer.content_type.starts_with("application/json"),
            "{}",
            answer.content_type
        );
        let body = answer.json();
        let calls = tool_calls(format, &body).unwrap();
        let text = match format {
            CHAT => {
                let choice = &body["choices"][0];
                assert_eq!(
                    choice["finish_reason"],
                    if calls.is_empty() {
                        "stop"
                    } else {
                        "tool_calls"
                    }
                );
                assert_eq!(body["object"], "chat.completion");
                choice["message"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            }
            ANTHROPIC => {
                assert_eq!(body["type"], "message");
                assert_eq!(
                    body["stop_reason"],
                    if calls.is_empty() {
                        "end_turn"
                    } else {
                        "tool_use"
                    }
                );
                crate::provider::normalize::reply_text(format, &body)
            }
            _ => {
                assert_eq!(body["object"], "response");
                assert_eq!(body["status"], "completed");
                responses_text(&body)
            }
        };
        return Turn { calls, text };
    }
    assert_eq!(answer.content_type, "text/event-stream");
    for block in answer.body.split_terminator("\n\n") {
        // Chat sends data alone; the others name each event after its type.
        let data = match block.strip_prefix("event: ") {
            Some(named) if format != CHAT => {
                let (name, data) = named.split_once('\n').unwrap();
                let data = data.strip_prefix("data: ").unwrap();
                let value: Value = serde_json::from_str(data).unwrap();
                assert_eq!(value["type"], name, "{block}");
                continue;
            }
            _ => block,
        };
        assert!(data.starts_with("data: "), "not an SSE data line: {block}");
    }
    let events = parse_sse(&answer.body);
    let mut assembler = StreamAssembler::new(format);
    for event in &events {
        assembler.push(event).unwrap();
    }
    let calls = assembler.finish().unwrap();
    let text = match format {
        CHAT => {
            assert!(answer.body.ends_with("data: [DONE]\n\n"));
            assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
            let last = &events[events.len() - 1]["choices"][0];
            assert_eq!(
                last["finish_reason"],
                if calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                }
            );
            for e in &events {
                assert_eq!(e["object"], "chat.completion.chunk");
            }
            events
                .iter()
                .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
                .collect()
        }
        ANTHROPIC => {
            assert_eq!(events[0]["type"], "message_start");
            assert_eq!(events[events.len() - 1]["type"], "message_stop");
            let stop = &events[events.len() - 2];
            assert_eq!(stop["type"], "message_delta");
            assert_eq!(
                stop["delta"]["stop_reason"],
                if calls.is_empty() {
                    "end_turn"
                } else {
                    "tool_use"
                }
            );
            events
                .iter()
                .filter_map(|e| crate::provider::normalize::stream_text(format, e))
                .collect()
        }
        _ => {
            assert_eq!(events[0]["type"], "response.created");
            let completed = &events[events.len() - 1];
            assert_eq!(completed["type"], "response.completed");
            let deltas: String = events
                .iter()
                .filter(|e| e["type"] == "response.output_text.delta")
                .filter_map(|e| e["delta"].as_str())
                .collect();
            assert_eq!(deltas, responses_text(&completed["response"]));
            // The completed response alone gives the same calls.
            assert_eq!(
                tool_calls(format, &completed["response"]).unwrap(),
                calls,
                "response.completed disagrees with the streamed items"
            );
            deltas
        }
    };
    Turn { calls, text }
}

fn responses_text(body: &Value) -> String {
    body["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().unwrap().iter())
        .filter_map(|part| part["text"].as_str())
        .collect()
}

/// A conversation built turn by turn, in one format.
struct Convo {
    format: Provider,
    stream: bool,
    tools: Vec<String>,
    items: Vec<Value>,
}

impl Convo {
    fn new(format: Provider, stream: bool, tools: &[&str], prompt: &str) -> Convo {
        let mut convo = Convo {
            format,
            stream,
            tools: tools.iter().map(|t| t.to_string()).collect(),
            items: Vec::new(),
        };
        if format == CHAT {
            convo
                .items
                .push(json!({"role": "system", "content": "You are a test."}));
        }
        convo.user(prompt);
        convo
    }

    fn user(&mut self, text: &str) {
        self.items.push(match self.format {
            // Responses: content as a list of parts, the shape the SDKs send.
            RESPONSES => json!({
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }),
            _ => json!({"role": "user", "content": text}),
        });
    }

    /// The model's turn and, for each call, its output.
    fn answered(&mut self, turn: &Turn, outputs: &[&str]) {
        assert_eq!(turn.calls.len(), outputs.len());
        match self.format {
            ANTHROPIC => {
                let mut blocks = Vec::new();
                if !turn.text.is_empty() {
                    blocks.push(json!({"type": "text", "text": turn.text}));
                }
                blocks.extend(turn.calls.iter().map(|c| {
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
                }));
                self.items
                    .push(json!({"role": "assistant", "content": blocks}));
                if !outputs.is_empty() {
                    let results: Vec<Value> = turn
                        .calls
                        .iter()
                        .zip(outputs)
                        .map(|(call, output)| {
                            json!({"type": "tool_result", "tool_use_id": call.id, "content": output})
                        })
                        .collect();
                    self.items.push(json!({"role": "user", "content": results}));
                }
            }
            RESPONSES => {
                if !turn.text.is_empty() {
                    self.items.push(json!({
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": turn.text}],
                    }));
                }
                // The call items as the gateway sends them back.
                self.items
                    .extend(turn.calls.iter().map(payload::responses_function_call));
                for (call, output) in turn.calls.iter().zip(outputs) {
                    self.items.push(json!({
                        "type": "function_call_output",
                        "call_id": call.id,
                        "output": output,
                    }));
                }
            }
            _ => {
                // The assistant message as the gateway sends it back.
                self.items
                    .push(payload::chat_assistant_message(&turn.text, &turn.calls));
                for (call, output) in turn.calls.iter().zip(outputs) {
                    self.items.push(json!({
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": output,
                    }));
                }
            }
        }
    }

    fn body(&self) -> Value {
        let params = json!({"type": "object", "properties": {}});
        match self.format {
            RESPONSES => json!({
                "model": "mock-model",
                "input": self.items,
                "tools": self.tools.iter().map(|name| json!({
                    "type": "function", "name": name, "description": "", "parameters": params, "strict": false,
                })).collect::<Vec<_>>(),
                "stream": self.stream,
            }),
            ANTHROPIC => json!({
                "model": "mock-model",
                "max_tokens": 8192,
                "messages": self.items,
                "tools": self.tools.iter().map(|name| json!({
                    "name": name, "description": "", "input_schema": params,
                })).collect::<Vec<_>>(),
                "stream": self.stream,
            }),
            _ => json!({
                "model": "mock-model",
                "messages": self.items,
                "tools": self.tools.iter().map(|name| json!({
                    "type": "function", "function": {"name": name, "description": "", "parameters": params},
                })).collect::<Vec<_>>(),
                "stream": self.stream,
            }),
        }
    }
}

fn qa_prompt(target: &str) -> String {
    format!("Please run: tool search qa check target={target} and report.")
}

/// The one call of a turn.
fn only_call(turn: &Turn) -> &ToolCall {
    assert!(turn.text.is_empty(), "unexpected text {:?}", turn.text);
    assert_eq!(turn.calls.len(), 1, "{:?}", turn.calls);
    &turn.calls[0]
}

fn only_text(turn: &Turn) -> &str {
    assert!(turn.calls.is_empty(), "unexpected calls {:?}", turn.calls);
    &turn.text
}

// ---------------------------------------------------------------------------------------
// Routes, recording, errors
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn health_and_unknown_routes() {
    let server = start(MockOptions::default()).await;
    let health = server.get("/healthz").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"ok": true}));

    let models = server.get("/v1/models").await;
    assert_eq!(models.status, 200);
    assert_eq!(models.json()["data"][0]["id"], MODEL);

    let missing = server.get("/v1/embeddings").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["type"], "invalid_request_error");
    assert!(
        missing.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/embeddings")
    );
    server.stop().await;
}

#[tokio::test]
async fn every_request_is_recorded_in_order_and_appended_to_the_record_file() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("requests.jsonl");
    let server = start(MockOptions {
        scenario: None,
        record: Some(record.clone()),
    })
    .await;

    let first = json!({"model": "m", "input": "hello"});
    let second =
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    let not_object = json!([1, 2]);
    assert_eq!(server.post("/v1/responses", &first).await.status, 200);
    assert_eq!(
        server.post("/v1/chat/completions", &second).await.status,
        200
    );
    // Parsed JSON is recorded even when it is refused; text that is not JSON cannot be.
    assert_eq!(server.post("/v1/responses", &not_object).await.status, 400);
    assert_eq!(
        server
            .post_bytes("/v1/responses", b"{not json".to_vec())
            .await
            .status,
        400
    );

    let expected = vec![first, second, not_object];
    let debug = server.get("/debug/requests").await;
    assert_eq!(debug.status, 200);
    assert_eq!(debug.json(), Value::Array(expected.clone()));
    assert_eq!(server.provider.requests(), expected);

    let lines: Vec<Value> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, expected);
    server.stop().await;
}

#[tokio::test]
async fn a_record_file_that_cannot_be_written_is_a_server_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(MockOptions {
        scenario: None,
        record: Some(dir.path().join("missing-dir/requests.jsonl")),
    })
    .await;
    let answer = server
        .post("/v1/responses", &json!({"input": "hello"}))
        .await;
    assert_eq!(answer.status, 500);
    let error = &answer.json()["error"];
    assert_eq!(error["type"], "server_error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("missing-dir/requests.jsonl")
    );
    server.stop().await;
}

#[tokio::test]
async fn malformed_requests_are_400_with_an_openai_error() {
    let server = start(MockOptions::default()).await;
    for path in ["/v1/responses", "/v1/chat/completions"] {
        for body in [&b"{\"input\": "[..], b"", b"\xff\xfe"] {
            let answer = server.post_bytes(path, body.to_vec()).await;
            assert_eq!(answer.status, 400, "{path}: {}", answer.body);
            let error = &answer.json()["error"];
            assert_eq!(error["type"], "invalid_request_error");
            assert!(
                error["message"]
                    .as_str()
                    .unwrap()
                    .contains("not valid JSON"),
                "{error}"
            );
        }
    }
    // Valid JSON of the wrong shape.
    for (path, body, says) in [
        ("/v1/chat/completions", json!({"model": "m"}), "`messages`"),
        ("/v1/responses", json!({"input": 7}), "`input`"),
        ("/v1/responses", json!("text"), "JSON object"),
    ] {
        let answer = server.post(path, &body).await;
        assert_eq!(answer.status, 400);
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.contains(says), "{message}");
    }
    // The server survived all of it.
    assert_eq!(server.get("/healthz").await.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn bodies_over_8_mib_are_413() {
    let server = start(MockOptions::default()).await;
    let mut body = b"{\"input\": \"".to_vec();
    body.resize(MAX_BODY_BYTES + 16, b'a');
    body.extend_from_slice(b"\"}");
    let answer = server.post_bytes("/v1/responses", body).await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.json()["error"]["type"], "invalid_request_error");
    assert!(server.provider.requests().is_empty());

    // Just under the limit is answered.
    let text = "a".repeat(MAX_BODY_BYTES - 64);
    let answer = server
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": text}]}),
        )
        .await;
    assert_eq!(answer.status, 200);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// Response shapes
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn response_bodies_have_the_documented_shapes() {
    let server = start(MockOptions::default()).await;
    let request = json!({"model": "gpt-test", "input": "hi there"});
    let bytes = request.to_string().len() as u64;
    let body = server.post("/v1/responses", &request).await.json();
    assert_eq!(
        body,
        json!({
            "id": "resp_1",
            "object": "response",
            "created_at": body["created_at"],
            "status": "completed",
            "model": "gpt-test",
            "output": [{
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "mock: hi there", "annotations": []}],
            }],
            "usage": {"input_tokens": bytes / 4, "output_tokens": 1, "total_tokens": bytes / 4 + 1},
        })
    );

    let body = server
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-chat", "messages": [{"role": "user", "content": [{"type": "text", "text": "yo"}]}]}),
        )
        .await
        .json();
    assert_eq!(body["id"], "chatcmpl-2");
    assert_eq!(body["model"], "gpt-chat");
    assert_eq!(
        body["choices"],
        json!([{"index": 0, "message": {"role": "assistant", "content": "mock: yo"}, "finish_reason": "stop"}])
    );
    server.stop().await;
}

#[tokio::test]
async fn a_streamed_call_is_sent_in_fragments_and_the_calls_are_fully_shaped() {
    let server = start(MockOptions::default()).await;
    let convo = Convo::new(RESPONSES, true, &[TOOL_SEARCH_CODE], &qa_prompt(TARGET));
    let answer = server.post("/v1/responses", &convo.body()).await;
    let events = parse_sse(&answer.body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let deltas = kinds
        .iter()
        .filter(|k| **k == "response.function_call_arguments.delta")
        .count();
    assert!(deltas >= 2, "{kinds:?}");
    let mut expected = vec!["response.created", "response.output_item.added"];
    expected.extend(std::iter::repeat_n(
        "response.function_call_arguments.delta",
        deltas,
    ));
    expected.extend([
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);
    assert_eq!(events[1]["item"]["arguments"], "");
    let fragments: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
    assert_eq!(fragments, json!({"code": qa_code(TARGET)}).to_string());
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i);
    }
    assert_eq!(
        events[events.len() - 1]["response"]["output"][0],
        json!({
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "tool_search_code",
            "arguments": fragments,
            "status": "completed",
        })
    );

    let convo = Convo::new(CHAT, true, &[TOOL_SEARCH_CODE], &qa_prompt(TARGET));
    let answer = server.post("/v1/chat/completions", &convo.body()).await;
    let chunks = parse_sse(&answer.body);
    let argument_chunks: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .filter(|a| !a.is_empty())
        .collect();
    assert!(argument_chunks.len() >= 2);
    assert_eq!(
        chunks[1]["choices"][0]["delta"]["tool_calls"][0],
        json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "tool_search_code", "arguments": ""}})
    );

    let convo = Convo::new(CHAT, false, &[TOOL_SEARCH_CODE], &qa_prompt(TARGET));
    let body = server
        .post("/v1/chat/completions", &convo.body())
        .await
        .json();
    let message = &body["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(message["tool_calls"][0]["id"], "call_1");
    assert_eq!(message["tool_calls"][0]["type"], "function");
    assert!(message["tool_calls"][0]["function"]["arguments"].is_string());
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// The QA play
// ---------------------------------------------------------------------------------------

#[test]
fn the_qa_code_is_exactly_the_documented_program() {
    assert_eq!(
        qa_code("demo.echo"),
        "const hits = await openclaw.tools.search(\"demo.echo\", {limit: 20});\n\
         const hit = hits.find((h) => h.name === \"demo.echo\");\n\
         if (!hit) throw new Error(\"qa target not found: \" + \"demo.echo\");\n\
         return await openclaw.tools.call(hit.id, {marker: \"qa-marker-demo.echo\"});"
    );
}

#[test]
fn the_qa_target_is_read_from_the_prompt() {
    assert_eq!(
        qa_target_in("tool search qa check target=fake:tool_7-x.y, thanks").as_deref(),
        Some("fake:tool_7-x.y")
    );
    assert_eq!(qa_target_in("tool search qa check target= x"), None);
    assert_eq!(
        qa_target_in("tool search qa check target=! then tool search qa check target=b").as_deref(),
        Some("b")
    );
    assert_eq!(qa_target_in("tool search qa check"), None);
}

#[tokio::test]
async fn code_lane_sends_the_search_code_then_answers_with_its_output() {
    let server = start(MockOptions::default()).await;
    for (format, stream) in MODES {
        let tools = [TOOL_SEARCH_CODE, TOOL_SEARCH, TOOL_CALL, "demo_echo"];
        let mut convo = Convo::new(format, stream, &tools, &qa_prompt(TARGET));
        let turn = server.ask(&convo).await;
        let call = only_call(&turn);
        assert_eq!(call.name, "tool_search_code", "{format} stream={stream}");
        assert_eq!(call.id, "call_1");
        assert_eq!(call.arguments, json!({"code": qa_code(TARGET)}));

        let output = r#"{"ok":true,"value":"FAKE_PLUGIN_OK demo.echo {\"marker\":\"qa-marker-demo.echo\"}"}"#;
        convo.answered(&turn, &[output]);
        let turn = server.ask(&convo).await;
        assert_eq!(only_text(&turn), format!("QA_DONE {output}"));
    }
    server.stop().await;
}

#[tokio::test]
async fn tools_lane_searches_then_calls_the_found_id_then_answers() {
    let server = start(MockOptions::default()).await;
    for (i, (format, stream)) in MODES.into_iter().enumerate() {
        let tools = [TOOL_SEARCH, "tool_describe", TOOL_CALL];
        let mut convo = Convo::new(format, stream, &tools, &qa_prompt(TARGET));
        let turn = server.ask(&convo).await;
        let call = only_call(&turn);
        assert_eq!(call.name, "tool_search");
        assert_eq!(call.id, "call_1");
        assert_eq!(call.arguments, json!({"queries": [{"query": TARGET}]}));

        let candidates = json!([
            {"id": "plugin:fake/demo.echo2", "name": "demo.echo2", "description": "not it"},
            {"id": "plugin:fake/demo.echo", "name": "demo.echo", "description": "echo"},
        ]);
        // Both shapes tool_search answers with: a batch result and a plain list.
        let output = if i % 2 == 0 {
            json!({"results": [{"query": TARGET, "candidates": candidates}]}).to_string()
        } else {
            candidates.to_string()
        };
        convo.answered(&turn, &[&output]);
        let turn = server.ask(&convo).await;
        let call = only_call(&turn);
        assert_eq!(call.name, "tool_call");
        assert_eq!(call.id, "call_2");
        assert_eq!(
            call.arguments,
            json!({"id": "plugin:fake/demo.echo", "args": {"marker": "qa-marker-demo.echo"}})
        );

        let output = "FAKE_PLUGIN_OK demo.echo {\"marker\":\"qa-marker-demo.echo\"}";
        convo.answered(&turn, &[output]);
        let turn = server.ask(&convo).await;
        assert_eq!(only_text(&turn), format!("QA_DONE {output}"));
    }
    server.stop().await;
}

#[tokio::test]
async fn tools_lane_without_the_target_in_the_results_fails() {
    let server = start(MockOptions::default()).await;
    for (format, stream) in MODES {
        let mut convo = Convo::new(
            format,
            stream,
            &[TOOL_SEARCH, TOOL_CALL],
            &qa_prompt(TARGET),
        );
        let turn = server.ask(&convo).await;
        let output = json!({"results": [{"query": TARGET, "candidates": [{"id": "x/other", "name": "other"}]}]});
        convo.answered(&turn, &[&output.to_string()]);
        let turn = server.ask(&convo).await;
        assert_eq!(only_text(&turn), "QA_FAIL target not found by tool_search");

        // An output that is not JSON (a tool error) finds nothing either.
        let mut convo = Convo::new(
            format,
            stream,
            &[TOOL_SEARCH, TOOL_CALL],
            &qa_prompt(TARGET),
        );
        let turn = server.ask(&convo).await;
        convo.answered(&turn, &["search failed: index unavailable"]);
        let turn = server.ask(&convo).await;
        assert_eq!(only_text(&turn), "QA_FAIL target not found by tool_search");
    }
    server.stop().await;
}

#[tokio::test]
async fn direct_lane_calls_the_target_by_its_declared_name() {
    let server = start(MockOptions::default()).await;
    for (format, stream) in MODES {
        // `demo.echo` is declared as `demo_echo`, the name OpenAI accepts; and a target
        // whose name needs no projection is called as is.
        for (target, declared) in [(TARGET, "demo_echo"), ("fake_tool_042", "fake_tool_042")] {
            let tools = ["fake_tool_001", declared, "fake_tool_999"];
            let mut convo = Convo::new(format, stream, &tools, &qa_prompt(target));
            let turn = server.ask(&convo).await;
            let call = only_call(&turn);
            assert_eq!(call.name, declared);
            assert_eq!(call.id, "call_1");
            assert_eq!(
                call.arguments,
                json!({"marker": format!("qa-marker-{target}")})
            );

            let output = format!("FAKE_PLUGIN_OK {target} {{\"marker\":\"qa-marker-{target}\"}}");
            convo.answered(&turn, &[&output]);
            let turn = server.ask(&convo).await;
            assert_eq!(only_text(&turn), format!("QA_DONE {output}"));
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn an_unreachable_target_fails() {
    let server = start(MockOptions::default()).await;
    for (format, stream) in MODES {
        for tools in [&["fake_tool_001", "tool_describe"][..], &[][..]] {
            let convo = Convo::new(format, stream, tools, &qa_prompt(TARGET));
            let turn = server.ask(&convo).await;
            assert_eq!(only_text(&turn), "QA_FAIL target not reachable");
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn qa_done_quotes_at_most_2000_characters_and_the_first_prompt_wins() {
    let server = start(MockOptions::default()).await;
    for (format, stream) in MODES {
        let mut convo = Convo::new(format, stream, &["first", "second"], &qa_prompt("first"));
        convo.user(&qa_prompt("second"));
        let turn = server.ask(&convo).await;
        assert_eq!(only_call(&turn).name, "first");

        let output = "é".repeat(5_000);
        convo.answered(&turn, &[&output]);
        let turn = server.ask(&convo).await;
        let text = only_text(&turn);
        assert_eq!(text.chars().count(), "QA_DONE ".len() + QA_OUTPUT_CHARS);
        assert!(text.starts_with("QA_DONE éé"));
    }
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_two_step_scenario_calls_then_answers_then_falls_back() {
    let scenario = Scenario::load(&fixture("weather.json")).unwrap();
    let server = start(MockOptions {
        scenario: Some(scenario),
        record: None,
    })
    .await;
    for (format, stream) in MODES {
        let mut convo = Convo::new(
            format,
            stream,
            &["get_weather"],
            "what is the weather in Paris?",
        );
        let turn = server.ask(&convo).await;
        let call = only_call(&turn);
        assert_eq!(call.name, "get_weather");
        assert_eq!(call.id, "call_1");
        assert_eq!(call.arguments, json!({"city": "Paris", "unit": "celsius"}));

        convo.answered(&turn, &["{\"temp\": 21}"]);
        let turn = server.ask(&convo).await;
        assert_eq!(only_text(&turn), "It is 21 °C and sunny in Paris.");

        // Both steps are used up in this conversation.
        convo.answered(&turn, &[]);
        convo.user("and the weather tomorrow?");
        let turn = server.ask(&convo).await;
        assert_eq!(only_text(&turn), "mock: and the weather tomorrow?");

        // A prompt no step matches.
        let convo = Convo::new(format, stream, &["get_weather"], "tell me a joke");
        assert_eq!(only_text(&server.ask(&convo).await), "mock: tell me a joke");
    }
    server.stop().await;
}

#[tokio::test]
async fn scenario_steps_are_matched_by_the_last_user_message_and_used_once() {
    let scenario = Scenario::load(&fixture("greetings.json")).unwrap();
    let server = start(MockOptions {
        scenario: Some(scenario),
        record: None,
    })
    .await;
    for (format, stream) in MODES {
        let mut convo = Convo::new(format, stream, &[], "hello there");
        let mut said = Vec::new();
        for next in ["bye now", "what?", "hello again", "bye"] {
            let turn = server.ask(&convo).await;
            said.push(only_text(&turn).to_string());
            convo.answered(&turn, &[]);
            convo.user(next);
        }
        let turn = server.ask(&convo).await;
        said.push(only_text(&turn).to_string());
        assert_eq!(
            said,
            [
                "Hello! How can I help?",
                "Goodbye.",
                "I only say hello and goodbye.",
                "mock: hello again",
                "mock: bye",
            ]
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_step_with_text_and_several_calls_continues_the_call_numbering() {
    let scenario = Scenario::parse(
        r#"{"steps": [
            {"reply": {"tool_calls": [{"name": "a"}]}},
            {"reply": {"text": "two at once", "tool_calls": [
                {"name": "b", "arguments": {"x": 1}},
                {"name": "c", "arguments": {"y": "ü"}}
            ]}}
        ]}"#,
        Path::new("inline.json"),
    )
    .unwrap();
    let server = start(MockOptions {
        scenario: Some(scenario),
        record: None,
    })
    .await;
    for (format, stream) in MODES {
        let mut convo = Convo::new(format, stream, &["a", "b", "c"], "go");
        let turn = server.ask(&convo).await;
        assert_eq!(only_call(&turn).arguments, json!({}));
        convo.answered(&turn, &["done a"]);
        let turn = server.ask(&convo).await;
        assert_eq!(turn.text, "two at once");
        let calls: Vec<(&str, &str, &Value)> = turn
            .calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_2", "b", &json!({"x": 1})),
                ("call_3", "c", &json!({"y": "ü"})),
            ]
        );
    }
    server.stop().await;
}

#[test]
fn bad_scenario_files_are_bad_config_naming_the_file_and_the_problem() {
    for (name, says) in [
        ("bad/unknown-field.json", "unknown field `tool_call`"),
        ("bad/not-json.json", "line 4"),
        ("bad/arguments-not-object.json", "must be a JSON object"),
        ("bad/empty-reply.json", "neither `text` nor `tool_calls`"),
        ("bad/does-not-exist.json", "cannot read the scenario file"),
    ] {
        let path = fixture(name);
        let error = Scenario::load(&path).unwrap_err();
        assert_eq!(error.code(), "bad-config", "{name}");
        let message = error.to_string();
        assert!(
            message.starts_with(&path.display().to_string()),
            "{message}"
        );
        assert!(message.contains(says), "{name}: {message}");
    }
    let error = Scenario::load(&fixture("bad/unknown-field.json")).unwrap_err();
    assert!(error.to_string().contains("steps[0].reply"), "{error}");

    let error = Scenario::parse(r#"{"steps": []}"#, Path::new("empty.json")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "empty.json: the scenario has no steps; add at least one to `steps`"
    );
}

#[test]
fn fragments_cut_at_character_boundaries() {
    assert_eq!(fragments("{}"), ["{", "}"]);
    assert_eq!(fragments("abcdefg"), ["ab", "cd", "efg"]);
    assert_eq!(fragments("ééé"), ["é", "é", "é"]);
    assert_eq!(fragments("x"), ["x"]);
    assert_eq!(fragments(""), [""]);
}

/// A streamed text answer has every event of its part, in OpenAI's order: the SDKs' stream
/// accumulators index the part from `content_part.added` (front round 17 F5: the Python
/// SDK's `responses.stream()` failed with an IndexError without it).
#[tokio::test]
async fn a_streamed_text_answer_has_every_event_of_its_part() {
    let server = start(MockOptions::default()).await;
    let convo = Convo::new(RESPONSES, true, &[], "say hello");
    let answer = server.post("/v1/responses", &convo.body()).await;
    let events = parse_sse(&answer.body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..3],
        [
            "response.created",
            "response.output_item.added",
            "response.content_part.added"
        ],
        "{kinds:?}"
    );
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ],
        "{kinds:?}"
    );
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert!(!text.is_empty());
    let done = &events[kinds.len() - 4];
    assert_eq!(done["text"], text);
    server.stop().await;
}
