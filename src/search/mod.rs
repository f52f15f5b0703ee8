//! The search index over compact descriptors, and its ranking.
//!
//! A tantivy index in RAM, one document per cataloged tool. Every text goes through the one
//! analyzer of [`analyze`] (identifier splitting, stop words, English stemming). The fields
//! of a tool (name, label and tags, description, parameter text, source and source name,
//! id) are weighted BM25F-style ([`FIELD_WEIGHTS`]) into one scored text; the name is also
//! a field of its own. A query is analyzed the same way, expanded with [`synonyms`] and
//! scored by [`score`] over tantivy's postings.
//!
//! Rules above the scores:
//! - an entry whose name or id equals the query (case-insensitive) ranks first, always;
//! - a query with no usable terms returns nothing rather than the whole catalog;
//! - a request of several sentences ("find the flight. then book a hotel") is searched
//!   whole and sentence by sentence, and the rankings are interleaved, so that each part's
//!   best tool reaches the top instead of the one tool that matches most words overall; the
//!   whole request, the better evidence, gives two tools a round.
//!
//! With a model configured (`[search.semantic]`), each part's lexical ranking is fused
//! with its semantic one ([`dense`], [`fusion`]) before the interleaving; the rules above
//! hold as they are.
//!
//! This module owns ranking only. It knows nothing of policy (the catalog given to it is
//! already filtered) and returns positions in the slice it was built from.

pub mod analyze;
pub mod dense;
pub mod fusion;
mod score;
pub mod synonyms;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use tantivy::indexer::NoMergePolicy;
use tantivy::indexer::UserOperation;
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{TextAnalyzer, WhitespaceTokenizer};
use tantivy::{Index, IndexWriter, ReloadPolicy};

use crate::error::{Error, Result};
use crate::semantic::Model;
use dense::Dense;
use score::Scorer;
use synonyms::Synonyms;

/// The text of one tool, field by field, as the index sees it.
#[derive(Debug, Clone, Default)]
pub struct IndexDoc {
    pub id: String,
    pub name: String,
    /// Label and tags.
    pub label: String,
    pub description: String,
    /// Per parameter: its name, and its description and enum values as text; empty for
    /// untrusted sources.
    pub params: Vec<(String, String)>,
    /// Source and source name (`mcp github`, `openclaw calendar`).
    pub source: String,
}

/// Bounds on the parameter text taken from one schema: enough for real tools, cheap for
/// pathological ones.
const MAX_PARAM_TEXT_BYTES: usize = 4096;
const MAX_PARAM_DEPTH: usize = 3;

impl IndexDoc {
    /// The parameters of a JSON Schema: names, and text (description, string enum values),
    /// walked to [`MAX_PARAM_DEPTH`] and cut at [`MAX_PARAM_TEXT_BYTES`] in all.
    pub fn param_text(schema: &Value) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut stack = vec![(schema, 0usize)];
        while let Some((s, depth)) = stack.pop() {
            if bytes >= MAX_PARAM_TEXT_BYTES || depth > MAX_PARAM_DEPTH {
                continue;
            }
            let Some(obj) = s.as_object() else { continue };
            if let Some(props) = obj.get("properties").and_then(Value::as_object) {
                stack.extend(props.values().rev().map(|p| (p, depth + 1)));
                for (name, prop) in props {
                    if bytes + name.len() > MAX_PARAM_TEXT_BYTES {
                        break;
                    }
                    bytes += name.len();
                    let mut text = String::new();
                    if let Some(d) = prop.get("description").and_then(Value::as_str) {
                        text.push_str(d);
                    }
                    if let Some(values) = prop.get("enum").and_then(Value::as_array) {
                        for v in values.iter().filter_map(Value::as_str) {
                            text.push(' ');
                            text.push_str(v);
                        }
                    }
                    let room = MAX_PARAM_TEXT_BYTES.saturating_sub(bytes);
                    let end = crate::shown::head(&text, room).len();
                    text.truncate(end);
                    bytes += text.len();
                    out.push((name.clone(), text));
                }
            }
            if let Some(items) = obj.get("items") {
                stack.push((items, depth + 1));
            }
        }
        out
    }
}

