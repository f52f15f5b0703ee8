//! What a schema costs to validate against once its references are followed, bounded when
//! a tool is loaded (review 20 F1: 1.3 KB of chained `$ref`s, `d0 = allOf[d1, d1]` forty
//! levels down, stood for 2^40 subschemas; two calls validating against it held both of
//! the host's runtime workers, past every deadline, and `mcp serve` answered nothing).
//!
//! The cost is the number of subschemas the schema stands for with every reference
//! expanded, shared targets counted each time they are used (that is what validation
//! walks). Refused: more than [`MAX_EXPANDED_NODES`]; references into other documents
//! (only `#...` inside the schema is read, so nothing can hide from the count); a reference
//! that points at nothing; a chain of references more than [`MAX_REFERENCE_CHAIN`] deep;
//! and a reference cycle that comes back to the same value without going into it (a
//! validator following it never ends). A cycle through `properties`, `items` and the like
//! is a recursive schema, bounded by the value's own depth, and counts once.

use std::collections::HashMap;

use serde_json::Value;

/// The most subschemas a schema may stand for once expanded. Large real schemas (a whole
/// API's request body) have a few thousand.
pub const MAX_EXPANDED_NODES: usize = 20_000;

/// The deepest chain of references followed.
pub const MAX_REFERENCE_CHAIN: usize = 64;

/// Keywords whose subschemas apply to a part of the value, not the value itself: a
/// reference cycle through one of them descends the value.
const DESCENDING: &[&str] = &[
    "properties",
    "patternProperties",
    "additionalProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
];

/// Keywords whose values are data, not schemas: a `$ref` string in them is not a reference.
const DATA: &[&str] = &["const", "enum", "default", "examples", "example"];

/// Keywords whose values map names to schemas: their keys are names, never keywords (a
/// property named `enum` or `default` is a schema like any other; skipped as data, it hid
/// 2^40 subschemas from the count: sandbox round 37 F1).
const NAMED: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// What a node of the walk is: a schema (its keys are keywords), or a map of names to
/// schemas.
#[derive(Clone, Copy, PartialEq)]
enum Node {
    Schema,
    Names,
}

/// The children of `v`, each with what it is.
fn children(v: &Value, node: Node) -> Vec<(&str, &Value, Node)> {
    match v {
        Value::Object(map) => map
            .iter()
            .filter(|(key, _)| node == Node::Names || !DATA.contains(&key.as_str()))
            .map(|(key, child)| {
                let kind = if node == Node::Schema && NAMED.contains(&key.as_str()) {
                    Node::Names
                } else {
                    Node::Schema
                };
                (key.as_str(), child, kind)
            })
            .collect(),
        Value::Array(items) => items.iter().map(|i| ("", i, Node::Schema)).collect(),
        _ => Vec::new(),
    }
}

/// The most regular expressions (`pattern`s and `patternProperties` keys) a schema may
/// hold: each is compiled, within a size bound, at the tool's first call (sandbox round 36
/// F1: 400 of them took 1.4 s and 388 MB to compile). Real schemas have a few.
pub const MAX_PATTERNS: usize = 64;

/// The regular expressions a schema holds, counted where they are written (a validator
/// compiles a referenced schema once).
pub fn patterns(schema: &Value) -> usize {
    let mut count = 0usize;
    let mut stack = vec![(schema, Node::Schema)];
    while let Some((v, node)) = stack.pop() {
        for (key, child, kind) in children(v, node) {
            if node == Node::Schema {
                match (key, child) {
                    ("pattern", Value::String(_)) => count += 1,
                    ("patternProperties", Value::Object(by)) => count += by.len(),
                    _ => {}
                }
            }
            stack.push((child, kind));
        }
    }
    count
}

/// The schema's expanded size, or why it is refused.
pub fn expanded_nodes(schema: &Value) -> Result<usize, String> {
    one_resource(schema)?;
    let mut counter = Counter {
        root: schema,
        memo: HashMap::new(),
        path: Vec::new(),
        returns: HashMap::new(),
        recursive: std::collections::HashSet::new(),
        anchors: None,
    };
    counter.cost(schema, Vec::new())
}

