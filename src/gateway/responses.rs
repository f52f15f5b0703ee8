//! The OpenAI Responses front: `POST /v1/responses`, streamed or not; `GET
//! /v1/responses/{id}` (with `stream=true`, the stored response replayed as its event
//! stream); `DELETE /v1/responses/{id}`.
//!
//! The conversation is the stored one of `previous_response_id` (404 when unknown or
//! expired), else the session's (`metadata.session_key`), else nothing; then `input`: a
//! string, or items — messages (`system` and `developer` ones are kept in the
//! conversation, and reach the provider after the instructions),
//! the client's `function_call` items and their `function_call_output`s. Text parts only:
//! an image or a file is refused, not dropped.
//!
//! The answer is a `message` item with the text, then a `function_call` item per call of a
//! client tool. It is stored unless `store: false`. Streamed, it is the Responses event
//! stream: `response.created`, `response.in_progress`, the message's item, part and
//! `response.output_text.delta` events as the provider streams, the function-call items
//! with their argument events, and `response.completed` (or `response.failed`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::errors::ApiError;
use super::forward;
use super::json::Budget;
use super::server::{Admitted, Gateway};
use super::sse;
use super::store::{Found, Ran, StoredResponse, random_id};
use super::turn::{Prior, Running, TEXT_BUFFER, TurnRequest, settled};
use crate::agent::{Message, TurnOutcome};
use crate::provider::normalize::Ending;
use crate::provider::{Provider, RequestOptions, ToolCall};
use crate::surface::Summary;

mod events;

/// The fields of a Responses request. Every field OpenAI's API takes is here: forwarded,
/// the gateway's own, passed on to an `openai-responses` upstream only, or read and
/// ignored (the README lists which is which). Anything else is a 400.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    text: Option<Value>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    service_tier: Option<String>,
    #[serde(default)]
    prompt_cache_key: Option<String>,
    #[serde(default)]
    safety_identifier: Option<String>,
    // The gateway's own.
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    previous_response_id: Option<String>,
    // For an openai-responses upstream only.
    #[serde(default)]
    include: Option<Value>,
    #[serde(default)]
    prompt: Option<Value>,
    #[serde(default)]
    prompt_cache_retention: Option<Value>,
    #[serde(default)]
    top_logprobs: Option<Value>,
    #[serde(default)]
    truncation: Option<Value>,
    /// Bounds the gateway's own tool loop ([`crate::agent::TurnOptions::max_tool_calls`]);
    /// not forwarded: each round is a request of its own upstream, where it bounds nothing.
    #[serde(default)]
    max_tool_calls: Option<u64>,
    // Read and ignored (named `_...`: read by serde, by nothing else).
    #[serde(default, rename = "background")]
    _background: Option<IgnoredAny>,
    #[serde(default, rename = "background_options")]
    _background_options: Option<IgnoredAny>,
    #[serde(default, rename = "access_programs")]
    _access_programs: Option<IgnoredAny>,
    #[serde(default, rename = "context_management")]
    _context_management: Option<IgnoredAny>,
    #[serde(default)]
    conversation: Option<Value>,
    #[serde(default, rename = "image")]
    _image: Option<IgnoredAny>,
    #[serde(default, rename = "moderation")]
    _moderation: Option<IgnoredAny>,
    #[serde(default, rename = "prompt_cache_options")]
    _prompt_cache_options: Option<IgnoredAny>,
    #[serde(default, rename = "stream_options")]
    _stream_options: Option<IgnoredAny>,
}

/// What the response object repeats of the request, fixed before the turn so a stream's
/// every event carries the same.
struct Answer {
    id: String,
    message_id: String,
    created_at: u64,
    model: String,
    request: Value,
    metadata: Map<String, Value>,
    store: bool,
    /// The response's registration among those running, when it is to be stored.
    ran: Option<Ran>,
    /// Filled in once the turn ran.
    key: String,
    summary: Option<Summary>,
    input_messages: usize,
}

