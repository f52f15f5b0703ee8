//! The reply as a provider would send it: a Responses, Chat Completions or Anthropic
//! Messages body, or its stream of events, as an HTTP response. It never decides what to say ([`super::play`]).
//!
//! The parts a request also carries are built by [`crate::provider::payload`], the encoder
//! the gateway sends with: the Chat assistant `message` and the core of a Responses
//! `function_call` item. So what the mock answers and what the gateway then sends back in
//! the conversation are one shape.
//!
//! **Ids.** Tool call ids are `call_<n>`, n = 1 + the tool calls already in the
//! conversation (so they never repeat within one); Responses items are `fc_<n>` for a
//! call and `msg_<m>`, m = 1 + the assistant turns already in the conversation, for text;
//! responses are `resp_<k>` / `chatcmpl-<k>`, k counting the requests this server has
//! answered. Arguments are always sent as a JSON string; a stream sends every text and
//! argument string in [`fragments`], so clients must assemble them.

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use sse_stream::Sse;

use super::conversation::Conversation;
use super::play::Reply;
use crate::provider::{Provider, ToolCall, payload};

/// A reply with its ids and wire arguments fixed, ready to be rendered.
pub(super) struct Plan {
    model: String,
    /// The request number (`resp_<k>`, `chatcmpl-<k>`).
    k: u64,
    /// The n of `msg_<n>`.
    message_n: usize,
    text: String,
    calls: Vec<PlannedCall>,
    input_tokens: u64,
    created: u64,
    /// Chat: `stream_options.include_usage` asked for a usage chunk.
    include_usage: bool,
}

struct PlannedCall {
    /// The n of `call_<n>` (its id) and `fc_<n>`.
    n: usize,
    call: ToolCall,
    /// `call.arguments` as the JSON text every event carries.
    arguments: String,
}

impl PlannedCall {
    fn item_id(&self) -> String {
        format!("fc_{}", self.n)
    }
}

