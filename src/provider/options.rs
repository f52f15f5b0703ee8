//! What a client asks of the model beyond the conversation and the tools — the model,
//! sampling, output limits and format, tool choice — provider-neutral, and each provider's
//! spelling of it.
//!
//! [`apply`] adds the options to a body [`super::payload::request_body`] built, after its
//! own keys, so a request without options is byte for byte the body `toolsearch surface`
//! reports. An option a provider has no equivalent for is left out (the README's gateway
//! section lists them); none is an error here: the gateway front decides what a client may
//! send.

use serde_json::{Map, Value, json};

use super::{Provider, WireNames};

/// Everything forwarded besides the conversation and the tools. `None` (or empty) is
/// "not set": the provider's default applies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestOptions {
    /// Replaces the configured model.
    pub model: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// Responses `max_output_tokens`, Chat `max_completion_tokens`, Anthropic `max_tokens`.
    pub max_output_tokens: Option<u64>,
    /// Chat `stop`, Anthropic `stop_sequences`; Responses has none.
    pub stop: Vec<String>,
    /// Anthropic takes it as `metadata.user_id`.
    pub user: Option<String>,
    /// String values only (what OpenAI accepts); the gateway's own keys are not in it.
    pub metadata: Map<String, Value>,
    pub reasoning: Option<Reasoning>,
    pub format: Option<OutputFormat>,
    /// `low`, `medium` or `high`.
    pub verbosity: Option<String>,
    /// Anthropic: `false` is `disable_parallel_tool_use`.
    pub parallel_tool_calls: Option<bool>,
    /// Already mapped onto the tools this request declares (see `agent`).
    pub tool_choice: Option<ToolChoice>,
    pub store: Option<bool>,
    /// OpenAI only, passed as they are.
    pub service_tier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub safety_identifier: Option<String>,
    /// Chat Completions only.
    pub seed: Option<i64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    /// Fields sent as they are, only to this provider: what a client wrote for the same
    /// API as the upstream's (`include`, `logprobs`...), which no other API could read.
    pub passthrough: Option<(Provider, Map<String, Value>)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reasoning {
    pub effort: Option<String>,
    pub summary: Option<String>,
}

/// The shape of the answer's text.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Value,
        strict: Option<bool>,
        description: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    /// Some tool must be called.
    Required,
    /// This tool (a name the request declares) must be called.
    Tool(String),
}

/// Adds `options` to `body`, a [`super::payload::request_body`] for `provider` whose tool
/// names are `names`. Tool choice and parallel calls are sent only with tools (OpenAI
/// refuses them without).
pub fn apply(provider: Provider, body: &mut Value, options: &RequestOptions, names: &WireNames) {
    let Some(body) = body.as_object_mut() else {
        return;
    };
    let has_tools = body.contains_key("tools");
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(key.to_string(), value);
        }
    };
    let o = options;
    if provider != Provider::Google {
        // An empty name is none: the configured model answers (front round 21: `""` was
        // sent on, and the provider refused it).
        put(
            "model",
            o.model.as_ref().filter(|m| !m.is_empty()).map(|m| json!(m)),
        );
    }
    match provider {
        Provider::OpenaiResponses => {
            put("temperature", o.temperature.map(|t| json!(t)));
            put("top_p", o.top_p.map(|t| json!(t)));
            put("max_output_tokens", o.max_output_tokens.map(|n| json!(n)));
            put("user", o.user.as_ref().map(|u| json!(u)));
            put("metadata", metadata(o));
            put("reasoning", o.reasoning.as_ref().map(responses_reasoning));
            put("text", responses_text(o));
            if has_tools {
                put(
                    "parallel_tool_calls",
                    o.parallel_tool_calls.map(|p| json!(p)),
                );
                put(
                    "tool_choice",
                    o.tool_choice.as_ref().map(|c| match c {
                        ToolChoice::Tool(name) => {
                            json!({"type": "function", "name": names.wire_name(name)})
                        }
                        other => json!(choice_word(other)),
                    }),
                );
            }
            put("store", o.store.map(|s| json!(s)));
            put_openai_extras(&mut put, o);
        }
        Provider::OpenaiCompletions => {
            put("temperature", o.temperature.map(|t| json!(t)));
            put("top_p", o.top_p.map(|t| json!(t)));
            put(
                "max_completion_tokens",
                o.max_output_tokens.map(|n| json!(n)),
            );
            put("stop", (!o.stop.is_empty()).then(|| json!(o.stop)));
            put("user", o.user.as_ref().map(|u| json!(u)));
            put("metadata", metadata(o));
            put(
                "reasoning_effort",
                o.reasoning
                    .as_ref()
                    .and_then(|r| r.effort.as_ref())
                    .map(|e| json!(e)),
            );
            put("response_format", o.format.as_ref().map(chat_format));
            put("verbosity", o.verbosity.as_ref().map(|v| json!(v)));
            if has_tools {
                put(
                    "parallel_tool_calls",
                    o.parallel_tool_calls.map(|p| json!(p)),
                );
                put(
                    "tool_choice",
                    o.tool_choice.as_ref().map(|c| match c {
                        ToolChoice::Tool(name) => json!({
                            "type": "function",
                            "function": {"name": names.wire_name(name)},
                        }),
                        other => json!(choice_word(other)),
                    }),
                );
            }
            put("store", o.store.map(|s| json!(s)));
            put("seed", o.seed.map(|s| json!(s)));
            put("frequency_penalty", o.frequency_penalty.map(|p| json!(p)));
            put("presence_penalty", o.presence_penalty.map(|p| json!(p)));
            put_openai_extras(&mut put, o);
        }
        Provider::Anthropic => {
            put("max_tokens", o.max_output_tokens.map(|n| json!(n)));
            put("temperature", o.temperature.map(|t| json!(t)));
            put("top_p", o.top_p.map(|t| json!(t)));
            put(
                "stop_sequences",
                (!o.stop.is_empty()).then(|| json!(o.stop)),
            );
            put("metadata", o.user.as_ref().map(|u| json!({"user_id": u})));
            if has_tools {
                put("tool_choice", anthropic_choice(o, names));
            }
        }
        Provider::Google => {}
    }
    if let Some((to, fields)) = &o.passthrough
        && *to == provider
    {
        for (key, value) in fields {
            body.insert(key.clone(), value.clone());
        }
    }
}

