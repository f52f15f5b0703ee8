//! The catalog: every tool the agent may use, planned, filtered and indexed.
//!
//! A [`Catalog`] is built whole from descriptors and a config ([`Catalog::build`]): load
//! ([`load`]), plan ([`plan`]: merge, policy, availability, contract checks), compact
//! ([`compact`]) and index ([`crate::search`]). It is immutable; a change of tools or policy
//! builds a new one, so no reader ever sees half an update.
//!
//! It answers the three questions every surface asks: search (compact descriptors, best
//! first), describe (one entry with its full schemas) and resolve (an id or exact unique
//! name to an entry, or a typed error with suggestions). It never runs a tool: that is
//! `dispatch`'s job.

pub mod compact;
pub mod descriptor;
pub mod embedded;
pub mod load;
pub mod plan;
pub mod schema_cost;
pub mod sources;
pub mod store;
mod suggest;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

pub use compact::CompactDescriptor;
pub use descriptor::{
    Availability, CatalogMode, ExecutionMode, ExecutorSpec, Schema, Source, ToolDescriptor,
    safe_name, tool_id,
};
pub use plan::{Diagnostic, Facts, HiddenTool, Notice, Plan};
pub use sources::{Local, Sources, Upstream};

use crate::config::{Config, ToolSearchSettings};
use crate::error::{Error, Result};
use crate::policy::{Policy, Toolsets};
use crate::search::{IndexDoc, SearchIndex};

/// Batch search bounds (README, "One call path").
pub mod batch_limits {
    pub const MAX_QUERIES: usize = 16;
    pub const MAX_QUERY_BYTES: usize = 512;
    pub const MAX_TOTAL_RESULTS: usize = 50;
    /// The serialized response is kept under this many bytes by dropping the
    /// lowest-ranked candidates: about 6k tokens, a sane share of a context window.
    pub const MAX_RESPONSE_BYTES: usize = 24 * 1024;
}

/// Suggestions offered for an unknown id.
const MAX_SUGGESTIONS: usize = 3;

/// An unknown id longer than this gets no suggestions: no tool id is that long.
pub const MAX_SUGGEST_BYTES: usize = 256;

/// One visible tool with its precomputed compact form.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Entry {
    pub descriptor: ToolDescriptor,
    pub id: String,
    pub compact: CompactDescriptor,
    /// The top-level property names of its input schema, sorted: read for every structured
    /// call with its arguments beside the id, which parsed the whole schema (up to its
    /// bound) on a runtime worker each time.
    properties: Box<[String]>,
}

impl Entry {
    /// Whether its input schema names `key` among its top-level properties.
    pub fn takes(&self, key: &str) -> bool {
        self.properties
            .binary_search_by(|p| p.as_str().cmp(key))
            .is_ok()
    }

    /// The bytes of its schemas as stored: what a describe of it parses and writes.
    pub fn schema_bytes(&self) -> usize {
        self.descriptor.input_schema.as_str().len()
            + self
                .descriptor
                .output_schema
                .as_ref()
                .map_or(0, |s| s.as_str().len())
    }

    fn new(descriptor: ToolDescriptor) -> Self {
        let id = descriptor.id();
        let schema = descriptor.input_schema.value();
        let mut properties: Vec<String> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        properties.sort_unstable();
        Entry {
            properties: properties.into(),
            compact: CompactDescriptor::of(&descriptor, &schema),
            id,
            descriptor,
        }
    }

    /// What the index reads of this entry.
    fn index_doc(&self) -> IndexDoc {
        index_doc(
            &self.descriptor,
            &self.id,
            &self.descriptor.input_schema.value(),
        )
    }
}

/// The index's view of a descriptor; `schema` is its input schema, parsed. `id` is a
/// parameter so that `eval` can keep a data set's own ids while indexing exactly as
/// production does.
pub fn index_doc(d: &ToolDescriptor, id: &str, schema: &Value) -> IndexDoc {
    let mut label = d.label.clone().unwrap_or_default();
    for tag in &d.tags {
        label.push(' ');
        label.push_str(tag);
    }
    IndexDoc {
        id: id.to_string(),
        name: d.name.clone(),
        label,
        description: d.description.clone(),
        params: if d.source.is_trusted() {
            IndexDoc::param_text(schema)
        } else {
            Vec::new()
        },
        source: format!("{} {}", d.source, d.source_name),
    }
}

