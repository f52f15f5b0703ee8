//! The exact request body each provider format receives.
//!
//! Bodies are byte-stable: the same [`Request`] always serializes (`serde_json::to_string`,
//! with `preserve_order`) to the same bytes, because every key is inserted in a fixed order
//! and schemas keep their authors' key order. That is what provider prompt caching keys on,
//! and what the QA end-to-end compares between modes.
//!
//! Rules shared by every format:
//! - tool names are the [`WireNames`] of the tool list for the provider;
//! - no tools means no `tools` key at all (an empty list is refused by some providers and
//!   is only noise for the others), and an empty system prompt means no system part;
//! - schemas are sent as [`super::schema`] shapes them for the format: `parameters` that is
//!   not a JSON object is sent as `{"type": "object", "properties": {}}`, since every format
//!   requires an object schema, and nesting is capped.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::schema::{gemini_parameters, plain_schema, strict_parameters};
use super::{Item, Provider, Request, ToolCall, ToolSpec, WireNames};

/// `max_tokens` is required by the Anthropic Messages API: the bound of a request that
/// names none (`[provider] max_output_tokens` replaces it in the gateway). 8192 is what
/// every current Claude model can write; 1024 cut ordinary answers short (front round 15).
/// Fixed, so bodies are comparable.
pub const ANTHROPIC_MAX_TOKENS: u64 = 8192;

/// The request body for `provider`: the system prompt, the conversation (each [`Item`] as
/// the private `conversation` says) and the tools.
///
/// - Chat Completions: `{model, messages: [system?, ...], tools?: [{type: "function",
///   function: {name, description, parameters}}]}`, tools in the given order.
/// - Responses: `{model, instructions?, input: [...], tools?: [{type: "function", name,
///   description, parameters, strict}]}`, tools sorted by wire name so that the prefix a
///   provider caches does not move when a catalog is reloaded in another order.
/// - Anthropic: `{model, max_tokens, system?, messages: [...], tools?: [{name,
///   description, input_schema}]}`, with `cache_control: {type: "ephemeral"}` on the last
///   tool: one breakpoint caches the whole tool prefix.
/// - Google: `{systemInstruction?, contents: [...], tools?: [{functionDeclarations:
///   [{name, description, parametersJsonSchema}]}]}` (or `parameters` in the OpenAPI
///   subset with `google_legacy`); the model is part of the URL, not the body.
///
/// Transport options (`stream`) are the sender's to add.
pub fn request_body(provider: Provider, request: &Request) -> Value {
    let names = WireNames::new(provider, request.tools);
    let tools = tools_with_names(provider, request, &names);
    let mut conversation = conversation(provider, request.conversation, &names);
    let mut body = Map::new();
    match provider {
        Provider::OpenaiCompletions => {
            body.insert("model".into(), json!(request.model));
            let mut messages = Vec::with_capacity(request.conversation.len() + 1);
            if !request.system.is_empty() {
                messages.push(json!({"role": "system", "content": request.system}));
            }
            messages.append(&mut conversation);
            body.insert("messages".into(), Value::Array(messages));
        }
        Provider::OpenaiResponses => {
            body.insert("model".into(), json!(request.model));
            if !request.system.is_empty() {
                body.insert("instructions".into(), json!(request.system));
            }
            body.insert("input".into(), Value::Array(conversation));
        }
        Provider::Anthropic => {
            body.insert("model".into(), json!(request.model));
            body.insert("max_tokens".into(), json!(ANTHROPIC_MAX_TOKENS));
            if !request.system.is_empty() {
                body.insert("system".into(), json!(request.system));
            }
            body.insert("messages".into(), Value::Array(conversation));
        }
        Provider::Google => {
            if !request.system.is_empty() {
                body.insert(
                    "systemInstruction".into(),
                    json!({"parts": [{"text": request.system}]}),
                );
            }
            body.insert("contents".into(), Value::Array(conversation));
        }
    }
    if let Some(tools) = tools {
        body.insert("tools".into(), tools);
    }
    Value::Object(body)
}

