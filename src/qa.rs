//! `toolsearch qa tool-search-gateway-e2e`: the end-to-end payload comparison, over real HTTP with real child processes.
//!
//! It writes a temporary fake plugin (tools taking a required `marker` and answering
//! `FAKE_PLUGIN_OK <name> <input>`), starts the mock provider, then the gateway once per
//! lane — direct, code, tools, directory — each a child process on a free loopback port,
//! sends the QA prompt `tool search qa check target=<name>` to each, and checks the provider
//! requests the mock recorded and the session logs the gateway wrote:
//!
//! 1. direct mode calls the target;
//! 2. each tool-search lane calls the same tool;
//! 3. direct mode sends the fake plugin's schemas;
//! 4. tool-search lanes send only their compact surface and the direct-only tools;
//! 5. their requests are smaller;
//! 6. the session logs show the expected calls (code: bridge telemetry with a search and
//!    one call; tools: exactly one `tool_search` then one `tool_call`).
//!
//! The gateways talk to the mock in the upstream format `--provider` names
//! (`openai-responses`, `openai-completions` or `anthropic`). Each gateway is stopped the
//! way an operator stops it, with SIGTERM, and waited for; a lane fails if the gateway
//! does not exit in time or leaves one of its processes (a spare sandbox child, say)
//! running. Nothing is left running afterwards.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::provider::Provider;
use crate::surface;

mod stop;
use stop::Guard;

pub const PLUGIN: &str = "qa-fake";

#[derive(Debug, Clone, Serialize)]
pub struct Lane {
    pub lane: String,
    pub declared_tools: usize,
    /// The turn's last provider request: the one that carries the whole conversation.
    pub request_bytes: usize,
    pub ratio_to_direct: f64,
    /// Every provider request of the turn, summed: what the turn cost in all, each round
    /// resending the tools and the conversation (front round 17 F6: only the last was
    /// reported, and the directory lane's 0.72 was 0.97 counted whole).
    pub turn_request_bytes: usize,
    pub turn_ratio_to_direct: f64,
    pub calls: Vec<String>,
    pub pass: bool,
    pub failures: Vec<String>,
    /// Evidence: the session-log events of the turn (secrets redacted), the answer.
    pub answer: String,
    pub log_excerpt: Vec<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pass: bool,
    /// The upstream format the gateways spoke to the mock.
    pub provider: Provider,
    pub target: String,
    pub tools: usize,
    pub seconds: f64,
    pub lanes: Vec<Lane>,
}

/// Names of the fake tools: varied words so the index has something to rank.
const WORDS: &[&str] = &[
    "inventory",
    "invoice",
    "shipment",
    "ticket",
    "calendar",
    "contact",
    "report",
    "ledger",
    "forecast",
    "payroll",
    "catalog",
    "warehouse",
    "campaign",
    "survey",
    "archive",
    "badge",
];
const VERBS: &[&str] = &["lookup", "create", "update", "list", "sync", "export"];

fn fake_plugin(n: usize) -> (Value, String) {
    let target_index = n / 2;
    let mut tools = Vec::with_capacity(n + 1);
    let mut target = String::new();
    for i in 0..n {
        let word = WORDS[i % WORDS.len()];
        let verb = VERBS[(i / WORDS.len()) % VERBS.len()];
        let name = format!("qa_{verb}_{word}_{i}");
        if i == target_index {
            target = name.clone();
        }
        tools.push(json!({
            "name": name,
            "description": format!("Fake QA tool {i}: {verb} a {word} record in the QA workspace and report what changed."),
            "input_schema": {
                "type": "object",
                "properties": {
                    "marker": {"type": "string", "description": "The QA marker to echo back."},
                    "note": {"type": "string", "description": format!("Optional note kept with the {word}.")},
                    "limit": {"type": "integer", "description": "How many records at most."}
                },
                "required": ["marker"]
            },
            "executor": {"kind": "fixture", "text": "FAKE_PLUGIN_OK {name} {input}"}
        }));
    }
    tools.push(json!({
        "name": "qa_status",
        "description": "Report the QA workspace status. Always visible to the model.",
        "input_schema": {"type": "object", "properties": {}},
        "catalog_mode": "direct-only",
        "executor": {"kind": "fixture", "text": "QA_STATUS_OK"}
    }));
    (json!({"plugin": PLUGIN, "tools": tools}), target)
}

