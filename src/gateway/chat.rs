//! The OpenAI Chat Completions front: `POST /v1/chat/completions`, streamed or not.
//!
//! Chat is stateless: `messages` is the whole conversation (`system` and `developer`
//! messages are the system prompt; the client's tool calls and their `tool` results are
//! in it). `metadata.session_key` names the session whose dispatcher and log the turn
//! uses; its history is neither read nor written. The request's `tools` are client tools
//! as in the Responses front; the legacy `functions` / `function_call` are read as tools
//! and a tool choice, and answered in the legacy `function_call` shape, which holds one
//! call: so a legacy request asks the model for one call at a time
//! (`parallel_tool_calls: false`, which the agent holds the model to).
//!
//! The answer is one choice: the text, and a tool call per call of a client tool
//! (`finish_reason: "tool_calls"`). Streamed, it is `chat.completion.chunk`s: the role,
//! the text as the provider streams it, the tool calls, the finish reason, then `[DONE]`.

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
use super::responses::{arguments_of, content_text};
use super::server::Gateway;
use super::sse::{self, Encoder, Later, event, made};
use super::store::random_id;
use super::turn::{Prior, Running, TEXT_BUFFER, TurnRequest, settled};
use crate::agent::{Message, Stop, TurnOutcome};
use crate::provider::{Provider, RequestOptions, ToolCall};

/// The fields of a Chat Completions request; as for Responses, every field OpenAI's API
/// takes is forwarded, passed on to an `openai-completions` upstream only, or read and
/// ignored. Anything else is a 400.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    messages: Vec<Value>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    functions: Option<Vec<Value>>,
    #[serde(default)]
    function_call: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop: Option<Value>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    reasoning_effort: Option<String>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    verbosity: Option<String>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    frequency_penalty: Option<f64>,
    #[serde(default)]
    presence_penalty: Option<f64>,
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
    stream_options: Option<Value>,
    // For an openai-completions upstream only.
    #[serde(default)]
    logit_bias: Option<Value>,
    #[serde(default)]
    logprobs: Option<Value>,
    #[serde(default)]
    top_logprobs: Option<Value>,
    #[serde(default)]
    prompt_cache_retention: Option<Value>,
    #[serde(default)]
    web_search_options: Option<Value>,
    /// Choices asked for: one is answered; more is refused (see [`refuse_unanswerable`]).
    #[serde(default)]
    n: Option<Value>,
    /// Output modalities: text is answered; audio is refused.
    #[serde(default)]
    modalities: Option<Value>,
    // Read and ignored (named `_...`: read by serde, by nothing else).
    #[serde(default, rename = "audio")]
    _audio: Option<IgnoredAny>,
    #[serde(default, rename = "prediction")]
    _prediction: Option<IgnoredAny>,
    #[serde(default, rename = "moderation")]
    _moderation: Option<IgnoredAny>,
    #[serde(default, rename = "prompt_cache_options")]
    _prompt_cache_options: Option<IgnoredAny>,
}

