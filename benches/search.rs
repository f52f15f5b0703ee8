//! Index build and search at 100, 1,000 and 10,000 synthetic tools, and the CLI's memory
//! and wall time for a 10,000-tool catalog, first and repeated (stored catalog). `cargo bench --bench search` prints a markdown table.
//!
//! A plain harness rather than criterion: the numbers wanted are medians and p95 of single
//! operations, printed side by side, and the memory of a separate process.

use std::process::Command;
use std::time::Instant;

use toolsearch::Catalog;
use toolsearch::catalog::{Facts, index_doc};
use toolsearch::config::Config;
use toolsearch::search::{IndexDoc, SearchIndex};
use toolsearch::synth;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // `cargo test --all-targets` runs bench targets too, without `--bench`: skip the
    // measurements there (they are slow in debug and mean nothing).
    if !std::env::args().any(|a| a == "--bench") {
        println!("benchmark skipped: run it with `cargo bench`");
        return;
    }
    let config = Config::default();
    let queries = synth::queries(2_000, 11);
    println!(
        "| tools | plan + index build (ms) | index build (ms) | search p50 (µs) | search p95 (µs) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for &n in &[100usize, 1_000, 10_000] {
        let tools = synth::catalog(n, 42);
        let runs = if n >= 10_000 { 7 } else { 15 };
        let mut full = Vec::new();
        let mut index_only = Vec::new();
        let mut catalog = None;
        for _ in 0..runs {
            let t = tools.clone();
            let started = Instant::now();
            let c = Catalog::build(t, &Facts::bare(&config)).expect("synthetic catalog builds");
            full.push(started.elapsed().as_secs_f64() * 1e3);
            let docs: Vec<IndexDoc> = c
                .cataloged()
                .iter()
                .map(|e| index_doc(&e.descriptor, &e.id, &e.descriptor.input_schema.value()))
                .collect();
            let started = Instant::now();
            let index = SearchIndex::build(&docs).expect("index builds");
            index_only.push(started.elapsed().as_secs_f64() * 1e3);
            drop(index);
            catalog = Some(c);
        }
        let catalog = catalog.expect("at least one run");
        // Warm up, then time each query through the catalog's public search.
        for q in queries.iter().take(200) {
            let _ = catalog.search(q, None);
        }
        let mut lat: Vec<f64> = queries
            .iter()
            .map(|q| {
                let started = Instant::now();
                let hits = catalog.search(q, None).expect("query within limits");
                std::hint::black_box(hits);
                started.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        println!(
            "| {n} | {:.1} | {:.1} | {:.1} | {:.1} |",
            median(full),
            median(index_only),
            percentile(&mut lat, 0.5),
            percentile(&mut lat, 0.95)
        );
    }
    memory();
}

/// Peak RSS and wall time of `toolsearch search` on the embedded demo and on a 10,000-tool
/// JSONL file: the first run (parse, plan, index, and store them) and the median of the
/// repeated ones, which read the stored catalog and index. The bench's own cache folder,
/// so that the first run is a first run.
fn memory() {
    let bin = env!("CARGO_BIN_EXE_toolsearch");
    if !std::path::Path::new("/usr/bin/time").exists() {
        println!("\n(/usr/bin/time not found: memory not measured)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("toolsearch-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("synthetic-10000.jsonl");
    std::fs::write(&file, synth::to_jsonl(&synth::catalog(10_000, 42))).expect("write catalog");
    let run = |args: &[&str]| -> (f64, f64) {
        let started = Instant::now();
        let out = Command::new("/usr/bin/time")
            .arg("-v")
            .arg(bin)
            .args(args)
            .current_dir(&dir)
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .output()
            .expect("run toolsearch under /usr/bin/time");
        let wall = started.elapsed().as_secs_f64() * 1e3;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let rss_kib: f64 = stderr
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("Maximum resident set size (kbytes): ")
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(f64::NAN);
        (rss_kib / 1024.0, wall)
    };
    println!(
        "\n| CLI `search` | first run: peak RSS (MiB) | wall (ms) | repeated: peak RSS (MiB) | wall p50 (ms) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let path = file.to_str().unwrap_or_default();
    for (label, args) in [
        ("embedded demo", vec!["search", "create a GitHub issue"]),
        (
            "10,000 tools (JSONL), target ≤ 150 ms repeated",
            vec!["--catalog", path, "search", "create invoice"],
        ),
    ] {
        let (first_rss, first_wall) = run(&args);
        let repeated: Vec<(f64, f64)> = (0..9).map(|_| run(&args)).collect();
        let rss = repeated.iter().map(|r| r.0).fold(0.0, f64::max);
        let wall = median(repeated.iter().map(|r| r.1).collect());
        println!("| {label} | {first_rss:.1} | {first_wall:.0} | {rss:.1} | {wall:.0} |");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
