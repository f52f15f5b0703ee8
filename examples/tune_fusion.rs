//! Tunes the fusion of lexical and semantic rankings leave-one-set-out, and prints the
//! tables the README reports.
//!
//! ```sh
//! cargo run --release --example tune_fusion -- MODEL_DIR [DATA_DIR]
//! ```
//!
//! `DATA_DIR` (default `../shared/data/retrieval`) holds the four development sets. Every
//! query's parts are ranked once, lexically and semantically, 100 deep (query vectors are
//! kept under `target/tune-fusion/`, so a second run embeds only the tools); then each
//! candidate [`Fusion`] is scored on every set with `eval`'s own scoring. For each set, the
//! parameters are chosen on the three others (best mean R@5 among those that cost none of
//! them more than 0.5 point against lexical search) and checked on it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toolsearch::config::SemanticConfig;
use toolsearch::eval::{DatasetQuery, read_dataset, score_query};
use toolsearch::search::fusion::{FUSION, Fusion, embedded_parts, fuse_parts};
use toolsearch::search::{SearchIndex, interleave, parts};
use toolsearch::semantic::Model;
use toolsearch::semantic::cache::{MAX_SEGMENTS, Store, text_key};

const SETS: [&str; 4] = ["metatool", "sealtools", "azure_mcp", "toollens_train"];
const DEPTH: usize = 100;
const KS: [usize; 3] = [1, 5, 10];

/// One query, ranked once: lexical and semantic lists per part (empty when a part is not
/// embedded under the fusion being scored: recomputed per candidate from `has_terms`).
struct Ranked {
    lexical: Vec<Vec<(usize, f32)>>,
    semantic: Vec<Vec<(usize, f32)>>,
    has_terms: Vec<bool>,
}

struct Set {
    name: &'static str,
    ids: Vec<String>,
    queries: Vec<DatasetQuery>,
    ranked: Vec<Ranked>,
}

