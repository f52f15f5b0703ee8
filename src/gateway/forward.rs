//! What both fronts read of a request besides its conversation: the options the provider
//! gets ([`RequestOptions`]), from the Responses or the Chat Completions spelling, and the
//! body itself, parsed with the path of a bad value in the error.
//!
//! A field of the wrong type is a 400 naming it; a value an option does not know (a tool
//! choice of a hosted tool this gateway does not have) is left out rather than refused,
//! as the README's gateway section lists.

use serde_json::{Map, Value};

use super::errors::ApiError;
use crate::provider::{OutputFormat, Reasoning, ToolChoice};

/// The metadata key that names the gateway session; never forwarded.
pub const SESSION_KEY: &str = "session_key";

/// `metadata` without the gateway's session key, and that key. OpenAI takes string values
/// only, and so does the gateway.
pub fn metadata(
    metadata: Option<Map<String, Value>>,
) -> Result<(Map<String, Value>, Option<String>), ApiError> {
    let mut metadata = metadata.unwrap_or_default();
    let key = match metadata.shift_remove(SESSION_KEY) {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) => Some(k),
        Some(_) => {
            return Err(
                ApiError::bad_request("metadata.session_key must be a string")
                    .param("metadata.session_key"),
            );
        }
    };
    if let Some((k, _)) = metadata.iter().find(|(_, v)| !v.is_string()) {
        return Err(ApiError::bad_request(format!(
            "metadata.{k}: metadata values must be strings"
        ))
        .param("metadata"));
    }
    // OpenAI's own bounds: metadata is copied into every round's options, the response
    // and the stored response, and 4 MB of it cost 28 MB a request (front round 11).
    if metadata.len() > METADATA_KEYS {
        return Err(ApiError::bad_request(format!(
            "metadata: {} keys; at most {METADATA_KEYS} (besides session_key)",
            metadata.len()
        ))
        .param("metadata"));
    }
    if let Some((k, v)) = metadata.iter().find(|(k, v)| {
        k.chars().count() > METADATA_KEY_CHARS
            || v.as_str()
                .is_some_and(|v| v.chars().count() > METADATA_VALUE_CHARS)
    }) {
        let what = if k.chars().count() > METADATA_KEY_CHARS {
            format!("the key is longer than {METADATA_KEY_CHARS} characters")
        } else {
            format!(
                "the value is {} characters; at most {METADATA_VALUE_CHARS}",
                v.as_str().map_or(0, |v| v.chars().count())
            )
        };
        return Err(ApiError::bad_request(format!(
            "metadata.{}: {what}",
            crate::catalog::compact::cut(k, METADATA_KEY_CHARS)
        ))
        .param("metadata"));
    }
    Ok((metadata, key))
}

/// OpenAI's bounds on `metadata`: 16 pairs, keys of 64 characters, values of 512.
pub const METADATA_KEYS: usize = 16;
pub const METADATA_KEY_CHARS: usize = 64;
pub const METADATA_VALUE_CHARS: usize = 512;

/// A tool choice word: `auto`, `none`, `required`.
fn choice_word(word: &str, field: &str) -> Result<ToolChoice, ApiError> {
    match word {
        "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "required" | "any" => Ok(ToolChoice::Required),
        other => Err(ApiError::bad_request(format!(
            "{field}: `{other}` is not a tool choice; expected auto, none, required or a function"
        ))
        .param(field)),
    }
}

/// Responses `tool_choice`: a word or `{type: "function", name}`; `allowed_tools` is
/// refused ([`allowed_tools_refused`]). Hosted tool types are left out (`None`).
pub fn responses_tool_choice(v: Option<&Value>) -> Result<Option<ToolChoice>, ApiError> {
    let field = "tool_choice";
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v {
        Value::String(word) => choice_word(word, field).map(Some),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => match o.get("name").and_then(Value::as_str) {
                Some(name) => Ok(Some(ToolChoice::Tool(name.to_string()))),
                None => Err(
                    ApiError::bad_request("tool_choice: a function choice needs `name`")
                        .param(field),
                ),
            },
            Some("allowed_tools") => Err(allowed_tools_refused(field)),
            _ => Ok(None),
        },
        _ => Err(ApiError::bad_request("tool_choice: expected a string or an object").param(field)),
    }
}

/// `allowed_tools` is refused, not taken for its mode alone: the gateway cannot hold a
/// turn to a list of tools (its catalog's run inside it, code mode's from the sandbox), and
/// keeping only the mode let the model call, and the gateway run, tools outside the list
/// (front round 15 F2). A restriction ignored would answer another question.
fn allowed_tools_refused(field: &str) -> ApiError {
    ApiError::bad_request(
        "tool_choice `allowed_tools` is not supported: this gateway cannot hold a turn to a list of tools; send only the client tools you allow in `tools`, with `auto` or `required`",
    )
    .param(field)
    .code("unsupported_value")
}

