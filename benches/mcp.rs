//! MCP: cataloging the three reference servers, and what a call through code mode adds
//! over the same call made directly with the official SDK client. Needs `npm ci` in
//! tests/mcp. Run with `cargo bench --bench mcp`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolsearch::catalog::{Local, Sources, Upstream};
use toolsearch::code;
use toolsearch::config::Config;
use toolsearch::dispatch::{CallRequest, DispatcherBuilder};
use toolsearch::executors::{Executor, Executors};
use toolsearch::mcp::Hub;
use toolsearch::sandbox::spares::SparePool;
use toolsearch::sandbox::{Sandbox, SandboxPolicy};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn modules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/node_modules/@modelcontextprotocol")
}

fn everything() -> String {
    modules()
        .join("server-everything/dist/index.js")
        .display()
        .to_string()
}

fn config(dir: &Path) -> Config {
    let text = format!(
        r#"
[catalog]
paths = []
[mcp.servers.everything]
command = "node"
args = ["{}", "stdio"]
[mcp.servers.files]
command = "node"
args = ["{}", "{}"]
[mcp.servers.memory]
command = "node"
args = ["{}"]
env = {{ MEMORY_FILE_PATH = "{}" }}
"#,
        everything(),
        modules().join("server-filesystem/dist/index.js").display(),
        dir.display(),
        modules().join("server-memory/dist/index.js").display(),
        dir.join("memory.jsonl").display(),
    );
    Config::from_toml_str(&text, &dir.join("toolsearch.toml")).expect("config")
}

/// Median microseconds of `echo` made directly by the SDK client (repeat calls).
fn sdk_direct_us(repeat: usize) -> f64 {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/sdk-client.mjs");
    let mut child = Command::new("node")
        .arg(client)
        .args(["stdio", "node", &everything(), "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("node");
    let input =
        json!({"calls": [{"name": "echo", "arguments": {"message": "hi"}}], "repeat": repeat});
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("sdk client");
    let v: Value = serde_json::from_slice(&out.stdout).expect("sdk client JSON");
    let times: Vec<f64> = v["call_us"][0]
        .as_array()
        .expect("call_us")
        .iter()
        .skip(5)
        .filter_map(Value::as_f64)
        .collect();
    median(times)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("benchmark skipped: run it with `cargo bench`");
        return;
    }
    assert!(
        modules().exists(),
        "run `npm ci` in tests/mcp first ({} is missing)",
        modules().display()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path());

    runtime.block_on(async {
        // Cataloging: start, initialize and list all three, then build the catalog.
        let mut catalog_ms = Vec::new();
        let mut tools = 0;
        for _ in 0..7 {
            let started = Instant::now();
            let hub = Hub::start(&config.mcp).await;
            let sources = Sources::new(
                config.clone(),
                Local::from_descriptors(Vec::new()),
                Some(Arc::clone(&hub) as Arc<dyn Upstream>),
            );
            let catalog = sources.build().expect("catalog");
            catalog_ms.push(started.elapsed().as_secs_f64() * 1e3);
            assert!(hub.status().iter().all(|s| s.up), "{:?}", hub.status());
            tools = catalog.counts().cataloged;
            hub.stop().await;
        }
        let first_ms = catalog_ms[0];
        let catalog_ms = median(catalog_ms);

        // One host for the calls.
        let hub = Hub::start(&config.mcp).await;
        let sources = Arc::new(Sources::new(
            config.clone(),
            Local::from_descriptors(Vec::new()),
            Some(Arc::clone(&hub) as Arc<dyn Upstream>),
        ));
        let live = Arc::clone(&sources).live().expect("catalog");
        let dispatcher = Arc::new(
            DispatcherBuilder::live(live)
                .executors(Executors {
                    mcp: Some(Arc::clone(&hub) as Arc<dyn Executor>),
                    client: None,
                })
                .build(),
        );
        let sandbox = Arc::new(
            Sandbox::new(None, SandboxPolicy::default_policy().expect("policy"), false)
                .expect("sandbox"),
        );
        let timeout = Duration::from_secs(30);

        // The dispatch path alone (no sandbox): resolve, validate, rmcp, the server.
        let mut dispatch_us = Vec::new();
        for i in 0..300 {
            let started = Instant::now();
            let r = dispatcher
                .call(CallRequest::new(
                    "mcp:everything:echo",
                    json!({"message": "hi"}),
                    "bench",
                ))
                .await
                .expect("call");
            assert!(!r.result.is_error, "{r:?}");
            if i >= 20 {
                dispatch_us.push(started.elapsed().as_secs_f64() * 1e6);
            }
        }
        let dispatch_us = median(dispatch_us);

        // Through code mode: a run making N calls against one making one; the difference
        // per call is what an MCP call inside tool_search_code costs.
        // At most 64 bridge calls a run (sandbox policy): 60 leaves room.
        let n = 60;
        let many = format!(
            "for (let i = 0; i < {n}; i++) await openclaw.tools.call('mcp:everything:echo', {{message: 'hi'}}); return 1"
        );
        let one = "await openclaw.tools.call('mcp:everything:echo', {message: 'hi'}); return 1";
        let (mut t_many, mut t_one) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            let started = Instant::now();
            let r = code::run(&sandbox, dispatcher.clone(), &many, timeout, "bench").await;
            assert!(r.is_ok(), "{r:?}");
            t_many.push(started.elapsed().as_secs_f64() * 1e6);
            let started = Instant::now();
            let r = code::run(&sandbox, dispatcher.clone(), one, timeout, "bench").await;
            assert!(r.is_ok(), "{r:?}");
            t_one.push(started.elapsed().as_secs_f64() * 1e6);
        }
        let code_per_call_us = (median(t_many) - median(t_one)) / (n - 1) as f64;

        // A whole run with one MCP call, on a spare child (what a long-lived host pays).
        let pool = SparePool::start(sandbox.clone(), toolsearch::sandbox::spares::Sizing { min: 1, max: 1 }, timeout);
        let mut spare_ms = Vec::new();
        for _ in 0..20 {
            while pool.is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let child = pool.take().await.expect("spare");
            let started = Instant::now();
            let r = code::run_with(
                &sandbox,
                code::ChildFrom::Ready(Box::new(child)),
                dispatcher.clone(),
                one,
                timeout,
                code::Parent::alone("bench"),
            )
            .await;
            assert!(r.is_ok(), "{r:?}");
            spare_ms.push(started.elapsed().as_secs_f64() * 1e3);
        }
        let spare_ms = median(spare_ms);
        pool.stop();
        hub.stop().await;

        let sdk_us = sdk_direct_us(300);
        println!("| measure | value | target |");
        println!("|---|---:|---:|");
        println!(
            "| catalog 3 stdio servers ({tools} tools): start, initialize, tools/list, build | {catalog_ms:.0} ms median, {first_ms:.0} ms first | ≤ 1,500 ms |"
        );
        println!("| echo, SDK client direct (Node, stdio) | {sdk_us:.0} µs | |");
        println!("| echo through the dispatch path (rmcp client) | {dispatch_us:.0} µs | |");
        println!(
            "| echo through code mode, per call inside a run | {code_per_call_us:.0} µs (+{:.2} ms over the SDK) | ≤ +5 ms |",
            (code_per_call_us - sdk_us) / 1e3
        );
        println!("| a whole tool_search_code run with one echo, on a spare | {spare_ms:.1} ms | |");
    });
}