/// Field weights, BM25F-style: a field's terms count `weight` times in the one scored
/// text, so all fields share one length normalisation and one saturation curve. (Summing
/// per-field BM25 scores instead rewards a word once per field it appears in, and costs a
/// postings lookup per field.) The name says most about what a tool does; label and tags
/// are curated. Parameters count as much as the description: a terse API's description
/// ("Get Suggestions") often says less than its parameters (`ingredient`, `ip_address`)
/// about what it is for (ToolLens R@5 30.4 -> 31.9; no other set moved). A parameter's
/// name is its identifier, chosen like the tool's name to say what it is (`ip_address`,
/// `ingredient`), so it counts as much as the name, above its description (toollens
/// +0.19, sealtools -0.05, the others unchanged). The source name
/// (an MCP server, an API's name: `flight-radar`, `worldwide-recipes`) names the domain
/// that terse endpoint names (`airlines/get-logos`, `Explore`) leave out, so it counts
/// above the name (ToolLens +0.4; a set of one server does not move).
pub const FIELD_WEIGHTS: Weights = Weights {
    name: 3,
    label: 2,
    description: 2,
    params: 2,
    param_names: 3,
    source: 4,
    id: 0,
};

/// Weight of the name field, scored on its own beside the combined text, so a word of the
/// name beats the same word repeated in a long description. Its score grows with the share
/// of the name the query says (see [`score`]).
pub const NAME_BOOST: f32 = 1.0;

#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub name: u32,
    pub label: u32,
    pub description: u32,
    /// Parameter descriptions and enum values.
    pub params: u32,
    pub param_names: u32,
    pub source: u32,
    pub id: u32,
}

/// Terms taken from one query, typed words first, then synonyms; the rest are dropped. A
/// request of several sentences easily has more than 32 distinct words, and each sentence
/// may be the only mention of one of its tools (sealtools R@5 +0.4 going from 32 to 64).
const MAX_QUERY_TERMS: usize = 64;
/// Sentences searched on their own at most; the rest count in the whole query only.
const MAX_SEGMENTS: usize = 6;
/// Entries the whole request's ranking gives to each round of the interleaving, against one
/// for each sentence: the whole request holds every word of the request, so its second tool
/// is better evidence than a sentence's first, which is often a tool for an aside ("I'm
/// planning a trip.") of a request that needs one tool (metatool R@5 +0.26, sealtools +0.12,
/// toollens +0.2; three a round costs sealtools 0.9).
const WHOLE_REQUEST_RANKS: usize = 2;
/// A source needs this many tools before its shared parameters count as boilerplate.
const BOILERPLATE_MIN_TOOLS: usize = 8;
/// The fields hold terms already analyzed by [`analyze`], joined by spaces (analyzed terms
/// never contain whitespace), so tantivy only splits them. (Tantivy's pre-tokenized values
/// go through a JSON round trip inside the indexer, which doubled the build time.)
const PRE_ANALYZED: &str = "pre-analyzed";
/// Documents handed to the indexing thread at once: one channel send per batch instead of
/// per document, with a bounded amount of text held.
const INDEX_BATCH: usize = 1_000;
/// Indexing memory; 10,000 tools fit in one segment.
const WRITER_MEMORY: usize = 50_000_000;
/// Beside an index on disk: each document's term counts (two little-endian `u32`) and
/// name mass (a little-endian `f32`), [`DOC_FACTS`] bytes a document.
pub const LENGTHS_FILE: &str = "lengths";
const DOC_FACTS: usize = 12;

/// One result: the position of the entry in the slice the index was built from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub ord: usize,
    pub score: f32,
    /// The query equals this entry's name or id.
    pub exact: bool,
}

/// A query term and its weight: 1 for a typed word, less for a synonym.
type WeightedTerm = (String, f32);

pub struct SearchIndex {
    scorer: Scorer,
    analyzer: TextAnalyzer,
    synonyms: Synonyms,
    /// Lowercased name or id -> entries, ids first.
    exact: HashMap<String, Vec<usize>>,
    len: usize,
    /// Term counts of the scored fields per document, and the summed idf of its name's
    /// words, kept to be written beside the index.
    lengths: Vec<[u32; 2]>,
    name_mass: Vec<f32>,
    /// The semantic half, when a model is configured.
    dense: Option<Dense>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("len", &self.len)
            .finish()
    }
}

impl SearchIndex {
    /// Indexes `docs` in memory; hits refer to positions in this slice.
    pub fn build(docs: &[IndexDoc]) -> Result<Self> {
        Self::write(Index::create_in_ram(index_schema()), docs)
    }