pub(super) async fn create(
    State(gw): State<Arc<Gateway>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match create_inner(&gw, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn create_inner(
    gw: &Arc<Gateway>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|r| ApiError::rejected(r.status(), r.body_text()))?;
    let mut admitted = gw.admit()?;
    let body_bytes = body.len();
    let mut budget = gw.budget();
    let request: CreateRequest = budget.body(&body)?;
    // Parsed: the text is not kept for the turn (two copies lived as long as it did).
    drop(body);
    if request.conversation.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(ApiError::bad_request(
            "conversation: this gateway keeps no server-side conversations; continue one with previous_response_id or metadata.session_key",
        )
        .param("conversation"));
    }
    let (metadata, session_key) = forward::metadata(request.metadata.clone())?;
    let prior = match &request.previous_response_id {
        Some(id) => match gw.in_flight.find(gw.store.as_ref(), id) {
            // Read once the request has its session's turn: waiting, it holds no memory.
            Found::Stored(stored) => Prior::Stored(stored),
            Found::Running(_) => {
                return Err(ApiError::bad_request(format!(
                    "Previous response with id '{id}' is still in progress; continue it once it has finished."
                ))
                .param("previous_response_id"));
            }
            Found::Unknown => {
                return Err(ApiError::not_found(format!(
                    "Previous response with id '{id}' not found (never stored, or expired)."
                ))
                .param("previous_response_id")
                .code("previous_response_not_found"));
            }
        },
        None if session_key.is_some() => Prior::Session,
        None => Prior::Nothing,
    };
    let Some(input) = request.input.as_ref().filter(|i| !i.is_null()) else {
        return Err(ApiError::bad_request("input: required").param("input"));
    };
    let input = input_messages(input, &mut budget)?;
    // The instructions hold for this request only, as OpenAI's do; system and developer
    // messages are part of the conversation, and continue with it.
    let system = request.instructions.clone().unwrap_or_default();
    let options = options_of(&request, metadata.clone())?;
    let stream = request.stream == Some(true);
    let mut answer = Answer {
        id: random_id("resp_"),
        message_id: random_id("msg_"),
        created_at: now(),
        model: gw.answering_model(request.model.as_deref()),
        request: echo(&request),
        metadata,
        store: request.store != Some(false),
        key: String::new(),
        summary: None,
        input_messages: 0,
        ran: None,
    };
    if answer.store {
        answer.ran = Some(gw.in_flight.start(&answer.id, &answer.in_progress()));
    }
    let client_tools = request.tools.clone().unwrap_or_default();
    // A streamed answer keeps the echo twice to its end: in its encoder and in the
    // completed response waiting to be sent.
    let held = gw.hold_request(
        &mut admitted,
        body_bytes,
        Some((&answer.request, if stream { 2 } else { 1 })),
    )?;
    let turn = TurnRequest {
        session_key,
        system,
        prior,
        input,
        input_param: "input",
        client_tools,
        options,
        max_tool_calls: request
            .max_tool_calls
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        // The session's history is the session's line of turns: a turn that continues a
        // stored response is that response's line (written, it replaced the session's
        // own; front round 17 F3). `store: false` is about stored responses: a client
        // that names a session asks for its history to be kept.
        remember: request.previous_response_id.is_none(),
        budget,
        admitted,
        held,
    };
    // What the turn and the answer need is taken from it.
    drop(request);
    if !stream {
        let running = gw.start(turn, None).await?;
        answer.started(&running);
        let Running { turn, cancel, .. } = running;
        let result = settled(turn.await);
        drop(cancel);
        let mut outcome = result?;
        let held = std::mem::take(&mut outcome.held);
        let body = answer.complete(gw, &outcome);
        drop(outcome);
        return Ok(sse::json_holding(&body, held));
    }
    let (tx, rx) = mpsc::channel(TEXT_BUFFER);
    let running = gw.start(turn, Some(tx)).await?;
    answer.started(&running);
    let encoder = events::ResponsesStream::new(Arc::clone(gw), answer);
    Ok(sse::respond(running, rx, encoder, gw.stream_keepalive()).await)
}