impl Plan {
    pub(super) fn new(
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
            .map(|(i, scripted)| PlannedCall {
                n: first + i,
                arguments: scripted.arguments.to_string(),
                call: ToolCall {
                    id: format!("call_{}", first + i),
                    name: scripted.name,
                    arguments: scripted.arguments,
                    unreadable: None,
                },
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
            include_usage: request
                .get("stream_options")
                .and_then(|o| o.get("include_usage"))
                .and_then(Value::as_bool)
                == Some(true),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    pub(super) fn call_count(&self) -> usize {
        self.calls.len()
    }

    /// The HTTP answer in `format`, streamed or not.
    pub(super) fn response(&self, format: Provider, stream: bool) -> Response {
        match (format, stream) {
            (Provider::OpenaiCompletions, false) => axum::Json(self.chat_body()).into_response(),
            (Provider::OpenaiCompletions, true) => sse_response(&self.chat_chunks(), Wire::Chat),
            (Provider::Anthropic, false) => axum::Json(self.anthropic_body()).into_response(),
            (Provider::Anthropic, true) => sse_response(&self.anthropic_events(), Wire::Named),
            (_, false) => axum::Json(self.responses_body()).into_response(),
            (_, true) => sse_response(&self.responses_events(), Wire::Named),
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

    /// The output item of a call: the `function_call` a request repeats it with, plus its
    /// item id and status, with `arguments` (empty while a stream has not sent them yet).
    fn responses_call(call: &PlannedCall, arguments: &str, status: &str) -> Value {
        let mut item = payload::responses_function_call(&call.call);
        item["id"] = json!(call.item_id());
        item["arguments"] = json!(arguments);
        item["status"] = json!(status);
        item
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
            // Every event OpenAI sends for a text part: the SDKs' stream accumulators
            // index the part from `content_part.added` (front round 17 F5: without it
            // the Python SDK's `responses.stream()` failed with an IndexError).
            push(json!({
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": self.responses_message(Vec::new(), "in_progress"),
            }));
            push(json!({
                "type": "response.content_part.added",
                "item_id": id,
                "output_index": output_index,
                "content_index": 0,
                "part": {"type": "output_text", "text": "", "annotations": []},
            }));
            for delta in fragments(&self.text) {
                push(json!({
                    "type": "response.output_text.delta",
                    "item_id": id,
                    "output_index": output_index,
                    "content_index": 0,
                    "delta": delta,
                    "logprobs": [],
                }));
            }
            push(json!({
                "type": "response.output_text.done",
                "item_id": id,
                "output_index": output_index,
                "content_index": 0,
                "text": self.text,
                "logprobs": [],
            }));
            push(json!({
                "type": "response.content_part.done",
                "item_id": id,
                "output_index": output_index,
                "content_index": 0,
                "part": Plan::output_text(&self.text),
            }));
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
        let calls: Vec<ToolCall> = self.calls.iter().map(|c| c.call.clone()).collect();
        json!({
            "id": self.chat_id(),
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": payload::chat_assistant_message(&self.text, &calls),
                "finish_reason": self.finish_reason(),
            }],
            "usage": self.chat_usage(),
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
        if !self.text.is_empty() {
            for piece in fragments(&self.text) {
                chunks.push(self.chat_chunk(json!({"content": piece}), None));
            }
        }
        for (index, planned) in self.calls.iter().enumerate() {
            chunks.push(self.chat_chunk(
                json!({"tool_calls": [{
                    "index": index,
                    "id": planned.call.id,
                    "type": "function",
                    "function": {"name": planned.call.name, "arguments": ""},
                }]}),
                None,
            ));
            for piece in fragments(&planned.arguments) {
                chunks.push(self.chat_chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
        chunks.push(self.chat_chunk(json!({}), Some(self.finish_reason())));
        if self.include_usage {
            chunks.push(json!({
                "id": self.chat_id(),
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self.chat_usage(),
            }));
        }
        chunks
    }

    fn chat_usage(&self) -> Value {
        json!({
            "prompt_tokens": self.input_tokens,
            "completion_tokens": 1,
            "total_tokens": self.input_tokens + 1,
        })
    }
}

/// How a stream's events are written.
#[derive(Clone, Copy, PartialEq)]
enum Wire {
    /// `data:` lines, then `data: [DONE]` (Chat Completions).
    Chat,
    /// `event: <type>` and `data:` (Responses, Anthropic).
    Named,
}

// --- Anthropic Messages ---

impl Plan {
    fn stop_reason(&self) -> &'static str {
        if self.calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
    }

    fn anthropic_message(&self, content: Vec<Value>, stop_reason: Option<&str>) -> Value {
        json!({
            "id": format!("msg_{}", self.k),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 1},
        })
    }

    fn anthropic_body(&self) -> Value {
        let mut content = Vec::new();
        if self.has_message() {
            content.push(json!({"type": "text", "text": self.text}));
        }
        for c in &self.calls {
            content.push(json!({"type": "tool_use", "id": c.call.id, "name": c.call.name, "input": c.call.arguments}));
        }
        self.anthropic_message(content, Some(self.stop_reason()))
    }

    /// `message_start`, a start, deltas and a stop per content block (text first, then a
    /// `tool_use` per call, its input in `input_json_delta` fragments), `message_delta`
    /// with the stop reason, `message_stop`.
    fn anthropic_events(&self) -> Vec<Value> {
        let mut events = vec![json!({
            "type": "message_start",
            "message": self.anthropic_message(Vec::new(), None),
        })];
        let mut index = 0usize;
        if self.has_message() {
            events.push(json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "text", "text": ""}}));
            for piece in fragments(&self.text) {
                events.push(json!({"type": "content_block_delta", "index": index,
                                   "delta": {"type": "text_delta", "text": piece}}));
            }
            events.push(json!({"type": "content_block_stop", "index": index}));
            index += 1;
        }
        for c in &self.calls {
            events.push(json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "tool_use", "id": c.call.id, "name": c.call.name, "input": {}}}));
            for piece in fragments(&c.arguments) {
                events.push(json!({"type": "content_block_delta", "index": index,
                                   "delta": {"type": "input_json_delta", "partial_json": piece}}));
            }
            events.push(json!({"type": "content_block_stop", "index": index}));
            index += 1;
        }
        events.push(json!({"type": "message_delta",
                           "delta": {"stop_reason": self.stop_reason(), "stop_sequence": null},
                           "usage": {"output_tokens": 1}}));
        events.push(json!({"type": "message_stop"}));
        events
    }
}

/// `events` as an SSE body, one event each (JSON text has no line break, so each `data:`
/// is one line), named by their `type` or ended by Chat's `[DONE]` as `wire` says.
fn sse_response(events: &[Value], wire: Wire) -> Response {
    let mut body = Vec::new();
    for event in events {
        let mut sse = Sse::default().data(event.to_string());
        if wire == Wire::Named
            && let Some(kind) = event.get("type").and_then(Value::as_str)
        {
            sse = sse.event(kind.to_string());
        }
        body.extend_from_slice(&Bytes::from(sse));
    }
    if wire == Wire::Chat {
        body.extend_from_slice(&Bytes::from(Sse::default().data("[DONE]")));
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

/// `text` in three pieces (two when it has two characters, one when fewer), cut at
/// character boundaries, so clients must assemble streamed fragments.
pub(super) fn fragments(text: &str) -> Vec<&str> {
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