/// The `tools` value of [`request_body`], or `None` when there are no tools.
pub fn tools_part(provider: Provider, request: &Request) -> Option<Value> {
    tools_with_names(provider, request, &WireNames::new(provider, request.tools))
}

/// Bytes of the serialized `tools` value alone, as the provider receives it with the
/// default options (no strict mode, `parametersJsonSchema` for Google); 0 without tools.
pub fn tool_bytes(provider: Provider, tools: &[ToolSpec]) -> usize {
    let request = Request {
        system: "",
        conversation: &[],
        tools,
        model: "",
        strict: false,
        google_legacy: false,
    };
    tools_part(provider, &request).map_or(0, |t| serialized_len(&t))
}

/// Sizes of one request, for the QA table (declared tools and request bytes per mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PayloadSummary {
    pub provider: Provider,
    /// Tools declared.
    pub tools: usize,
    /// Tools whose wire name differs from their catalog name.
    pub renamed: usize,
    /// Bytes of the serialized `tools` value (0 without tools).
    pub tool_bytes: usize,
    /// Bytes of the whole serialized body.
    pub body_bytes: usize,
}

/// The sizes of [`request_body`] for this request, honouring its options.
pub fn summary(provider: Provider, request: &Request) -> PayloadSummary {
    let names = WireNames::new(provider, request.tools);
    let body = request_body(provider, request);
    PayloadSummary {
        provider,
        tools: request.tools.len(),
        renamed: names.renamed(),
        tool_bytes: body.get("tools").map_or(0, serialized_len),
        body_bytes: serialized_len(&body),
    }
}

fn serialized_len(value: &Value) -> usize {
    // Serializing a `Value` into memory cannot fail: its keys are strings and it holds no
    // non-finite numbers. An error would only make the count 0, never panic.
    serde_json::to_vec(value).map_or(0, |v| v.len())
}

/// A tool's parameters as OpenAI's kinds take them: made strict (every property required,
/// no others) for a strict tool, else plain.
fn parameters(t: &ToolSpec, strict: bool) -> Value {
    if strict {
        strict_parameters(&t.parameters)
    } else {
        plain_schema(&t.parameters)
    }
}

fn tools_with_names(provider: Provider, request: &Request, names: &WireNames) -> Option<Value> {
    if request.tools.is_empty() {
        return None;
    }
    let tools = request.tools;
    Some(match provider {
        Provider::OpenaiCompletions => Value::Array(
            tools
                .iter()
                .map(|t| {
                    // A tool the client made strict stays strict (front round 15 F1: the
                    // flag was dropped); Chat has no `strict: false` to say otherwise.
                    let strict = t.strict == Some(true);
                    let mut function = json!({
                        "name": names.wire_name(&t.name),
                        "description": t.description,
                        "parameters": parameters(t, strict),
                    });
                    if strict {
                        function["strict"] = json!(true);
                    }
                    json!({"type": "function", "function": function})
                })
                .collect(),
        ),
        Provider::OpenaiResponses => {
            let mut sorted: Vec<(&str, &ToolSpec)> = tools
                .iter()
                .map(|t| (names.wire_name(&t.name), t))
                .collect();
            // Stable: tools that share a name keep their given order.
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            Value::Array(
                sorted
                    .into_iter()
                    .map(|(wire, t)| {
                        // The tool's own `strict` (a client's) over the request's.
                        let strict = t.strict.unwrap_or(request.strict);
                        json!({
                            "type": "function",
                            "name": wire,
                            "description": t.description,
                            "parameters": parameters(t, strict),
                            "strict": strict,
                        })
                    })
                    .collect(),
            )
        }
        Provider::Anthropic => {
            let last = tools.len() - 1;
            Value::Array(
                tools
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let mut tool = Map::new();
                        tool.insert("name".into(), json!(names.wire_name(&t.name)));
                        tool.insert("description".into(), json!(t.description));
                        tool.insert("input_schema".into(), plain_schema(&t.parameters));
                        if i == last {
                            tool.insert("cache_control".into(), json!({"type": "ephemeral"}));
                        }
                        Value::Object(tool)
                    })
                    .collect(),
            )
        }
        Provider::Google => {
            let declarations: Vec<Value> = tools
                .iter()
                .map(|t| {
                    let mut decl = Map::new();
                    decl.insert("name".into(), json!(names.wire_name(&t.name)));
                    decl.insert("description".into(), json!(t.description));
                    if request.google_legacy {
                        if let Some(parameters) = gemini_parameters(&t.parameters) {
                            decl.insert("parameters".into(), parameters);
                        }
                    } else {
                        decl.insert("parametersJsonSchema".into(), plain_schema(&t.parameters));
                    }
                    Value::Object(decl)
                })
                .collect();
            json!([{"functionDeclarations": declarations}])
        }
    })
}

