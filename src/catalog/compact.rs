//! Compact descriptors: what search returns, sized to be pasted back into a prompt.
//!
//! A compact descriptor holds the id, source, name, label, a description cut to
//! [`MAX_DESCRIPTION_CHARS`] and `input`, a TypeScript-like signature of the arguments
//! (`{ title: string; body?: string; labels?: string[] }`). The signature is bounded in
//! length, property count and depth; when a schema does not fit, or comes from a source
//! that is not trusted (MCP servers, clients), `input` is `"unknown"` and the model calls
//! `describe` for the full schema.

use serde::Serialize;
use serde_json::{Map, Value};

use super::descriptor::{Source, ToolDescriptor};

pub const MAX_DESCRIPTION_CHARS: usize = 240;
pub const MAX_SIGNATURE_CHARS: usize = 320;
/// Properties rendered per object; an object with more makes the signature `"unknown"`.
pub const MAX_SIGNATURE_PROPERTIES: usize = 16;
/// Object nesting rendered; deeper objects render as `object`.
pub const MAX_SIGNATURE_DEPTH: usize = 3;
/// Enum values rendered as a literal union; more render as the base type.
const MAX_ENUM_VALUES: usize = 6;
pub const UNKNOWN_SIGNATURE: &str = "unknown";

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CompactDescriptor {
    pub id: String,
    pub source: Source,
    pub source_name: String,
    pub name: String,
    pub label: String,
    pub description: String,
    pub input: String,
}

impl CompactDescriptor {
    /// `schema` is `tool.input_schema` parsed (the caller parses once for every use).
    pub fn of(tool: &ToolDescriptor, schema: &Value) -> Self {
        CompactDescriptor {
            id: tool.id(),
            source: tool.source,
            source_name: tool.source_name.clone(),
            name: tool.name.clone(),
            label: tool.label.clone().unwrap_or_else(|| label_of(&tool.name)),
            description: cut(
                &collapse_whitespace(&tool.description),
                MAX_DESCRIPTION_CHARS,
            ),
            input: if tool.source.is_trusted() {
                signature(schema)
            } else {
                UNKNOWN_SIGNATURE.to_string()
            },
        }
    }
}

/// `create_issue` -> `Create issue`: a readable label when the descriptor has none.
fn label_of(name: &str) -> String {
    let words: Vec<&str> = name
        .split(['_', '-', '.', '/'])
        .filter(|w| !w.is_empty())
        .collect();
    let mut label = words.join(" ");
    if let Some(first) = label.get(..1) {
        label = first.to_uppercase() + &label[1..];
    }
    label
}

pub fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Cuts `text` to at most `max` characters, on a char boundary, marking the cut with `…`.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

/// The TypeScript-like signature of an input schema, or `"unknown"` when it is too large.
pub fn signature(schema: &Value) -> String {
    let mut budget = Budget { chars: 0 };
    match render(schema, 0, &mut budget) {
        Some(s) if s.chars().count() <= MAX_SIGNATURE_CHARS => s,
        _ => UNKNOWN_SIGNATURE.to_string(),
    }
}

struct Budget {
    chars: usize,
}

impl Budget {
    /// Stops rendering early once the output cannot fit, so a huge schema costs little.
    fn spend(&mut self, s: &str) -> Option<()> {
        self.chars += s.len();
        (self.chars <= MAX_SIGNATURE_CHARS * 4).then_some(())
    }
}

fn render(schema: &Value, depth: usize, budget: &mut Budget) -> Option<String> {
    let Some(obj) = schema.as_object() else {
        // `true` accepts anything; `false` nothing.
        return Some(if schema == &Value::Bool(false) {
            "never".into()
        } else {
            "unknown".into()
        });
    };
    let out = render_object_schema(obj, depth, budget)?;
    budget.spend(&out)?;
    Some(out)
}

fn render_object_schema(
    obj: &Map<String, Value>,
    depth: usize,
    budget: &mut Budget,
) -> Option<String> {
    if let Some(c) = obj.get("const") {
        return Some(literal(c));
    }
    if let Some(Value::Array(values)) = obj.get("enum")
        && !values.is_empty()
        && values.len() <= MAX_ENUM_VALUES
    {
        return Some(values.iter().map(literal).collect::<Vec<_>>().join(" | "));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = obj.get(key) {
            let parts = options
                .iter()
                .take(MAX_ENUM_VALUES + 1)
                .map(|o| render(o, depth, budget))
                .collect::<Option<Vec<_>>>()?;
            if parts.len() > MAX_ENUM_VALUES {
                return Some("unknown".into());
            }
            return Some(dedup(parts).join(" | "));
        }
    }
    if obj.contains_key("$ref") || obj.contains_key("allOf") {
        return Some("unknown".into());
    }
    match obj.get("type") {
        Some(Value::String(t)) => render_type(t, obj, depth, budget),
        Some(Value::Array(types)) => {
            let parts = types
                .iter()
                .filter_map(Value::as_str)
                .map(|t| render_type(t, obj, depth, budget))
                .collect::<Option<Vec<_>>>()?;
            Some(if parts.is_empty() {
                "unknown".into()
            } else {
                dedup(parts).join(" | ")
            })
        }
        _ if obj.contains_key("properties") => render_type("object", obj, depth, budget),
        _ => Some("unknown".into()),
    }
}

