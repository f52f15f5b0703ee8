//! The scripted mock model provider (SPEC section 11): an OpenAI-compatible server that
//! records every request it receives and answers like a model would, from a script.
//!
//! Routes:
//! - `POST /v1/responses` (OpenAI Responses) and `POST /v1/chat/completions` (Chat
//!   Completions), each streamed as SSE (`data: {json}` events, Chat ending with
//!   `data: [DONE]`) when the body says `"stream": true`;
//! - `GET /debug/requests`: every request body received, in order, as a JSON array;
//! - `GET /healthz`: `{"ok": true}`.
//!
//! Every body that parses as JSON is recorded before it is answered (and appended as one
//! line to [`MockOptions::record`] when set). A body that is not JSON is `400` with an
//! OpenAI-style `{"error": {"message", "type": "invalid_request_error"}}`; a body larger
//! than [`MAX_BODY_BYTES`] is `413`.
//!
//! # Playing the model
//!
//! The server is stateless: every answer is decided from the request alone (the
//! conversation and the declared tool names), so the same request always gets the same
//! answer.
//!
//! **The QA prompt.** When a user message holds `tool search qa check target=<name>`
//! (the first such message counts; `<name>` is `[A-Za-z0-9_.:-]+`), the marker is
//! `qa-marker-<name>` and the first rule that applies answers:
//! 1. the conversation holds the output of a call to `tool_search_code`, `tool_call` or
//!    the target itself: answer `QA_DONE <output>` (the latest such output, cut to
//!    [`QA_OUTPUT_CHARS`] characters);
//! 2. `tool_search_code` is declared: call it with [`qa_code`];
//! 3. `tool_search` is declared: without a `tool_search` output yet, call it with
//!    `{"queries": [{"query": <name>}]}`; else read the latest `tool_search` output (a
//!    batch result `{"results": [{"candidates": [...]}]}` or a plain list of candidates)
//!    and call `tool_call` with `{"id": <the id of the candidate named <name>>, "args":
//!    {"marker": ...}}`, or answer `QA_FAIL target not found by tool_search`;
//! 4. the target is declared (exactly, or as the name OpenAI accepts for it, see
//!    [`WireNames`]): call it with `{"marker": ...}`;
//! 5. answer `QA_FAIL target not reachable`.
//!
//! **A scenario** ([`Scenario`]) otherwise. The rule: *the reply is the first step whose
//! `when` is absent or a substring of the last user message, among the steps this
//! conversation has not used yet.* Which steps are used is replayed from the conversation
//! itself: walking it in order, every assistant turn already in it used up the first
//! unused step that matched the user message before it. A single-prompt conversation
//! therefore plays its matching steps in order, one per round, and a conversation with
//! several user messages picks up where it left off. When no step applies (or there is
//! no scenario) the answer is `mock: <last user message>`.
//!
//! **Ids.** Tool call ids are `call_<n>`, n = 1 + the tool calls already in the
//! conversation (so they never repeat within one); Responses items are `fc_<n>` for a
//! call and `msg_<m>`, m = 1 + the assistant turns already in the conversation, for text;
//! responses are `resp_<k>` / `chatcmpl-<k>`, k counting the requests this server has
//! answered. Arguments are always sent as a JSON string.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::provider::{Provider, WireNames};
use crate::surface::{TOOL_CALL, TOOL_SEARCH, TOOL_SEARCH_CODE};

/// Largest request body accepted; a larger one is `413`.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// What a user message says to start the QA play; the target name follows.
pub const QA_PROMPT: &str = "tool search qa check target=";

/// Characters of the final tool output quoted in the `QA_DONE` answer.
pub const QA_OUTPUT_CHARS: usize = 2_000;

/// How the mock provider is run.
#[derive(Debug, Clone, Default)]
pub struct MockOptions {
    /// The script for conversations without the QA prompt.
    pub scenario: Option<Scenario>,
    /// A file each request body is appended to, as one JSON line.
    pub record: Option<PathBuf>,
}

/// A scripted conversation: `{"steps": [{"when": "...", "reply": {"text": "...",
/// "tool_calls": [{"name": "...", "arguments": {...}}]}}]}`. See the module documentation
/// for how a step is chosen.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// A substring of the last user message; absent matches every message.
    #[serde(default)]
    pub when: Option<String>,
    pub reply: Reply,
}

