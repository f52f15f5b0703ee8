//! Code mode timings: a cold run against `node -e 0` measured in the same run, a run on a
//! spare child, the bridge round trip per call, how far past its deadline a child that does
//! not read its answers is stopped, a burst of back-to-back runs through `mcp serve`, a
//! whole `toolsearch code` process against `env -i node -e 0`, and a soak of 1,000 runs
//! mixing successes, errors and timeouts that counts the sandbox processes left afterwards.
//! `cargo bench --bench code` prints a markdown table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolsearch::Catalog;
use toolsearch::catalog::Facts;
use toolsearch::code;
use toolsearch::config::Config;
use toolsearch::dispatch::DispatcherBuilder;
use toolsearch::sandbox::protocol::BridgeMethod;
use toolsearch::sandbox::spares::SparePool;
use toolsearch::sandbox::{Bridge, BridgeFuture, Sandbox, SandboxPolicy};

/// Answers every call with 256 KiB, so a child that does not read fills its socket.
struct Flood;

impl Bridge for Flood {
    fn call(&self, _: BridgeMethod, _: Vec<Value>, _: CancellationToken) -> BridgeFuture<'_> {
        Box::pin(async { Ok(toolsearch::sandbox::answer(&"a".repeat(256 * 1024))) })
    }
}

/// Milliseconds of one whole process run, `cmd` with `args`.
fn time_process(cmd: &str, args: &[&str], env_clear: bool) -> f64 {
    let mut c = std::process::Command::new(cmd);
    c.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if env_clear {
        c.env_clear();
    }
    let started = Instant::now();
    let status = c.status().expect("run");
    assert!(status.success(), "{cmd} {args:?}: {status}");
    started.elapsed().as_secs_f64() * 1e3
}

/// `n` back-to-back `tool_search_code` calls through `toolsearch mcp serve` on stdio,
/// JSON-RPC written by hand; milliseconds of each, from request written to answer read.
fn mcp_serve_burst(n: usize, idle_first: Duration) -> Vec<f64> {
    use std::io::{BufRead, Write};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolsearch"))
        .args(["--state-dir", "/tmp/toolsearch-bench-state", "mcp", "serve"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mcp serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    fn ask(
        stdin: &mut impl Write,
        stdout: &mut impl BufRead,
        id: u64,
        method: &str,
        params: Value,
    ) -> Value {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{msg}").expect("write");
        let mut line = String::new();
        loop {
            line.clear();
            stdout.read_line(&mut line).expect("read");
            let v: Value = serde_json::from_str(&line).expect("json");
            if v["id"] == json!(id) {
                return v;
            }
        }
    }
    ask(
        &mut stdin,
        &mut stdout,
        0,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
    );
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .expect("write");
    std::thread::sleep(idle_first);
    let mut times = Vec::new();
    for i in 0..n {
        let started = Instant::now();
        let v = ask(
            &mut stdin,
            &mut stdout,
            i as u64 + 1,
            "tools/call",
            json!({"name": "tool_search_code", "arguments": {"code": "return (await openclaw.tools.search('issue')).length"}}),
        );
        times.push(started.elapsed().as_secs_f64() * 1e3);
        assert!(v["result"]["isError"] != json!(true), "{v}");
    }
    drop(stdin);
    let _ = child.wait();
    times
}

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
            &Facts::bare(&config),
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
                code::ChildFrom::Ready(Box::new(child)),
                dispatcher.clone(),
                body,
                timeout,
                code::Parent::alone("bench"),
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

        // A child that starts 60 calls, never reads the answers (256 KiB each) and blocks or
        // spins: how long past its 1 s deadline the run ends (as `timeout`).
        let mut over = Vec::new();
        for then in ["Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);", "for (;;) {}"] {
            for _ in 0..5 {
                let body = format!(
                    "for (let i = 0; i < 60; i++) openclaw.tools.search('q' + i).then(() => {{}});\nawait null;\n{then}"
                );
                let started = Instant::now();
                let r = sandbox.run(&body, Duration::from_millis(1000), Arc::new(Flood)).await;
                let took = started.elapsed().as_secs_f64() * 1e3;
                assert_eq!(r.outcome.as_ref().err().map(|e| e.code), Some("timeout"), "{r:?}");
                over.push(took - 1000.0);
            }
        }
        over.sort_by(f64::total_cmp);
        println!(
            "| a child with 60 unread answers, blocked or busy: past the 1 s deadline | {:.0} ms median, {:.0} ms max (target ≤ 250) |",
            over[over.len() / 2],
            over[over.len() - 1]
        );

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
            let r = code::run_with(
                &sandbox,
                code::ChildFrom::Spares(&pool),
                dispatcher.clone(),
                body,
                t,
                code::Parent::alone("soak"),
            )
            .await;
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

    // Whole processes, paired: `toolsearch code 'return 1'` (cached probe and calibration;
    // one warm-up fills the cache) against `env -i node -e 0`.
    let bin = env!("CARGO_BIN_EXE_toolsearch");
    let node = sandbox.node().path.to_string_lossy().into_owned();
    let args = [
        "--state-dir",
        "/tmp/toolsearch-bench-state",
        "code",
        "return 1",
    ];
    time_process(bin, &args, false);
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..30 {
        let a = time_process(bin, &args, false);
        let b = time_process(&node, &["-e", "0"], true);
        ours.push(a);
        theirs.push(b);
        ratios.push(a / b);
    }
    println!(
        "| `toolsearch code 'return 1'`, whole process | {:.1} ms vs `env -i node -e 0` {:.1} ms: {:.2} x (median of 30 paired ratios; target ≤ 1.5) |",
        median(ours),
        median(theirs),
        median(ratios)
    );

    // Back-to-back tool_search_code calls through mcp serve (spares as configured: 8, up
    // to 16 in a burst), after 2 s idle so the pool is at rest when the burst starts.
    let burst = mcp_serve_burst(20, Duration::from_secs(2));
    let mut sorted = burst.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "| burst of 20 back-to-back runs through `mcp serve` | p50 {:.1} ms, max {:.1} ms (target p50 ≤ 15) |",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
}
