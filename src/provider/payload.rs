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
use super::{Provider, Request, ToolSpec, WireNames};

/// `max_tokens` is required by the Anthropic Messages API; 1024 is enough for a turn that
/// mostly calls tools, and fixed so bodies are comparable.
pub const ANTHROPIC_MAX_TOKENS: u64 = 1024;

/// The request body for `provider`.
///
/// - Chat Completions: `{model, messages: [system?, user], tools?: [{type: "function",
///   function: {name, description, parameters}}]}`, tools in the given order.
/// - Responses: `{model, instructions?, input: [user], tools?: [{type: "function", name,
///   description, parameters, strict}]}`, tools sorted by wire name so that the prefix a
///   provider caches does not move when a catalog is reloaded in another order.
/// - Anthropic: `{model, max_tokens, system?, messages: [user], tools?: [{name,
///   description, input_schema}]}`, with `cache_control: {type: "ephemeral"}` on the last
///   tool: one breakpoint caches the whole tool prefix.
/// - Google: `{systemInstruction?, contents: [user], tools?: [{functionDeclarations:
///   [{name, description, parametersJsonSchema}]}]}` (or `parameters` in the OpenAPI
///   subset with `google_legacy`); the model is part of the URL, not the body.
pub fn request_body(provider: Provider, request: &Request) -> Value {
    let names = WireNames::new(provider, request.tools);
    let tools = tools_with_names(provider, request, &names);
    let mut body = Map::new();
    match provider {
        Provider::OpenaiCompletions => {
            body.insert("model".into(), json!(request.model));
            let mut messages = Vec::with_capacity(2);
            if !request.system.is_empty() {
                messages.push(json!({"role": "system", "content": request.system}));
            }
            messages.push(json!({"role": "user", "content": request.prompt}));
            body.insert("messages".into(), Value::Array(messages));
        }
        Provider::OpenaiResponses => {
            body.insert("model".into(), json!(request.model));
            if !request.system.is_empty() {
                body.insert("instructions".into(), json!(request.system));
            }
            body.insert(
                "input".into(),
                json!([{"role": "user", "content": request.prompt}]),
            );
        }
        Provider::Anthropic => {
            body.insert("model".into(), json!(request.model));
            body.insert("max_tokens".into(), json!(ANTHROPIC_MAX_TOKENS));
            if !request.system.is_empty() {
                body.insert("system".into(), json!(request.system));
            }
            body.insert(
                "messages".into(),
                json!([{"role": "user", "content": request.prompt}]),
            );
        }
        Provider::Google => {
            if !request.system.is_empty() {
                body.insert(
                    "systemInstruction".into(),
                    json!({"parts": [{"text": request.system}]}),
                );
            }
            body.insert(
                "contents".into(),
                json!([{"role": "user", "parts": [{"text": request.prompt}]}]),
            );
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
        prompt: "",
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
                    json!({"type": "function", "function": {
                        "name": names.wire_name(&t.name),
                        "description": t.description,
                        "parameters": plain_schema(&t.parameters),
                    }})
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
                        let parameters = if request.strict {
                            strict_parameters(&t.parameters)
                        } else {
                            plain_schema(&t.parameters)
                        };
                        json!({
                            "type": "function",
                            "name": wire,
                            "description": t.description,
                            "parameters": parameters,
                            "strict": request.strict,
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
