//! The tool descriptor: one tool as a catalog file declares it, whatever its format.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::ids::{Source, ToolKey, safe_name, tool_id};

/// A JSON Schema, held as compact JSON text.
///
/// A catalog of 10,000 tools holds 10,000 schemas; as `serde_json::Value` trees they took
/// about 40 MB, as text about 5 MB. Schemas are read rarely (building the catalog, a
/// describe, a validation), so each reader parses its own copy.
#[derive(Clone, PartialEq, Eq)]
pub struct Schema(Arc<str>);

impl Schema {
    pub fn from_value(value: &Value) -> Self {
        Schema(Arc::from(value.to_string()))
    }

    /// A schema from text this program wrote with [`Schema::as_str`] (a stored catalog,
    /// in a folder only this user can write). Only its shape is checked, not parsed again:
    /// that is the work a stored catalog saves. Were it damaged anyway, [`Schema::value`]
    /// gives `null`, which validates nothing. Not for catalog files: they go through the
    /// loader's checks.
    pub fn from_text(text: String) -> Result<Self, String> {
        let t = text.trim();
        if t.starts_with('{') && t.ends_with('}') {
            Ok(Schema(Arc::from(text)))
        } else {
            Err("a stored schema is not a JSON object".into())
        }
    }

    /// The schema as a JSON value.
    pub fn value(&self) -> Value {
        // Written by `from_value`, so it parses; a damaged stored one is `null`.
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Schema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

/// A schema kept as its compact text, not re-parsed: what a stored catalog holds.
mod schema_text {
    use super::Schema;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(schema: &Schema, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(schema.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Schema, D::Error> {
        Schema::from_text(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// An executor kept as JSON text: its serde form is tagged and carries free JSON
/// (`details`), which only a self-describing format reads back, and a stored catalog is not
/// one.
mod executor_json {
    use super::ExecutorSpec;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(e: &Option<ExecutorSpec>, s: S) -> Result<S::Ok, S::Error> {
        match e {
            Some(e) => {
                s.serialize_some(&serde_json::to_string(e).map_err(serde::ser::Error::custom)?)
            }
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ExecutorSpec>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(serde::de::Error::custom)
    }
}

mod optional_schema_text {
    use super::Schema;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(schema: &Option<Schema>, s: S) -> Result<S::Ok, S::Error> {
        match schema {
            Some(schema) => s.serialize_some(schema.as_str()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Schema>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(Schema::from_text)
            .transpose()
            .map_err(serde::de::Error::custom)
    }
}

/// `catalog` (the default) puts a tool behind search; `direct-only` keeps it out of the
/// catalog and always visible to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CatalogMode {
    #[default]
    Catalog,
    DirectOnly,
}

/// Whether a tool may run beside others in one batch of calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutionMode {
    #[default]
    Parallel,
    Sequential,
}

/// What runs a tool. An unknown `kind` is an error when the catalog loads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ExecutorSpec {
    /// A templated answer: `{name}`, `{input}` (the arguments as compact JSON) and
    /// `{args.KEY}` are replaced. Used by the demo catalog and QA.
    Fixture {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// A program run without a shell, the arguments as JSON on stdin.
    Command {
        command: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
    },
    /// `tools/call` on an upstream MCP server.
    Mcp { server: String, tool: String },
    /// Relayed to the client that declared the tool.
    Client,
}

/// A condition a tool needs to be offered. A failing signal hides the tool, and the
/// catalog reports why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Availability {
    /// An auth profile of this name is configured (`[auth] profiles`).
    Auth(String),
    /// A dotted key is set in the `[settings]` table of the config (not `false`, not empty).
    Config(String),
    /// An environment variable is set and not empty.
    Env(String),
    /// The plugin of this id is enabled (`[plugins]`).
    #[serde(rename = "plugin-enabled")]
    PluginEnabled(String),
    /// A context fact: `key` (present) or `key=value` (equal), from `[context]`.
    Context(String),
    AllOf(Vec<Availability>),
    AnyOf(Vec<Availability>),
}

/// One tool, normalised from any catalog format.
///
/// Its serde form is the one a stored catalog keeps ([`super::store`]), with schemas as
/// their compact text; catalog files are read by [`super::load`], not through it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    pub name: String,
    pub description: String,
    #[serde(with = "schema_text")]
    pub input_schema: Schema,
    #[serde(with = "optional_schema_text")]
    pub output_schema: Option<Schema>,
    pub label: Option<String>,
    pub source: Source,
    pub source_name: String,
    pub catalog_mode: CatalogMode,
    pub availability: Option<Availability>,
    #[serde(with = "executor_json")]
    pub executor: Option<ExecutorSpec>,
    pub tags: Vec<String>,
    pub sort_key: Option<String>,
    pub execution_mode: ExecutionMode,
    /// A client tool's `strict` as the client sent it, forwarded to the provider for that
    /// tool (front round 15 F1: it was dropped, and `strict: false` sent in its place).
    /// (Always written: a stored catalog is postcard, which cannot skip a field.)
    #[serde(default)]
    pub strict: Option<bool>,
    /// Where the descriptor was read (`file#/tools/3`, `file line 7`), for diagnostics.
    pub origin: String,
}

impl ToolKey for ToolDescriptor {
    fn name(&self) -> &str {
        &self.name
    }

    fn id(&self) -> String {
        ToolDescriptor::id(self)
    }
}

impl ToolDescriptor {
    /// `{source}:{source_name}:{name}`; the same as [`ToolKey::id`], callable without the
    /// trait in scope.
    pub fn id(&self) -> String {
        tool_id(self.source, &self.source_name, &self.name)
    }
}

/// Builds a [`ToolDescriptor`] in code, for the places that make one without a catalog
/// file (evaluation data sets, tests). Start with [`ToolDescriptor::builder`]; a field not
/// set is empty or the default: no description, the input schema `{"type": "object"}`, no
/// output schema, label, availability, executor, tags or sort key, [`CatalogMode::Catalog`],
/// [`ExecutionMode::Parallel`] and an empty origin. The setters are for the fields such
/// code varies; every field is public for the rest.
///
/// [`build`](Self::build) does not run the checks the catalog loaders run (name length,
/// schema size): a descriptor made here is trusted to be well formed.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ToolDescriptorBuilder(ToolDescriptor);

impl ToolDescriptor {
    /// A builder for the tool `name` of `source_name` (a plugin id, server name or
    /// `client`) from `source`; its id is `{source}:{source_name}:{name}`.
    pub fn builder(
        source: Source,
        source_name: impl Into<String>,
        name: impl Into<String>,
    ) -> ToolDescriptorBuilder {
        ToolDescriptorBuilder(ToolDescriptor {
            name: name.into(),
            description: String::new(),
            input_schema: Schema::from_value(&serde_json::json!({"type": "object"})),
            output_schema: None,
            label: None,
            source,
            source_name: source_name.into(),
            catalog_mode: CatalogMode::default(),
            availability: None,
            executor: None,
            tags: Vec::new(),
            sort_key: None,
            execution_mode: ExecutionMode::default(),
            strict: None,
            origin: String::new(),
        })
    }
}

impl ToolDescriptorBuilder {
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.0.description = description.into();
        self
    }

    pub fn input_schema(mut self, schema: &Value) -> Self {
        self.0.input_schema = Schema::from_value(schema);
        self
    }

    pub fn executor(mut self, executor: ExecutorSpec) -> Self {
        self.0.executor = Some(executor);
        self
    }

    pub fn execution_mode(mut self, mode: ExecutionMode) -> Self {
        self.0.execution_mode = mode;
        self
    }

    /// Where the descriptor came from, as diagnostics name it (`test`, `file#/tools/3`).
    pub fn origin(mut self, origin: impl Into<String>) -> Self {
        self.0.origin = origin.into();
        self
    }

    pub fn build(self) -> ToolDescriptor {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_parses_composed_signals() {
        let a: Availability = serde_json::from_str(
            r#"{"all_of": [{"env": "A"}, {"any_of": [{"auth": "gh"}, {"plugin-enabled": "x"}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            a,
            Availability::AllOf(vec![
                Availability::Env("A".into()),
                Availability::AnyOf(vec![
                    Availability::Auth("gh".into()),
                    Availability::PluginEnabled("x".into())
                ])
            ])
        );
    }

    #[test]
    fn the_builder_gives_catalog_defaults_and_takes_its_setters() {
        let plain = ToolDescriptor::builder(Source::Mcp, "files", "read").build();
        assert_eq!(plain.id(), "mcp:files:read");
        assert_eq!(
            plain.input_schema.value(),
            serde_json::json!({"type": "object"})
        );
        assert_eq!(plain.catalog_mode, CatalogMode::Catalog);
        assert_eq!(plain.execution_mode, ExecutionMode::Parallel);
        assert!(plain.description.is_empty() && plain.origin.is_empty());
        assert!(plain.executor.is_none() && plain.tags.is_empty());
        let set = ToolDescriptor::builder(Source::Client, "client", "pick")
            .description("Pick a file.")
            .input_schema(&serde_json::json!({"type": "object", "required": ["x"]}))
            .executor(ExecutorSpec::Client)
            .execution_mode(ExecutionMode::Sequential)
            .origin("test")
            .build();
        assert_eq!(set.description, "Pick a file.");
        assert_eq!(
            set.input_schema.value()["required"],
            serde_json::json!(["x"])
        );
        assert_eq!(set.executor, Some(ExecutorSpec::Client));
        assert_eq!(set.execution_mode, ExecutionMode::Sequential);
        assert_eq!(set.origin, "test");
    }

    #[test]
    fn unknown_executor_kind_is_an_error() {
        let e = serde_json::from_str::<ExecutorSpec>(r#"{"kind": "teleport"}"#).unwrap_err();
        assert!(e.to_string().contains("teleport"), "{e}");
    }
}