#[derive(Clone, Copy, Default)]
struct Scores {
    r1: f64,
    r5: f64,
    r10: f64,
    ndcg5: f64,
    mrr: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(model_dir) = args.first() else {
        eprintln!("usage: tune_fusion MODEL_DIR [DATA_DIR]");
        std::process::exit(2);
    };
    let data = PathBuf::from(args.get(1).map_or("../shared/data/retrieval", |s| s));
    let model = Arc::new(
        Model::load(&SemanticConfig {
            model: model_dir.into(),
            query_prefix: None,
            document_prefix: None,
            cache: true,
        })
        .unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        }),
    );
    let sets: Vec<Set> = SETS
        .iter()
        .map(|name| prepare(name, &data, &model))
        .collect();

    let lexical: Vec<Scores> = sets.iter().map(|s| score(s, None)).collect();
    let dense_only: Vec<Scores> = sets
        .iter()
        .map(|s| {
            score(
                s,
                Some(&Fusion {
                    semantic_weight: 1e6,
                    ..FUSION
                }),
            )
        })
        .collect();
    let mut grid = Vec::new();
    for k in [1.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 100.0] {
        for semantic_weight in [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0] {
            for depth in [10, 20, 50, 100] {
                for whole_request in [true, false] {
                    grid.push(Fusion {
                        k,
                        semantic_weight,
                        depth,
                        whole_request,
                    });
                }
            }
        }
    }
    let results: Vec<(Fusion, Vec<Scores>)> = grid
        .iter()
        .map(|f| (*f, sets.iter().map(|s| score(s, Some(f))).collect()))
        .collect();

    println!("## R@5 by ranking\n");
    println!("| ranking | {} |", SETS.join(" | "));
    println!("|---|{}", "---:|".repeat(SETS.len()));
    row("lexical", &lexical);
    row("semantic alone", &dense_only);
    row(
        &format!("{FUSION:?} (production)"),
        &sets
            .iter()
            .map(|s| score(s, Some(&FUSION)))
            .collect::<Vec<_>>(),
    );

    println!("\n## Leave one set out\n");
    println!(
        "| held out | chosen on the other three | their mean R@5 gain | held-out lexical R@5 | held-out hybrid R@5 |"
    );
    println!("|---|---|---:|---:|---:|");
    for held in 0..sets.len() {
        let others: Vec<usize> = (0..sets.len()).filter(|&i| i != held).collect();
        if let Some((f, gain, s)) = best(&results, &lexical, &others) {
            println!(
                "| {} | {} | {:+.2} | {:.2} | {:.2} |",
                SETS[held],
                show(&f),
                gain,
                100.0 * lexical[held].r5,
                100.0 * s[held].r5
            );
        }
    }
    let all: Vec<usize> = (0..sets.len()).collect();
    if let Some((f, gain, s)) = best(&results, &lexical, &all) {
        println!("\nChosen on all four: {} (mean R@5 {gain:+.2})\n", show(&f));
        println!("| set | ranking | R@1 | R@5 | R@10 | nDCG@5 | MRR |");
        println!("|---|---|---:|---:|---:|---:|---:|");
        for (i, name) in SETS.iter().enumerate() {
            for (label, m) in [("lexical", lexical[i]), ("hybrid", s[i])] {
                println!(
                    "| {name} | {label} | {:.1} | {:.2} | {:.1} | {:.1} | {:.3} |",
                    100.0 * m.r1,
                    100.0 * m.r5,
                    100.0 * m.r10,
                    100.0 * m.ndcg5,
                    m.mrr
                );
            }
        }
    }
    println!("\n## The 15 best on all four (mean R@5 gain; per set)\n");
    let mut ranked: Vec<&(Fusion, Vec<Scores>)> = results.iter().collect();
    let mean_gain = |s: &[Scores]| {
        s.iter()
            .zip(&lexical)
            .map(|(h, l)| 100.0 * (h.r5 - l.r5))
            .sum::<f64>()
            / s.len() as f64
    };
    ranked.sort_by(|a, b| mean_gain(&b.1).total_cmp(&mean_gain(&a.1)));
    for (f, s) in ranked.iter().take(15) {
        let per: Vec<String> = s.iter().map(|m| format!("{:.2}", 100.0 * m.r5)).collect();
        println!("- {}: {:+.2} ({})", show(f), mean_gain(s), per.join(", "));
    }
}

fn show(f: &Fusion) -> String {
    format!(
        "k {}, semantic weight {}, depth {}, whole request {}",
        f.k, f.semantic_weight, f.depth, f.whole_request
    )
}

fn row(label: &str, s: &[Scores]) {
    let cells: Vec<String> = s.iter().map(|m| format!("{:.2}", 100.0 * m.r5)).collect();
    println!("| {label} | {} |", cells.join(" | "));
}

