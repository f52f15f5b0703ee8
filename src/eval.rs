//! Retrieval evaluation: how well search finds the right tool.
//!
//! Reads a data set (`catalog.jsonl`: `id, name, description, input_schema, server?`;
//! `queries.jsonl`: `qid, query, gold, gold_any_of?`), indexes the catalog with exactly the
//! production index and ranking ([`crate::catalog::index_doc`], [`SearchIndex`]) under the
//! configuration every command reads — lexical, or hybrid with the `[search.semantic]`
//! model — runs every query and reports recall@k, nDCG@5/10, MRR and search latency (for a
//! hybrid run, the query's embedding included).
//!
//! Choices made here:
//! - Data-set tools are indexed as trusted (`openclaw`) tools, source name = `server` or
//!   `dataset`, so their parameter text counts as it does for the agent's own tools.
//! - Relevance units: each `gold_any_of` group is one unit (hit by any member); each gold
//!   id in no group is a unit of its own. recall@k = units hit in the top k / units;
//!   nDCG uses binary gains, a unit counted at its first hit only; MRR is 1 / the rank of
//!   the first hit within the deepest k (0 if none).
//! - Queries carrying a `subset` field are also reported per subset.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::load::json_error_message;
use crate::catalog::{Source, ToolDescriptor, index_doc, safe_name};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::search::{IndexDoc, SearchIndex};
use crate::semantic::Model;

#[derive(Deserialize)]
struct DatasetTool {
    id: String,
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    input_schema: Option<Value>,
    #[serde(default)]
    server: Option<String>,
}

