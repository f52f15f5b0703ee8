//! The search index over compact descriptors, and its ranking.
//!
//! A tantivy index in RAM, one document per cataloged tool, with a field per kind of text:
//! name, label and tags, description, parameter text (names, descriptions and enum values;
//! only for trusted sources), source and source name, and the id. Every text field uses the
//! one analyzer of [`analyze`]. A query is analyzed the same way, expanded with
//! [`synonyms`], and scored as a weighted sum of BM25 over the fields ([`FIELD_WEIGHTS`]).
//!
//! Two rules sit above the scores: an entry whose name or id equals the query
//! (case-insensitive) ranks first, always; and a query with no usable terms returns
//! nothing rather than the whole catalog.
//!
//! This module owns ranking only. It knows nothing of policy (the catalog given to it is
//! already filtered) and returns positions in the slice it was built from.

pub mod analyze;
pub mod synonyms;

use std::collections::HashMap;

use serde_json::Value;
use tantivy::collector::TopDocs;
use tantivy::columnar::Column;
use tantivy::indexer::NoMergePolicy;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};

use crate::error::Result;
use synonyms::Synonyms;

/// The text of one tool, field by field, as the index sees it.
#[derive(Debug, Clone, Default)]
pub struct IndexDoc {
    pub id: String,
    pub name: String,
    /// Label and tags.
    pub label: String,
    pub description: String,
    /// Parameter names, descriptions and enum values; empty for untrusted sources.
    pub params: String,
    /// Source and source name (`mcp github`, `openclaw calendar`).
    pub source: String,
}

/// Bounds on the parameter text taken from one schema: enough for real tools, cheap for
/// pathological ones.
const MAX_PARAM_TEXT_BYTES: usize = 4096;
const MAX_PARAM_DEPTH: usize = 3;

impl IndexDoc {
    /// The parameter text of a JSON Schema: property names, descriptions and string enum
    /// values, walked to [`MAX_PARAM_DEPTH`] and cut at [`MAX_PARAM_TEXT_BYTES`].
    pub fn param_text(schema: &Value) -> String {
        let mut out = String::new();
        let mut stack = vec![(schema, 0usize)];
        while let Some((s, depth)) = stack.pop() {
            if out.len() >= MAX_PARAM_TEXT_BYTES || depth > MAX_PARAM_DEPTH {
                continue;
            }
            let Some(obj) = s.as_object() else { continue };
            if let Some(props) = obj.get("properties").and_then(Value::as_object) {
                stack.extend(props.values().rev().map(|p| (p, depth + 1)));
                for (name, prop) in props {
                    out.push_str(name);
                    out.push(' ');
                    if let Some(d) = prop.get("description").and_then(Value::as_str) {
                        out.push_str(d);
                        out.push(' ');
                    }
                    if let Some(values) = prop.get("enum").and_then(Value::as_array) {
                        for v in values.iter().filter_map(Value::as_str) {
                            out.push_str(v);
                            out.push(' ');
                        }
                    }
                }
            }
            if let Some(items) = obj.get("items") {
                stack.push((items, depth + 1));
            }
        }
        if out.len() > MAX_PARAM_TEXT_BYTES {
            let mut end = MAX_PARAM_TEXT_BYTES;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
        }
        out
    }
}

/// Weights of the fields in the score. The name says most about what a tool does; the
/// label and tags are curated; parameters are many words and say little about intent.
pub const FIELD_WEIGHTS: Weights = Weights {
    name: 2.5,
    label: 1.5,
    description: 1.0,
    params: 0.4,
    source: 1.0,
    id: 0.3,
};

#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub name: f32,
    pub label: f32,
    pub description: f32,
    pub params: f32,
    pub source: f32,
    pub id: f32,
}

/// Terms taken from one query, after synonyms; the rest are dropped.
const MAX_QUERY_TERMS: usize = 32;

#[derive(Clone, Copy)]
struct Fields {
    ord: Field,
    name: Field,
    label: Field,
    description: Field,
    params: Field,
    source: Field,
    id: Field,
}

/// One result: the position of the entry in the slice the index was built from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub ord: usize,
    pub score: f32,
    /// The query equals this entry's name or id.
    pub exact: bool,
}

pub struct SearchIndex {
    searcher: Searcher,
    /// One `ord` column per segment, by segment ordinal.
    ords: Vec<Column<u64>>,
    fields: Fields,
    analyzer: TextAnalyzer,
    synonyms: Synonyms,
    /// Lowercased name or id -> entries, ids first.
    exact: HashMap<String, Vec<usize>>,
    len: usize,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("len", &self.len)
            .finish()
    }
}

