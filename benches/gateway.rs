//! The gateway's own overhead per turn: a turn through the gateway (tools mode, the mock
//! provider answering at once) minus the same provider request sent straight to the mock,
//! both in this process over loopback HTTP, not streamed and streamed (the client streams,
//! so the gateway streams from the provider too). `cargo bench --bench gateway` prints a
//! table.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use toolsearch::catalog::embedded;
use toolsearch::config::{Config, Mode};
use toolsearch::gateway::client::HttpModel;
use toolsearch::gateway::mock::{MockOptions, MockProvider, serve};
use toolsearch::gateway::server::Gateway;
use toolsearch::host::{self, Host};
use toolsearch::provider::Provider;

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
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
    runtime.block_on(async {
        let mock = MockProvider::new(MockOptions { scenario: None, record: None });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mock_url = format!("http://{}", listener.local_addr().expect("addr"));
        let stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(serve(listener, mock, stop.clone()));

        let mut config = Config::default();
        config.provider.base_url = format!("{mock_url}/v1");
        let model = HttpModel::new(&config.provider).expect("model");
        let state = std::env::temp_dir().join(format!("toolsearch-gw-bench-{}", std::process::id()));
        let options = host::Options {
            mode: Some(Mode::Tools),
            state_dir: Some(state.clone()),
            ..Default::default()
        };
        let local = embedded::demo_descriptors().expect("demo");
        let host = Host::with_descriptors(options, config, local).expect("host");
        let gw = Gateway::new(Arc::new(host), Arc::new(model), Provider::OpenaiResponses);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let gw_url = format!("http://{}", listener.local_addr().expect("addr"));
        let server = Arc::clone(&gw);
        tokio::spawn(async move { server.serve(listener).await });

        let http = reqwest::Client::new();
        let n = 400;
        println!("| measure | p50 (ms) | p95 (ms) |");
        println!("|---|---:|---:|");
        for stream in [false, true] {
            let what = if stream { "streamed" } else { "not streamed" };
            let (mut through, mut straight) = (Vec::new(), Vec::new());
            for i in 0..(n + 40) {
                let started = Instant::now();
                let r = http
                    .post(format!("{gw_url}/v1/responses"))
                    .json(&json!({"input": "hello there", "stream": stream, "metadata": {"session_key": format!("bench-{stream}-{i}")}}))
                    .send()
                    .await
                    .expect("turn");
                assert!(r.status().is_success());
                let _ = r.bytes().await;
                let t = started.elapsed().as_secs_f64() * 1e3;
                let started = Instant::now();
                let r = http
                    .post(format!("{mock_url}/v1/responses"))
                    .json(&json!({"model": "m", "input": [{"role": "user", "content": "hello there"}], "stream": stream}))
                    .send()
                    .await
                    .expect("mock");
                let _ = r.bytes().await;
                let s = started.elapsed().as_secs_f64() * 1e3;
                if i >= 40 {
                    through.push(t);
                    straight.push(s);
                }
            }
            let (t50, s50) = (percentile(&mut through, 0.5), percentile(&mut straight, 0.5));
            println!("| turn through the gateway, {what} (tools mode, one provider round trip) | {t50:.2} | {:.2} |", percentile(&mut through, 0.95));
            println!("| the provider request alone, {what}, straight to the mock | {s50:.2} | {:.2} |", percentile(&mut straight, 0.95));
            println!("| gateway overhead per turn, {what} | {:.2} | |", t50 - s50);
        }
        gw.shutdown();
        stop.cancel();
        let _ = std::fs::remove_dir_all(&state);
    });
}