/// One labelled query of a data set.
#[derive(Deserialize)]
pub struct DatasetQuery {
    pub query: String,
    pub gold: Vec<String>,
    #[serde(default)]
    pub gold_any_of: Vec<Vec<String>>,
    #[serde(default)]
    pub subset: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Metrics {
    /// Keyed by k as a string ("1", "5", "10").
    pub recall: BTreeMap<String, f64>,
    pub ndcg: BTreeMap<String, f64>,
    pub mrr: f64,
    pub queries: usize,
    /// Queries that returned no result at all.
    pub empty: usize,
    pub latency_us: Latency,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p95: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub all: Metrics,
    /// `lexical`, or `hybrid` with a `[search.semantic]` model.
    pub ranking: &'static str,
    /// The model of a hybrid run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelReport>,
    pub tools: usize,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub subsets: BTreeMap<String, Metrics>,
}

/// What a hybrid run's model cost.
#[derive(Debug, Clone, Serialize)]
pub struct ModelReport {
    pub name: String,
    /// Hex content hash of its files (the embedding cache's key).
    pub key: String,
    pub dim: usize,
    /// Reading the folder and building the encoder.
    pub load_ms: f64,
    /// Building the index, the tools' embeddings included (from the cache when there).
    pub index_ms: f64,
}

const NDCG_KS: [usize; 2] = [5, 10];

/// Runs the evaluation under `config`; `ks` are the recall cut-offs.
pub fn run(config: &Config, catalog: &Path, queries: &Path, ks: &[usize]) -> Result<Report> {
    if ks.is_empty() || ks.contains(&0) {
        return Err(Error::Usage(
            "--k needs positive cut-offs, e.g. 1,5,10".into(),
        ));
    }
    let model = config
        .search
        .semantic
        .as_ref()
        .map(Model::shared)
        .transpose()?;
    let (docs, queries) = read_dataset(catalog, queries)?;
    let started = Instant::now();
    let mut index = SearchIndex::build(&docs)?;
    if let Some(model) = &model {
        index = index.with_dense(model.clone(), &docs)?;
    }
    let index_ms = started.elapsed().as_secs_f64() * 1e3;
    let depth = ks.iter().chain(NDCG_KS.iter()).copied().max().unwrap_or(10);

    let mut all = Accumulator::default();
    let mut subsets: BTreeMap<String, Accumulator> = BTreeMap::new();
    for q in &queries {
        let started = Instant::now();
        let hits = index.search(&q.query, depth);
        let micros = started.elapsed().as_secs_f64() * 1e6;
        let ranked: Vec<&str> = hits.iter().map(|h| docs[h.ord].id.as_str()).collect();
        let score = score_query(q, &ranked, ks);
        all.add(&score, micros);
        if let Some(s) = &q.subset {
            subsets.entry(s.clone()).or_default().add(&score, micros);
        }
    }
    Ok(Report {
        all: all.finish(ks),
        ranking: if model.is_some() { "hybrid" } else { "lexical" },
        model: model.map(|m| ModelReport {
            name: m.name().to_string(),
            key: m.key().to_string(),
            dim: m.dim(),
            load_ms: m.load_time().as_secs_f64() * 1e3,
            index_ms,
        }),
        tools: docs.len(),
        subsets: subsets
            .into_iter()
            .map(|(k, a)| (k, a.finish(ks)))
            .collect(),
    })
}

/// A data set's tools as index documents (the data set's ids kept) and its queries.
pub fn read_dataset(catalog: &Path, queries: &Path) -> Result<(Vec<IndexDoc>, Vec<DatasetQuery>)> {
    let tools: Vec<DatasetTool> = read_jsonl(catalog)?;
    let queries: Vec<DatasetQuery> = read_jsonl(queries)?;
    let mut seen = HashSet::new();
    let mut docs = Vec::with_capacity(tools.len());
    for t in &tools {
        if !seen.insert(t.id.as_str()) {
            return Err(Error::BadDataset {
                file: catalog.to_path_buf(),
                location: format!("id {}", t.id),
                message: "duplicate id in the data set".into(),
            });
        }
        let schema = t.input_schema.clone().unwrap_or(Value::Null);
        let source_name = t.server.as_deref().map(safe_name);
        let descriptor = ToolDescriptor::builder(
            Source::Openclaw,
            source_name.unwrap_or("dataset".into()),
            t.name.clone(),
        )
        .description(t.description.clone())
        .input_schema(&schema)
        .build();
        docs.push(index_doc(&descriptor, &t.id, &schema));
    }
    Ok((docs, queries))
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let bad = |location: String, message: String| Error::BadDataset {
        file: path.to_path_buf(),
        location,
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad("open".into(), format!("cannot read: {e}")))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let item = serde_json::from_str(line).map_err(|e| {
            bad(
                format!("line {}, column {}", i + 1, e.column()),
                json_error_message(&e),
            )
        })?;
        out.push(item);
    }
    Ok(out)
}

/// One query's scores: recall at each cut-off, nDCG@5 and @10, reciprocal rank.
pub struct QueryScore {
    pub recall: Vec<f64>,
    pub ndcg: [f64; 2],
    pub rr: f64,
    pub empty: bool,
}

/// Scores one ranking (ids, best first) against the query's gold; see the module doc.
pub fn score_query(q: &DatasetQuery, ranked: &[&str], ks: &[usize]) -> QueryScore {
    let mut unit_of: HashMap<&str, usize> = HashMap::new();
    let mut units = 0;
    for group in &q.gold_any_of {
        for id in group {
            unit_of.entry(id.as_str()).or_insert(units);
        }
        units += 1;
    }
    for id in &q.gold {
        if !unit_of.contains_key(id.as_str()) {
            unit_of.insert(id.as_str(), units);
            units += 1;
        }
    }
    // gains[i] = 1 when rank i is the first hit of a unit
    let mut hit_units = HashSet::new();
    let gains: Vec<f64> = ranked
        .iter()
        .map(|id| match unit_of.get(id) {
            Some(u) if hit_units.insert(*u) => 1.0,
            _ => 0.0,
        })
        .collect();
    let units_f = units.max(1) as f64;
    let recall = ks
        .iter()
        .map(|&k| gains.iter().take(k).sum::<f64>() / units_f)
        .collect();
    let ndcg = NDCG_KS.map(|k| {
        let dcg: f64 = gains
            .iter()
            .take(k)
            .enumerate()
            .map(|(i, g)| g / ((i + 2) as f64).log2())
            .sum();
        let ideal: f64 = (0..units.min(k))
            .map(|i| 1.0 / ((i + 2) as f64).log2())
            .sum();
        if ideal > 0.0 { dcg / ideal } else { 0.0 }
    });
    let rr = gains
        .iter()
        .position(|g| *g > 0.0)
        .map(|p| 1.0 / (p + 1) as f64)
        .unwrap_or(0.0);
    QueryScore {
        recall,
        ndcg,
        rr,
        empty: ranked.is_empty(),
    }
}

