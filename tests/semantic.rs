//! Semantic search through the binary, with all-MiniLM-L6-v2 (`.ci/fetch-model`, or
//! `TOOLSEARCH_TEST_MODEL`): every front's search gets the fused ranking, tool embeddings
//! are kept on disk and survive a corrupt or unwritable cache, and a model that cannot load
//! stops every command, naming the file.

mod common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use common::*;

fn model_dir() -> PathBuf {
    let dir = std::env::var_os("TOOLSEARCH_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/models/all-MiniLM-L6-v2")
        });
    assert!(
        dir.join("model.safetensors").is_file(),
        "no test model at {}: run `bash .ci/fetch-model` (or set TOOLSEARCH_TEST_MODEL)",
        dir.display()
    );
    dir
}

/// "what is 15 percent of 240" shares no word with any demo tool ("percent" is in none,
/// the rest are stop words or numbers), so lexical search finds nothing; the model knows a
/// percentage is arithmetic.
const PARAPHRASE: &str = "what is 15 percent of 240";

impl Sandbox {
    /// A config using the test model, its cache under this sandbox.
    fn semantic_config(&self) -> PathBuf {
        self.write(
            "semantic.toml",
            format!(
                "[search.semantic]\nmodel = {:?}\n",
                model_dir().to_str().expect("a UTF-8 path")
            ),
        )
    }

    /// `toolsearch --config semantic.toml ARGS` with `XDG_CACHE_HOME` in this sandbox.
    fn semantic(&self, args: &[&str]) -> Command {
        let config = self.semantic_config();
        let mut cmd = self.cmd();
        cmd.env("XDG_CACHE_HOME", self.path().join("cache"))
            .arg("--config")
            .arg(config)
            .args(args);
        cmd
    }

    fn segments(&self) -> Vec<PathBuf> {
        let root = self.path().join("cache/toolsearch/embeddings");
        let mut out = Vec::new();
        for model in std::fs::read_dir(root).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(model.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push(f.path());
            }
        }
        out
    }
}