/// `describe`'s answer: the compact descriptor plus the full schemas.
#[derive(Debug, Clone, Serialize)]
pub struct Description {
    #[serde(flatten)]
    pub compact: CompactDescriptor,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub catalog_mode: CatalogMode,
    pub execution_mode: ExecutionMode,
}

/// One query of a batch.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchQuery {
    pub query: String,
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BatchGroup {
    pub query: String,
    pub candidates: Vec<CompactDescriptor>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct BatchResult {
    pub results: Vec<BatchGroup>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug)]
pub struct Catalog {
    /// Cataloged entries first (positions match the index), then direct-only ones.
    entries: Vec<Entry>,
    cataloged: usize,
    hidden: Vec<HiddenTool>,
    notices: Vec<Notice>,
    filtered: usize,
    /// The search index, built (or read from the store) at the first search: a command
    /// that never searches (a `code` run that only calls tools, `describe` of a known id,
    /// `catalog`) does not pay for it. Long-lived hosts build it ahead ([`Catalog::warm`]).
    index: std::sync::OnceLock<std::result::Result<SearchIndex, String>>,
    /// The entries' ids and names as "did you mean" compares them, made at the first
    /// unknown id.
    suggester: std::sync::OnceLock<suggest::Suggester>,
    /// Where the index is kept between processes, for a catalog the store keeps.
    index_home: Option<store::IndexHome>,
    /// The embedding model of `[search.semantic]`, when one is configured.
    semantic: Option<std::sync::Arc<crate::semantic::Model>>,
    by_id: HashMap<String, usize>,
    by_name: HashMap<String, Vec<usize>>,
    settings: ToolSearchSettings,
    toolsets: Toolsets,
    policy: Policy,
    sources_down: BTreeMap<String, String>,
}

/// What planning decides besides the entries.
struct Parts {
    hidden: Vec<HiddenTool>,
    notices: Vec<Notice>,
    filtered: usize,
    toolsets: Toolsets,
    policy: Policy,
}

/// Counts by source, for `catalog` and telemetry.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Counts {
    pub cataloged: usize,
    pub direct_only: usize,
    pub hidden: usize,
    pub by_source: BTreeMap<String, usize>,
}

impl Catalog {
    /// Plans `descriptors` under `facts`; the index is built at the first search.
    pub fn build(descriptors: Vec<ToolDescriptor>, facts: &Facts<'_>) -> Result<Self> {
        let plan = plan::plan(descriptors, facts)?;
        let cataloged = plan.cataloged.len();
        let entries = plan
            .cataloged
            .into_iter()
            .chain(plan.direct_only)
            .map(Entry::new)
            .collect();
        Catalog::assemble(
            entries,
            cataloged,
            Parts {
                hidden: plan.hidden,
                notices: plan.notices,
                filtered: plan.filtered,
                toolsets: plan.toolsets,
                policy: plan.policy,
            },
            facts.config,
            facts.sources_down.clone(),
            None,
        )
    }

    /// A catalog as [`store`] kept it, planned under this same `config`.
    #[allow(clippy::too_many_arguments)]
    fn from_stored(
        entries: Vec<Entry>,
        cataloged: usize,
        hidden: Vec<HiddenTool>,
        notices: Vec<Notice>,
        filtered: usize,
        toolsets: Toolsets,
        config: &Config,
        index_home: Option<store::IndexHome>,
    ) -> Result<Self> {
        if cataloged > entries.len() {
            return Err(Error::Index(format!(
                "{cataloged} cataloged entries of {}",
                entries.len()
            )));
        }
        if let Some(e) = entries.iter().find(|e| e.id != e.descriptor.id()) {
            return Err(Error::Index(format!("entry `{}` has another id", e.id)));
        }
        let policy = Policy::from_config(config, &toolsets)?;
        Catalog::assemble(
            entries,
            cataloged,
            Parts {
                hidden,
                notices,
                filtered,
                toolsets,
                policy,
            },
            config,
            BTreeMap::new(),
            index_home,
        )
    }

