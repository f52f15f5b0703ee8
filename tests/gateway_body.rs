//! One encoder per provider, end to end: what the gateway sends the provider for a prompt
//! is the request `toolsearch surface --provider KIND --prompt PROMPT --json` reports, on
//! the same config, catalog and mode.
//!
//! The mock provider records every body it receives; the gateway's first request of a turn
//! is the prompt alone, so it must equal `surface`'s `request` but for `model` (the
//! configured one there, a placeholder in `surface`). Its `tools` are compared byte for
//! byte, then the whole body, for each upstream format the gateway speaks (Anthropic's
//! `cache_control` on the last tool included).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

const PROMPT: &str = "create a github issue about the crash on start";

fn bin() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("toolsearch")
}

/// A child process killed (and reaped) when dropped, and the URL it listens on.
struct Running(Child, String);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `toolsearch ARGS` and waits for `listening on URL`.
fn start(args: &[&str]) -> Running {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_default()
        .to_string();
    assert!(
        !url.is_empty(),
        "toolsearch {args:?} did not start: {line:?}"
    );
    Running(child, url)
}

fn recorded(record: &Path) -> Vec<Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `body` without its `model`, serialized as sent (keys in their order).
fn without_model(body: &Value) -> String {
    let mut body = body.clone();
    body.as_object_mut().unwrap().shift_remove("model");
    serde_json::to_string(&body).unwrap()
}

#[test]
fn the_gateway_sends_the_request_surface_reports() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("requests.jsonl");
    let state = dir.path().join("state");
    let mock = start(&[
        "mock-provider",
        "--listen",
        "127.0.0.1:0",
        "--record",
        record.to_str().unwrap(),
    ]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = reqwest::Client::new();
    for kind in ["openai-responses", "openai-completions", "anthropic"] {
        let config = dir.path().join(format!("{kind}.toml"));
        std::fs::write(
            &config,
            format!(
                "[provider]\nkind = \"{kind}\"\nbase_url = \"{}/v1\"\nmodel = \"gateway-model\"\nmax_retries = 0\n",
                mock.1
            ),
        )
        .unwrap();
        for mode in ["code", "tools", "directory"] {
            let what = format!("{kind}, {mode} mode");
            let common = [
                "--config",
                config.to_str().unwrap(),
                "--mode",
                mode,
                "--state-dir",
                state.to_str().unwrap(),
            ];
            let before = recorded(&record).len();
            let gateway = start(&[&common[..], &["gateway", "--listen", "127.0.0.1:0"]].concat());
            let (status, answer) = runtime.block_on(async {
                let answer = http
                    .post(format!("{}/v1/responses", gateway.1))
                    .json(&json!({"input": PROMPT}))
                    .send()
                    .await
                    .unwrap();
                (answer.status(), answer.text().await.unwrap())
            });
            assert!(status.is_success(), "{what}: {status} {answer}");
            drop(gateway);
            // The mock answers a prompt without a script in text: one request per turn.
            let sent = recorded(&record).split_off(before);
            assert_eq!(sent.len(), 1, "{what}: {sent:?}");
            let sent = &sent[0];

            let out = Command::new(bin())
                .args(common)
                .args(["surface", "--provider", kind, "--prompt", PROMPT, "--json"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let surface: Value = serde_json::from_slice(&out.stdout).unwrap();
            let reported = &surface["request"];

            let tools = |body: &Value| serde_json::to_string(&body["tools"]).unwrap();
            assert!(
                reported["tools"].as_array().is_some_and(|t| !t.is_empty()),
                "{what}: {reported}"
            );
            assert_eq!(tools(sent), tools(reported), "{what}: the tools differ");
            assert_eq!(sent["model"], "gateway-model", "{what}");
            assert_eq!(without_model(sent), without_model(reported), "{what}");
        }
    }
}