fn ids(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .expect("an array of hits")
        .iter()
        .map(|h| h["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn search_finds_in_meaning_what_words_miss_and_embeds_the_catalog_once() {
    let sb = Sandbox::new();
    let lexical = ok_json(sb.cmd().args(["search", PARAPHRASE, "--json"]));
    assert!(ids(&lexical).is_empty(), "{lexical}");

    let first = run(&mut sb.semantic(&["search", PARAPHRASE, "--limit", "3", "--json"]));
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(
        ids(&first.json())[0],
        "openclaw:core:calculate",
        "{}",
        first.stdout
    );
    assert!(
        first
            .stderr
            .contains("embedding 204 tool texts with all-MiniLM-L6-v2"),
        "the first run says it embeds the catalog: {}",
        first.stderr
    );
    assert_eq!(sb.segments().len(), 1, "one segment written");

    // The next process reads the vectors back: nothing embedded, the same answer.
    let second = run(&mut sb.semantic(&["search", PARAPHRASE, "--limit", "3", "--json"]));
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(!second.stderr.contains("embedding"), "{}", second.stderr);
    assert_eq!(second.stdout, first.stdout);
    assert_eq!(sb.segments().len(), 1);

    // The exact-name rule stays above the fused ranking.
    let exact = ok_json(&mut sb.semantic(&["search", "calculate", "--limit", "2", "--json"]));
    assert_eq!(ids(&exact)[0], "openclaw:core:calculate");
    // A query of stop words alone is still no query.
    let none = ok_json(&mut sb.semantic(&["search", "what is it", "--json"]));
    assert!(ids(&none).is_empty(), "{none}");
}

#[test]
fn every_front_searches_through_the_fused_ranking() {
    let sb = Sandbox::new();
    // Warm the cache once, so the runs below embed only their query.
    ok_json(&mut sb.semantic(&["search", PARAPHRASE, "--json"]));

    // Directory mode's likely schemas are scored against the prompt by the same index.
    let surface = ok_json(&mut sb.semantic(&[
        "surface",
        "--mode",
        "directory",
        "--prompt",
        PARAPHRASE,
        "--json",
    ]));
    let declared: Vec<&str> = surface["request"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(declared.contains(&"calculate"), "{declared:?}");
    let lexical = ok_json(sb.cmd().args([
        "surface",
        "--mode",
        "directory",
        "--prompt",
        PARAPHRASE,
        "--json",
    ]));
    assert!(
        !lexical["request"]["tools"]
            .to_string()
            .contains("\"calculate\""),
        "lexical search alone should not find it: {lexical}"
    );

    // The code bridge's search.
    let code = ok_json(&mut sb.semantic(&[
        "code",
        &format!("return (await openclaw.tools.search({PARAPHRASE:?}, {{limit: 1}}))[0].id"),
        "--json",
    ]));
    assert_eq!(code["value"], "openclaw:core:calculate", "{code}");

    // A request of several sentences: each sentence's tool reaches the top. The whole
    // request places its two best in each round and a sentence whose best it already
    // gave yields its turn (a sentence offering its next instead cost sealtools 7.8 points
    // of R@5), so the first sentence's tool is fourth here.
    let multi = ok_json(&mut sb.semantic(&[
        "search",
        "Convert 100 US dollars into euros. Then translate the total into French for my invoice.",
        "--limit",
        "4",
        "--json",
    ]));
    let got = ids(&multi);
    for want in [
        "openclaw:core:convert_currency",
        "openclaw:core:translate_text",
    ] {
        assert!(got.iter().any(|id| id == want), "{want} missing: {got:?}");
    }
}

#[test]
fn a_corrupt_or_unwritable_cache_is_rebuilt_or_skipped() {
    let sb = Sandbox::new();
    let catalog = fixture("tools.jsonl");
    let search = |sb: &Sandbox| {
        let args = [
            "--catalog",
            catalog.to_str().unwrap(),
            "search",
            "put this into German",
            "--json",
        ];
        let out = run(&mut sb.semantic(&args));
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.stdout
    };
    let first = search(&sb);
    let segments = sb.segments();
    assert_eq!(segments.len(), 1);
    std::fs::write(&segments[0], b"not a segment").unwrap();
    assert_eq!(search(&sb), first, "a corrupt cache changes nothing");
    let rebuilt = sb.segments();
    assert_eq!(rebuilt.len(), 1, "{rebuilt:?}");
    assert_ne!(std::fs::read(&rebuilt[0]).unwrap(), b"not a segment");

    // A cache root that is a file: no cache, the same answer.
    let unwritable = Sandbox::new();
    unwritable.write("cache", "a file, not a folder");
    assert_eq!(search(&unwritable), first);
}

#[test]
fn eval_reports_the_hybrid_run_and_its_model() {
    let sb = Sandbox::new();
    let (catalog, queries) = (fixture("eval/catalog.jsonl"), fixture("eval/queries.jsonl"));
    let args = [
        "eval",
        "--catalog",
        catalog.to_str().unwrap(),
        "--queries",
        queries.to_str().unwrap(),
    ];
    let mut json = args.to_vec();
    json.push("--json");
    let r = ok_json(&mut sb.semantic(&json));
    assert_eq!(r["ranking"], "hybrid", "{r}");
    assert_eq!(r["model"]["name"], "all-MiniLM-L6-v2");
    assert_eq!(r["model"]["dim"], 384);
    assert_eq!(r["model"]["key"].as_str().map(str::len), Some(64));
    assert!(r["recall"]["5"].as_f64().is_some(), "{r}");
    let text = run(&mut sb.semantic(&args));
    assert_eq!(text.code, 0);
    assert!(
        text.stdout
            .contains("ranking: hybrid, lexical fused with all-MiniLM-L6-v2"),
        "{}",
        text.stdout
    );
}

#[test]
fn a_model_that_cannot_load_stops_every_command_naming_the_file() {
    let sb = Sandbox::new();
    // The test model without its tokenizer, linked file by file.
    let broken = sb.path().join("broken-model");
    for entry in walk(&model_dir()) {
        let rel = entry.strip_prefix(model_dir()).unwrap();
        if rel == Path::new("tokenizer.json") {
            continue;
        }
        let to = broken.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if std::fs::hard_link(&entry, &to).is_err() {
            std::fs::copy(&entry, &to).unwrap();
        }
    }
    let config = sb.write(
        "broken.toml",
        format!(
            "[search.semantic]\nmodel = {:?}\n",
            broken.to_str().unwrap()
        ),
    );
    let (catalog, queries) = (fixture("eval/catalog.jsonl"), fixture("eval/queries.jsonl"));
    let eval = [
        "eval",
        "--catalog",
        catalog.to_str().unwrap(),
        "--queries",
        queries.to_str().unwrap(),
    ];
    for args in [
        &["search", "x", "--json"][..],
        &["catalog", "--json"],
        &["describe", "calculate", "--json"],
        &eval,
    ] {
        let mut cmd = sb.cmd();
        cmd.arg("--config").arg(&config).args(args);
        if !args.contains(&"--json") {
            cmd.arg("--json");
        }
        let m = err_json(&mut cmd, 2, "bad-model");
        assert!(
            m.contains(&broken.join("tokenizer.json").display().to_string())
                && m.contains("missing file"),
            "{args:?}: {m}"
        );
    }
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