/// What every chunk and the completion repeat.
struct Completion {
    id: String,
    created: u64,
    model: String,
    /// The client used the legacy `functions`: answer with `function_call`.
    legacy: bool,
    include_usage: bool,
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

/// `n` above 1 and an audio modality are refused: one text choice is all a turn answers,
/// and a 200 with one text choice to a client that asked for three, or for audio, answered
/// another question (front round 15 F9). `n: 1` and `modalities: ["text"]` pass.
fn refuse_unanswerable(request: &CreateRequest) -> Result<(), ApiError> {
    match &request.n {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => {
            return Err(ApiError::bad_request(format!(
                "n: this gateway answers one choice per request (got {n})"
            ))
            .param("n")
            .code("unsupported_value"));
        }
    }
    let text_only = match &request.modalities {
        None | Some(Value::Null) => true,
        Some(Value::Array(m)) => m.iter().all(|m| m == "text"),
        Some(_) => false,
    };
    if !text_only {
        return Err(ApiError::bad_request(
            "modalities: this gateway answers text only; send [\"text\"] or leave it out",
        )
        .param("modalities")
        .code("unsupported_value"));
    }
    Ok(())
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
    refuse_unanswerable(&request)?;
    let (metadata, session_key) = forward::metadata(request.metadata.clone())?;
    let (input, system) = chat_messages(&request.messages, &mut budget)?;
    let legacy = request.tools.is_none() && request.functions.is_some();
    let mut tools = request.tools.clone().unwrap_or_default();
    tools.extend(
        request
            .functions
            .iter()
            .flatten()
            .map(|f| json!({"type": "function", "function": f})),
    );
    let mut options = options_of(&request, metadata)?;
    if legacy {
        options.parallel_tool_calls = Some(false);
    }
    let completion = Completion {
        id: random_id("chatcmpl-"),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: gw.answering_model(request.model.as_deref()),
        legacy,
        include_usage: request
            .stream_options
            .as_ref()
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true),
    };
    // A Chat answer echoes nothing of its request.
    let held = gw.hold_request(&mut admitted, body_bytes, None)?;
    let turn = TurnRequest {
        session_key,
        system: system.join("\n\n"),
        prior: Prior::Nothing,
        input,
        input_param: "messages",
        client_tools: tools,
        options,
        max_tool_calls: None,
        remember: false,
        budget,
        admitted,
        held,
    };
    let stream = request.stream == Some(true);
    // What the turn and the answer need is taken from it.
    drop(request);
    if !stream {
        let Running { turn, cancel, .. } = gw.start(turn, None).await?;
        let result = settled(turn.await);
        drop(cancel);
        let mut outcome = result?;
        let held = std::mem::take(&mut outcome.held);
        let body = completion.body(&outcome);
        drop(outcome);
        return Ok(sse::json_holding(&body, held));
    }
    let (tx, rx) = mpsc::channel(TEXT_BUFFER);
    let running = gw.start(turn, Some(tx)).await?;
    Ok(sse::respond(
        running,
        rx,
        ChatStream { completion },
        gw.stream_keepalive(),
    )
    .await)
}

fn options_of(
    request: &CreateRequest,
    metadata: Map<String, Value>,
) -> Result<RequestOptions, ApiError> {
    let passthrough = forward::set_fields(&[
        ("logit_bias", &request.logit_bias),
        ("logprobs", &request.logprobs),
        ("top_logprobs", &request.top_logprobs),
        ("prompt_cache_retention", &request.prompt_cache_retention),
        ("web_search_options", &request.web_search_options),
    ]);
    Ok(RequestOptions {
        model: request.model.clone(),
        temperature: request.temperature,
        top_p: request.top_p,
        max_output_tokens: request.max_completion_tokens.or(request.max_tokens),
        stop: forward::stop(request.stop.as_ref())?,
        user: request.user.clone(),
        metadata,
        reasoning: request
            .reasoning_effort
            .clone()
            .map(|effort| crate::provider::Reasoning {
                effort: Some(effort),
                summary: None,
            }),
        format: forward::chat_format(request.response_format.as_ref())?,
        verbosity: request.verbosity.clone(),
        parallel_tool_calls: request.parallel_tool_calls,
        tool_choice: forward::chat_tool_choice(
            request.tool_choice.as_ref(),
            request.function_call.as_ref(),
        )?,
        store: request.store,
        service_tier: request.service_tier.clone(),
        prompt_cache_key: request.prompt_cache_key.clone(),
        safety_identifier: request.safety_identifier.clone(),
        seed: request.seed,
        frequency_penalty: request.frequency_penalty,
        presence_penalty: request.presence_penalty,
        passthrough: (!passthrough.is_empty())
            .then_some((Provider::OpenaiCompletions, passthrough)),
    })
}

