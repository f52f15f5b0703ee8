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
//! - `parameters` that is not a JSON object is sent as `{"type": "object", "properties":
//!   {}}`, since every format requires an object schema;
//! - JSON nested deeper than [`MAX_SCHEMA_DEPTH`] levels is cut: a container that starts
//!   past the limit is replaced by `{}` (by `{"type": "object"}` in the Gemini subset, by an
//!   empty strict object in strict mode). The catalog already refuses schemas nested over
//!   32 levels; the cap is what keeps any other input from recursing without bound.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{Provider, Request, ToolSpec, WireNames};

/// JSON nesting depth past which a schema is cut (see the module documentation).
pub const MAX_SCHEMA_DEPTH: usize = 64;
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
                            strict_schema(&root_schema(&t.parameters), 0)
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

/// The tool's schema, or the empty object schema when it is not a JSON object.
fn root_schema(parameters: &Value) -> Cow<'_, Value> {
    if parameters.is_object() {
        Cow::Borrowed(parameters)
    } else {
        Cow::Owned(json!({"type": "object", "properties": {}}))
    }
}

/// The schema unchanged but for the depth cap.
fn plain_schema(parameters: &Value) -> Value {
    bounded_copy(&root_schema(parameters), 0)
}

/// A copy of `value` (found at nesting `depth`) in which containers starting at
/// [`MAX_SCHEMA_DEPTH`] or deeper are `{}`.
fn bounded_copy(value: &Value, depth: usize) -> Value {
    match value {
        Value::Object(map) => {
            if depth >= MAX_SCHEMA_DEPTH {
                return json!({});
            }
            Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), bounded_copy(v, depth + 1)))
                    .collect(),
            )
        }
        Value::Array(items) => {
            if depth >= MAX_SCHEMA_DEPTH {
                return json!({});
            }
            Value::Array(items.iter().map(|v| bounded_copy(v, depth + 1)).collect())
        }
        scalar => scalar.clone(),
    }
}

// ---------------------------------------------------------------------------------------
// OpenAI strict mode
// ---------------------------------------------------------------------------------------

/// Keywords removed from every subschema in strict mode. Strict mode (structured outputs)
/// refuses a schema that uses a keyword it does not support, and these are the validation
/// keywords it documents as unsupported or only recently and partly supported:
/// `default` (strict mode has no defaults: every property is sent), the string bounds
/// `minLength`, `maxLength`, `pattern`, the number bounds `minimum`, `maximum`, and the array
/// bounds `minItems`, `maxItems`, `uniqueItems`. Dropping them loosens what the model is
/// held to, never what we accept: the dispatcher still validates the arguments against the
/// tool's original schema. `format`, `description`, `enum`, `const`, `examples`, `$ref` and
/// `title` stay.
pub const STRICT_DROPPED_KEYWORDS: [&str; 9] = [
    "default",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "uniqueItems",
];