/// The count reads every `#...` reference against the document's root, and an anchor as
/// the one place that declares it. A validator reads them against the nearest enclosing
/// `$id` and its own anchors: a `$id` below the root, or an anchor declared twice, let the
/// count cost a cheap target while the validator walked a 2^40 one (sandbox round 38 F1).
/// Such schemas are refused: tool schemas are one resource (a `$id` at the root, and
/// legacy `"$id": "#name"` anchors, are fine).
fn one_resource(schema: &Value) -> Result<(), String> {
    let mut anchors: Vec<&str> = Vec::new();
    let mut stack = vec![(schema, Node::Schema, true)];
    while let Some((v, node, root)) = stack.pop() {
        if let (Value::Object(map), Node::Schema) = (v, node) {
            for key in ["$id", "id"] {
                if let Some(Value::String(id)) = map.get(key) {
                    match id.strip_prefix('#') {
                        Some(name) if !name.is_empty() => anchors.push(name),
                        _ if root => {}
                        _ => {
                            return Err(format!(
                                "a `{key}` below the schema's root (`{}`) starts a resource of its own; tool schemas are one resource",
                                crate::catalog::compact::cut(id, 80)
                            ));
                        }
                    }
                }
            }
            for key in ["$anchor", "$dynamicAnchor"] {
                if let Some(Value::String(name)) = map.get(key) {
                    anchors.push(name);
                }
            }
        }
        for (_, child, kind) in children(v, node) {
            stack.push((child, kind, false));
        }
    }
    anchors.sort_unstable();
    if let Some(w) = anchors.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!(
            "the anchor `{}` is declared more than once",
            crate::catalog::compact::cut(w[0], 80)
        ));
    }
    Ok(())
}

/// One step into the value: an item or a member, by index or name, or any.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Item(Option<usize>),
    Member(Option<String>),
}

impl Step {
    /// Whether the two can be the same part of one value.
    fn meets(&self, other: &Step) -> bool {
        match (self, other) {
            (Step::Item(a), Step::Item(b)) => a.is_none() || b.is_none() || a == b,
            (Step::Member(a), Step::Member(b)) => a.is_none() || b.is_none() || a == b,
            _ => false,
        }
    }
}

/// Where a child keyword's subschema applies, from where its parent's does.
fn step(parent_key: &str, key: &str, parent: Node) -> Option<Step> {
    match (parent, parent_key) {
        (Node::Names, "properties") => Some(Step::Member(Some(key.to_string()))),
        (Node::Names, "patternProperties") => Some(Step::Member(None)),
        _ => match key {
            "items" | "additionalItems" | "contains" | "unevaluatedItems" => Some(Step::Item(None)),
            "additionalProperties" | "unevaluatedProperties" | "propertyNames" => {
                Some(Step::Member(None))
            }
            _ => None,
        },
    }
}

struct Counter<'a> {
    root: &'a Value,
    /// By target (its address in the document: two spellings of one reference, `$defs`
    /// and `%24defs`, are one target; sandbox round 39 F3).
    memo: HashMap<*const Value, usize>,
    /// The references being expanded, outermost first, by target, each with whether the
    /// walk that met it had gone into the value since the reference before it, and where
    /// in the value it was met.
    path: Vec<(*const Value, bool, Vec<Step>)>,
    /// Targets whose cost was counted while a reference they lead back to was still being
    /// expanded: their count holds returns checked in that expansion only, so it is not
    /// reused (round 39 F1: a memo hit skipped the check of a second return).
    recursive: std::collections::HashSet<*const Value>,
    /// Where in the value each reference being expanded came back to itself, from where
    /// it was entered (by its place in `path`).
    returns: HashMap<usize, Vec<Vec<Step>>>,
    /// Every anchor of the schema and the schema that declares it, found by one walk at
    /// the first `#name` reference. Looked for at each reference, a walk of the whole
    /// schema per reference made 3,000 `{"$ref": "#zz"}` beside 4,000 properties cost
    /// 0.45 s to count.
    anchors: Option<HashMap<&'a str, &'a Value>>,
}