/// Chat `tool_choice`: a word or `{type: "function", function: {name}}` (`allowed_tools`
/// refused); or the legacy `function_call` (`none`, `auto` or `{name}`). Custom tool
/// choices are left out.
pub fn chat_tool_choice(
    v: Option<&Value>,
    legacy: Option<&Value>,
) -> Result<Option<ToolChoice>, ApiError> {
    if let Some(v) = v.filter(|v| !v.is_null()) {
        let field = "tool_choice";
        return match v {
            Value::String(word) => choice_word(word, field).map(Some),
            Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                Some("function") => match v.pointer("/function/name").and_then(Value::as_str) {
                    Some(name) => Ok(Some(ToolChoice::Tool(name.to_string()))),
                    None => Err(ApiError::bad_request(
                        "tool_choice: a function choice needs `function.name`",
                    )
                    .param(field)),
                },
                Some("allowed_tools") => Err(allowed_tools_refused(field)),
                _ => Ok(None),
            },
            _ => Err(
                ApiError::bad_request("tool_choice: expected a string or an object").param(field),
            ),
        };
    }
    match legacy.filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::String(word)) => choice_word(word, "function_call").map(Some),
        Some(Value::Object(o)) => match o.get("name").and_then(Value::as_str) {
            Some(name) => Ok(Some(ToolChoice::Tool(name.to_string()))),
            None => Err(
                ApiError::bad_request("function_call: expected `none`, `auto` or {name}")
                    .param("function_call"),
            ),
        },
        Some(_) => Err(
            ApiError::bad_request("function_call: expected `none`, `auto` or {name}")
                .param("function_call"),
        ),
    }
}

/// `{name, schema, strict?, description?}`, the body of a JSON-schema format in either API.
fn json_schema(o: &Map<String, Value>, field: &str) -> Result<OutputFormat, ApiError> {
    let name = o
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("response")
        .to_string();
    let Some(schema) = o.get("schema").filter(|s| s.is_object()) else {
        return Err(
            ApiError::bad_request(format!("{field}: a json_schema format needs `schema`"))
                .param(field),
        );
    };
    Ok(OutputFormat::JsonSchema {
        name,
        schema: schema.clone(),
        strict: o.get("strict").and_then(Value::as_bool),
        description: o
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

fn format_of(kind: Option<&str>, field: &str) -> Result<Option<OutputFormat>, ApiError> {
    match kind {
        None | Some("text") => Ok(Some(OutputFormat::Text)),
        Some("json_object") => Ok(Some(OutputFormat::JsonObject)),
        Some(other) => Err(ApiError::bad_request(format!(
            "{field}: `{other}` is not a format; expected text, json_object or json_schema"
        ))
        .param(field)),
    }
}

/// Responses `text`: `{format: {type, ...}, verbosity}`.
pub fn responses_text(
    v: Option<&Value>,
) -> Result<(Option<OutputFormat>, Option<String>), ApiError> {
    let Some(text) = v.filter(|v| !v.is_null()) else {
        return Ok((None, None));
    };
    let Some(text) = text.as_object() else {
        return Err(ApiError::bad_request("text: expected an object").param("text"));
    };
    let verbosity = text
        .get("verbosity")
        .and_then(Value::as_str)
        .map(str::to_string);
    let format = match text.get("format").filter(|f| !f.is_null()) {
        None => None,
        Some(Value::Object(f)) => match f.get("type").and_then(Value::as_str) {
            Some("json_schema") => Some(json_schema(f, "text.format")?),
            kind => format_of(kind, "text.format")?,
        },
        Some(_) => {
            return Err(
                ApiError::bad_request("text.format: expected an object").param("text.format")
            );
        }
    };
    Ok((format, verbosity))
}

/// Chat `response_format`: `{type, json_schema?: {name, schema, strict, description}}`.
pub fn chat_format(v: Option<&Value>) -> Result<Option<OutputFormat>, ApiError> {
    let field = "response_format";
    match v.filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::Object(f)) => match f.get("type").and_then(Value::as_str) {
            Some("json_schema") => match f.get("json_schema").and_then(Value::as_object) {
                Some(s) => json_schema(s, field).map(Some),
                None => Err(ApiError::bad_request(
                    "response_format: a json_schema format needs `json_schema`",
                )
                .param(field)),
            },
            kind => format_of(kind, field),
        },
        Some(_) => Err(ApiError::bad_request("response_format: expected an object").param(field)),
    }
}

/// Responses `reasoning`: `{effort, summary}` (or the older `generate_summary`).
pub fn responses_reasoning(v: Option<&Value>) -> Result<Option<Reasoning>, ApiError> {
    match v.filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::Object(r)) => {
            let text = |key: &str| r.get(key).and_then(Value::as_str).map(str::to_string);
            Ok(Some(Reasoning {
                effort: text("effort"),
                summary: text("summary").or_else(|| text("generate_summary")),
            }))
        }
        Some(_) => Err(ApiError::bad_request("reasoning: expected an object").param("reasoning")),
    }
}