/// Starts `bin args...` and waits for its `listening on http://ADDR` line.
fn start(bin: &Path, args: &[String], stderr: &Path) -> Result<(Guard, String)> {
    let err = std::fs::File::create(stderr).map_err(|e| Error::Usage(format!("qa: {e}")))?;
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .map_err(|e| Error::Usage(format!("qa: cannot start {}: {e}", bin.display())))?;
    let stdout = child.stdout.take();
    let guard = Guard(child);
    let mut line = String::new();
    if let Some(out) = stdout {
        let mut reader = BufReader::new(out);
        let _ = reader.read_line(&mut line);
        // Keep draining so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while reader.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
    }
    match line.trim().strip_prefix("listening on ") {
        Some(url) => Ok((guard, url.to_string())),
        None => Err(Error::Usage(format!(
            "qa: {} {} did not start: {} (see {})",
            bin.display(),
            args.join(" "),
            line.trim(),
            stderr.display()
        ))),
    }
}

fn read_log(state: &Path, session: &str) -> Vec<Value> {
    let path = state.join("sessions").join(format!("{session}.jsonl"));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Runs the comparison with `tools` fake tools, the gateways speaking `provider` to the
/// mock, using `bin` (this program) for the mock provider and the gateways.
pub async fn run(bin: &Path, tools: usize, provider: Provider) -> Result<Report> {
    if provider == Provider::Google {
        return Err(Error::Usage(
            "qa: --provider: the gateway speaks openai-responses, openai-completions and anthropic"
                .into(),
        ));
    }
    let started = Instant::now();
    let io = |e: std::io::Error| Error::Usage(format!("qa: {e}"));
    // A fresh folder of this process's own (random name, 0700, made by this call): it holds
    // the config the gateways run with, and a guessable name another user made first let
    // them plant a link root wrote through or a server the gateways started.
    let dir = crate::cache::private_temp_dir("toolsearch-qa-").map_err(io)?;
    std::fs::create_dir(dir.join("plugins")).map_err(io)?;
    let result = run_in(bin, tools, provider, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    let mut report = result?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

async fn run_in(bin: &Path, tools: usize, provider: Provider, dir: &Path) -> Result<Report> {
    let io = |e: std::io::Error| Error::Usage(format!("qa: {e}"));
    let (plugin, target) = fake_plugin(tools.max(1));
    std::fs::write(dir.join("plugins").join("qa-fake.json"), plugin.to_string()).map_err(io)?;
    let (mock, mock_url) = start(
        bin,
        &[
            "mock-provider".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        &dir.join("mock.stderr"),
    )?;
    let config = dir.join("toolsearch.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nkind = \"{provider}\"\nbase_url = \"{mock_url}/v1\"\nmax_retries = 0\n"
        ),
    )
    .map_err(io)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| Error::Usage(format!("qa: {e}")))?;
    let target_id = format!("openclaw:{PLUGIN}:{target}");
    let prompt = format!("tool search qa check target={target}");
    let mut lanes = Vec::new();
    let mut direct_bytes = 0usize;
    let mut direct_turn_bytes = 0usize;
    for lane in ["direct", "code", "tools", "directory"] {
        let before = mock_requests(&http, &mock_url).await?.len();
        let state = dir.join(format!("state-{lane}"));
        let args: Vec<String> = vec![
            "--config".into(),
            config.display().to_string(),
            "--catalog".into(),
            dir.join("plugins").display().to_string(),
            "--mode".into(),
            lane.into(),
            "--state-dir".into(),
            state.display().to_string(),
            "gateway".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ];
        let (gateway, url) = start(bin, &args, &dir.join(format!("gateway-{lane}.stderr")))?;
        let session = format!("qa-{lane}");
        let answer = http
            .post(format!("{url}/v1/responses"))
            .json(&json!({"input": prompt, "metadata": {"session_key": session}}))
            .send()
            .await
            .map_err(|e| Error::Usage(format!("qa: the {lane} gateway: {e}")))?;
        let status = answer.status();
        let answer: Value = answer.json().await.unwrap_or(Value::Null);
        let stopped =
            tokio::task::spawn_blocking(move || gateway.stop(&format!("the {lane} gateway")))
                .await
                .unwrap_or_else(|e| Some(format!("stopping the gateway failed: {e}")));
        let requests: Vec<Value> = mock_requests(&http, &mock_url).await?.split_off(before);
        let log = read_log(&state, &session);
        let mut l = check_lane(lane, &target, &target_id, &answer, &requests, &log, tools);
        if !status.is_success() {
            l.failures
                .push(format!("the gateway answered {status}: {answer}"));
            l.pass = false;
        }
        if let Some(problem) = stopped {
            l.failures.push(problem);
            l.pass = false;
        }
        if lane == "direct" {
            direct_bytes = l.request_bytes;
            direct_turn_bytes = l.turn_request_bytes;
        }
        lanes.push(l);
    }
    let ratio = |bytes: usize, direct: usize| {
        if direct == 0 {
            0.0
        } else {
            bytes as f64 / direct as f64
        }
    };
    for l in &mut lanes {
        l.ratio_to_direct = ratio(l.request_bytes, direct_bytes);
        l.turn_ratio_to_direct = ratio(l.turn_request_bytes, direct_turn_bytes);
        if l.lane != "direct" && tools >= 20 && l.request_bytes >= direct_bytes {
            l.failures.push(format!(
                "(5) the request ({} bytes) is not smaller than direct mode's ({direct_bytes})",
                l.request_bytes
            ));
            l.pass = false;
        }
    }
    let mock_stopped = tokio::task::spawn_blocking(move || mock.stop("the mock provider"))
        .await
        .unwrap_or_else(|e| Some(format!("stopping the mock failed: {e}")));
    if let Some(problem) = mock_stopped {
        return Err(Error::Usage(format!("qa: {problem}")));
    }
    Ok(Report {
        pass: lanes.iter().all(|l| l.pass),
        provider,
        target,
        tools,
        seconds: 0.0,
        lanes,
    })
}

async fn mock_requests(http: &reqwest::Client, mock: &str) -> Result<Vec<Value>> {
    let v: Value = http
        .get(format!("{mock}/debug/requests"))
        .send()
        .await
        .map_err(|e| Error::Usage(format!("qa: the mock provider: {e}")))?
        .json()
        .await
        .map_err(|e| Error::Usage(format!("qa: the mock provider: {e}")))?;
    Ok(v.as_array().cloned().unwrap_or_default())
}

fn declared(request: &Value) -> Vec<String> {
    request
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t.get("name").or_else(|| t.pointer("/function/name")))
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn check_lane(
    lane: &str,
    target: &str,
    target_id: &str,
    answer: &Value,
    requests: &[Value],
    log: &[Value],
    tools: usize,
) -> Lane {
    let mut failures = Vec::new();
    let text = crate::provider::normalize::responses_output_text(answer);
    let calls: Vec<&Value> = log.iter().filter(|e| e["event"] == "call").collect();
    let call_ids: Vec<String> = calls
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_string))
        .collect();
    let ran_target = calls
        .iter()
        .any(|e| e["id"] == target_id && e["outcome"] == "ok");
    if !ran_target {
        failures.push(format!(
            "({}) the session log shows no successful call of {target_id} (calls: {call_ids:?})",
            if lane == "direct" { 1 } else { 2 }
        ));
    }
    if !text.contains(&format!("FAKE_PLUGIN_OK {target}")) {
        failures.push(format!(
            "the answer does not carry the tool's output: {text:?}"
        ));
    }
    let first = requests.first().cloned().unwrap_or(Value::Null);
    let last = requests.last().cloned().unwrap_or(Value::Null);
    let names = declared(&first);
    if requests.is_empty() {
        failures.push("the provider received no request".into());
    }
    let fake_declared = names
        .iter()
        .filter(|n| n.starts_with("qa_") && *n != "qa_status")
        .count();
    if lane == "direct" {
        if fake_declared != tools || !names.iter().any(|n| n == target) {
            failures.push(format!(
                "(3) direct mode declared {fake_declared} of the {tools} fake tools"
            ));
        }
    } else {
        let allowed_fake = if lane == "directory" {
            surface::LIKELY_MAX
        } else {
            0
        };
        let controls: Vec<&String> = names.iter().filter(|n| surface::is_control(n)).collect();
        if controls.is_empty()
            || fake_declared > allowed_fake
            || !names.iter().any(|n| n == "qa_status")
        {
            failures.push(format!(
                "(4) {lane} declared {names:?}: expected its controls, the direct-only qa_status and at most {allowed_fake} fake schemas"
            ));
        }
    }
    match lane {
        "code" => {
            let result = log.iter().find(|e| e["event"] == "code_result");
            let ok = result.is_some_and(|r| {
                r["ok"] == true && r["search_count"].as_u64() >= Some(1) && r["call_count"] == 1
            });
            if !ok {
                failures.push(format!(
                    "(6) code lane: expected a tool_search_code run with a search and one call, got {result:?}"
                ));
            }
            if !calls
                .iter()
                .any(|e| e["id"] == target_id && e["caller"] == "code")
            {
                failures.push("(6) code lane: the target was not called through the bridge".into());
            }
        }
        "tools" => {
            let searches = log.iter().filter(|e| e["event"] == "search").count();
            let tool_calls = calls.iter().filter(|e| e["caller"] == "tool_call").count();
            if searches != 1 || tool_calls != 1 {
                failures.push(format!(
                    "(6) tools lane: expected exactly one tool_search then one tool_call, got {searches} searches and {tool_calls} calls"
                ));
            }
        }
        _ => {}
    }
    let request_bytes = serde_json::to_vec(&last).map(|v| v.len()).unwrap_or(0);
    let turn_request_bytes = requests
        .iter()
        .map(|r| serde_json::to_vec(r).map(|v| v.len()).unwrap_or(0))
        .sum();
    let log_excerpt: Vec<Value> = log
        .iter()
        .filter(|e| {
            matches!(
                e["event"].as_str(),
                Some("request" | "search" | "describe" | "call" | "code_result" | "turn")
            )
        })
        .map(redact)
        .collect();
    Lane {
        lane: lane.into(),
        declared_tools: names.len(),
        request_bytes,
        ratio_to_direct: 0.0,
        turn_request_bytes,
        turn_ratio_to_direct: 0.0,
        calls: call_ids,
        pass: failures.is_empty(),
        failures,
        answer: text,
        log_excerpt,
    }
}