#[derive(Default)]
struct Accumulator {
    recall: Vec<f64>,
    ndcg: [f64; 2],
    rr: f64,
    n: usize,
    empty: usize,
    latencies: Vec<f64>,
}

impl Accumulator {
    fn add(&mut self, s: &QueryScore, micros: f64) {
        if self.recall.len() < s.recall.len() {
            self.recall.resize(s.recall.len(), 0.0);
        }
        for (a, r) in self.recall.iter_mut().zip(&s.recall) {
            *a += r;
        }
        self.ndcg[0] += s.ndcg[0];
        self.ndcg[1] += s.ndcg[1];
        self.rr += s.rr;
        self.n += 1;
        self.empty += usize::from(s.empty);
        self.latencies.push(micros);
    }

    fn finish(mut self, ks: &[usize]) -> Metrics {
        let n = self.n.max(1) as f64;
        self.latencies.sort_by(f64::total_cmp);
        let pct = |p: f64| {
            if self.latencies.is_empty() {
                0.0
            } else {
                let i = ((self.latencies.len() - 1) as f64 * p).round() as usize;
                self.latencies[i]
            }
        };
        Metrics {
            recall: ks
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    (
                        k.to_string(),
                        self.recall.get(i).copied().unwrap_or(0.0) / n,
                    )
                })
                .collect(),
            ndcg: NDCG_KS
                .iter()
                .enumerate()
                .map(|(i, k)| (k.to_string(), self.ndcg[i] / n))
                .collect(),
            mrr: self.rr / n,
            queries: self.n,
            empty: self.empty,
            latency_us: Latency {
                p50: pct(0.5),
                p95: pct(0.95),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(gold: &[&str], any_of: &[&[&str]]) -> DatasetQuery {
        DatasetQuery {
            query: "x".into(),
            gold: gold.iter().map(|s| s.to_string()).collect(),
            gold_any_of: any_of
                .iter()
                .map(|g| g.iter().map(|s| s.to_string()).collect())
                .collect(),
            subset: None,
        }
    }

    #[test]
    fn recall_ndcg_and_rr_by_hand() {
        let s = score_query(&q(&["a", "b"], &[]), &["x", "a", "y", "b"], &[1, 2, 5]);
        assert_eq!(s.recall, vec![0.0, 0.5, 1.0]);
        assert_eq!(s.rr, 0.5);
        let dcg = 1.0 / 3f64.log2() + 1.0 / 5f64.log2();
        let ideal = 1.0 + 1.0 / 3f64.log2();
        assert!((s.ndcg[0] - dcg / ideal).abs() < 1e-12);
    }

    #[test]
    fn an_any_of_group_counts_once() {
        let s = score_query(
            &q(&["a", "b", "c"], &[&["a", "b"]]),
            &["a", "b", "c"],
            &[1, 2, 3],
        );
        // units: {a,b} and {c}; b is a second hit of the first unit and gains nothing.
        assert_eq!(s.recall, vec![0.5, 0.5, 1.0]);
        assert_eq!(s.rr, 1.0);
    }

    #[test]
    fn no_hits_scores_zero() {
        let s = score_query(&q(&["a"], &[]), &[], &[1]);
        assert_eq!(s.recall, vec![0.0]);
        assert_eq!(s.rr, 0.0);
        assert!(s.empty);
    }
}