/// The schema strict mode accepts for `schema` (found at JSON nesting `depth`):
///
/// - every object schema (`type` `"object"` or including it, or no `type` but
///   `properties`) gets `properties` (`{}` when absent), `required` listing all its
///   properties in their order, and `"additionalProperties": false`. A free-form object
///   (`additionalProperties` a schema, or no properties) therefore becomes the empty object:
///   strict mode has no way to say "any keys";
/// - a property that was not required becomes nullable, so the model can still leave it
///   out by sending `null`: a simple `type` `T` becomes `[T, "null"]` (and `null` joins its
///   `enum`), a schema that is only an `anyOf` gets a `{"type": "null"}` member, any other
///   schema is wrapped as `{"anyOf": [schema, {"type": "null"}]}`;
/// - `oneOf` becomes `anyOf` (strict mode has only `anyOf`; exclusivity is checked by the
///   dispatcher against the original schema);
/// - an `allOf` of plain objects is merged first (see [`merge_all_of`]): left as it is,
///   each member would get `"additionalProperties": false` and refuse the others'
///   properties, so no value could satisfy them all. Any other `allOf` is kept, its members
///   made strict;
/// - [`STRICT_DROPPED_KEYWORDS`] are removed;
/// - this applies recursively through `properties`, `items` (a schema or a tuple),
///   `anyOf`/`oneOf`/`allOf` and `$defs`/`definitions`; other keywords are copied.
///
/// Property names are never mistaken for keywords: a property called `default` stays.
fn strict_schema(schema: &Value, depth: usize) -> Value {
    let Value::Object(map) = schema else {
        return bounded_copy(schema, depth);
    };
    if depth >= MAX_SCHEMA_DEPTH {
        return json!({"type": "object", "properties": {}, "required": [],
            "additionalProperties": false});
    }
    if let Some(merged) = merge_all_of(map, depth) {
        return strict_schema(&Value::Object(merged), depth);
    }
    let required: Vec<&str> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let has_any_of = map.contains_key("anyOf");
    let mut out = Map::new();
    for (key, value) in map {
        let key = key.as_str();
        if STRICT_DROPPED_KEYWORDS.contains(&key) {
            continue;
        }
        let converted = match (key, value) {
            ("properties", Value::Object(props)) => Value::Object(
                props
                    .iter()
                    .map(|(name, prop)| {
                        let strict = strict_schema(prop, depth + 2);
                        let strict = if required.contains(&name.as_str()) {
                            strict
                        } else {
                            nullable(strict)
                        };
                        (name.clone(), strict)
                    })
                    .collect(),
            ),
            ("items", Value::Object(_)) => strict_schema(value, depth + 1),
            ("items" | "anyOf" | "oneOf" | "allOf", Value::Array(members)) => Value::Array(
                members
                    .iter()
                    .map(|m| strict_schema(m, depth + 2))
                    .collect(),
            ),
            ("$defs" | "definitions", Value::Object(defs)) => Value::Object(
                defs.iter()
                    .map(|(name, def)| (name.clone(), strict_schema(def, depth + 2)))
                    .collect(),
            ),
            _ => bounded_copy(value, depth + 1),
        };
        let key = if key == "oneOf" && !has_any_of {
            "anyOf"
        } else {
            key
        };
        out.insert(key.to_string(), converted);
    }
    if is_object_schema(map) {
        let names: Vec<Value> = match out.get("properties") {
            Some(Value::Object(props)) => props.keys().map(|k| json!(k)).collect(),
            _ => {
                out.insert("properties".into(), json!({}));
                Vec::new()
            }
        };
        out.insert("required".into(), Value::Array(names));
        out.insert("additionalProperties".into(), json!(false));
    }
    Value::Object(out)
}

fn is_object_schema(map: &Map<String, Value>) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        _ => map.contains_key("properties"),
    }
}

/// `schema` that also accepts `null` (see [`strict_schema`]).
fn nullable(schema: Value) -> Value {
    let Value::Object(mut map) = schema else {
        // `true` accepts null already; `false` stays what its author wrote.
        return schema;
    };
    let null = json!("null");
    match map.get_mut("type") {
        Some(Value::String(t)) if t == "null" => return Value::Object(map),
        Some(ty @ Value::String(_)) => {
            let t = ty.take();
            *ty = json!([t, "null"]);
            add_null_to_enum(&mut map);
            return Value::Object(map);
        }
        Some(Value::Array(types)) => {
            if !types.contains(&null) {
                types.push(null);
            }
            add_null_to_enum(&mut map);
            return Value::Object(map);
        }
        _ => {}
    }
    let only_any_of = map
        .keys()
        .all(|k| k == "anyOf" || k == "description" || k == "title");
    if only_any_of && let Some(Value::Array(members)) = map.get_mut("anyOf") {
        let null_member = json!({"type": "null"});
        if !members.contains(&null_member) {
            members.push(null_member);
        }
        return Value::Object(map);
    }
    json!({"anyOf": [Value::Object(map), {"type": "null"}]})
}

fn add_null_to_enum(map: &mut Map<String, Value>) {
    if let Some(Value::Array(values)) = map.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}

/// Keywords that make an `allOf` member more than a plain object.
const NOT_PLAIN_OBJECT: [&str; 7] = ["anyOf", "oneOf", "allOf", "$ref", "items", "enum", "const"];