/// Indexing memory: tantivy's minimum per thread; 10,000 tools fit in one segment.
const WRITER_MEMORY: usize = 50_000_000;

impl SearchIndex {
    /// Indexes `docs`; hits refer to positions in this slice.
    pub fn build(docs: &[IndexDoc]) -> Result<Self> {
        let mut builder = Schema::builder();
        let text = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(analyze::ANALYZER)
                .set_index_option(IndexRecordOption::WithFreqs),
        );
        let fields = Fields {
            ord: builder.add_u64_field("ord", INDEXED | FAST),
            name: builder.add_text_field("name", text.clone()),
            label: builder.add_text_field("label", text.clone()),
            description: builder.add_text_field("description", text.clone()),
            params: builder.add_text_field("params", text.clone()),
            source: builder.add_text_field("source", text.clone()),
            id: builder.add_text_field("id", text),
        };
        let index = Index::create_in_ram(builder.build());
        let analyzer = analyze::analyzer();
        index
            .tokenizers()
            .register(analyze::ANALYZER, analyzer.clone());

        let mut writer: IndexWriter = index.writer_with_num_threads(1, WRITER_MEMORY)?;
        writer.set_merge_policy(Box::new(NoMergePolicy));
        let mut exact: HashMap<String, Vec<usize>> = HashMap::new();
        for (ord, d) in docs.iter().enumerate() {
            let mut doc = TantivyDocument::default();
            doc.add_u64(fields.ord, ord as u64);
            doc.add_text(fields.name, &d.name);
            doc.add_text(fields.label, &d.label);
            doc.add_text(fields.description, &d.description);
            doc.add_text(fields.params, &d.params);
            doc.add_text(fields.source, &d.source);
            doc.add_text(fields.id, &d.id);
            writer.add_document(doc)?;
            exact.entry(d.id.to_lowercase()).or_default().push(ord);
        }
        // Names after ids, so an exact id match outranks a same-named tool.
        for (ord, d) in docs.iter().enumerate() {
            let list = exact.entry(d.name.to_lowercase()).or_default();
            if !list.contains(&ord) {
                list.push(ord);
            }
        }
        writer.commit()?;
        writer.wait_merging_threads()?;

        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let searcher = reader.searcher();
        let ords = searcher
            .segment_readers()
            .iter()
            .map(|s| s.fast_fields().u64("ord"))
            .collect::<tantivy::Result<Vec<_>>>()?;
        let mut synonym_analyzer = analyzer.clone();
        Ok(SearchIndex {
            searcher,
            ords,
            fields,
            synonyms: Synonyms::new(&mut synonym_analyzer),
            analyzer,
            exact,
            len: docs.len(),
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The analyzed terms of a query, without synonyms (for logs and `eval`).
    pub fn query_terms(&self, query: &str) -> Vec<String> {
        let mut analyzer = self.analyzer.clone();
        analyze::terms(&mut analyzer, query)
    }

    /// The best `limit` entries for `query`, exact name or id matches first.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        if limit == 0 {
            return Vec::new();
        }
        let mut hits: Vec<Hit> = self
            .exact
            .get(&query.trim().to_lowercase())
            .map(|ords| {
                ords.iter()
                    .map(|&ord| Hit {
                        ord,
                        score: f32::INFINITY,
                        exact: true,
                    })
                    .collect()
            })
            .unwrap_or_default();
        hits.truncate(limit);
        if hits.len() == limit {
            return hits;
        }
        let Some(query) = self.build_query(query) else {
            return hits;
        };
        let wanted = limit + hits.len();
        let scored = match self
            .searcher
            .search(&query, &TopDocs::with_limit(wanted).order_by_score())
        {
            Ok(scored) => scored,
            Err(e) => {
                // Only an internal fault gets here (the index is in RAM and read-only).
                tracing::error!("search failed: {e}");
                return hits;
            }
        };
        for (score, address) in scored {
            let Some(ord) = self
                .ords
                .get(address.segment_ord as usize)
                .and_then(|c| c.first(address.doc_id))
            else {
                continue;
            };
            let ord = ord as usize;
            if hits.iter().any(|h| h.ord == ord) {
                continue;
            }
            hits.push(Hit {
                ord,
                score,
                exact: false,
            });
            if hits.len() == limit {
                break;
            }
        }
        hits
    }