/// `messages` as the conversation, and the texts of its `system` and `developer`
/// messages.
fn chat_messages(
    list: &[Value],
    budget: &mut Budget,
) -> Result<(Vec<Message>, Vec<String>), ApiError> {
    let mut messages = Vec::with_capacity(list.len());
    let mut system = Vec::new();
    // Legacy `function` results name their function, not a call: the latest call of that
    // name is theirs.
    let mut legacy_calls = 0usize;
    let mut call_by_name: std::collections::HashMap<String, String> =
        std::collections::HashMap::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let bad = |s: String| ApiError::bad_request(format!("{at}: {s}")).param("messages");
        let Some(m) = m.as_object() else {
            return Err(bad("expected an object".into()));
        };
        let content = || content_text(m.get("content"), &at);
        match m.get("role").and_then(Value::as_str).unwrap_or_default() {
            "system" | "developer" => system.push(content()?),
            "user" => messages.push(Message::User {
                content: content()?,
            }),
            "assistant" => {
                let mut calls = Vec::new();
                for (j, c) in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    let text = |p: &str| c.pointer(p).and_then(Value::as_str);
                    let (Some(id), Some(name)) = (text("/id"), text("/function/name")) else {
                        return Err(bad(format!(
                            "tool_calls[{j}] needs `id` and `function.name`"
                        )));
                    };
                    calls.push(ToolCall {
                        id: id.to_string(),
                        name: name.to_string(),
                        arguments: arguments_of(
                            string_or_none(c.pointer("/function/arguments")).map_err(|e| {
                                bad(format!("tool_calls[{j}].function.arguments: {e}"))
                            })?,
                            budget,
                        )
                        .map_err(|e| bad(format!("tool_calls[{j}].function.arguments: {e}")))?,
                        unreadable: None,
                    });
                }
                if let Some(f) = m.get("function_call").filter(|f| f.is_object()) {
                    legacy_calls += 1;
                    let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
                    calls.push(ToolCall {
                        id: format!("legacy_call_{legacy_calls}"),
                        name: name.to_string(),
                        arguments: arguments_of(
                            string_or_none(f.get("arguments"))
                                .map_err(|e| bad(format!("function_call.arguments: {e}")))?,
                            budget,
                        )
                        .map_err(|e| bad(format!("function_call.arguments: {e}")))?,
                        unreadable: None,
                    });
                }
                for c in &calls {
                    call_by_name.insert(c.name.clone(), c.id.clone());
                }
                // The model's refusal is its words: kept for the next round as the
                // gateway keeps its own answers' (front round 15 F7: an answer sent back
                // with `content: null, refusal` lost the refusal).
                let mut said = content()?;
                match m.get("refusal") {
                    None | Some(Value::Null) => {}
                    Some(Value::String(refusal)) => {
                        if !said.is_empty() && !refusal.is_empty() {
                            said.push_str("\n\n");
                        }
                        said.push_str(refusal);
                    }
                    Some(_) => return Err(bad("`refusal` must be a string".into())),
                }
                messages.push(Message::Assistant {
                    content: said,
                    tool_calls: calls,
                });
            }
            "tool" => {
                let Some(call_id) = m.get("tool_call_id").and_then(Value::as_str) else {
                    return Err(bad("a tool message needs `tool_call_id`".into()));
                };
                messages.push(Message::Tool {
                    call_id: call_id.to_string(),
                    name: String::new(),
                    content: content()?,
                    is_error: false,
                });
            }
            "function" => {
                let name = m.get("name").and_then(Value::as_str).unwrap_or_default();
                let call_id = call_by_name.get(name).cloned();
                messages.push(Message::Tool {
                    call_id: call_id.unwrap_or_default(),
                    name: name.to_string(),
                    content: content()?,
                    is_error: false,
                });
            }
            other => {
                return Err(bad(format!(
                    "`{other}` is not a role; expected system, developer, user, assistant or tool"
                )));
            }
        }
    }
    Ok((messages, system))
}

impl Completion {
    fn finish_reason(&self, outcome: &TurnOutcome) -> &'static str {
        match (outcome.stop, self.legacy) {
            (Stop::ClientTools, true) => "function_call",
            (Stop::ClientTools, false) => "tool_calls",
            // The provider's cut, not "stop": a client that checks for "length" before it
            // trusts the answer must see it (front round 13 F2).
            _ => outcome.ending.cut.map_or("stop", |c| c.finish_reason()),
        }
    }

    fn message(&self, outcome: &TurnOutcome) -> Value {
        let mut message = crate::provider::payload::chat_assistant_message(&outcome.text, &[]);
        message["refusal"] = match outcome.ending.refusal.as_str() {
            "" => Value::Null,
            refusal => json!(refusal),
        };
        let annotations = outcome.ending.notes.chat_annotations();
        if !annotations.is_empty() {
            message["annotations"] = json!(annotations);
        }
        match (self.legacy, outcome.pending.first()) {
            (true, Some(call)) => {
                message["function_call"] =
                    json!({"name": call.name, "arguments": call.arguments.to_string()});
            }
            (false, Some(_)) => {
                message["tool_calls"] = crate::provider::payload::chat_assistant_message(
                    "",
                    &outcome.pending,
                )["tool_calls"]
                    .clone();
            }
            _ => {}
        }
        message
    }

    fn body(&self, outcome: &TurnOutcome) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": self.message(outcome),
                "finish_reason": self.finish_reason(outcome),
                "logprobs": logprobs(outcome),
            }],
            "usage": usage(outcome),
        })
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Bytes {
        event(None, &self.chunk_value(delta, finish_reason))
    }

    fn chunk_value(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null}],
        })
    }
}