    fn assemble(
        entries: Vec<Entry>,
        cataloged: usize,
        parts: Parts,
        config: &Config,
        sources_down: BTreeMap<String, String>,
        index_home: Option<store::IndexHome>,
    ) -> Result<Self> {
        // The model of `[search.semantic]` (loaded once per process), for the index.
        let semantic = config
            .search
            .semantic
            .as_ref()
            .map(crate::semantic::Model::shared)
            .transpose()?;
        let mut by_id = HashMap::with_capacity(entries.len());
        let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            by_id.insert(e.id.clone(), i);
            by_name
                .entry(e.descriptor.name.clone())
                .or_default()
                .push(i);
        }
        Ok(Catalog {
            entries,
            cataloged,
            hidden: parts.hidden,
            notices: parts.notices,
            filtered: parts.filtered,
            index: std::sync::OnceLock::new(),
            suggester: std::sync::OnceLock::new(),
            index_home,
            semantic,
            by_id,
            by_name,
            settings: config.tools.tool_search.clone(),
            toolsets: parts.toolsets,
            policy: parts.policy,
            sources_down,
        })
    }

    /// Sources whose tools are hidden because they cannot run now, with why.
    pub fn sources_down(&self) -> &BTreeMap<String, String> {
        &self.sources_down
    }

    /// The effective policy this catalog was filtered with.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The toolsets tool patterns expand (plugin and server names, `[toolsets]`).
    pub fn toolsets(&self) -> &Toolsets {
        &self.toolsets
    }

    pub fn settings(&self) -> &ToolSearchSettings {
        &self.settings
    }

    /// The entries behind search, sorted.
    pub fn cataloged(&self) -> &[Entry] {
        &self.entries[..self.cataloged]
    }

    /// The direct-only entries, sorted.
    pub fn direct_only(&self) -> &[Entry] {
        &self.entries[self.cataloged..]
    }

    /// What a surface that declares one tool per name declares, in catalog order
    /// (cataloged, then direct-only), and what it leaves out: for each name, the entry of
    /// the most trusted source ([`plan::trust`]), the first of them among equals. Surfaces
    /// and the agent's routing by name both read it, so the tool declared is the tool
    /// that runs (review 17: an upstream server's `message` took the core one's place).
    pub fn one_per_name(&self) -> (Vec<&Entry>, Vec<&Entry>) {
        let all = || self.cataloged().iter().chain(self.direct_only());
        let mut best: std::collections::HashMap<&str, &Entry> = std::collections::HashMap::new();
        for e in all() {
            let name = e.descriptor.name.as_str();
            match best.get(name) {
                Some(kept) if plan::trust(&kept.descriptor) <= plan::trust(&e.descriptor) => {}
                _ => {
                    best.insert(name, e);
                }
            }
        }
        all().partition(|e| {
            best.get(e.descriptor.name.as_str())
                .is_some_and(|kept| std::ptr::eq(*kept, *e))
        })
    }

    pub fn hidden(&self) -> &[HiddenTool] {
        &self.hidden
    }

    pub fn notices(&self) -> &[Notice] {
        &self.notices
    }

    /// How many tools the policy or `tools.active` removed.
    pub fn filtered(&self) -> usize {
        self.filtered
    }

    pub fn counts(&self) -> Counts {
        let mut by_source = BTreeMap::new();
        for e in &self.entries {
            *by_source
                .entry(e.descriptor.source.as_str().to_string())
                .or_insert(0) += 1;
        }
        Counts {
            cataloged: self.cataloged,
            direct_only: self.entries.len() - self.cataloged,
            hidden: self.hidden.len(),
            by_source,
        }
    }

    /// The effective limit for a requested one: the default when absent, clamped to the max.
    pub fn effective_limit(&self, requested: Option<usize>) -> usize {
        requested
            .unwrap_or(self.settings.search_default_limit)
            .clamp(1, self.settings.max_search_limit)
    }

    /// One search, best first. `limit` defaults to `searchDefaultLimit` and is clamped to
    /// `maxSearchLimit`. The same rules and bounds as one query of a batch.
    pub fn search(&self, query: &str, limit: Option<usize>) -> Result<Vec<CompactDescriptor>> {
        let mut batch = self.search_batch(&[BatchQuery {
            query: query.to_string(),
            limit,
        }])?;
        Ok(batch
            .results
            .pop()
            .map(|g| g.candidates)
            .unwrap_or_default())
    }

    /// Up to 16 queries; groups in request order; at most 50 candidates in all and a
    /// response under [`batch_limits::MAX_RESPONSE_BYTES`], dropping the lowest-ranked
    /// candidates (the deepest ranks, across groups) first.
    pub fn search_batch(&self, queries: &[BatchQuery]) -> Result<BatchResult> {
        use batch_limits::*;
        if queries.is_empty() {
            return Err(Error::InvalidRequest(
                "a batch search needs at least one query".into(),
            ));
        }
        if queries.len() > MAX_QUERIES {
            return Err(Error::InvalidRequest(format!(
                "a batch search takes at most {MAX_QUERIES} queries; got {}",
                queries.len()
            )));
        }
        for (i, q) in queries.iter().enumerate() {
            if q.query.len() > MAX_QUERY_BYTES {
                return Err(Error::InvalidRequest(format!(
                    "query {} is {} bytes; the limit is {MAX_QUERY_BYTES} bytes",
                    i + 1,
                    q.query.len()
                )));
            }
        }
        let mut groups: Vec<BatchGroup> = queries
            .iter()
            .map(|q| {
                let limit = self.effective_limit(q.limit);
                Ok(BatchGroup {
                    query: q.query.clone(),
                    candidates: self
                        .index()?
                        .search(&q.query, limit)
                        .into_iter()
                        .map(|h| self.entries[h.ord].compact.clone())
                        .collect(),
                    truncated: false,
                })
            })
            .collect::<Result<_>>()?;
        let mut truncated = false;
        let total = |g: &[BatchGroup]| g.iter().map(|g| g.candidates.len()).sum::<usize>();
        while total(&groups) > MAX_TOTAL_RESULTS || response_bytes(&groups) > MAX_RESPONSE_BYTES {
            // The group whose last candidate sits deepest loses it; ties go to the later
            // query, so earlier queries keep more.
            let Some(g) = groups
                .iter_mut()
                .filter(|g| !g.candidates.is_empty())
                .max_by_key(|g| g.candidates.len())
            else {
                break;
            };
            g.candidates.pop();
            g.truncated = true;
            truncated = true;
        }
        Ok(BatchResult {
            results: groups,
            truncated,
        })
    }

    /// Finds an entry by id, or by exact unique name; an unknown id's error says which ids
    /// are close ([`Catalog::suggest`]).
    pub fn resolve(&self, requested: &str) -> Result<&Entry> {
        self.find(requested).map_err(|e| match e {
            Error::UnknownTool {
                requested, hint, ..
            } => Error::UnknownTool {
                suggestions: self.suggest(&requested),
                requested,
                hint,
            },
            other => other,
        })
    }

    /// [`Catalog::resolve`] without the suggestions: for a caller that only asks whether an
    /// id is known, or that makes the suggestions elsewhere (a call, off the runtime's
    /// workers).
    pub fn find(&self, requested: &str) -> Result<&Entry> {
        let requested = requested.trim();
        if let Some(&i) = self.by_id.get(requested) {
            return Ok(&self.entries[i]);
        }
        if let Some(found) = self.by_name.get(requested) {
            return match found.as_slice() {
                [i] => Ok(&self.entries[*i]),
                many => Err(Error::AmbiguousTool {
                    name: requested.to_string(),
                    candidates: many.iter().map(|&i| self.entries[i].id.clone()).collect(),
                }),
            };
        }
        if let Some(h) = self
            .hidden
            .iter()
            .find(|h| h.id == requested || h.name == requested)
        {
            return Err(Error::UnavailableTool {
                id: h.id.clone(),
                reason: h
                    .diagnostics
                    .iter()
                    .map(|d| d.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
        // An id of a source that is down (an MCP server that never listed its tools, so
        // the tool is not even hidden by name): say the server is unavailable, so a model
        // stops retrying.
        if let Some((source, _)) = requested.rsplit_once(':')
            && let Some(why) = self.sources_down.get(source)
        {
            return Err(Error::UnavailableTool {
                id: requested.to_string(),
                reason: why.clone(),
            });
        }
        Err(Error::UnknownTool {
            requested: requested.to_string(),
            suggestions: Vec::new(),
            hint: String::new(),
        })
    }

    /// `describe`: the entry with its full schemas.
    pub fn describe(&self, requested: &str) -> Result<Description> {
        let e = self.resolve(requested)?;
        Ok(Description {
            compact: e.compact.clone(),
            input_schema: e.descriptor.input_schema.value(),
            output_schema: e.descriptor.output_schema.as_ref().map(Schema::value),
            catalog_mode: e.descriptor.catalog_mode,
            execution_mode: e.descriptor.execution_mode,
        })
    }

    /// Up to three ids close to an unknown one: by edit distance to names and ids
    /// ([`suggest`], bounded whatever the catalog and the id), then by its words on the
    /// lexical index when a search has built it. A suggestion neither builds the index (5 s
    /// for 10,000 tools) nor embeds the id: its cost is the caller's to choose, many times
    /// a run.
    pub fn suggest(&self, requested: &str) -> Vec<String> {
        if requested.len() > MAX_SUGGEST_BYTES {
            return Vec::new();
        }
        let suggester = self.suggester.get_or_init(|| {
            suggest::Suggester::new(
                self.entries
                    .iter()
                    .map(|e| (e.id.as_str(), e.descriptor.name.as_str())),
            )
        });
        let mut out: Vec<String> = suggester
            .closest(requested, MAX_SUGGESTIONS)
            .into_iter()
            .map(|i| self.entries[i].id.clone())
            .collect();
        if out.len() < MAX_SUGGESTIONS
            && let Some(Ok(index)) = self.index.get()
        {
            for (ord, _) in index.ranked(requested, 2 * MAX_SUGGESTIONS) {
                let id = &self.entries[ord].id;
                if !out.contains(id) && out.len() < MAX_SUGGESTIONS {
                    out.push(id.clone());
                }
            }
        }
        out
    }

    /// The search index over the cataloged entries (positions match
    /// [`Catalog::cataloged`]), built now if no search has built it yet.
    pub fn index(&self) -> Result<&SearchIndex> {
        self.index
            .get_or_init(|| {
                let lexical = match &self.index_home {
                    Some(home) => home.index(
                        self.cataloged()
                            .iter()
                            .map(|e| (e.id.as_str(), e.descriptor.name.as_str())),
                        || self.index_docs(),
                    ),
                    None => SearchIndex::build(&self.index_docs()),
                };
                let built = match &self.semantic {
                    Some(model) => lexical
                        .and_then(|index| index.with_dense(model.clone(), &self.index_docs())),
                    None => lexical,
                };
                built.map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| Error::Index(e.clone()))
    }

    /// What the index is built from: the cataloged entries' text, in order.
    fn index_docs(&self) -> Vec<IndexDoc> {
        self.cataloged().iter().map(Entry::index_doc).collect()
    }

    /// Builds the index ahead of the first search, for hosts that outlive one command.
    pub fn warm(&self) {
        if let Err(e) = self.index() {
            tracing::warn!("{e}");
        }
    }
}

fn response_bytes(groups: &[BatchGroup]) -> usize {
    serde_json::to_vec(groups)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> Catalog {
        let config = Config::default();
        Catalog::build(embedded::demo_descriptors().unwrap(), &Facts::bare(&config)).unwrap()
    }

    #[test]
    fn the_index_is_built_by_the_first_search_only() {
        let c = demo();
        assert!(c.index.get().is_none(), "built before any search");
        assert!(c.resolve("openclaw:github:create_issue").is_ok());
        assert!(c.index.get().is_none(), "a lookup by id built it");
        assert!(!c.search("create issue", None).unwrap().is_empty());
        assert!(c.index.get().is_some());
    }

    #[test]
    fn demo_catalog_puts_issue_creation_first() {
        let c = demo();
        let hits = c.search("create a GitHub issue", None).unwrap();
        assert_eq!(hits[0].id, "openclaw:github:create_issue", "{hits:#?}");
    }

    #[test]
    fn limits_default_and_clamp() {
        let c = demo();
        assert_eq!(c.search("issue", None).unwrap().len(), 8);
        assert_eq!(c.search("issue", Some(500)).unwrap().len(), 20);
        assert_eq!(c.search("issue", Some(0)).unwrap().len(), 1);
    }

    #[test]
    fn batch_keeps_order_and_bounds() {
        let c = demo();
        let queries: Vec<BatchQuery> = ["calendar event", "github pull request", "ticket"]
            .iter()
            .map(|q| BatchQuery {
                query: q.to_string(),
                limit: Some(20),
            })
            .collect();
        let r = c.search_batch(&queries).unwrap();
        assert_eq!(r.results[1].query, "github pull request");
        let total: usize = r.results.iter().map(|g| g.candidates.len()).sum();
        assert!(total <= batch_limits::MAX_TOTAL_RESULTS);
        assert!(response_bytes(&r.results) <= batch_limits::MAX_RESPONSE_BYTES);
        assert!(r.truncated);

        let too_many = vec![
            BatchQuery {
                query: "x".into(),
                limit: None
            };
            17
        ];
        assert_eq!(
            c.search_batch(&too_many).unwrap_err().code(),
            "invalid-request"
        );
        let long = vec![BatchQuery {
            query: "x".repeat(513),
            limit: None,
        }];
        let e = c.search_batch(&long).unwrap_err();
        assert!(e.to_string().contains("513 bytes"), "{e}");
    }

    #[test]
    fn resolve_by_id_name_ambiguity_and_suggestions() {
        let c = demo();
        assert_eq!(
            c.resolve("openclaw:github:create_issue").unwrap().id,
            "openclaw:github:create_issue"
        );
        assert_eq!(
            c.resolve("create_issue").unwrap().id,
            "openclaw:github:create_issue"
        );
        let e = c.resolve("openclaw:github:create_isue").unwrap_err();
        assert_eq!(e.code(), "unknown-tool");
        match e {
            Error::UnknownTool { suggestions, .. } => {
                assert_eq!(suggestions[0], "openclaw:github:create_issue");
                assert!(suggestions.len() <= 3);
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_huge_unknown_id_gets_no_suggestions_and_a_short_message() {
        let c = demo();
        let huge = format!("openclaw:github:create_issue{}", "x".repeat(60_000));
        match c.resolve(&huge) {
            Err(e @ Error::UnknownTool { .. }) => {
                let Error::UnknownTool { suggestions, .. } = &e else {
                    unreachable!()
                };
                assert!(suggestions.is_empty());
                assert!(e.to_string().len() < 1_000, "{}", e.to_string().len());
                assert!(e.to_string().contains("60028 bytes"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        // Just under the bound, suggestions still work.
        let near = format!("openclaw:github:create_issu{}", "");
        assert!(!c.suggest(&near).is_empty());
    }

    /// An id under a source that is down is echoed as an unknown one is: cut, with its
    /// length (it was echoed whole, 60 KB into the model's context).
    #[test]
    fn a_huge_id_under_a_source_that_is_down_gets_a_short_message() {
        let mut c = demo();
        c.sources_down
            .insert("mcp:down".into(), "it did not start".into());
        let huge = format!("mcp:down:{}", "é".repeat(30_000));
        let e = c.resolve(&huge).map(|_| ()).unwrap_err();
        assert_eq!(e.code(), "unavailable-tool");
        let shown = e.to_string();
        assert!(shown.len() < 1_000, "{}", shown.len());
        assert!(
            shown.contains("60009 bytes") && shown.contains("it did not start"),
            "{shown}"
        );
    }

    #[test]
    fn direct_only_tools_resolve_but_are_never_searched() {
        let c = demo();
        assert!(!c.direct_only().is_empty());
        for e in c.direct_only() {
            assert!(c.resolve(&e.id).is_ok());
            let hits = c.search(&e.descriptor.name, Some(50)).unwrap();
            assert!(hits.iter().all(|h| h.id != e.id), "{} was searched", e.id);
        }
    }
}