    /// Indexes `docs` into the empty folder `dir`, where [`SearchIndex::open`] finds it
    /// again: tantivy's files, and the documents' lengths and name masses beside them.
    pub fn build_in(dir: &Path, docs: &[IndexDoc]) -> Result<Self> {
        let index = Index::create_in_dir(dir, index_schema())?;
        let built = Self::write(index, docs)?;
        let mut bytes = Vec::with_capacity(built.lengths.len() * DOC_FACTS);
        for (pair, mass) in built.lengths.iter().zip(&built.name_mass) {
            bytes.extend(pair[0].to_le_bytes());
            bytes.extend(pair[1].to_le_bytes());
            bytes.extend(mass.to_le_bytes());
        }
        std::fs::write(dir.join(LENGTHS_FILE), bytes)
            .map_err(|e| Error::Index(format!("cannot write {}: {e}", dir.display())))?;
        Ok(built)
    }

    /// The index [`SearchIndex::build_in`] wrote to `dir` for the documents whose ids and
    /// names are `keys`, in the order they were indexed. Anything that does not fit (a
    /// missing or damaged file, another number of documents) is an error, never a wrong
    /// index.
    pub fn open<'a>(
        dir: &Path,
        keys: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self> {
        let n = keys.len();
        let bytes = std::fs::read(dir.join(LENGTHS_FILE))
            .map_err(|e| Error::Index(format!("cannot read {}: {e}", dir.display())))?;
        if bytes.len() != n * DOC_FACTS {
            return Err(Error::Index(format!(
                "{}: lengths of {} documents for {n}",
                dir.display(),
                bytes.len() / DOC_FACTS
            )));
        }
        let (lengths, name_mass): (Vec<[u32; 2]>, Vec<f32>) = bytes
            .chunks_exact(DOC_FACTS)
            .map(|c| {
                (
                    [
                        u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                        u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                    ],
                    f32::from_le_bytes([c[8], c[9], c[10], c[11]]),
                )
            })
            .unzip();
        let index = Index::open_in_dir(dir)?;
        register_tokenizer(&index);
        let searcher = Self::searcher(&index)?;
        if searcher.num_docs() != n as u64 {
            return Err(Error::Index(format!(
                "{}: {} documents indexed for {n}",
                dir.display(),
                searcher.num_docs()
            )));
        }
        Self::assemble(searcher, lengths, name_mass, keys)
    }

    /// Adds `docs` to the empty `index` and commits.
    fn write(index: Index, docs: &[IndexDoc]) -> Result<Self> {
        register_tokenizer(&index);
        let schema = index.schema();
        let [ord_field, text_field, name_field] = fields(&schema)?;
        let mut analyzer = analyze::analyzer();
        let mut writer: IndexWriter = index.writer_with_num_threads(1, WRITER_MEMORY)?;
        writer.set_merge_policy(Box::new(NoMergePolicy));
        let boilerplate = boilerplate_params(docs);
        let w = FIELD_WEIGHTS;
        let mut lengths = Vec::with_capacity(docs.len());
        let mut name_words = Vec::with_capacity(docs.len());
        let mut batch = Vec::with_capacity(INDEX_BATCH.min(docs.len()));
        for (ord, d) in docs.iter().enumerate() {
            let (param_names, params): (Vec<&str>, Vec<&str>) = d
                .params
                .iter()
                .filter(|(name, _)| !boilerplate.contains(&(d.source.as_str(), name.as_str())))
                .map(|(name, text)| (name.as_str(), text.as_str()))
                .unzip();
            let (param_names, params) = (param_names.join(" "), params.join(" "));
            let name_terms = analyze::terms(&mut analyzer, &d.name);
            let mut text_terms = Vec::new();
            for _ in 0..w.name {
                text_terms.extend(name_terms.iter().cloned());
            }
            for (text, weight) in [
                (d.label.as_str(), w.label),
                (d.description.as_str(), w.description),
                (param_names.as_str(), w.param_names),
                (params.as_str(), w.params),
                (d.source.as_str(), w.source),
                (d.id.as_str(), w.id),
            ] {
                if weight == 0 || text.is_empty() {
                    continue;
                }
                let terms = analyze::terms(&mut analyzer, text);
                for _ in 0..weight {
                    text_terms.extend(terms.iter().cloned());
                }
            }
            lengths.push([text_terms.len() as u32, name_terms.len() as u32]);
            name_words.push(analyze::part_terms(&mut analyzer, &d.name));
            let mut doc = tantivy::TantivyDocument::default();
            doc.add_u64(ord_field, ord as u64);
            doc.add_text(text_field, text_terms.join(" "));
            doc.add_text(name_field, name_terms.join(" "));
            batch.push(UserOperation::Add(doc));
            if batch.len() == INDEX_BATCH {
                writer.run(std::mem::take(&mut batch))?;
            }
        }
        writer.run(batch)?;
        writer.commit()?;
        writer.wait_merging_threads()?;
        let searcher = Self::searcher(&index)?;
        let name_mass = score::name_mass(&searcher, name_field, &name_words)?;
        Self::assemble(
            searcher,
            lengths,
            name_mass,
            docs.iter().map(|d| (d.id.as_str(), d.name.as_str())),
        )
    }