fn put_openai_extras(put: &mut impl FnMut(&str, Option<Value>), o: &RequestOptions) {
    put("service_tier", o.service_tier.as_ref().map(|v| json!(v)));
    put(
        "prompt_cache_key",
        o.prompt_cache_key.as_ref().map(|v| json!(v)),
    );
    put(
        "safety_identifier",
        o.safety_identifier.as_ref().map(|v| json!(v)),
    );
}

fn metadata(o: &RequestOptions) -> Option<Value> {
    (!o.metadata.is_empty()).then(|| Value::Object(o.metadata.clone()))
}

fn choice_word(choice: &ToolChoice) -> &'static str {
    match choice {
        ToolChoice::None => "none",
        ToolChoice::Required => "required",
        ToolChoice::Auto | ToolChoice::Tool(_) => "auto",
    }
}

fn responses_reasoning(r: &Reasoning) -> Value {
    let mut out = Map::new();
    if let Some(effort) = &r.effort {
        out.insert("effort".into(), json!(effort));
    }
    if let Some(summary) = &r.summary {
        out.insert("summary".into(), json!(summary));
    }
    Value::Object(out)
}

/// Responses `text`: `{format?, verbosity?}`.
fn responses_text(o: &RequestOptions) -> Option<Value> {
    let mut text = Map::new();
    if let Some(format) = &o.format {
        let format = match format {
            OutputFormat::Text => json!({"type": "text"}),
            OutputFormat::JsonObject => json!({"type": "json_object"}),
            OutputFormat::JsonSchema {
                name,
                schema,
                strict,
                description,
            } => {
                let mut f = Map::new();
                f.insert("type".into(), json!("json_schema"));
                f.insert("name".into(), json!(name));
                f.insert("schema".into(), schema.clone());
                if let Some(strict) = strict {
                    f.insert("strict".into(), json!(strict));
                }
                if let Some(description) = description {
                    f.insert("description".into(), json!(description));
                }
                Value::Object(f)
            }
        };
        text.insert("format".into(), format);
    }
    if let Some(verbosity) = &o.verbosity {
        text.insert("verbosity".into(), json!(verbosity));
    }
    (!text.is_empty()).then_some(Value::Object(text))
}

/// Chat `response_format`: the schema goes under `json_schema`.
fn chat_format(format: &OutputFormat) -> Value {
    match format {
        OutputFormat::Text => json!({"type": "text"}),
        OutputFormat::JsonObject => json!({"type": "json_object"}),
        OutputFormat::JsonSchema {
            name,
            schema,
            strict,
            description,
        } => {
            let mut s = Map::new();
            s.insert("name".into(), json!(name));
            s.insert("schema".into(), schema.clone());
            if let Some(strict) = strict {
                s.insert("strict".into(), json!(strict));
            }
            if let Some(description) = description {
                s.insert("description".into(), json!(description));
            }
            json!({"type": "json_schema", "json_schema": Value::Object(s)})
        }
    }
}

/// Anthropic `tool_choice`: `auto`, `any` (required), `tool` (one by name) or `none`, with
/// `disable_parallel_tool_use` when parallel calls are off (`auto` carries it when no
/// choice was made).
fn anthropic_choice(o: &RequestOptions, names: &WireNames) -> Option<Value> {
    let serial = o.parallel_tool_calls == Some(false);
    let mut choice = match &o.tool_choice {
        None if serial => json!({"type": "auto"}),
        None => return None,
        Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::None) => return Some(json!({"type": "none"})),
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::Tool(name)) => json!({"type": "tool", "name": names.wire_name(name)}),
    };
    if serial {
        choice["disable_parallel_tool_use"] = json!(true);
    }
    Some(choice)
}