/// What the model answers: text, tool calls, or both.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub name: String,
    /// A JSON object; absent is `{}`.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl Reply {
    fn text(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            tool_calls: Vec::new(),
        }
    }

    fn call(name: &str, arguments: Value) -> Reply {
        Reply {
            text: String::new(),
            tool_calls: vec![ScriptedCall {
                name: name.to_string(),
                arguments,
            }],
        }
    }
}

impl Scenario {
    /// Reads and checks a scenario file. Every problem is `bad-config` naming the file and
    /// what is wrong (with the JSON path and line for a shape error).
    pub fn load(path: &Path) -> Result<Scenario, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::BadConfig {
            file: path.to_path_buf(),
            message: format!("cannot read the scenario file: {e}"),
        })?;
        Scenario::parse(&text, path)
    }

    /// Parses and checks scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Scenario, Error> {
        let bad = |message: String| Error::BadConfig {
            file: file.to_path_buf(),
            message,
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let scenario: Scenario = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path.is_empty() || path == "." {
                bad(format!("not a valid scenario: {inner}"))
            } else {
                bad(format!("not a valid scenario at `{path}`: {inner}"))
            }
        })?;
        if scenario.steps.is_empty() {
            return Err(bad(
                "the scenario has no steps; add at least one to `steps`".into(),
            ));
        }
        for (i, step) in scenario.steps.iter().enumerate() {
            if step.reply.text.is_empty() && step.reply.tool_calls.is_empty() {
                return Err(bad(format!(
                    "`steps[{i}].reply` has neither `text` nor `tool_calls`"
                )));
            }
            for (j, call) in step.reply.tool_calls.iter().enumerate() {
                if call.name.trim().is_empty() {
                    return Err(bad(format!(
                        "`steps[{i}].reply.tool_calls[{j}].name` is empty"
                    )));
                }
                if !call.arguments.is_object() {
                    return Err(bad(format!(
                        "`steps[{i}].reply.tool_calls[{j}].arguments` must be a JSON object, not {}",
                        crate::catalog::load::json_type_name(&call.arguments)
                    )));
                }
            }
        }
        Ok(scenario)
    }
}

/// The mock provider: its options and every request it has received.
#[derive(Debug)]
pub struct MockProvider {
    options: MockOptions,
    requests: Arc<Mutex<Vec<Value>>>,
    answered: AtomicU64,
}

impl MockProvider {
    pub fn new(options: MockOptions) -> Arc<Self> {
        Arc::new(MockProvider {
            options,
            requests: Arc::new(Mutex::new(Vec::new())),
            answered: AtomicU64::new(0),
        })
    }

    /// The routes of the module documentation, with the body limit.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/responses", post(responses))
            .route("/v1/chat/completions", post(chat_completions))
            .route("/debug/requests", get(debug_requests))
            .route("/healthz", get(healthz))
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(Arc::clone(self))
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.recorded().clone()
    }

    fn recorded(&self) -> MutexGuard<'_, Vec<Value>> {
        // A panic while the lock was held cannot leave the list half-written.
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a body in memory and in the record file. The lock is held while writing so
    /// the file's lines come in the same order as the list.
    fn record(&self, body: &Value) -> Result<(), String> {
        let mut requests = self.recorded();
        requests.push(body.clone());
        if let Some(path) = &self.options.record {
            let line = format!("{body}\n");
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut file| file.write_all(line.as_bytes()))
                .map_err(|e| {
                    format!(
                        "mock provider: cannot append to the record file {}: {e}",
                        path.display()
                    )
                })?;
        }
        Ok(())
    }

    fn handle(&self, format: Provider, body: Result<Bytes, BytesRejection>) -> Response {
        let bytes = match body {
            Ok(bytes) => bytes,
            Err(rejection) => return error_response(rejection.status(), rejection.body_text()),
        };
        let request: Value = match serde_json::from_slice(&bytes) {
            Ok(value) => value,
            Err(e) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    format!("the request body is not valid JSON: {e}"),
                );
            }
        };
        if let Err(message) = self.record(&request) {
            tracing::error!("{message}");
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, message);
        }
        let Some(obj) = request.as_object() else {
            return error_response(
                StatusCode::BAD_REQUEST,
                "the request body must be a JSON object".into(),
            );
        };
        let conversation = match format {
            Provider::OpenaiCompletions => Conversation::of_chat(obj),
            _ => Conversation::of_responses(obj),
        };
        let conversation = match conversation {
            Ok(c) => c,
            Err(message) => return error_response(StatusCode::BAD_REQUEST, message),
        };
        let reply = self.decide(&conversation, format);
        let k = self.answered.fetch_add(1, Ordering::Relaxed) + 1;
        let plan = Plan::new(&conversation, reply, obj, bytes.len(), k);
        let stream = obj.get("stream").and_then(Value::as_bool) == Some(true);
        tracing::debug!(
            format = %format,
            stream,
            calls = plan.calls.len(),
            "mock provider answered"
        );
        match (format, stream) {
            (Provider::OpenaiCompletions, false) => axum::Json(plan.chat_body()).into_response(),
            (Provider::OpenaiCompletions, true) => sse_response(&plan.chat_chunks(), true),
            (_, false) => axum::Json(plan.responses_body()).into_response(),
            (_, true) => sse_response(&plan.responses_events(), false),
        }
    }

    /// The QA play, else the scenario, else the echo.
    fn decide(&self, conversation: &Conversation, format: Provider) -> Reply {
        if let Some(target) = conversation.qa_target() {
            return qa_reply(conversation, &target, format);
        }
        let last_user = conversation.last_user();
        self.options
            .scenario
            .as_ref()
            .and_then(|s| scripted_reply(s, conversation))
            .unwrap_or_else(|| Reply::text(format!("mock: {last_user}")))
    }
}

