//! Code mode timings: a cold run against `node -e 0` measured in the same run, a run on a
//! spare child, the bridge round trip per call, and a soak of 1,000 runs mixing successes,
//! errors and timeouts that counts the sandbox processes left afterwards.
//! `cargo bench --bench code` prints a markdown table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use toolsearch::Catalog;
use toolsearch::catalog::Facts;
use toolsearch::code;
use toolsearch::config::Config;
use toolsearch::dispatch::DispatcherBuilder;
use toolsearch::sandbox::spares::SparePool;
use toolsearch::sandbox::{Sandbox, SandboxPolicy};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Live processes whose command line holds the runtime (which names `tool_search_code`) or
/// the runtime's startup snapshot.
fn sandbox_processes() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            let zombie = status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            !zombie && {
                let cmd = String::from_utf8_lossy(&cmd);
                cmd.contains("tool_search_code") || cmd.contains("--snapshot-blob")
            }
        })
        .count()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("benchmark skipped: run it with `cargo bench`");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let config = Config::default();
    let catalog = Arc::new(
        Catalog::build(
            toolsearch::catalog::embedded::demo_descriptors().expect("demo"),
            &Facts {
                config: &config,
                env: &|_| None,
                sources_down: &Default::default(),
            },
        )
        .expect("catalog"),
    );
    let dispatcher = Arc::new(DispatcherBuilder::new(catalog).build());
    let sandbox = Arc::new(
        Sandbox::new(
            None,
            SandboxPolicy::default_policy().expect("policy"),
            false,
        )
        .expect("sandbox"),
    );
    let timeout = Duration::from_secs(10);
    let body = r#"const hits = await openclaw.tools.search("create a GitHub issue");
return await openclaw.tools.call(hits[0].id, {title: "Crash on start"});"#;

    runtime.block_on(async {
        let mut node_e0 = Vec::new();
        let mut cold = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let _ = tokio::process::Command::new(&sandbox.node().path)
                .args(["-e", "0"])
                .env_clear()
                .output()
                .await;
            node_e0.push(started.elapsed().as_secs_f64() * 1e3);
            let started = Instant::now();
            let r = code::run(&sandbox, dispatcher.clone(), body, timeout, "bench").await;
            assert!(r.is_ok(), "{r:?}");
            cold.push(started.elapsed().as_secs_f64() * 1e3);
        }
        let node_e0 = median(node_e0);
        let cold = median(cold);

        let pool = SparePool::start(
            sandbox.clone(),
            toolsearch::sandbox::spares::Sizing { min: 1, max: 1 },
            timeout,
        );
        let mut spare = Vec::new();
        for _ in 0..30 {
            while pool.is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let started = Instant::now();
            let child = pool.take().await.expect("spare");
            let r = code::run_with(
                &sandbox,
                Some(child),
                dispatcher.clone(),
                body,
                timeout,
                "bench",
            )
            .await;
            assert!(r.is_ok(), "{r:?}");
            spare.push(started.elapsed().as_secs_f64() * 1e3);
        }
        let spare = median(spare);

        // At most 64 bridge calls a run (sandbox policy): 60, and every run must succeed
        // (a run cut off at the cap would make calls look cheaper than they are).
        let many =
            "for (let i = 0; i < 60; i++) await openclaw.tools.describe('create_issue'); return 1";
        let one = "await openclaw.tools.describe('create_issue'); return 1";
        let (mut t_many, mut t_one) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            let started = Instant::now();
            let r = code::run(&sandbox, dispatcher.clone(), many, timeout, "bench").await;
            assert!(r.is_ok(), "{r:?}");
            t_many.push(started.elapsed().as_secs_f64() * 1e6);
            let started = Instant::now();
            let r = code::run(&sandbox, dispatcher.clone(), one, timeout, "bench").await;
            assert!(r.is_ok(), "{r:?}");
            t_one.push(started.elapsed().as_secs_f64() * 1e6);
        }
        let per_call = (median(t_many) - median(t_one)) / 59.0;

        println!("| measure | value |");
        println!("|---|---:|");
        println!("| `node -e 0` (same run) | {node_e0:.1} ms |");
        println!(
            "| cold run: spawn, search, call, result, reap | {cold:.1} ms ({:.2} x node -e 0) |",
            cold / node_e0
        );
        println!("| run on a spare child (take, run, reap) | {spare:.1} ms |");
        println!("| bridge round trip per call (describe) | {per_call:.0} µs |");

        // Soak: successes, code errors, bridge errors and timeouts, on spares.
        let before = sandbox_processes();
        let started = Instant::now();
        let mut outcomes = std::collections::BTreeMap::new();
        for i in 0..1000 {
            let (body, t) = match i % 50 {
                0 => ("for(;;){}", Duration::from_millis(1000)),
                1..=9 => ("throw new Error('x')", timeout),
                10..=19 => ("return await openclaw.tools.call('nope', {})", timeout),
                // Leaves a continuation running after the result: killed with the group.
                20..=24 => (
                    "(async () => { await null; await null; for(;;){} })(); return 1",
                    timeout,
                ),
                _ => (body, timeout),
            };
            let child = pool.take().await.ok();
            let r = code::run_with(&sandbox, child, dispatcher.clone(), body, t, "soak").await;
            let key = match &r {
                code::CodeResult::Ok { .. } => "ok",
                code::CodeResult::Err { error, .. } => error.code,
            };
            *outcomes.entry(key).or_insert(0) += 1;
        }
        let soak = started.elapsed().as_secs_f64();
        drop(pool);
        let mut left = sandbox_processes();
        for _ in 0..30 {
            if left <= before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            left = sandbox_processes();
        }
        println!(
            "| soak: 1,000 runs {outcomes:?} | {soak:.1} s; sandbox processes left: {} |",
            left.saturating_sub(before)
        );
    });
}