/// The answer's token log probabilities in Chat's shape, `null` when the provider gave none.
fn logprobs(outcome: &TurnOutcome) -> Value {
    match outcome.ending.notes.logprobs.as_slice() {
        [] => Value::Null,
        tokens => json!({"content": tokens, "refusal": null}),
    }
}

/// The turn's tokens in Chat's shape, `null` when the provider counted none.
fn usage(outcome: &TurnOutcome) -> Value {
    outcome.usage.map_or(Value::Null, |u| {
        json!({
            "prompt_tokens": u.input_tokens,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.total(),
            "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        })
    })
}

struct ChatStream {
    completion: Completion,
}

impl Encoder for ChatStream {
    fn start(&mut self) -> Vec<Bytes> {
        vec![
            self.completion
                .chunk(json!({"role": "assistant", "content": ""}), None),
        ]
    }

    fn text(&mut self, delta: &str) -> Vec<Bytes> {
        vec![self.completion.chunk(json!({"content": delta}), None)]
    }

    fn finish(&mut self, result: Result<TurnOutcome, ApiError>) -> Vec<Later<Self>> {
        // Made at once: a chunk here never repeats the text, and a call's arguments are
        // sent once.
        self.end(result).into_iter().map(made).collect()
    }
}

impl ChatStream {
    fn end(&self, result: Result<TurnOutcome, ApiError>) -> Vec<Bytes> {
        let c = &self.completion;
        let outcome = match result {
            Ok(o) => o,
            // OpenAI's streams end this way: the error as an event, no `[DONE]`.
            Err(e) => return vec![event(None, &e.body())],
        };
        let mut frames = Vec::new();
        if !outcome.ending.refusal.is_empty() {
            frames.push(c.chunk(json!({"refusal": outcome.ending.refusal}), None));
        }
        for (index, call) in outcome.pending.iter().enumerate() {
            let arguments = call.arguments.to_string();
            if c.legacy {
                if index == 0 {
                    frames.push(c.chunk(
                        json!({"function_call": {"name": call.name, "arguments": arguments}}),
                        None,
                    ));
                }
                continue;
            }
            frames.push(c.chunk(
                json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                        "function": {"name": call.name, "arguments": ""}}]}),
                None,
            ));
            frames.push(c.chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}),
                None,
            ));
        }
        // What the provider said of the text comes with the last chunk: the SDKs join
        // the chunks' `logprobs.content` and `annotations` lists.
        let mut last = c.chunk_value(json!({}), Some(c.finish_reason(&outcome)));
        let annotations = outcome.ending.notes.chat_annotations();
        if !annotations.is_empty() {
            last["choices"][0]["delta"]["annotations"] = json!(annotations);
        }
        last["choices"][0]["logprobs"] = logprobs(&outcome);
        frames.push(event(None, &last));
        if c.include_usage {
            frames.push(event(
                None,
                &json!({"id": c.id, "object": "chat.completion.chunk", "created": c.created,
                        "model": c.model, "choices": [], "usage": usage(&outcome)}),
            ));
        }
        frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
        frames
    }
}

/// A call's argument text: a string, or nothing (`""`); anything else is refused, not read
/// as `{}` (front round 16 F8).
fn string_or_none(value: Option<&Value>) -> Result<&str, String> {
    match value {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err("must be a string (the call's arguments as JSON text)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_messages_become_the_conversation() {
        let (messages, system) = chat_messages(&[
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": [{"type": "text", "text": "pick"}]}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "pick", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "a.txt"}),
        ], &mut Budget::default())
        .unwrap();
        assert_eq!(system, ["be brief"]);
        assert_eq!(messages.len(), 3);
        assert!(matches!(&messages[2], Message::Tool { call_id, .. } if call_id == "c1"));
    }

    #[test]
    fn legacy_function_results_find_their_call() {
        let (messages, _) = chat_messages(&[
            json!({"role": "user", "content": "pick"}),
            json!({"role": "assistant", "content": null, "function_call": {"name": "pick", "arguments": "{}"}}),
            json!({"role": "function", "name": "pick", "content": "a.txt"}),
        ], &mut Budget::default())
        .unwrap();
        assert!(
            matches!(&messages[2], Message::Tool { call_id, .. } if call_id == "legacy_call_1")
        );
        let e = chat_messages(
            &[json!({"role": "robot", "content": "x"})],
            &mut Budget::default(),
        )
        .unwrap_err();
        assert!(e.message.contains("robot"), "{}", e.message);
    }
}