/// Serves the mock provider on `listener` until `shutdown` is cancelled; requests in
/// flight are finished first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    provider: Arc<MockProvider>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, provider.router())
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

async fn responses(
    State(provider): State<Arc<MockProvider>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    provider.handle(Provider::OpenaiResponses, body)
}

async fn chat_completions(
    State(provider): State<Arc<MockProvider>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    provider.handle(Provider::OpenaiCompletions, body)
}

async fn debug_requests(State(provider): State<Arc<MockProvider>>) -> Response {
    axum::Json(Value::Array(provider.requests())).into_response()
}

async fn healthz() -> Response {
    axum::Json(json!({"ok": true})).into_response()
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        format!(
            "the mock provider has no route {method} {}; it serves POST /v1/responses, POST /v1/chat/completions, GET /debug/requests and GET /healthz",
            uri.path()
        ),
    )
}

fn error_response(status: StatusCode, message: String) -> Response {
    let kind = if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": kind}})),
    )
        .into_response()
}

fn sse_response(events: &[Value], done: bool) -> Response {
    let mut body = String::new();
    for event in events {
        body.push_str("data: ");
        body.push_str(&event.to_string());
        body.push_str("\n\n");
    }
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

// ---------------------------------------------------------------------------------------
// The conversation, read from either format
// ---------------------------------------------------------------------------------------

/// What the mock needs of a request: its turns and the declared tool names.
#[derive(Debug, Default)]
struct Conversation {
    items: Vec<Item>,
    tools: Vec<String>,
}

#[derive(Debug)]
enum Item {
    User(String),
    /// One assistant turn and the calls it made (ids may be empty when the client sent
    /// none).
    Assistant(Vec<CallRef>),
    Output {
        call_id: String,
        /// The tool name the output itself carries (Chat `tool` messages may have one).
        name: Option<String>,
        output: String,
    },
}

#[derive(Debug)]
struct CallRef {
    id: String,
    name: String,
}

impl Conversation {
    /// Responses: `input` is a string (one user message) or a list of items: messages
    /// (`{role, content}`, with or without `type: "message"`), `function_call` and
    /// `function_call_output` items. Consecutive `function_call`s belong to the assistant
    /// turn before them (an assistant message or the first of them); other item types
    /// (reasoning) are skipped.
    fn of_responses(body: &Map<String, Value>) -> Result<Conversation, String> {
        let mut conversation = Conversation {
            items: Vec::new(),
            tools: declared_tools(body),
        };
        let items = match body.get("input") {
            None | Some(Value::Null) => return Ok(conversation),
            Some(Value::String(text)) => {
                conversation.items.push(Item::User(text.clone()));
                return Ok(conversation);
            }
            Some(Value::Array(items)) => items,
            Some(_) => return Err("`input` must be a string or an array of items".into()),
        };
        for item in items.iter().filter_map(Value::as_object) {
            let kind = item.get("type").and_then(Value::as_str);
            match kind {
                Some("function_call") => {
                    let call = CallRef {
                        id: id_field(item, "call_id")
                            .or_else(|| id_field(item, "id"))
                            .unwrap_or_default(),
                        name: str_of(item.get("name")),
                    };
                    match conversation.items.last_mut() {
                        Some(Item::Assistant(calls)) => calls.push(call),
                        _ => conversation.items.push(Item::Assistant(vec![call])),
                    }
                }
                Some("function_call_output") => conversation.items.push(Item::Output {
                    call_id: str_of(item.get("call_id")),
                    name: None,
                    output: item.get("output").map(content_text).unwrap_or_default(),
                }),
                None | Some("message") => match item.get("role").and_then(Value::as_str) {
                    Some("user") => conversation.items.push(Item::User(
                        item.get("content").map(content_text).unwrap_or_default(),
                    )),
                    Some("assistant") => conversation.items.push(Item::Assistant(Vec::new())),
                    _ => {}
                },
                Some(_) => {}
            }
        }
        Ok(conversation)
    }

    /// Chat Completions: `messages` with roles `user`, `assistant` (its `tool_calls`, or
    /// the legacy `function_call`), `tool` (`tool_call_id`, `content`) and the legacy
    /// `function` (`name`, `content`); `system` and `developer` are skipped.
    fn of_chat(body: &Map<String, Value>) -> Result<Conversation, String> {
        let Some(messages) = body.get("messages").and_then(Value::as_array) else {
            return Err("`messages` must be an array of messages".into());
        };
        let mut conversation = Conversation {
            items: Vec::new(),
            tools: declared_tools(body),
        };
        for message in messages.iter().filter_map(Value::as_object) {
            let content = || message.get("content").map(content_text).unwrap_or_default();
            match message.get("role").and_then(Value::as_str) {
                Some("user") => conversation.items.push(Item::User(content())),
                Some("assistant") => {
                    let mut calls: Vec<CallRef> = message
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_object)
                        .map(|call| CallRef {
                            id: id_field(call, "id").unwrap_or_default(),
                            name: str_of(call.get("function").and_then(|f| f.get("name"))),
                        })
                        .collect();
                    if calls.is_empty()
                        && let Some(legacy) =
                            message.get("function_call").and_then(Value::as_object)
                    {
                        calls.push(CallRef {
                            id: String::new(),
                            name: str_of(legacy.get("name")),
                        });
                    }
                    conversation.items.push(Item::Assistant(calls));
                }
                Some("tool") | Some("function") => conversation.items.push(Item::Output {
                    call_id: str_of(message.get("tool_call_id")),
                    name: message
                        .get("name")
                        .and_then(Value::as_str)
                        .map(String::from),
                    output: content(),
                }),
                _ => {}
            }
        }
        Ok(conversation)
    }

    fn declares(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t == name)
    }

    fn last_user(&self) -> &str {
        self.items
            .iter()
            .rev()
            .find_map(|item| match item {
                Item::User(text) => Some(text.as_str()),
                _ => None,
            })
            .unwrap_or_default()
    }

    fn tool_calls_so_far(&self) -> usize {
        self.items
            .iter()
            .map(|item| match item {
                Item::Assistant(calls) => calls.len(),
                _ => 0,
            })
            .sum()
    }

    fn assistant_turns(&self) -> usize {
        self.items
            .iter()
            .filter(|item| matches!(item, Item::Assistant(_)))
            .count()
    }

    /// Every tool output in order, with the name of the tool that produced it: the call
    /// with its `call_id`, else the name the output carries.
    fn outputs(&self) -> Vec<(&str, &str)> {
        let names: HashMap<&str, &str> = self
            .items
            .iter()
            .filter_map(|item| match item {
                Item::Assistant(calls) => Some(calls),
                _ => None,
            })
            .flatten()
            .filter(|c| !c.id.is_empty())
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        self.items
            .iter()
            .filter_map(|item| match item {
                Item::Output {
                    call_id,
                    name,
                    output,
                } => {
                    let tool = names
                        .get(call_id.as_str())
                        .copied()
                        .or(name.as_deref())
                        .unwrap_or_default();
                    Some((tool, output.as_str()))
                }
                _ => None,
            })
            .collect()
    }

    /// The target of the first user message holding the QA prompt with a name.
    fn qa_target(&self) -> Option<String> {
        self.items.iter().find_map(|item| match item {
            Item::User(text) => qa_target_in(text),
            _ => None,
        })
    }
}