/// `GET /v1/responses/{id}`: a stored response as its client got it; with `stream=true`,
/// as the event stream that built it (from `starting_after` on).
pub(super) async fn retrieve(
    State(gw): State<Arc<Gateway>>,
    super::extract::Id(id): super::extract::Id,
    query: super::extract::Params,
) -> Response {
    let (stream, starting_after) = match (query.one("stream"), query.one("starting_after")) {
        (Ok(stream), Ok(after)) => (stream, after),
        (Err(e), _) | (_, Err(e)) => return e.into_response(),
    };
    let stored = match gw.in_flight.find(gw.store.as_ref(), &id) {
        Found::Stored(stored) => stored,
        Found::Unknown => return unknown_response(&id).into_response(),
        Found::Running(in_progress) => {
            if stream.is_some_and(|s| s != "false") {
                return ApiError::bad_request(format!(
                    "Response with id '{id}' is still in progress: its events go to the request that made it; GET it with stream=true once it has finished"
                ))
                .param("stream")
                .into_response();
            }
            return (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                in_progress,
            )
                .into_response();
        }
    };
    let stream = match stream {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return ApiError::bad_request(format!("stream: `{other}` is not true or false"))
                .param("stream")
                .into_response();
        }
    };
    let after = match starting_after.map(str::parse::<u64>) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return ApiError::bad_request("starting_after: expected a sequence number")
                .param("starting_after")
                .into_response();
        }
    };
    let admitted = match gw.admit_retrieval() {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    if !stream {
        // The stored text itself, shared, not a copy per reader.
        let body = axum::body::Body::from(Bytes::from_owner(StoredText {
            stored,
            _held: admitted,
        }));
        return (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
    }
    match events::replay(stored, after) {
        Ok(frames) => sse::replay(frames, admitted),
        Err(e) => ApiError::bad_request(format!(
            "this response is too intricate to replay as a stream ({e}); GET it without stream=true"
        ))
        .param("stream")
        .into_response(),
    }
}

/// A stored response's text as a body, holding its request's places until it is sent.
struct StoredText {
    stored: Arc<StoredResponse>,
    _held: Admitted,
}

impl AsRef<[u8]> for StoredText {
    fn as_ref(&self) -> &[u8] {
        self.stored.body().as_bytes()
    }
}

/// `DELETE /v1/responses/{id}`: the stored response forgotten.
pub(super) async fn delete(
    State(gw): State<Arc<Gateway>>,
    super::extract::Id(id): super::extract::Id,
) -> Response {
    if gw.in_flight.remove(gw.store.as_ref(), &id) {
        axum::Json(json!({"id": id, "object": "response", "deleted": true})).into_response()
    } else {
        unknown_response(&id).into_response()
    }
}

fn unknown_response(id: &str) -> ApiError {
    ApiError::not_found(format!("Response with id '{id}' not found.")).param("response_id")
}

fn options_of(
    request: &CreateRequest,
    metadata: Map<String, Value>,
) -> Result<RequestOptions, ApiError> {
    let (format, verbosity) = forward::responses_text(request.text.as_ref())?;
    let passthrough = forward::set_fields(&[
        ("include", &request.include),
        ("prompt", &request.prompt),
        ("prompt_cache_retention", &request.prompt_cache_retention),
        ("top_logprobs", &request.top_logprobs),
        ("truncation", &request.truncation),
    ]);
    Ok(RequestOptions {
        model: request.model.clone(),
        temperature: request.temperature,
        top_p: request.top_p,
        max_output_tokens: request.max_output_tokens,
        stop: Vec::new(),
        user: request.user.clone(),
        metadata,
        reasoning: forward::responses_reasoning(request.reasoning.as_ref())?,
        format,
        verbosity,
        parallel_tool_calls: request.parallel_tool_calls,
        tool_choice: forward::responses_tool_choice(request.tool_choice.as_ref())?,
        store: request.store,
        service_tier: request.service_tier.clone(),
        prompt_cache_key: request.prompt_cache_key.clone(),
        safety_identifier: request.safety_identifier.clone(),
        seed: None,
        frequency_penalty: None,
        presence_penalty: None,
        passthrough: (!passthrough.is_empty()).then_some((Provider::OpenaiResponses, passthrough)),
    })
}

/// What the response object repeats of the request as the client wrote it.
fn echo(r: &CreateRequest) -> Value {
    json!({
        "instructions": r.instructions,
        "previous_response_id": r.previous_response_id,
        "tools": r.tools.clone().unwrap_or_default(),
        "tool_choice": r.tool_choice.clone().unwrap_or(json!("auto")),
        "parallel_tool_calls": r.parallel_tool_calls.unwrap_or(true),
        "temperature": r.temperature,
        "top_p": r.top_p,
        "max_output_tokens": r.max_output_tokens,
        "user": r.user,
        "reasoning": r.reasoning.clone().unwrap_or(json!({"effort": null, "summary": null})),
        "text": r.text.clone().unwrap_or(json!({"format": {"type": "text"}})),
        "truncation": r.truncation.clone().unwrap_or(json!("disabled")),
        "max_tool_calls": r.max_tool_calls,
    })
}

/// `input` as messages (`system` and `developer` ones as [`Message::System`]).
fn input_messages(input: &Value, budget: &mut Budget) -> Result<Vec<Message>, ApiError> {
    let items = match input {
        Value::String(text) => {
            return Ok(vec![Message::User {
                content: text.clone(),
            }]);
        }
        Value::Array(items) => items,
        _ => {
            return Err(
                ApiError::bad_request("input: expected a string or a list of items").param("input"),
            );
        }
    };
    let mut messages: Vec<Message> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let bad = |m: String| ApiError::bad_request(format!("{at}: {m}")).param("input");
        let Some(item) = item.as_object() else {
            return Err(bad("expected an object".into()));
        };
        match item.get("type").and_then(Value::as_str) {
            None | Some("message") => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or_default();
                let text = content_text(item.get("content"), &at)?;
                match role {
                    "user" => messages.push(Message::User { content: text }),
                    "assistant" => messages.push(Message::Assistant {
                        content: text,
                        tool_calls: Vec::new(),
                    }),
                    "system" | "developer" => messages.push(Message::System { content: text }),
                    other => {
                        return Err(bad(format!(
                            "`{other}` is not a role; expected user, assistant, system or developer"
                        )));
                    }
                }
            }
            Some("function_call") => {
                let text = |key: &str| item.get(key).and_then(Value::as_str);
                let (Some(call_id), Some(name)) = (text("call_id"), text("name")) else {
                    return Err(bad("a function_call needs `call_id` and `name`".into()));
                };
                let arguments = match item.get("arguments") {
                    None | Some(Value::Null) => "",
                    Some(Value::String(s)) => s.as_str(),
                    Some(_) => {
                        return Err(bad(
                            "arguments: must be a string (the call's arguments as JSON text)"
                                .into(),
                        ));
                    }
                };
                let arguments =
                    arguments_of(arguments, budget).map_err(|e| bad(format!("arguments: {e}")))?;
                let call = ToolCall {
                    id: call_id.to_string(),
                    name: name.to_string(),
                    arguments,
                    unreadable: None,
                };
                // Calls that follow the model's message (or each other) are its calls.
                match messages.last_mut() {
                    Some(Message::Assistant { tool_calls, .. }) => tool_calls.push(call),
                    _ => messages.push(Message::Assistant {
                        content: String::new(),
                        tool_calls: vec![call],
                    }),
                }
            }
            Some("function_call_output") => {
                let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                    return Err(bad("a function_call_output needs `call_id`".into()));
                };
                messages.push(Message::Tool {
                    call_id: call_id.to_string(),
                    name: String::new(),
                    content: content_text(item.get("output"), &at)?,
                    is_error: false,
                });
            }
            Some("item_reference") => {
                return Err(bad(
                    "item references name items stored by OpenAI; send the items themselves".into(),
                ));
            }
            // Reasoning, and the calls of hosted tools this gateway never declares (their
            // findings are in the message that follows them), carry nothing its providers
            // read back.
            Some(kind) if IGNORED_ITEMS.contains(&kind) => {}
            // Anything else would be dropped unread, a typo as much as a kind of item whose
            // content matters (front round 16 F4: `custom_tool_call_output`, `"mesage"`).
            Some(other) => {
                return Err(bad(format!(
                    "`{other}` items are not supported; this gateway reads message, function_call and function_call_output items (and skips {})",
                    IGNORED_ITEMS.join(", ")
                )));
            }
        }
    }
    Ok(messages)
}