/// `map` (at nesting `depth`) with an `allOf` of plain objects merged in: one object
/// schema with the members' `properties` after its own (a name defined twice keeps its
/// first definition) and the union of every `required`. `None` when there is no `allOf`, a
/// member is not a plain inline object (no `type` or `type: "object"`, none of
/// [`NOT_PLAIN_OBJECT`]) or the schema itself is not an object. Keeping the first definition
/// loosens a property defined twice; the dispatcher still validates against the original.
fn merge_all_of(map: &Map<String, Value>, depth: usize) -> Option<Map<String, Value>> {
    let Some(Value::Array(members)) = map.get("allOf") else {
        return None;
    };
    if map.get("type").is_some_and(|t| t != "object") {
        return None;
    }
    let mut objects = Vec::with_capacity(members.len());
    for member in members {
        let member = member.as_object()?;
        let plain = member.get("type").is_none_or(|t| t == "object")
            && !NOT_PLAIN_OBJECT.iter().any(|k| member.contains_key(*k));
        if !plain {
            return None;
        }
        objects.push(member);
    }
    let mut out: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| k.as_str() != "allOf")
        .map(|(k, v)| (k.clone(), bounded_copy(v, depth + 1)))
        .collect();
    if !out.contains_key("type") {
        out.insert("type".into(), json!("object"));
    }
    // Taken out in place (`mem::take` leaves `null` at the key's position) so that the
    // merged values go back where the author put them.
    let mut properties = match out.get_mut("properties").map(std::mem::take) {
        Some(Value::Object(p)) => p,
        _ => Map::new(),
    };
    let mut required = match out.get_mut("required").map(std::mem::take) {
        Some(Value::Array(r)) => r,
        _ => Vec::new(),
    };
    for member in objects {
        if let Some(Value::Object(props)) = member.get("properties") {
            for (name, prop) in props {
                if !properties.contains_key(name) {
                    properties.insert(name.clone(), bounded_copy(prop, depth + 2));
                }
            }
        }
        if let Some(Value::Array(names)) = member.get("required") {
            for name in names {
                if name.is_string() && !required.contains(name) {
                    required.push(name.clone());
                }
            }
        }
    }
    out.insert("properties".into(), Value::Object(properties));
    if required.is_empty() {
        out.shift_remove("required");
    } else {
        out.insert("required".into(), Value::Array(required));
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------
// Gemini's OpenAPI 3.0 subset (`parameters`)
// ---------------------------------------------------------------------------------------

/// The `parameters` of a legacy Gemini declaration, or `None` when the tool takes no
/// arguments: Gemini refuses an object schema with empty `properties`
/// ("should be non-empty for OBJECT type"), and a declaration without `parameters` is how
/// it spells "no arguments". The root is always `type: object`.
fn gemini_parameters(parameters: &Value) -> Option<Value> {
    let mut root = match gemini_schema(&root_schema(parameters), 0) {
        Value::Object(map) => map,
        _ => return None,
    };
    if !matches!(root.get("properties"), Some(Value::Object(p)) if !p.is_empty()) {
        return None;
    }
    root.insert("type".into(), json!("object"));
    Some(Value::Object(root))
}

const GEMINI_TYPES: [&str; 6] = ["string", "number", "integer", "boolean", "array", "object"];

/// `schema` reduced to the OpenAPI 3.0 subset Gemini's `parameters` accepts. The rule:
///
/// - kept: `type` (one type), `format`, `description`, `nullable`, `enum`, `properties`,
///   `required`, `items`, `anyOf`, written in that key order;
/// - `type: [T, "null"]` becomes `type: T, nullable: true`; several non-null types become an
///   `anyOf` of one schema per type; `type: "null"` alone becomes `nullable: true`;
/// - a missing `type` is inferred: `properties` means object, `items` array, `enum` string;
/// - `enum` is kept only when its values are strings (a `null` among them makes the schema
///   nullable); `const` that is a string becomes a one-value `enum`; others are dropped;
/// - `format` is kept only where Gemini knows it: `enum` and `date-time` on strings, `int32`
///   and `int64` on integers, `float`, `double`, `int32` and `int64` on numbers;
/// - `$ref` replaces the whole subschema by `{"type": "object"}`: the subset has no
///   references, and an object is the least wrong guess for what a definition holds;
/// - `oneOf` becomes `anyOf` (joined to an existing `anyOf`);
/// - an `allOf` of plain objects is merged into the schema (see [`merge_all_of`]); any
///   other `allOf` is replaced by its first member, whose keys fill the ones the schema
///   lacks;
/// - `required` keeps only names that are properties (Gemini refuses the others); empty
///   `properties` and `required` are left out;
/// - `items` given as a tuple keeps its first schema;
/// - everything else is dropped: `additionalProperties`, `patternProperties`, `$schema`,
///   `$id`, `$defs`, `definitions`, `default`, `title`, `examples`, `minLength`,
///   `maxLength`, `pattern`, `minimum`, `maximum`, `minItems`, `maxItems`, `uniqueItems`,
///   `not`, `if`/`then`/`else` and any unknown keyword. Dropped constraints are still
///   enforced by the dispatcher, which validates against the original schema.
fn gemini_schema(schema: &Value, depth: usize) -> Value {
    let Value::Object(map) = schema else {
        return json!({"type": "object"});
    };
    if depth >= MAX_SCHEMA_DEPTH || map.contains_key("$ref") {
        return json!({"type": "object"});
    }
    if let Some(merged) = merge_all_of(map, depth) {
        return gemini_schema(&Value::Object(merged), depth);
    }

    let mut ty: Option<String> = None;
    let mut nullable = matches!(map.get("nullable"), Some(Value::Bool(true)));
    let mut any_of: Vec<Value> = Vec::new();
    match map.get("type") {
        Some(Value::String(t)) if t == "null" => nullable = true,
        Some(Value::String(t)) if GEMINI_TYPES.contains(&t.as_str()) => ty = Some(t.clone()),
        Some(Value::Array(types)) => {
            let mut named: Vec<&str> = Vec::new();
            for t in types.iter().filter_map(Value::as_str) {
                if t == "null" {
                    nullable = true;
                } else if GEMINI_TYPES.contains(&t) && !named.contains(&t) {
                    named.push(t);
                }
            }
            match named.as_slice() {
                [] => {}
                [one] => ty = Some((*one).to_string()),
                many => any_of.extend(many.iter().map(|t| json!({"type": t}))),
            }
        }
        _ => {}
    }

    let mut enum_values: Option<Vec<Value>> = None;
    if let Some(Value::Array(values)) = map.get("enum") {
        let strings: Vec<Value> = values.iter().filter(|v| v.is_string()).cloned().collect();
        let only_strings = values.iter().all(|v| v.is_string() || v.is_null());
        if values.iter().any(Value::is_null) {
            nullable = true;
        }
        if !strings.is_empty() && only_strings {
            enum_values = Some(strings);
        }
    } else if let Some(Value::String(c)) = map.get("const") {
        enum_values = Some(vec![json!(c)]);
    }

    let mut properties = Map::new();
    if let Some(Value::Object(props)) = map.get("properties") {
        for (name, prop) in props {
            properties.insert(name.clone(), gemini_schema(prop, depth + 2));
        }
    }
    let mut required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let items = match map.get("items") {
        Some(item @ Value::Object(_)) => Some(gemini_schema(item, depth + 1)),
        Some(Value::Array(tuple)) => tuple.first().map(|first| gemini_schema(first, depth + 2)),
        _ => None,
    };
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(members)) = map.get(key) {
            any_of.extend(members.iter().map(|m| gemini_schema(m, depth + 2)));
        }
    }

    // `allOf` that `merge_all_of` could not merge: its first member fills the gaps.
    let fill_from = match map.get("allOf") {
        Some(Value::Array(members)) => {
            members
                .first()
                .and_then(|first| match gemini_schema(first, depth + 2) {
                    Value::Object(first) => Some(first),
                    _ => None,
                })
        }
        _ => None,
    };

    if ty.is_none() {
        if !properties.is_empty() {
            ty = Some("object".into());
        } else if items.is_some() {
            ty = Some("array".into());
        } else if enum_values.is_some() {
            ty = Some("string".into());
        }
    }
    if enum_values.is_some() && ty.as_deref() != Some("string") {
        enum_values = None;
    }
    let format = map
        .get("format")
        .and_then(Value::as_str)
        .filter(|f| gemini_format_allowed(ty.as_deref(), f));
    required.retain(|name| properties.contains_key(name));

    let mut out = Map::new();
    if let Some(ty) = ty {
        out.insert("type".into(), json!(ty));
    }
    if let Some(format) = format {
        out.insert("format".into(), json!(format));
    }
    if let Some(Value::String(description)) = map.get("description") {
        out.insert("description".into(), json!(description));
    }
    if nullable {
        out.insert("nullable".into(), json!(true));
    }
    if let Some(values) = enum_values {
        out.insert("enum".into(), Value::Array(values));
    }
    if !properties.is_empty() {
        out.insert("properties".into(), Value::Object(properties));
    }
    if !required.is_empty() {
        out.insert(
            "required".into(),
            Value::Array(required.into_iter().map(Value::String).collect()),
        );
    }
    if let Some(items) = items {
        out.insert("items".into(), items);
    }
    if !any_of.is_empty() {
        out.insert("anyOf".into(), Value::Array(any_of));
    }
    if let Some(first) = fill_from {
        for (key, value) in first {
            if !out.contains_key(&key) {
                out.insert(key, value);
            }
        }
    }
    Value::Object(out)
}

fn gemini_format_allowed(ty: Option<&str>, format: &str) -> bool {
    match ty {
        Some("string") => matches!(format, "enum" | "date-time"),
        Some("integer") => matches!(format, "int32" | "int64"),
        Some("number") => matches!(format, "int32" | "int64" | "float" | "double"),
        _ => false,
    }
}