// ---------------------------------------------------------------------------------------
// The conversation
// ---------------------------------------------------------------------------------------

/// The conversation as `provider`'s messages (Chat, Anthropic), input items (Responses) or
/// contents (Google), in order. Calls and results carry the wire names of `names`; a name
/// outside the list (a model that invented a tool) is sent as the model called it.
///
/// - Chat Completions: `{role: "user", content}`; the model's answer is
///   [`chat_assistant_message`]; a result is `{role: "tool", tool_call_id, content}`.
/// - Responses: `{role: "user", content}`; the model's text, when it has any, is
///   `{role: "assistant", content}`, then each call is a [`responses_function_call`]; a
///   result is `{type: "function_call_output", call_id, output}`.
/// - Anthropic: `{role: "user", content}`; the model's answer is `{role: "assistant",
///   content}` with the text alone (no message for an empty answer, which the API
///   refuses), or with blocks when it called tools: the text when it has any, then
///   `{type: "tool_use", id, name, input}` per call. Consecutive results
///   share one user message of `{type: "tool_result", tool_use_id, content, is_error?}`
///   blocks: the API wants a batch's results together, right after its calls.
/// - Google: `{role: "user", parts: [{text}]}`; the model's answer is `{role: "model",
///   parts}`: the text when it has any (the empty text when it has nothing at all), then
///   `{functionCall: {name, args}}` per call. Consecutive results share one user content of
///   `{functionResponse: {name, response: {output}}}` parts (`{error}` for a failed call).
///   No ids are sent: Gemini pairs results with calls by name and order, and an id it did
///   not give (`call_<n>`) would be ours, not its.
fn conversation(provider: Provider, items: &[Item], names: &WireNames) -> Vec<Value> {
    match provider {
        Provider::OpenaiCompletions => chat_messages(items, names),
        Provider::OpenaiResponses => responses_input(items, names),
        Provider::Anthropic => anthropic_messages(items, names),
        Provider::Google => google_contents(items, names),
    }
}

/// The Chat Completions assistant message of one answer of the model: `content` its text
/// (`null` when empty) and `tool_calls` (left out when there are none), each `{id, type:
/// "function", function: {name, arguments}}` with the arguments as JSON text and the name
/// the call carries. It is also the `message` of a Chat Completions response.
pub fn chat_assistant_message(text: &str, calls: &[ToolCall]) -> Value {
    let content = if text.is_empty() {
        Value::Null
    } else {
        json!(text)
    };
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments.to_string()},
                })
            })
            .collect();
    }
    message
}

/// A Responses `function_call` item `{type, call_id, name, arguments}`, the arguments as
/// JSON text and the name the call carries: the input item that repeats a call of the
/// model, and the core of the output item a response carries for it.
pub fn responses_function_call(call: &ToolCall) -> Value {
    json!({
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments.to_string(),
    })
}

/// `calls` with the names the provider gets.
fn on_wire(calls: &[ToolCall], names: &WireNames) -> Vec<ToolCall> {
    calls
        .iter()
        .map(|c| ToolCall {
            id: c.id.clone(),
            name: names.wire_name(&c.name).to_string(),
            arguments: c.arguments.clone(),
            unreadable: None,
        })
        .collect()
}