/// Input items read and skipped: reasoning, and hosted tools' calls.
const IGNORED_ITEMS: &[&str] = &[
    "reasoning",
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "mcp_list_tools",
];

/// `{"a": 1}` from a call's argument text, within the request's `budget`; the empty text
/// is `{}`.
pub(super) fn arguments_of(text: &str, budget: &mut Budget) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    match budget.parse::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("must be a JSON object".into()),
        Err(e) => Err(format!("not read: {e}")),
    }
}

/// A message's content, or a tool's output, as text: a string, or its text parts joined.
/// A part that is not text (an image, a file, audio) is refused: dropping it would answer
/// a question the client did not ask.
///
/// Parts are joined by a blank line: they are separate pieces of text to the model, and
/// joined end to end two sentences ran together (front round 16 F8). A part's text must be
/// a string. `at` is the item's path (`input[2]`, `messages[0]`), whose list is the error's
/// `param`.
pub(super) fn content_text(content: Option<&Value>, at: &str) -> Result<String, ApiError> {
    let param = at.split('[').next().unwrap_or(at);
    let bad = |m: String| ApiError::bad_request(m).param(param);
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("text");
                let key = match kind {
                    "input_text" | "output_text" | "text" => "text",
                    "refusal" => "refusal",
                    other => {
                        return Err(bad(format!(
                            "{at}.content[{j}]: `{other}` parts are not supported; this gateway passes text only"
                        )));
                    }
                };
                let piece = match part.get(key) {
                    None | Some(Value::Null) => "",
                    Some(Value::String(s)) => s.as_str(),
                    Some(_) => {
                        return Err(bad(format!("{at}.content[{j}].{key}: must be a string")));
                    }
                };
                if !text.is_empty() && !piece.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(piece);
            }
            Ok(text)
        }
        Some(_) => Err(bad(format!(
            "{at}: content must be a string or a list of parts"
        ))),
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Answer {
    fn started(&mut self, running: &Running) {
        self.key = running.key.clone();
        self.summary = Some(running.summary.clone());
        self.input_messages = running.input_messages;
        if running.keyed {
            self.metadata
                .insert(forward::SESSION_KEY.into(), json!(running.key));
        }
    }

    fn message(&self, text: &str, status: &str) -> Value {
        json!({
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
        })
    }

    /// The finished message: `incomplete` when the provider cut the answer, and the
    /// model's refusal as a `refusal` part after its text (front round 13 F2, F3).
    fn finished_message(&self, text: &str, ending: &Ending) -> Value {
        let status = if ending.cut.is_some() {
            "incomplete"
        } else {
            "completed"
        };
        // `logprobs` always present, as the live `content_part.done` sends it (front round 24).
        let mut message = self.message(text, status);
        message["content"][0]["annotations"] = json!(ending.notes.annotations);
        message["content"][0]["logprobs"] = json!(ending.notes.logprobs);
        if !ending.refusal.is_empty()
            && let Some(content) = message["content"].as_array_mut()
        {
            content.push(json!({"type": "refusal", "refusal": ending.refusal}));
        }
        message
    }

    /// The output items of a finished turn: the message (when it has text, or nothing
    /// else comes), then a function call per client tool call.
    fn output(&self, outcome: &TurnOutcome) -> Vec<Value> {
        let mut output = Vec::new();
        if has_message(outcome) {
            output.push(self.finished_message(&outcome.text, &outcome.ending));
        }
        output.extend(
            outcome
                .pending
                .iter()
                .map(|c| function_call(c, "completed")),
        );
        output
    }

    fn object(&self, status: &str, output: Vec<Value>, extra: Option<&TurnOutcome>) -> Value {
        let mut body = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": null,
            "incomplete_details": null,
            "model": self.model,
            "output": output,
            "store": self.store,
            "metadata": self.metadata,
            "usage": null,
        });
        if let (Some(obj), Some(echo)) = (body.as_object_mut(), self.request.as_object()) {
            for (k, v) in echo {
                obj.insert(k.clone(), v.clone());
            }
        }
        if let Some(outcome) = extra {
            if let Some(u) = outcome.usage {
                body["usage"] = json!({
                    "input_tokens": u.input_tokens,
                    "input_tokens_details": {"cached_tokens": u.cached_tokens},
                    "output_tokens": u.output_tokens,
                    "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
                    "total_tokens": u.total(),
                });
            }
            body["toolsearch"] = json!({
                "mode": self.summary.as_ref().map(|s| s.mode),
                "stop": outcome.stop,
                "rounds": outcome.rounds,
                "calls": outcome.calls,
                "summary": self.summary,
            });
        }
        body
    }

    /// The response while its turn runs, as `GET` gives it: what the request said, not yet
    /// what it echoes (that can be megabytes, and is stored with the answer).
    fn in_progress(&self) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": "in_progress",
            "error": null,
            "incomplete_details": null,
            "model": self.model,
            "output": [],
            "store": self.store,
            "metadata": self.metadata,
            "usage": null,
        })
    }

    /// The completed response: built, stored (unless `store: false`, or deleted while the
    /// turn ran), returned.
    fn complete(&mut self, gw: &Gateway, outcome: &TurnOutcome) -> Value {
        self.complete_streamed(gw, outcome, None)
    }

    /// The same for a streamed answer, whose text went out in deltas of `pieces` bytes.
    fn complete_streamed(
        &mut self,
        gw: &Gateway,
        outcome: &TurnOutcome,
        pieces: Option<Vec<u32>>,
    ) -> Value {
        let mut body = self.object(
            finished_status(outcome),
            self.output(outcome),
            Some(outcome),
        );
        if let Some(cut) = outcome.ending.cut {
            body["incomplete_details"] = json!({"reason": cut.incomplete_reason()});
        }
        if let Some(ran) = self.ran.take() {
            let mut stored = StoredResponse::new(
                &outcome.messages,
                self.input_messages,
                &body,
                Some(self.key.clone()),
            );
            if let Some(pieces) = pieces {
                stored = stored.streamed_in(pieces);
            }
            ran.store(gw.store.as_ref(), stored);
        }
        body
    }
}