    fn searcher(index: &Index) -> Result<tantivy::Searcher> {
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        Ok(reader.searcher())
    }

    /// The index over a committed `searcher`; `keys` are the (id, name) of each document,
    /// by position.
    fn assemble<'a>(
        searcher: tantivy::Searcher,
        lengths: Vec<[u32; 2]>,
        name_mass: Vec<f32>,
        keys: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self> {
        let [ord_field, text_field, name_field] = fields(searcher.schema())?;
        let scorer = Scorer::new(
            searcher,
            ord_field,
            [text_field, name_field],
            &lengths,
            &name_mass,
        )?;
        let keys: Vec<(&str, &str)> = keys.collect();
        let mut exact: HashMap<String, Vec<usize>> = HashMap::new();
        for (ord, (id, _)) in keys.iter().enumerate() {
            exact.entry(id.to_lowercase()).or_default().push(ord);
        }
        // Names after ids, so an exact id match outranks a same-named tool.
        for (ord, (_, name)) in keys.iter().enumerate() {
            let list = exact.entry(name.to_lowercase()).or_default();
            if !list.contains(&ord) {
                list.push(ord);
            }
        }
        let mut analyzer = analyze::analyzer();
        let synonyms = Synonyms::new(&mut analyzer);
        Ok(SearchIndex {
            scorer,
            analyzer,
            synonyms,
            exact,
            len: keys.len(),
            lengths,
            name_mass,
            dense: None,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The index made hybrid: `docs` (the documents it was built from, in order) embedded
    /// with `model`, for fusion with the lexical ranking.
    pub fn with_dense(mut self, model: Arc<Model>, docs: &[IndexDoc]) -> Result<Self> {
        if docs.len() != self.len {
            return Err(Error::Index(format!(
                "{} documents to embed for an index of {}",
                docs.len(),
                self.len
            )));
        }
        self.dense = Some(Dense::build(model, docs)?);
        Ok(self)
    }

    /// The semantic half, when the index has one.
    pub fn dense(&self) -> Option<&Dense> {
        self.dense.as_ref()
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
                    .take(limit)
                    .map(|&ord| Hit {
                        ord,
                        score: f32::INFINITY,
                        exact: true,
                    })
                    .collect()
            })
            .unwrap_or_default();
        if hits.len() == limit {
            return hits;
        }
        let wanted = limit + hits.len();
        let parts = parts(query);
        let lists: Vec<Vec<(usize, f32)>> = match &self.dense {
            Some(dense) => fusion::rank_parts(self, dense, &parts, wanted),
            None => parts.iter().map(|q| self.ranked(q, wanted)).collect(),
        };
        // Whole request first, then each sentence, a round at a time.
        let ranked = interleave(&lists, wanted);
        for (ord, score) in ranked {
            if hits.len() == limit {
                break;
            }
            if !hits.iter().any(|h| h.ord == ord) {
                hits.push(Hit {
                    ord,
                    score,
                    exact: false,
                });
            }
        }
        hits
    }

    /// The lexical ranking of one query (a whole request or one of its sentences): the
    /// best `n` entries with their BM25 scores.
    pub fn ranked(&self, query: &str, n: usize) -> Vec<(usize, f32)> {
        let terms = self.weighted_terms(query);
        if terms.is_empty() {
            return Vec::new();
        }
        self.scorer.top(&terms, NAME_BOOST, n)
    }

    /// Whether `query` has a word the analyzer keeps (not only stop words and symbols).
    pub fn has_terms(&self, query: &str) -> bool {
        let mut analyzer = self.analyzer.clone();
        !analyze::terms(&mut analyzer, query).is_empty()
    }

    /// Typed terms at full weight, then synonyms not typed, at a reduced weight.
    fn weighted_terms(&self, query: &str) -> Vec<WeightedTerm> {
        let mut analyzer = self.analyzer.clone();
        let typed = analyze::terms(&mut analyzer, query);
        let mut weighted: Vec<WeightedTerm> = Vec::with_capacity(typed.len() * 4);
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
        weighted
    }
}

/// The index's fields: each tool's position (`ord`), the weighted text, the name.
fn index_schema() -> Schema {
    let mut builder = Schema::builder();
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(PRE_ANALYZED)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    builder.add_u64_field("ord", INDEXED | FAST);
    builder.add_text_field("text", text_options.clone());
    builder.add_text_field("name", text_options);
    builder.build()
}

fn fields(schema: &Schema) -> Result<[Field; 3]> {
    let field = |name: &str| {
        schema
            .get_field(name)
            .map_err(|e| Error::Index(format!("the index has no `{name}` field: {e}")))
    };
    Ok([field("ord")?, field("text")?, field("name")?])
}

fn register_tokenizer(index: &Index) {
    index.tokenizers().register(
        PRE_ANALYZED,
        TextAnalyzer::from(WhitespaceTokenizer::default()),
    );
}

/// Merges rankings a round at a time: the first list's next [`WHOLE_REQUEST_RANKS`]
/// entries, then every other list's next one, skipping entries already taken.
pub fn interleave(lists: &[Vec<(usize, f32)>], n: usize) -> Vec<(usize, f32)> {
    let mut out: Vec<(usize, f32)> = Vec::with_capacity(n);
    let depth = lists.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..depth {
        for (i, list) in lists.iter().enumerate() {
            let ranks = if i == 0 {
                round * WHOLE_REQUEST_RANKS..(round + 1) * WHOLE_REQUEST_RANKS
            } else {
                round..round + 1
            };
            for &(ord, score) in ranks.filter_map(|r| list.get(r)) {
                if !out.iter().any(|(o, _)| *o == ord) {
                    out.push((ord, score));
                    if out.len() == n {
                        return out;
                    }
                }
            }
        }
    }
    out
}

/// What a request is searched as: the whole, then each of its sentences when it has
/// several.
pub fn parts(query: &str) -> Vec<&str> {
    let segments = segments(query);
    if segments.len() < 2 {
        return vec![query];
    }
    std::iter::once(query).chain(segments).collect()
}

/// The sentences of a request: split at `.`, `?`, `!` or `;` followed by a space. A
/// sentence of fewer than three words joins the next one, so "e.g. x" or a short aside
/// does not become a query of its own.
fn segments(query: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = query.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let end_mark = matches!(b, b'.' | b'?' | b'!' | b';');
        let followed_by_space = bytes.get(i + 1).is_none_or(|c| c.is_ascii_whitespace());
        if end_mark && followed_by_space {
            let sentence = query[start..=i].trim();
            if sentence.split_whitespace().count() >= 3 {
                out.push(sentence);
                start = i + 1;
            }
        }
    }
    let rest = query[start..].trim();
    if rest.split_whitespace().count() >= 3 {
        out.push(rest);
    } else if !rest.is_empty()
        && let Some(last) = out.pop()
    {
        // A short tail belongs to the sentence before it.
        let from = last.as_ptr() as usize - query.as_ptr() as usize;
        out.push(query[from..].trim());
    }
    out.truncate(MAX_SEGMENTS);
    out
}