fn chat_messages(items: &[Item], names: &WireNames) -> Vec<Value> {
    items
        .iter()
        .map(|item| match *item {
            Item::User(text) => json!({"role": "user", "content": text}),
            Item::Assistant { text, calls } => chat_assistant_message(text, &on_wire(calls, names)),
            Item::ToolResult {
                call_id, content, ..
            } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
        })
        .collect()
}

fn responses_input(items: &[Item], names: &WireNames) -> Vec<Value> {
    let mut input = Vec::with_capacity(items.len());
    for item in items {
        match *item {
            Item::User(text) => input.push(json!({"role": "user", "content": text})),
            Item::Assistant { text, calls } => {
                if !text.is_empty() {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                input.extend(on_wire(calls, names).iter().map(responses_function_call));
            }
            Item::ToolResult {
                call_id, content, ..
            } => input.push(
                json!({"type": "function_call_output", "call_id": call_id, "output": content}),
            ),
        }
    }
    input
}

fn anthropic_messages(items: &[Item], names: &WireNames) -> Vec<Value> {
    let mut messages = Results::new("content");
    for item in items {
        match *item {
            Item::User(text) => messages.push(json!({"role": "user", "content": text})),
            // Anthropic refuses an empty message; left out, the user turns around it are
            // combined into one, as the API does with consecutive turns of one role.
            Item::Assistant {
                text: "",
                calls: [],
            } => {}
            Item::Assistant { text, calls: [] } => {
                messages.push(json!({"role": "assistant", "content": text}));
            }
            Item::Assistant { text, calls } => {
                let mut blocks = Vec::with_capacity(calls.len() + 1);
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                blocks.extend(calls.iter().map(|c| {
                    json!({
                        "type": "tool_use",
                        "id": c.id,
                        "name": names.wire_name(&c.name),
                        "input": c.arguments,
                    })
                }));
                messages.push(json!({"role": "assistant", "content": blocks}));
            }
            Item::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => {
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if is_error {
                    block["is_error"] = json!(true);
                }
                messages.push_result(block);
            }
        }
    }
    messages.done
}

fn google_contents(items: &[Item], names: &WireNames) -> Vec<Value> {
    let mut contents = Results::new("parts");
    for item in items {
        match *item {
            Item::User(text) => contents.push(json!({"role": "user", "parts": [{"text": text}]})),
            Item::Assistant { text, calls } => {
                let mut parts = Vec::with_capacity(calls.len() + 1);
                if !text.is_empty() || calls.is_empty() {
                    parts.push(json!({"text": text}));
                }
                parts.extend(calls.iter().map(|c| {
                    json!({"functionCall": {"name": names.wire_name(&c.name), "args": c.arguments}})
                }));
                contents.push(json!({"role": "model", "parts": parts}));
            }
            Item::ToolResult {
                name,
                content,
                is_error,
                ..
            } => {
                let key = if is_error { "error" } else { "output" };
                let mut response = Map::new();
                response.insert(key.into(), json!(content));
                contents.push_result(json!({"functionResponse": {
                    "name": names.wire_name(name),
                    "response": response,
                }}));
            }
        }
    }
    contents.done
}

/// Messages being built for a format whose tool results of one batch share a user message
/// (Anthropic, Google), under `key` (`content`, `parts`).
struct Results {
    key: &'static str,
    done: Vec<Value>,
    /// The last message is a user message of results, which the next result joins.
    open: bool,
}

impl Results {
    fn new(key: &'static str) -> Self {
        Results {
            key,
            done: Vec::new(),
            open: false,
        }
    }

    fn push(&mut self, message: Value) {
        self.done.push(message);
        self.open = false;
    }

    fn push_result(&mut self, part: Value) {
        if self.open
            && let Some(Value::Array(parts)) =
                self.done.last_mut().and_then(|m| m.get_mut(self.key))
        {
            parts.push(part);
            return;
        }
        let mut message = Map::new();
        message.insert("role".into(), json!("user"));
        message.insert(self.key.into(), Value::Array(vec![part]));
        self.done.push(Value::Object(message));
        self.open = true;
    }
}
