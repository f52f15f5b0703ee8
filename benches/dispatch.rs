//! Dispatch overhead: resolve + validate + (no hooks) + fixture executor + envelope, and the
//! same with one command hook (one process spawn per call). `cargo bench --bench dispatch`
//! prints a markdown table.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use toolsearch::Catalog;
use toolsearch::catalog::{ExecutorSpec, Facts, Source, ToolDescriptor};
use toolsearch::config::Config;
use toolsearch::dispatch::{CallRequest, DispatcherBuilder};
use toolsearch::telemetry::SessionLog;

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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let state =
        std::env::temp_dir().join(format!("toolsearch-dispatch-bench-{}", std::process::id()));
    println!("| path | calls | p50 (µs) | p95 (µs) |");
    println!("|---|---:|---:|---:|");
    let hook_config = Config::from_toml_str(
        "[[hooks.before_tool_call]]\ncommand = [\"/bin/true\"]\n",
        "bench.toml".as_ref(),
    )
    .expect("config");
    // Checkers are this package's binary (the bench's own `main` serves none).
    toolsearch::dispatch::checker::use_program(env!("CARGO_BIN_EXE_toolsearch").into());
    let light = (
        "openclaw:github:create_issue",
        json!({"title": "Crash on start", "labels": ["bug"]}),
    );
    // A schema with patterns is checked in a checker process: one round trip a call.
    let patterned: (&str, serde_json::Value) = (
        "openclaw:core:patterned",
        json!({"slug": "crash-on-start", "count": 3}),
    );
    for (label, config, log, n, tool) in [
        (
            "fixture, no hooks, no session log",
            Config::default(),
            false,
            20_000,
            &light,
        ),
        (
            "fixture, schema with a pattern (checked in a checker), no session log",
            Config::default(),
            false,
            5_000,
            &patterned,
        ),
        (
            "fixture, no hooks, session log",
            Config::default(),
            true,
            20_000,
            &light,
        ),
        (
            "fixture, one command hook (/bin/true)",
            hook_config,
            true,
            300,
            &light,
        ),
    ] {
        let mut tools = toolsearch::catalog::embedded::demo_descriptors().expect("demo");
        tools.push(
            ToolDescriptor::builder(Source::Openclaw, "core", "patterned")
                .description("a tool whose schema has a pattern")
                .input_schema(&json!({"type": "object", "properties": {
                    "slug": {"type": "string", "pattern": "^[a-z0-9-]{1,64}$"},
                    "count": {"type": "integer", "minimum": 1}}}))
                .executor(ExecutorSpec::Fixture {
                    text: "ok".into(),
                    details: None,
                })
                .origin("bench")
                .build(),
        );
        let catalog = Arc::new(Catalog::build(tools, &Facts::bare(&config)).expect("catalog"));
        let mut builder = DispatcherBuilder::new(catalog)
            .config(&config)
            .expect("config");
        if log {
            builder =
                builder.session_log(Arc::new(SessionLog::open(&state, "bench").expect("log")));
        }
        let d = builder.build();
        let (tool, args) = tool.clone();
        let mut lat = Vec::with_capacity(n);
        runtime.block_on(async {
            for i in 0..(n + n / 10) {
                let started = Instant::now();
                let e = d
                    .call(CallRequest::new(tool, args.clone(), "bench"))
                    .await
                    .expect("call");
                std::hint::black_box(e);
                if i >= n / 10 {
                    lat.push(started.elapsed().as_secs_f64() * 1e6);
                }
            }
        });
        println!(
            "| {label} | {n} | {:.1} | {:.1} |",
            percentile(&mut lat, 0.5),
            percentile(&mut lat, 0.95)
        );
    }
    // Unknown ids: what a caller's choice of id costs the host (suggestions are bounded):
    // ordinary names, and 10,000 names of the longest length a catalog takes (128
    // characters, all alike in length, so no comparison is skipped by length alone).
    let config = Config::default();
    let long = |mut tools: Vec<toolsearch::catalog::ToolDescriptor>| {
        for t in &mut tools {
            let pad = 128usize.saturating_sub(t.name.len() + 1);
            t.name = format!("{}_{}", t.name, &"golf_romeo_ticket_".repeat(8)[..pad]);
        }
        tools
    };
    for (tools, size) in [
        (toolsearch::synth::catalog(2_000, 7), "2,000 tools"),
        (toolsearch::synth::catalog(10_000, 7), "10,000 tools"),
        (
            long(toolsearch::synth::catalog(10_000, 7)),
            "10,000 tools of 128-character names",
        ),
    ] {
        let catalog = Arc::new(Catalog::build(tools, &Facts::bare(&config)).expect("catalog"));
        let d = DispatcherBuilder::new(catalog).build();
        for (label, id) in [
            (
                "an unknown 27-byte id",
                "openclaw:github:create_isue".to_string(),
            ),
            (
                "an unknown 256-byte id",
                format!("openclaw:core:{}", "g".repeat(242)),
            ),
            (
                "an unknown 142-byte id",
                format!("openclaw:core:{}", "golf_romeo_ticket_".repeat(8)),
            ),
            ("an unknown 60 KB id", "x".repeat(60_000)),
        ] {
            // The first builds the comparison forms once; the rest are what a caller costs.
            let _ = d.describe(&id, "bench");
            let n = 50;
            let mut lat = Vec::with_capacity(n);
            for _ in 0..n {
                let started = Instant::now();
                let e = d.describe(&id, "bench");
                assert!(e.is_err());
                lat.push(started.elapsed().as_secs_f64() * 1e6);
            }
            println!(
                "| describe {label} ({size}) | {n} | {:.1} | {:.1} |",
                percentile(&mut lat, 0.5),
                percentile(&mut lat, 0.95)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&state);
}