/// Parameters that more than half of one source's tools take (`tenant`, `retry-mode`,
/// `page`, `auth-method`) say nothing about what a tool does, and their text would only
/// make every tool of that source longer. They are left out of the scored text.
fn boilerplate_params(docs: &[IndexDoc]) -> HashSet<(&str, &str)> {
    let mut tools: HashMap<&str, usize> = HashMap::new();
    let mut uses: HashMap<(&str, &str), usize> = HashMap::new();
    for d in docs {
        *tools.entry(d.source.as_str()).or_default() += 1;
        let mut seen = HashSet::new();
        for (name, _) in &d.params {
            if seen.insert(name.as_str()) {
                *uses.entry((d.source.as_str(), name.as_str())).or_default() += 1;
            }
        }
    }
    uses.into_iter()
        .filter(|((source, _), n)| {
            let total = tools.get(source).copied().unwrap_or(0);
            total >= BOILERPLATE_MIN_TOOLS && 2 * n > total
        })
        .map(|(key, _)| key)
        .collect()
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
    fn names_count_by_the_share_of_them_a_query_says() {
        // Alike for BM25: one name word matched, same lengths. But "list" is in most names
        // and "close" in one, so "issues" says more of `list_issues` than of `close_issues`.
        let idx = SearchIndex::build(&[
            doc("c", "close_issues", "Issues of a repository"),
            doc("l", "list_issues", "Issues of a repository"),
            doc("r", "list_repos", "Repositories of a user"),
            doc("u", "list_users", "Users of an organisation"),
        ])
        .unwrap();
        let hits = idx.search("issues", 2);
        assert_eq!(hits[0].ord, 1, "{hits:?}");
        assert!(hits[0].score > hits[1].score, "{hits:?}");
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
    fn requests_split_into_sentences() {
        assert_eq!(
            segments("Find a cheap flight to Paris. Then book a hotel near the Louvre."),
            [
                "Find a cheap flight to Paris.",
                "Then book a hotel near the Louvre."
            ]
        );
        assert_eq!(segments("create a github issue"), ["create a github issue"]);
        assert_eq!(
            segments("See e.g. the docs. Ok."),
            ["See e.g. the docs. Ok."]
        );
        assert!(segments("").is_empty());
    }

    #[test]
    fn interleaving_takes_each_lists_best_first() {
        let lists = vec![
            vec![(1, 0.0), (2, 0.0), (5, 0.0)],
            vec![(3, 0.0), (1, 0.0), (6, 0.0)],
            vec![(4, 0.0)],
        ];
        let ords: Vec<usize> = interleave(&lists, 10).into_iter().map(|(o, _)| o).collect();
        // Round one: the whole request's two best, each sentence's best; round two: the
        // whole request's third, the second sentence's second (1, already taken), ...
        assert_eq!(ords, [1, 2, 3, 4, 5, 6]);
        assert_eq!(interleave(&lists, 2).len(), 2);
    }

    #[test]
    fn multi_part_requests_surface_each_parts_tool() {
        let idx = SearchIndex::build(&[
            doc("a", "search_flights", "Search flights between two airports"),
            doc("b", "book_hotel", "Book a hotel room"),
            doc(
                "c",
                "flight_status",
                "Flight status of a flight number, flight delays",
            ),
        ])
        .unwrap();
        let hits = idx.search("Search flights for a flight to Paris, flight number please. Then book a hotel room there.", 2);
        let ords: Vec<usize> = hits.iter().map(|h| h.ord).collect();
        assert!(ords.contains(&1), "{ords:?}");
    }

    #[test]
    fn boilerplate_parameters_are_detected_per_source() {
        let docs: Vec<IndexDoc> = (0..10)
            .map(|i| IndexDoc {
                id: format!("t{i}"),
                name: format!("t{i}"),
                source: "mcp azure".into(),
                params: vec![
                    ("tenant".into(), "tenant the tenant id".into()),
                    (format!("p{i}"), "own".into()),
                ],
                ..Default::default()
            })
            .collect();
        let b = boilerplate_params(&docs);
        assert!(b.contains(&("mcp azure", "tenant")));
        assert!(!b.contains(&("mcp azure", "p1")));
    }

    #[test]
    fn param_text_is_bounded_and_walks_nesting() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "repo": {"type": "string", "description": "owner/name"},
            "state": {"enum": ["open", "closed"]},
            "filter": {"type": "object", "properties": {"label": {"description": "a label"}}}
        }});
        let params = IndexDoc::param_text(&schema);
        let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["repo", "state", "filter", "label"]);
        let t: String = params.iter().map(|(_, t)| t.clone() + " ").collect();
        for w in ["owner/name", "open", "closed", "a label"] {
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
        let bytes: usize = t.iter().map(|(n, t)| n.len() + t.len()).sum();
        assert!(bytes <= MAX_PARAM_TEXT_BYTES, "{bytes}");
    }
}