/// The candidate with the best mean R@5 gain over `sets` among those that lose no more
/// than 0.5 point on any of them.
fn best(
    results: &[(Fusion, Vec<Scores>)],
    lexical: &[Scores],
    sets: &[usize],
) -> Option<(Fusion, f64, Vec<Scores>)> {
    results
        .iter()
        .filter(|(_, s)| {
            sets.iter()
                .all(|&i| 100.0 * (s[i].r5 - lexical[i].r5) >= -0.5)
        })
        .map(|(f, s)| {
            let gain = sets
                .iter()
                .map(|&i| 100.0 * (s[i].r5 - lexical[i].r5))
                .sum::<f64>()
                / sets.len() as f64;
            (*f, gain, s.clone())
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

fn prepare(name: &'static str, data: &Path, model: &Arc<Model>) -> Set {
    let dir = data.join(name);
    let (docs, queries) = read_dataset(&dir.join("catalog.jsonl"), &dir.join("queries.jsonl"))
        .unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        });
    eprintln!("{name}: {} tools, {} queries", docs.len(), queries.len());
    let lexical_index = SearchIndex::build(&docs).expect("index");
    let hybrid = SearchIndex::build(&docs)
        .and_then(|index| index.with_dense(Arc::clone(model), &docs))
        .expect("index");
    let dense = hybrid.dense().expect("dense");

    // Every part of every query, embedded once (and kept between runs).
    let mut texts: Vec<&str> = queries.iter().flat_map(|q| parts(&q.query)).collect();
    texts.sort_unstable();
    texts.dedup();
    let store = Store::open(
        &PathBuf::from("target/tune-fusion").join(name),
        model.key(),
        model.dim(),
    );
    let mut vectors: HashMap<[u8; 16], Vec<f32>> =
        store.as_ref().map(|s| s.load().0).unwrap_or_default();
    let missing: Vec<&str> = texts
        .iter()
        .copied()
        .filter(|t| !vectors.contains_key(&text_key(t)))
        .collect();
    if !missing.is_empty() {
        eprintln!("{name}: embedding {} query parts", missing.len());
        let dim = model.dim();
        for chunk in missing.chunks(2048) {
            let v = model.embed_queries(chunk).expect("embed");
            let fresh: Vec<([u8; 16], Vec<f32>)> = chunk
                .iter()
                .enumerate()
                .map(|(i, t)| (text_key(t), v[i * dim..(i + 1) * dim].to_vec()))
                .collect();
            if let Some(s) = &store {
                let refs: Vec<([u8; 16], &[f32])> =
                    fresh.iter().map(|(k, v)| (*k, v.as_slice())).collect();
                if s.save(&refs) > MAX_SEGMENTS {
                    vectors.extend(fresh.iter().cloned());
                    let all: Vec<([u8; 16], &[f32])> =
                        vectors.iter().map(|(k, v)| (*k, v.as_slice())).collect();
                    s.merge(&all);
                }
            }
            vectors.extend(fresh);
            eprintln!(
                "{name}: {} left",
                missing.len().saturating_sub(vectors.len())
            );
        }
    }
    let ranked = queries
        .iter()
        .map(|q| {
            let p = parts(&q.query);
            Ranked {
                lexical: p.iter().map(|t| lexical_index.ranked(t, DEPTH)).collect(),
                semantic: p
                    .iter()
                    .map(|t| dense.top(&vectors[&text_key(t)], DEPTH))
                    .collect(),
                has_terms: p.iter().map(|t| lexical_index.has_terms(t)).collect(),
            }
        })
        .collect();
    Set {
        name,
        ids: docs.iter().map(|d| d.id.clone()).collect(),
        queries,
        ranked,
    }
}

/// The set's scores under `fusion` (none: lexical alone, as production without a model).
fn score(set: &Set, fusion: Option<&Fusion>) -> Scores {
    let mut total = Scores::default();
    let n = *KS.iter().max().unwrap_or(&10);
    for (q, r) in set.queries.iter().zip(&set.ranked) {
        let lists = match fusion {
            None => r
                .lexical
                .iter()
                .map(|l| l[..l.len().min(n)].to_vec())
                .collect(),
            Some(f) => {
                let embedded = embedded_parts(f, &r.has_terms);
                let semantic: Vec<Vec<(usize, f32)>> = (0..r.semantic.len())
                    .map(|i| {
                        if embedded.contains(&i) {
                            r.semantic[i].clone()
                        } else {
                            Vec::new()
                        }
                    })
                    .collect();
                fuse_parts(f, &r.lexical, &semantic, n)
            }
        };
        let ranked: Vec<&str> = interleave(&lists, n)
            .iter()
            .map(|(ord, _)| set.ids[*ord].as_str())
            .collect();
        let s = score_query(q, &ranked, &KS);
        total.r1 += s.recall[0];
        total.r5 += s.recall[1];
        total.r10 += s.recall[2];
        total.ndcg5 += s.ndcg[0];
        total.mrr += s.rr;
    }
    let count = set.queries.len().max(1) as f64;
    let _ = set.name;
    Scores {
        r1: total.r1 / count,
        r5: total.r5 / count,
        r10: total.r10 / count,
        ndcg5: total.ndcg5 / count,
        mrr: total.mrr / count,
    }
}