/// Chat `stop`: a string or a list of strings.
pub fn stop(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    match v.filter(|v| !v.is_null()) {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(list)) => list
            .iter()
            .map(|s| {
                s.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::bad_request("stop: expected a string or a list of strings")
                        .param("stop")
                })
            })
            .collect(),
        Some(_) => {
            Err(ApiError::bad_request("stop: expected a string or a list of strings").param("stop"))
        }
    }
}

/// The fields of `pairs` that are set, as one map (for [`crate::provider::RequestOptions`]'s
/// passthrough).
pub fn set_fields(pairs: &[(&str, &Option<Value>)]) -> Map<String, Value> {
    pairs
        .iter()
        .filter_map(|(k, v)| {
            v.as_ref()
                .filter(|v| !v.is_null())
                .map(|v| (k.to_string(), v.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_is_held_to_openais_bounds() {
        let m = |v: Value| metadata(v.as_object().cloned());
        let (kept, key) = m(json!({"user_id": "u", "session_key": "s"})).unwrap();
        assert_eq!((kept.len(), key.as_deref()), (1, Some("s")));
        let many: Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
        let e = metadata(Some(many)).unwrap_err();
        assert!(e.message.contains("17 keys"), "{}", e.message);
        let e = m(json!({"big": "x".repeat(513)})).unwrap_err();
        assert!(e.message.contains("513 characters"), "{}", e.message);
        let e = m(json!({"k".repeat(65): "v"})).unwrap_err();
        assert!(e.message.contains("longer than 64"), "{}", e.message);
        assert_eq!(e.param.as_deref(), Some("metadata"));
    }

    #[test]
    fn tool_choices_of_both_apis() {
        let r = |v: Value| responses_tool_choice(Some(&v));
        assert_eq!(r(json!("required")).unwrap(), Some(ToolChoice::Required));
        assert_eq!(
            r(json!({"type": "function", "name": "f"})).unwrap(),
            Some(ToolChoice::Tool("f".into()))
        );
        let e = r(json!({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "pick"}]})).unwrap_err();
        assert!(e.message.contains("allowed_tools"), "{}", e.message);
        assert_eq!(r(json!({"type": "web_search_preview"})).unwrap(), None);
        assert!(r(json!("sometimes")).is_err());
        assert!(r(json!(3)).is_err());
        let c = |v: Value| chat_tool_choice(Some(&v), None);
        assert_eq!(
            c(json!({"type": "function", "function": {"name": "f"}})).unwrap(),
            Some(ToolChoice::Tool("f".into()))
        );
        assert_eq!(
            chat_tool_choice(None, Some(&json!({"name": "g"}))).unwrap(),
            Some(ToolChoice::Tool("g".into()))
        );
    }

    #[test]
    fn formats_of_both_apis() {
        let schema = json!({"type": "object"});
        let (format, verbosity) = responses_text(Some(&json!({"format": {"type": "json_schema", "name": "x", "schema": schema, "strict": true}, "verbosity": "low"}))).unwrap();
        let expected = OutputFormat::JsonSchema {
            name: "x".into(),
            schema: schema.clone(),
            strict: Some(true),
            description: None,
        };
        assert_eq!(format, Some(expected.clone()));
        assert_eq!(verbosity.as_deref(), Some("low"));
        let chat = chat_format(Some(&json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}}))).unwrap();
        assert_eq!(chat, Some(expected));
        assert!(chat_format(Some(&json!({"type": "json_schema"}))).is_err());
        assert!(responses_text(Some(&json!({"format": {"type": "yaml"}}))).is_err());
    }

    #[test]
    fn metadata_loses_the_session_key_and_keeps_strings() {
        let m = json!({"session_key": "s1", "team": "a"});
        let (rest, key) = metadata(m.as_object().cloned()).unwrap();
        assert_eq!(key.as_deref(), Some("s1"));
        assert_eq!(Value::Object(rest), json!({"team": "a"}));
        assert!(metadata(json!({"n": 1}).as_object().cloned()).is_err());
    }
}