fn render_type(
    t: &str,
    obj: &Map<String, Value>,
    depth: usize,
    budget: &mut Budget,
) -> Option<String> {
    Some(match t {
        "string" => "string".into(),
        "integer" | "number" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => {
            let item = match obj.get("items") {
                Some(items) => render(items, depth, budget)?,
                None => "unknown".into(),
            };
            if item.contains(' ') {
                format!("({item})[]")
            } else {
                format!("{item}[]")
            }
        }
        "object" => render_properties(obj, depth, budget)?,
        _ => "unknown".into(),
    })
}

fn render_properties(
    obj: &Map<String, Value>,
    depth: usize,
    budget: &mut Budget,
) -> Option<String> {
    let props = obj.get("properties").and_then(Value::as_object);
    let Some(props) = props.filter(|p| !p.is_empty()) else {
        return Some(match obj.get("additionalProperties") {
            Some(v @ Value::Object(_)) if depth < MAX_SIGNATURE_DEPTH => {
                format!("Record<string, {}>", render(v, depth + 1, budget)?)
            }
            Some(Value::Object(_)) | Some(Value::Bool(true)) => "Record<string, unknown>".into(),
            _ => "{}".into(),
        });
    };
    if depth >= MAX_SIGNATURE_DEPTH {
        return Some("object".into());
    }
    if props.len() > MAX_SIGNATURE_PROPERTIES {
        return None;
    }
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields = Vec::with_capacity(props.len());
    for (name, prop) in props {
        let optional = if required.contains(&name.as_str()) {
            ""
        } else {
            "?"
        };
        let key = if is_identifier(name) {
            name.clone()
        } else {
            serde_json::to_string(name).unwrap_or_default()
        };
        let field = format!("{key}{optional}: {}", render(prop, depth + 1, budget)?);
        budget.spend(&field)?;
        fields.push(field);
    }
    Some(format!("{{ {} }}", fields.join("; ")))
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

fn literal(v: &Value) -> String {
    match v {
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => v.to_string(),
        _ => "unknown".into(),
    }
}

fn dedup(parts: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(parts.len());
    for p in parts {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_required_and_optional_fields() {
        let s = signature(&json!({
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "body": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["title"]
        }));
        assert_eq!(s, "{ title: string; body?: string; labels?: string[] }");
    }

    #[test]
    fn renders_enums_unions_nesting_and_records() {
        let s = signature(&json!({
            "type": "object",
            "properties": {
                "state": {"type": "string", "enum": ["open", "closed"]},
                "limit": {"type": ["integer", "null"]},
                "when": {"type": "object", "properties": {"start": {"type": "string"}}, "required": ["start"]},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
                "meta": {"type": "object", "additionalProperties": {"type": "string"}},
                "any": {},
                "weird-key": {"type": "boolean"}
            },
            "required": ["state"]
        }));
        assert_eq!(
            s,
            "{ state: \"open\" | \"closed\"; limit?: number | null; when?: { start: string }; tags?: (\"a\" | \"b\")[]; meta?: Record<string, string>; any?: unknown; \"weird-key\"?: boolean }"
        );
    }

    #[test]
    fn depth_is_bounded() {
        let mut schema = json!({"type": "string"});
        for _ in 0..40 {
            schema = json!({"type": "object", "properties": {"a": schema}});
        }
        assert_eq!(signature(&schema), "{ a?: { a?: { a?: object } } }");
    }

    #[test]
    fn too_many_properties_or_too_long_is_unknown() {
        let mut props = Map::new();
        for i in 0..40 {
            props.insert(format!("p{i}"), json!({"type": "string"}));
        }
        assert_eq!(
            signature(&json!({"type": "object", "properties": props})),
            "unknown"
        );
        let mut props = Map::new();
        for i in 0..12 {
            props.insert(
                format!("a_rather_long_property_name_{i}"),
                json!({"type": "string"}),
            );
        }
        assert_eq!(
            signature(&json!({"type": "object", "properties": props})),
            "unknown"
        );
    }

    #[test]
    fn empty_and_odd_schemas() {
        assert_eq!(signature(&json!({"type": "object"})), "{}");
        assert_eq!(
            signature(&json!({"type": "object", "properties": {}})),
            "{}"
        );
        assert_eq!(signature(&json!({"$ref": "#/defs/x"})), "unknown");
        assert_eq!(signature(&json!(true)), "unknown");
    }

    #[test]
    fn descriptions_are_collapsed_and_cut() {
        assert_eq!(collapse_whitespace(" a \n\t b  "), "a b");
        let long = "word ".repeat(100);
        let c = cut(&collapse_whitespace(&long), MAX_DESCRIPTION_CHARS);
        assert!(c.chars().count() <= MAX_DESCRIPTION_CHARS);
        assert!(c.ends_with('…'));
        assert_eq!(cut("é".repeat(10).as_str(), 5), "éééé…");
    }

    #[test]
    fn labels_default_from_the_name() {
        assert_eq!(label_of("create_issue"), "Create issue");
        assert_eq!(label_of("notion-search"), "Notion search");
    }
}