    fn build_query(&self, query: &str) -> Option<BooleanQuery> {
        let mut analyzer = self.analyzer.clone();
        let typed = analyze::terms(&mut analyzer, query);
        if typed.is_empty() {
            return None;
        }
        // Typed terms at full weight, then synonyms not typed, at a reduced weight.
        let mut weighted: Vec<(String, f32)> = Vec::new();
        for t in &typed {
            if !weighted.iter().any(|(w, _)| w == t) {
                weighted.push((t.clone(), 1.0));
            }
        }
        for t in &typed {
            for s in self.synonyms.of(t) {
                if !weighted.iter().any(|(w, _)| w == s) {
                    weighted.push((s.clone(), synonyms::SYNONYM_WEIGHT));
                }
            }
        }
        weighted.truncate(MAX_QUERY_TERMS);
        let f = self.fields;
        let w = FIELD_WEIGHTS;
        let field_weights = [
            (f.name, w.name),
            (f.label, w.label),
            (f.description, w.description),
            (f.params, w.params),
            (f.source, w.source),
            (f.id, w.id),
        ];
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for (term, term_weight) in &weighted {
            for (field, field_weight) in field_weights {
                let q = TermQuery::new(
                    Term::from_field_text(field, term),
                    IndexRecordOption::WithFreqs,
                );
                clauses.push((
                    Occur::Should,
                    Box::new(BoostQuery::new(Box::new(q), term_weight * field_weight)),
                ));
            }
        }
        Some(BooleanQuery::new(clauses))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, name: &str, description: &str) -> IndexDoc {
        IndexDoc {
            id: id.into(),
            name: name.into(),
            description: description.into(),
            ..Default::default()
        }
    }

    fn index() -> SearchIndex {
        SearchIndex::build(&[
            doc(
                "openclaw:github:create_issue",
                "create_issue",
                "Open a new issue in a repository",
            ),
            doc(
                "openclaw:tickets:create_ticket",
                "create_ticket",
                "File a support ticket",
            ),
            doc("openclaw:core:message", "message", "Send a chat message"),
            doc("mcp:x:message", "message", "Another message tool"),
            doc(
                "openclaw:core:zebra",
                "zebra",
                "Create issue create issue create issue",
            ),
        ])
        .unwrap()
    }

    #[test]
    fn exact_names_and_ids_rank_first() {
        let idx = index();
        let hits = idx.search("MESSAGE", 5);
        assert!(hits[0].exact && hits[1].exact, "{hits:?}");
        assert_eq!([hits[0].ord, hits[1].ord], [2, 3]);
        let hits = idx.search("mcp:x:message", 5);
        assert_eq!(hits[0].ord, 3);
        assert!(hits[0].exact);
        assert!(hits.iter().skip(1).all(|h| h.ord != 3));
    }

    #[test]
    fn name_matches_outweigh_repeated_description_words() {
        let hits = index().search("create issue", 3);
        assert_eq!(hits[0].ord, 0, "{hits:?}");
    }

    #[test]
    fn empty_or_stop_word_queries_return_nothing() {
        let idx = index();
        assert!(idx.search("", 5).is_empty());
        assert!(idx.search("   ", 5).is_empty());
        assert!(idx.search("the of and", 5).is_empty());
        assert!(idx.search("create", 0).is_empty());
    }

    #[test]
    fn synonyms_find_tools_described_in_other_words() {
        let idx = SearchIndex::build(&[
            doc("a", "remove_file", "Remove a file from disk"),
            doc("b", "weather", "Forecast for a city"),
        ])
        .unwrap();
        let hits = idx.search("delete a file", 2);
        assert_eq!(hits[0].ord, 0);
    }

    #[test]
    fn param_text_is_bounded_and_walks_nesting() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "repo": {"type": "string", "description": "owner/name"},
            "state": {"enum": ["open", "closed"]},
            "filter": {"type": "object", "properties": {"label": {"description": "a label"}}}
        }});
        let t = IndexDoc::param_text(&schema);
        for w in [
            "repo",
            "owner/name",
            "open",
            "closed",
            "filter",
            "label",
            "a label",
        ] {
            assert!(t.contains(w), "{w} missing from {t}");
        }
        let mut props = serde_json::Map::new();
        for i in 0..2000 {
            props.insert(
                format!("p{i}"),
                serde_json::json!({"description": "x".repeat(50)}),
            );
        }
        let t = IndexDoc::param_text(&serde_json::json!({"properties": props}));
        assert!(t.len() <= MAX_PARAM_TEXT_BYTES);
    }
}