impl<'a> Counter<'a> {
    /// The nodes of `node`, its references expanded. The walk of one schema is iterative;
    /// only references recurse, at most [`MAX_REFERENCE_CHAIN`] deep.
    fn cost(&mut self, node: &'a Value, at: Vec<Step>) -> Result<usize, String> {
        let mut total = 0usize;
        let mut stack: Vec<(&Value, bool, Node, &str, Vec<Step>)> =
            vec![(node, false, Node::Schema, "", at)];
        while let Some((v, descended, kind, from, at)) = stack.pop() {
            total = total.saturating_add(1);
            if let (Value::Object(map), Node::Schema) = (v, kind) {
                for key in ["$ref", "$dynamicRef", "$recursiveRef"] {
                    if let Some(Value::String(r)) = map.get(key) {
                        total = total.saturating_add(self.reference(r, descended, &at)?);
                    }
                }
            }
            for (i, (key, child, child_kind)) in children(v, kind).into_iter().enumerate() {
                let descends = kind == Node::Schema && DESCENDING.contains(&key);
                let mut child_at = at.clone();
                child_at.extend(step(from, key, kind));
                // An `items` array (draft 4) or `prefixItems` applies each to its own item.
                if let (Value::Array(_), "items" | "prefixItems") = (v, from) {
                    if let Some(Step::Item(None)) = child_at.last() {
                        child_at.pop();
                    }
                    child_at.push(Step::Item(Some(i)));
                }
                let from = if v.is_array() { from } else { key };
                stack.push((child, descended || descends, child_kind, from, child_at));
            }
            if total > MAX_EXPANDED_NODES {
                return Err(too_costly());
            }
        }
        Ok(total)
    }

    fn reference(&mut self, r: &str, descended: bool, here: &[Step]) -> Result<usize, String> {
        let node = self.resolve(r)?;
        let target: *const Value = node;
        if let Some(at) = self.path.iter().position(|(p, _, _)| *p == target) {
            let goes_in = descended || self.path[at + 1..].iter().any(|(_, d, _)| *d);
            if !goes_in {
                return Err(format!(
                    "the reference `{r}` comes back to itself without going into the value: validating against it never ends"
                ));
            }
            // Where it comes back, from where it was entered. Two returns whose first
            // steps can meet the same part of the value apply it there more than once, at
            // every level: validating costs a power of the value's depth (sandbox round 38
            // F2: `allOf` of four `items` of itself, 4^depth; round 39 F4: returns to the
            // child and the grandchild, 1.6^depth). Returns through different members
            // (`left`, `right`), or to items and members apart, are a tree's, linear.
            let entered = &self.path[at].2;
            let back: Vec<Step> = here.get(entered.len()..).unwrap_or_default().to_vec();
            // Every expansion inside this cycle is counted for this entry only.
            for (p, _, _) in &self.path[at..] {
                self.recursive.insert(*p);
            }
            let seen = self.returns.entry(at).or_default();
            if seen
                .iter()
                .any(|other| match (other.first(), back.first()) {
                    (Some(a), Some(b)) => a.meets(b),
                    _ => true,
                })
            {
                return Err(format!(
                    "the reference `{r}` applies itself more than once to the same part of the value: validating against it costs a power of the value's depth"
                ));
            }
            seen.push(back);
            return Ok(1);
        }
        if let Some(&known) = self.memo.get(&target) {
            return Ok(known);
        }
        if self.path.len() >= MAX_REFERENCE_CHAIN {
            return Err(format!(
                "references chain more than {MAX_REFERENCE_CHAIN} deep"
            ));
        }
        self.path.push((target, descended, here.to_vec()));
        let cost = self.cost(node, here.to_vec());
        self.path.pop();
        self.returns.remove(&self.path.len());
        let cost = cost?;
        if !self.recursive.contains(&target) {
            self.memo.insert(target, cost);
        }
        Ok(cost)
    }

    /// The subschema a reference inside the schema names: `#`, a JSON pointer `#/...`
    /// (percent-decoded), or a plain-name fragment `#name` (an `$anchor`, or a legacy `$id`
    /// of `#name`).
    fn resolve(&mut self, r: &str) -> Result<&'a Value, String> {
        let Some(fragment) = r.strip_prefix('#') else {
            return Err(format!(
                "the reference `{r}` names another document; only references inside the schema (`#/...`) are read"
            ));
        };
        let root = self.root;
        let found = if fragment.is_empty() {
            Some(root)
        } else if fragment.starts_with('/') {
            percent_decode(fragment).and_then(|p| root.pointer(&p))
        } else {
            self.anchors
                .get_or_insert_with(|| anchors(root))
                .get(fragment)
                .copied()
        };
        found.ok_or_else(|| format!("the reference `{r}` points at nothing in the schema"))
    }
}