fn has_message(outcome: &TurnOutcome) -> bool {
    !outcome.text.is_empty() || !outcome.ending.refusal.is_empty() || outcome.pending.is_empty()
}

/// A finished turn's status: `incomplete` when the provider cut its answer short.
fn finished_status(outcome: &TurnOutcome) -> &'static str {
    if outcome.ending.cut.is_some() {
        "incomplete"
    } else {
        "completed"
    }
}

fn function_call(call: &ToolCall, status: &str) -> Value {
    let mut item = crate::provider::payload::responses_function_call(call);
    item["id"] = json!(format!("fc_{}", call.id));
    item["status"] = json!(status);
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_items_become_messages() {
        let messages = input_messages(&json!([
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "input_text", "text": "pick a file"}]},
            {"type": "function_call", "call_id": "c1", "name": "pick", "arguments": "{\"n\": 1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {"type": "reasoning", "summary": []},
        ]), &mut Budget::default())
        .unwrap();
        assert_eq!(
            messages[0],
            Message::System {
                content: "be brief".into()
            }
        );
        assert_eq!(messages.len(), 4);
        assert!(
            matches!(&messages[2], Message::Assistant { tool_calls, .. } if tool_calls[0].arguments == json!({"n": 1}))
        );
        assert!(matches!(&messages[3], Message::Tool { content, .. } if content == "a.txt"));
    }

    #[test]
    fn images_and_bad_arguments_are_refused_by_name() {
        let e = input_messages(
            &json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
            &mut Budget::default(),
        )
        .unwrap_err();
        assert!(e.message.contains("input_image"), "{}", e.message);
        let e = input_messages(
            &json!([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]),
            &mut Budget::default(),
        )
        .unwrap_err();
        assert!(e.message.contains("input[0]"), "{}", e.message);
        assert!(input_messages(&json!(42), &mut Budget::default()).is_err());
        // Argument texts count against the request's one budget.
        let many = format!("{{\"a\": [{}]}}", vec!["[]"; 50].join(","));
        let e = input_messages(
            &json!([{"type": "function_call", "call_id": "c", "name": "f", "arguments": many}]),
            &mut Budget::new(20),
        )
        .unwrap_err();
        assert!(e.message.contains("JSON values"), "{}", e.message);
    }
}
