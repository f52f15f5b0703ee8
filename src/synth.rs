//! Synthetic catalogs for benchmarks: any number of plausible tools, deterministic.
//!
//! Tools are built from a vocabulary of domains, objects and verbs (`crm_update_invoice`:
//! "Update an invoice in the CRM workspace..."), spread over plugins and MCP servers, with
//! two to six typed parameters each, so term statistics look like a real catalog rather
//! than random strings. The same `(count, seed)` always gives the same catalog.

use serde_json::{Value, json};

use crate::catalog::{CatalogMode, ExecutionMode, ExecutorSpec, Schema, Source, ToolDescriptor};

const DOMAINS: &[&str] = &[
    "crm",
    "billing",
    "hr",
    "inventory",
    "analytics",
    "support",
    "marketing",
    "devops",
    "storage",
    "security",
    "payments",
    "shipping",
    "legal",
    "finance",
    "docs",
    "chat",
    "calendar",
    "email",
    "search",
    "media",
    "maps",
    "weather",
    "health",
    "education",
    "travel",
    "retail",
    "gaming",
    "iot",
    "research",
    "social",
];
const OBJECTS: &[&str] = &[
    "invoice",
    "customer",
    "ticket",
    "order",
    "report",
    "dashboard",
    "user",
    "account",
    "project",
    "task",
    "document",
    "file",
    "folder",
    "message",
    "channel",
    "event",
    "meeting",
    "contact",
    "lead",
    "campaign",
    "product",
    "shipment",
    "payment",
    "refund",
    "subscription",
    "contract",
    "policy",
    "alert",
    "incident",
    "deployment",
    "build",
    "repository",
    "branch",
    "release",
    "metric",
    "log",
    "backup",
    "certificate",
    "secret",
    "device",
    "sensor",
    "route",
    "booking",
    "review",
    "comment",
    "note",
    "image",
    "video",
    "playlist",
    "course",
];
const VERBS: &[(&str, &str)] = &[
    ("create", "Create a new"),
    ("get", "Get the details of one"),
    ("list", "List every"),
    ("update", "Update the fields of an existing"),
    ("delete", "Delete an"),
    ("search", "Search for a"),
    ("export", "Export a"),
    ("archive", "Archive a"),
    ("assign", "Assign an owner to a"),
    ("approve", "Approve a pending"),
    ("sync", "Synchronise a"),
    ("share", "Share a"),
];
const PARAMS: &[(&str, &str, &str)] = &[
    ("id", "string", "Identifier of the record"),
    ("name", "string", "Display name"),
    ("owner", "string", "User who owns it"),
    ("status", "string", "Current status"),
    ("limit", "integer", "Maximum number of results"),
    (
        "since",
        "string",
        "Only records changed after this ISO 8601 time",
    ),
    ("tags", "array", "Labels to attach"),
    ("notify", "boolean", "Send a notification to watchers"),
    ("region", "string", "Data centre region"),
    ("currency", "string", "ISO 4217 currency code"),
    ("priority", "string", "Priority: low, normal or high"),
    ("note", "string", "Free text note kept with the change"),
];

/// A small deterministic generator (xorshift64*), enough for picking words.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

/// `count` tools; every 50th is direct-only, every 7th comes from an MCP server.
pub fn catalog(count: usize, seed: u64) -> Vec<ToolDescriptor> {
    let mut rng = Rng(seed.wrapping_mul(2_654_435_761).max(1));
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let domain = DOMAINS[i % DOMAINS.len()];
        let object = *rng.pick(OBJECTS);
        let (verb, phrase) = *rng.pick(VERBS);
        let other = *rng.pick(OBJECTS);
        // The index keeps names unique within a source.
        let name = format!("{domain}_{verb}_{object}_{i}");
        let mut properties = serde_json::Map::new();
        let mut required = Vec::new();
        for p in 0..(2 + rng.next() % 5) {
            let (pname, ptype, pdesc) = *rng.pick(PARAMS);
            let schema = if ptype == "array" {
                json!({"type": "array", "items": {"type": "string"}, "description": pdesc})
            } else {
                json!({"type": ptype, "description": format!("{pdesc} of the {object}")})
            };
            if p == 0 {
                required.push(Value::String(pname.to_string()));
            }
            properties.insert(pname.to_string(), schema);
        }
        let (source, source_name) = if i % 7 == 3 {
            (Source::Mcp, format!("{domain}-server"))
        } else {
            (Source::Openclaw, domain.to_string())
        };
        out.push(ToolDescriptor {
            description: format!(
                "{phrase} {object} in the {domain} workspace. Use it when a user asks to {verb} {object}s, \
                 for example one linked to a {other}."
            ),
            input_schema: Schema::from_value(
                &json!({"type": "object", "properties": properties, "required": required}),
            ),
            output_schema: None,
            label: None,
            source,
            source_name,
            catalog_mode: if i % 50 == 49 {
                CatalogMode::DirectOnly
            } else {
                CatalogMode::Catalog
            },
            availability: None,
            executor: Some(ExecutorSpec::Fixture {
                text: "FAKE_PLUGIN_OK {name} {input}".into(),
                details: None,
            }),
            tags: vec![domain.to_string(), object.to_string()],
            sort_key: None,
            execution_mode: ExecutionMode::Parallel,
            strict: None,
            origin: format!("synthetic#{i}"),
            name,
        });
    }
    out
}

/// Queries of the kind an agent writes: a verb, an object, sometimes a domain.
pub fn queries(count: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed.wrapping_mul(40_503).max(1));
    (0..count)
        .map(|i| {
            let (verb, _) = *rng.pick(VERBS);
            let object = *rng.pick(OBJECTS);
            match i % 3 {
                0 => format!("{verb} {object}"),
                1 => format!("{verb} a {object} in {}", rng.pick(DOMAINS)),
                _ => format!("how do I {verb} the {object} for a {}", rng.pick(OBJECTS)),
            }
        })
        .collect()
}

/// The catalog as JSONL in our descriptor format (for the CLI memory measurement).
pub fn to_jsonl(tools: &[ToolDescriptor]) -> String {
    let mut out = String::new();
    for t in tools {
        let mut v = json!({
            "name": t.name,
            "description": t.description,
            "input_schema": t.input_schema.value(),
            "source": t.source,
            "source_name": t.source_name,
            "tags": t.tags,
            "executor": t.executor,
        });
        if t.catalog_mode == CatalogMode::DirectOnly {
            v["catalog_mode"] = json!("direct-only");
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::load::parse_catalog_text;

    #[test]
    fn deterministic_and_loadable() {
        let a = catalog(200, 7);
        assert_eq!(a, catalog(200, 7));
        let back = parse_catalog_text("s.jsonl".as_ref(), &to_jsonl(&a)).unwrap();
        assert_eq!(back.len(), 200);
        assert_eq!(back[3].id(), a[3].id());
        assert_eq!(queries(5, 1), queries(5, 1));
    }
}