fn qa_target_in(text: &str) -> Option<String> {
    text.match_indices(QA_PROMPT).find_map(|(at, _)| {
        let name: String = text[at + QA_PROMPT.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'))
            .collect();
        (!name.is_empty()).then_some(name)
    })
}

/// `tools[].name` (Responses) or `tools[].function.name` (Chat), whichever a tool has, and
/// the legacy Chat `functions[].name`.
fn declared_tools(body: &Map<String, Value>) -> Vec<String> {
    let tools = body.get("tools").and_then(Value::as_array).into_iter();
    let functions = body.get("functions").and_then(Value::as_array).into_iter();
    tools
        .chain(functions)
        .flatten()
        .filter_map(|tool| {
            tool.get("name")
                .or_else(|| tool.get("function").and_then(|f| f.get("name")))
                .and_then(Value::as_str)
                .map(String::from)
        })
        .collect()
}

/// A message content or tool output as text: a string as is, a list of parts as their
/// `text`s joined by newlines, `null` as nothing, anything else as JSON.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part {
                Value::String(text) => Some(text.as_str()),
                _ => part.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

fn str_of(value: Option<&Value>) -> String {
    value
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn id_field(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key)
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(String::from)
}

// ---------------------------------------------------------------------------------------
// Deciding the reply
// ---------------------------------------------------------------------------------------

/// The marker the QA play passes to the target.
pub fn qa_marker(target: &str) -> String {
    format!("qa-marker-{target}")
}

/// The code the QA play sends to `tool_search_code`: search for the target, find it by
/// name, call it with the marker.
pub fn qa_code(target: &str) -> String {
    let name = Value::String(target.to_string()).to_string();
    let marker = Value::String(qa_marker(target)).to_string();
    format!(
        "const hits = await openclaw.tools.search({name}, {{limit: 20}});\n\
         const hit = hits.find((h) => h.name === {name});\n\
         if (!hit) throw new Error(\"qa target not found: \" + {name});\n\
         return await openclaw.tools.call(hit.id, {{marker: {marker}}});"
    )
}

fn qa_reply(conversation: &Conversation, target: &str, format: Provider) -> Reply {
    let marker = qa_marker(target);
    // The target as declared: its own name, or the name the provider format accepts.
    let direct = [
        target.to_string(),
        WireNames::from_names(format, [target])
            .wire_name(target)
            .to_string(),
    ]
    .into_iter()
    .find(|name| conversation.declares(name));

    let outputs = conversation.outputs();
    let is_final = |tool: &str| {
        tool == TOOL_SEARCH_CODE
            || tool == TOOL_CALL
            || tool == target
            || Some(tool) == direct.as_deref()
    };
    if let Some((_, output)) = outputs.iter().rev().find(|(tool, _)| is_final(tool)) {
        let output: String = output.chars().take(QA_OUTPUT_CHARS).collect();
        return Reply::text(format!("QA_DONE {output}"));
    }
    if conversation.declares(TOOL_SEARCH_CODE) {
        return Reply::call(TOOL_SEARCH_CODE, json!({"code": qa_code(target)}));
    }
    if conversation.declares(TOOL_SEARCH) {
        let latest = outputs.iter().rev().find(|(tool, _)| *tool == TOOL_SEARCH);
        return match latest {
            None => Reply::call(TOOL_SEARCH, json!({"queries": [{"query": target}]})),
            Some((_, output)) => match candidate_id(output, target) {
                Some(id) => Reply::call(TOOL_CALL, json!({"id": id, "args": {"marker": marker}})),
                None => Reply::text("QA_FAIL target not found by tool_search"),
            },
        };
    }
    if let Some(direct) = direct {
        return Reply::call(&direct, json!({"marker": marker}));
    }
    Reply::text("QA_FAIL target not reachable")
}

/// The id of the candidate named `target` in a `tool_search` output: a batch result
/// (`{"results": [{"candidates": [...]}]}`), an object with `candidates`, or a plain list.
fn candidate_id(output: &str, target: &str) -> Option<String> {
    let value: Value = serde_json::from_str(output).ok()?;
    let candidates: Vec<&Value> = match &value {
        Value::Array(list) => list.iter().collect(),
        Value::Object(obj) => match (obj.get("results"), obj.get("candidates")) {
            (Some(Value::Array(results)), _) => results
                .iter()
                .filter_map(|r| r.get("candidates").and_then(Value::as_array))
                .flatten()
                .collect(),
            (_, Some(Value::Array(list))) => list.iter().collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let hit = candidates
        .into_iter()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(target))?;
    Some(
        hit.get("id")
            .and_then(Value::as_str)
            .unwrap_or(target)
            .to_string(),
    )
}

/// The scenario step for this request (see the module documentation), replaying which
/// steps the conversation's assistant turns used.
fn scripted_reply(scenario: &Scenario, conversation: &Conversation) -> Option<Reply> {
    let steps = &scenario.steps;
    let mut used = vec![false; steps.len()];
    let next = |used: &[bool], user: &str| {
        steps.iter().enumerate().position(|(i, step)| {
            !used[i] && step.when.as_deref().is_none_or(|when| user.contains(when))
        })
    };
    let mut last_user = "";
    for item in &conversation.items {
        match item {
            Item::User(text) => last_user = text,
            Item::Assistant(_) => {
                if let Some(i) = next(&used, last_user) {
                    used[i] = true;
                }
            }
            Item::Output { .. } => {}
        }
    }
    next(&used, last_user).map(|i| steps[i].reply.clone())
}

// ---------------------------------------------------------------------------------------
// Rendering the reply in either format
// ---------------------------------------------------------------------------------------

/// A reply with its ids and wire arguments fixed, ready to be rendered.
struct Plan {
    model: String,
    /// The request number (`resp_<k>`, `chatcmpl-<k>`).
    k: u64,
    /// The n of `msg_<n>`.
    message_n: usize,
    text: String,
    calls: Vec<PlannedCall>,
    input_tokens: u64,
    created: u64,
}

struct PlannedCall {
    n: usize,
    name: String,
    arguments: String,
}

impl PlannedCall {
    fn call_id(&self) -> String {
        format!("call_{}", self.n)
    }

    fn item_id(&self) -> String {
        format!("fc_{}", self.n)
    }
}

impl Plan {
    fn new(
        conversation: &Conversation,
        reply: Reply,
        request: &Map<String, Value>,
        request_bytes: usize,
        k: u64,
    ) -> Plan {
        let first = conversation.tool_calls_so_far() + 1;
        let calls = reply
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| PlannedCall {
                n: first + i,
                name: call.name,
                arguments: call.arguments.to_string(),
            })
            .collect();
        Plan {
            model: request
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("mock")
                .to_string(),
            k,
            message_n: conversation.assistant_turns() + 1,
            text: reply.text,
            calls,
            input_tokens: (request_bytes / 4) as u64,
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// A message item is sent when there is text, or when there is nothing else.
    fn has_message(&self) -> bool {
        !self.text.is_empty() || self.calls.is_empty()
    }

    fn message_id(&self) -> String {
        format!("msg_{}", self.message_n)
    }

    // --- Responses ---

    fn responses_message(&self, content: Vec<Value>, status: &str) -> Value {
        json!({
            "type": "message",
            "id": self.message_id(),
            "role": "assistant",
            "status": status,
            "content": content,
        })
    }

    fn output_text(text: &str) -> Value {
        json!({"type": "output_text", "text": text, "annotations": []})
    }

    fn responses_call(call: &PlannedCall, arguments: &str, status: &str) -> Value {
        json!({
            "type": "function_call",
            "id": call.item_id(),
            "call_id": call.call_id(),
            "name": call.name,
            "arguments": arguments,
            "status": status,
        })
    }

    fn responses_output(&self) -> Vec<Value> {
        let mut output = Vec::new();
        if self.has_message() {
            output.push(self.responses_message(vec![Plan::output_text(&self.text)], "completed"));
        }
        for call in &self.calls {
            output.push(Plan::responses_call(call, &call.arguments, "completed"));
        }
        output
    }

    fn responses_object(&self, status: &str, output: Vec<Value>) -> Value {
        let mut body = json!({
            "id": format!("resp_{}", self.k),
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output,
        });
        if status == "completed" {
            body["usage"] = json!({
                "input_tokens": self.input_tokens,
                "output_tokens": 1,
                "total_tokens": self.input_tokens + 1,
            });
        }
        body
    }

    fn responses_body(&self) -> Value {
        self.responses_object("completed", self.responses_output())
    }

    fn responses_events(&self) -> Vec<Value> {
        let mut events = Vec::new();
        let mut push = |mut event: Value| {
            event["sequence_number"] = json!(events.len());
            events.push(event);
        };
        push(json!({
            "type": "response.created",
            "response": self.responses_object("in_progress", Vec::new()),
        }));
        let mut output_index = 0usize;
        if self.has_message() {
            let id = self.message_id();
            push(json!({
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": self.responses_message(Vec::new(), "in_progress"),
            }));
            for delta in fragments(&self.text) {
                push(json!({
                    "type": "response.output_text.delta",
                    "item_id": id,
                    "output_index": output_index,
                    "content_index": 0,
                    "delta": delta,
                }));
            }
            push(json!({
                "type": "response.output_item.done",
                "output_index": output_index,
                "item": self.responses_message(vec![Plan::output_text(&self.text)], "completed"),
            }));
            output_index += 1;
        }
        for call in &self.calls {
            push(json!({
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": Plan::responses_call(call, "", "in_progress"),
            }));
            for delta in fragments(&call.arguments) {
                push(json!({
                    "type": "response.function_call_arguments.delta",
                    "item_id": call.item_id(),
                    "output_index": output_index,
                    "delta": delta,
                }));
            }
            push(json!({
                "type": "response.function_call_arguments.done",
                "item_id": call.item_id(),
                "output_index": output_index,
                "arguments": call.arguments,
            }));
            push(json!({
                "type": "response.output_item.done",
                "output_index": output_index,
                "item": Plan::responses_call(call, &call.arguments, "completed"),
            }));
            output_index += 1;
        }
        push(json!({
            "type": "response.completed",
            "response": self.responses_body(),
        }));
        events
    }

    // --- Chat Completions ---

    fn finish_reason(&self) -> &'static str {
        if self.calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    fn chat_id(&self) -> String {
        format!("chatcmpl-{}", self.k)
    }

    fn chat_body(&self) -> Value {
        let mut message = json!({
            "role": "assistant",
            "content": if self.has_message() { json!(self.text) } else { Value::Null },
        });
        if !self.calls.is_empty() {
            message["tool_calls"] = self
                .calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.call_id(),
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    })
                })
                .collect();
        }
        json!({
            "id": self.chat_id(),
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": self.finish_reason(),
            }],
            "usage": {
                "prompt_tokens": self.input_tokens,
                "completion_tokens": 1,
                "total_tokens": self.input_tokens + 1,
            },
        })
    }

    fn chat_chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.chat_id(),
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    }

    fn chat_chunks(&self) -> Vec<Value> {
        let mut chunks = vec![self.chat_chunk(json!({"role": "assistant"}), None)];
        if self.has_message() && !self.text.is_empty() {
            for piece in fragments(&self.text) {
                chunks.push(self.chat_chunk(json!({"content": piece}), None));
            }
        }
        for (index, call) in self.calls.iter().enumerate() {
            chunks.push(self.chat_chunk(
                json!({"tool_calls": [{
                    "index": index,
                    "id": call.call_id(),
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]}),
                None,
            ));
            for piece in fragments(&call.arguments) {
                chunks.push(self.chat_chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
        chunks.push(self.chat_chunk(json!({}), Some(self.finish_reason())));
        chunks
    }
}

/// `text` in three pieces (two when it has two characters, one when fewer), cut at
/// character boundaries, so clients must assemble streamed fragments.
fn fragments(text: &str) -> Vec<&str> {
    let chars = text.chars().count();
    let pieces = chars.clamp(1, 3);
    let mut out = Vec::with_capacity(pieces);
    let mut rest = text;
    for i in 0..pieces {
        let remaining_pieces = pieces - i;
        if remaining_pieces == 1 {
            out.push(rest);
            break;
        }
        let take = rest.chars().count() / remaining_pieces;
        let cut = rest
            .char_indices()
            .nth(take)
            .map_or(rest.len(), |(at, _)| at);
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    out
}

#[cfg(test)]
mod tests;
