//! Tool schemas as each format accepts them: the author's schema with a depth cap, OpenAI
//! strict mode's rewrite, and Gemini's OpenAPI 3.0 subset.
//!
//! Every rewrite keeps key order (bodies are byte-stable, see [`super::payload`]) and only
//! loosens what the model is held to: the dispatcher validates arguments against the tool's
//! original schema, whatever was sent. JSON nested deeper than [`MAX_SCHEMA_DEPTH`] levels
//! is cut: a container that starts past the limit is replaced by `{}` (by `{"type":
//! "object"}` in the Gemini subset, by an empty strict object in strict mode). The catalog
//! already refuses schemas nested over 32 levels; the cap is what keeps any other input from
//! recursing without bound. Nothing here knows about tool names or bodies.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

/// JSON nesting depth past which a schema is cut (see the module documentation).
pub const MAX_SCHEMA_DEPTH: usize = 64;
/// The tool's schema, or the empty object schema when it is not a JSON object.
fn root_schema(parameters: &Value) -> Cow<'_, Value> {
    if parameters.is_object() {
        Cow::Borrowed(parameters)
    } else {
        Cow::Owned(json!({"type": "object", "properties": {}}))
    }
}

/// The schema unchanged but for the depth cap.
pub(super) fn plain_schema(parameters: &Value) -> Value {
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

/// The schema strict mode accepts for a tool's `parameters` (the empty object schema when
/// they are not an object):
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
pub(super) fn strict_parameters(parameters: &Value) -> Value {
    strict_schema(&root_schema(parameters), 0)
}

/// [`strict_parameters`] for a subschema found at JSON nesting `depth`.
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

/// `schema` that also accepts `null` (see [`strict_parameters`]).
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
pub(super) fn gemini_parameters(parameters: &Value) -> Option<Value> {
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