/// Values of keys that look like secrets are replaced.
fn redact(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let lower = k.to_ascii_lowercase();
                    if ["key", "token", "secret", "password", "authorization"]
                        .iter()
                        .any(|s| lower.contains(s))
                    {
                        (k.clone(), json!("[redacted]"))
                    } else {
                        (k.clone(), redact(v))
                    }
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(redact).collect()),
        other => other.clone(),
    }
}

/// The table for a person.
pub fn table(r: &Report) -> String {
    let mut out = format!(
        "tool-search-gateway-e2e: target {} among {} fake tools, upstream {}, {:.1} s\n\n| lane | declared tools | last request bytes | ratio to direct | turn's requests bytes | ratio to direct | calls | pass |\n|---|---:|---:|---:|---:|---:|---|---|\n",
        r.target, r.tools, r.provider, r.seconds
    );
    for l in &r.lanes {
        out.push_str(&format!(
            "| {} | {} | {} | {:.3} | {} | {:.3} | {} | {} |\n",
            l.lane,
            l.declared_tools,
            l.request_bytes,
            l.ratio_to_direct,
            l.turn_request_bytes,
            l.turn_ratio_to_direct,
            l.calls.join(", "),
            if l.pass { "pass" } else { "FAIL" }
        ));
    }
    for l in &r.lanes {
        for f in &l.failures {
            out.push_str(&format!("{}: {f}\n", l.lane));
        }
    }
    out.push_str(if r.pass { "\nPASS\n" } else { "\nFAIL\n" });
    out
}