fn too_costly() -> String {
    format!(
        "the schema stands for more than {MAX_EXPANDED_NODES} subschemas once its references are followed: validating against it would cost that much per call"
    )
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Each anchor of the schema and the schema that declares it, looked for only where
/// schemas are, as a validator indexes them (an `$anchor` inside `examples` data was found
/// first, a cheap decoy for the count while the validator went to the real one: sandbox
/// round 39 F2). A name declared twice is refused before ([`one_resource`]); were it not,
/// the first met would be kept.
fn anchors(root: &Value) -> HashMap<&str, &Value> {
    #[cfg(test)]
    ANCHOR_WALKS.with(|walks| walks.set(walks.get() + 1));
    let mut found = HashMap::new();
    let mut stack = vec![(root, Node::Schema)];
    while let Some((v, node)) = stack.pop() {
        if let (Value::Object(map), Node::Schema) = (v, node) {
            let legacy = map
                .get("$id")
                .and_then(Value::as_str)
                .and_then(|id| id.strip_prefix('#'));
            let declared = [
                map.get("$anchor").and_then(Value::as_str),
                map.get("$dynamicAnchor").and_then(Value::as_str),
                legacy,
            ];
            for name in declared.into_iter().flatten() {
                found.entry(name).or_insert(v);
            }
        }
        stack.extend(children(v, node).into_iter().map(|(_, c, k)| (c, k)));
    }
    found
}

#[cfg(test)]
thread_local! {
    /// The walks [`anchors`] made on this thread: a test counts them.
    static ANCHOR_WALKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Definitions `d0 = allOf[d1, d1]`, ... `d{levels} = {type: string}`, referring to
    /// each other under `base`: 2^levels subschemas.
    fn doubling_defs(base: &str, levels: usize) -> serde_json::Map<String, Value> {
        let mut defs = serde_json::Map::new();
        for i in 0..levels {
            let next = format!("{base}/d{}", i + 1);
            defs.insert(
                format!("d{i}"),
                serde_json::json!({"allOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert(format!("d{levels}"), serde_json::json!({"type": "string"}));
        defs
    }

    /// A recursive reference that applies itself twice to the same part of the value is
    /// refused (4^depth: sandbox round 38 F2); a tree's recursion, through different
    /// members or items and members apart, is not.
    #[test]
    fn a_recursion_that_branches_on_the_same_value_is_refused() {
        use serde_json::json;
        let branching = json!({"$defs": {"n": {"allOf": [
            {"items": {"$ref": "#/$defs/n"}}, {"items": {"$ref": "#/$defs/n"}},
            {"items": {"$ref": "#/$defs/n"}}, {"items": {"$ref": "#/$defs/n"}}]}},
            "properties": {"x": {"$ref": "#/$defs/n"}}});
        assert!(
            expanded_nodes(&branching)
                .unwrap_err()
                .contains("more than once")
        );
        let same_member = json!({"$defs": {"n": {"anyOf": [
            {"properties": {"a": {"$ref": "#/$defs/n"}}},
            {"additionalProperties": {"$ref": "#/$defs/n"}}]}},
            "$ref": "#/$defs/n"});
        assert!(expanded_nodes(&same_member).is_err());
        // Round 39: through one more reference (a memo hit skipped the check), by another
        // spelling of the same reference, and returns at different depths.
        let through = json!({"$defs": {"n": {"allOf": [
            {"items": {"$ref": "#/$defs/m"}}, {"items": {"$ref": "#/$defs/m"}}]},
            "m": {"$ref": "#/$defs/n"}}, "properties": {"x": {"$ref": "#/$defs/n"}}});
        let spelled = json!({"$defs": {"n": {"allOf": [
            {"items": {"$ref": "#/$defs/n"}}, {"items": {"$ref": "#/%24defs/n"}}]}},
            "properties": {"x": {"$ref": "#/$defs/n"}}});
        let depths = json!({"$defs": {"n": {"allOf": [
            {"items": {"$ref": "#/$defs/n"}}, {"items": {"items": {"$ref": "#/$defs/n"}}}]}},
            "properties": {"x": {"$ref": "#/$defs/n"}}});
        for schema in [through, spelled, depths] {
            assert!(expanded_nodes(&schema).is_err(), "{schema}");
        }
        // Anchors in data are not anchors: the decoy does not stand for the real chain.
        let mut defs = serde_json::Map::new();
        for i in 0..40 {
            let next = format!("#a{}", i + 1);
            defs.insert(
                format!("d{i}"),
                json!({"$anchor": format!("a{i}"), "allOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert("d40".into(), json!({"$anchor": "a40", "type": "string"}));
        let decoys: Vec<Value> = (0..41)
            .map(|i| json!({"$anchor": format!("a{i}")}))
            .collect();
        let decoyed =
            json!({"$defs": defs, "properties": {"x": {"$ref": "#a0"}}, "examples": decoys});
        assert!(expanded_nodes(&decoyed).is_err());
        for fine in [
            // Any JSON value.
            json!({"$defs": {"v": {"anyOf": [{"type": "string"},
                {"type": "array", "items": {"$ref": "#/$defs/v"}},
                {"type": "object", "additionalProperties": {"$ref": "#/$defs/v"}}]}},
                "$ref": "#/$defs/v"}),
            // A binary tree, a list, a tree of children, tuples.
            json!({"$defs": {"t": {"properties": {"left": {"$ref": "#/$defs/t"}, "right": {"$ref": "#/$defs/t"}}}},
                "$ref": "#/$defs/t"}),
            json!({"$defs": {"l": {"properties": {"next": {"$ref": "#/$defs/l"}}}}, "$ref": "#/$defs/l"}),
            json!({"$defs": {"c": {"properties": {"children": {"items": {"$ref": "#/$defs/c"}}}}}, "$ref": "#/$defs/c"}),
            json!({"$defs": {"p": {"prefixItems": [{"$ref": "#/$defs/p"}, {"$ref": "#/$defs/p"}]}}, "$ref": "#/$defs/p"}),
            json!({"properties": {"self": {"$ref": "#"}, "other": {"$ref": "#"}}}),
        ] {
            assert!(expanded_nodes(&fine).is_ok(), "{fine}");
        }
    }

    /// A `$id` below the root, or an anchor declared twice, is refused: the count could not
    /// read references as a validator does (sandbox round 38 F1: a 2^40 bomb under an inner
    /// `$id` loaded while the same at the root was refused).
    #[test]
    fn a_second_resource_or_a_repeated_anchor_is_refused() {
        let bomb = doubling_defs("#/$defs", 40);
        let cheap: serde_json::Map<String, Value> = (0..41)
            .map(|i| (format!("d{i}"), serde_json::json!({"type": "string"})))
            .collect();
        for id in ["http://example.com/inner", "inner.json"] {
            let schema = serde_json::json!({"type": "object", "$defs": cheap,
                "properties": {"x": {"$id": id, "$defs": bomb, "$ref": "#/$defs/d0"}}});
            let e = expanded_nodes(&schema).unwrap_err();
            assert!(e.contains("resource"), "{e}");
        }
        let twice = serde_json::json!({"$defs": {"a": {"$anchor": "x"}, "b": {"$anchor": "x"}}});
        assert!(
            expanded_nodes(&twice)
                .unwrap_err()
                .contains("more than once")
        );
        // A root `$id`, legacy anchors, and a property named `$id` or `id` are fine.
        let fine = serde_json::json!({"$id": "https://example.com/tool", "type": "object",
            "properties": {"$id": {"type": "string"}, "id": {"type": "string", "$id": "#name"}}});
        assert!(expanded_nodes(&fine).is_ok());
    }

    /// A schema under a property (or a definition) named like a data keyword is a schema:
    /// counted, its references followed, its patterns counted (sandbox round 37 F1: under
    /// `properties/enum` a 2^40 reference bomb loaded and spun a core for ever).
    #[test]
    fn a_schema_named_like_a_data_keyword_is_counted() {
        let bomb = |at: &str| {
            let base = format!("#/properties/{at}/$defs");
            let defs = doubling_defs(&base, 40);
            serde_json::json!({"type": "object", "properties": {at: {"$ref": format!("{base}/d0"), "$defs": defs}}})
        };
        for key in ["enum", "const", "default", "examples", "example", "plain"] {
            assert!(expanded_nodes(&bomb(key)).is_err(), "{key}");
        }
        let hidden = serde_json::json!({"properties": {"default": {"pattern": "^a$"}, "enum": {"patternProperties": {"^x": {}}}}, "$defs": {"const": {"pattern": "b"}}});
        assert_eq!(patterns(&hidden), 3);
    }

    #[test]
    fn patterns_are_counted_where_written_and_not_in_data() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "a": {"type": "string", "pattern": "^a$"},
                "b": {"type": "array", "items": {"pattern": "^b$"}},
                "c": {"const": {"pattern": "not a schema"}, "default": {"pattern": "x"}}
            },
            "patternProperties": {"^x": {}, "^y": {"pattern": "z"}},
            "$defs": {"d": {"pattern": "^d$"}}
        });
        assert_eq!(patterns(&schema), 6);
    }
    use serde_json::json;

    /// A schema whose `x` is [`doubling_defs`]'s `d0`.
    fn doubling(levels: usize) -> Value {
        let defs = doubling_defs("#/$defs", levels);
        json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": defs})
    }

    #[test]
    fn shared_references_are_counted_each_time_they_are_used() {
        assert!(expanded_nodes(&doubling(5)).is_ok());
        let e = expanded_nodes(&doubling(40)).unwrap_err();
        assert!(e.contains("subschemas"), "{e}");
    }

    #[test]
    fn recursive_schemas_that_go_into_the_value_are_fine() {
        let tree = json!({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}});
        assert!(expanded_nodes(&tree).unwrap() < 50);
        let anchored = json!({"$defs": {"n": {"$anchor": "n", "type": "array", "items": {"$ref": "#n"}}}, "$ref": "#n"});
        assert!(expanded_nodes(&anchored).is_ok());
    }

    #[test]
    fn cycles_on_the_same_value_other_documents_and_dangling_references_are_refused() {
        let forever = json!({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"});
        assert!(expanded_nodes(&forever).unwrap_err().contains("never ends"));
        let other = json!({"$ref": "http://example.com/s.json#/a"});
        assert!(
            expanded_nodes(&other)
                .unwrap_err()
                .contains("another document")
        );
        let dangling = json!({"$ref": "#/$defs/missing"});
        assert!(
            expanded_nodes(&dangling)
                .unwrap_err()
                .contains("points at nothing")
        );
        // A `$ref` string in data is not a reference.
        let data = json!({"const": {"$ref": "http://elsewhere"}, "enum": [{"$ref": "#/nowhere"}]});
        assert!(expanded_nodes(&data).is_ok());
    }

    /// Anchors are found by one walk of the schema, however many references name them,
    /// and by none when no reference does: a walk per reference made a schema of 3,000
    /// `#zz` references and 4,000 properties cost 0.45 s to count, 20 such tools 9.3 s.
    #[test]
    fn anchors_are_found_once_per_schema_not_once_per_reference() {
        let walks = || ANCHOR_WALKS.with(std::cell::Cell::get);
        let mut properties = serde_json::Map::new();
        for i in 0..2000 {
            properties.insert(format!("r{i}"), json!({"$ref": "#zz"}));
            properties.insert(format!("f{i}"), json!({"type": "string"}));
        }
        let anchored = json!({"type": "object", "properties": properties,
            "$defs": {"z": {"$anchor": "zz", "type": "string"}}});
        let before = walks();
        assert!(expanded_nodes(&anchored).is_ok());
        assert_eq!(walks() - before, 1, "one walk for 2,000 references");
        let pointed = json!({"properties": {"a": {"$ref": "#/$defs/z"}, "b": {"$ref": "#/$defs/z"}},
            "$defs": {"z": {"$anchor": "zz", "type": "string"}}});
        let before = walks();
        assert!(expanded_nodes(&pointed).is_ok());
        assert_eq!(walks() - before, 0, "no reference names an anchor");
        // `$dynamicAnchor` and legacy `$id` anchors are in the same map.
        let both = json!({"properties": {"a": {"$ref": "#d"}, "b": {"$ref": "#l"}},
            "$defs": {"d": {"$dynamicAnchor": "d"}, "l": {"$id": "#l"}}});
        let before = walks();
        assert!(expanded_nodes(&both).is_ok());
        assert_eq!(walks() - before, 1);
    }

    #[test]
    fn long_chains_are_refused_without_deep_recursion() {
        let mut defs = serde_json::Map::new();
        for i in 0..5000 {
            defs.insert(
                format!("d{i}"),
                json!({"$ref": format!("#/$defs/d{}", i + 1)}),
            );
        }
        defs.insert("d5000".into(), json!({"type": "string"}));
        let chain = json!({"$ref": "#/$defs/d0", "$defs": defs});
        assert!(expanded_nodes(&chain).unwrap_err().contains("deep"));
    }
}
