//! MCP against real servers: the reference servers from the npm registry
//! (`tests/mcp/package.json`, installed by `.ci/run` with `npm ci`), a server whose tool
//! list changes (`tests/mcp/dynamic-server.mjs`), and the official SDK's client
//! (`tests/mcp/sdk-client.mjs`) driving `toolsearch mcp serve`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::{BIN, Guard, start_listening};

fn mcp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

/// The installed reference servers; a missing install fails loudly (it is not a skip).
fn module(path: &str) -> String {
    let p = mcp_dir().join("node_modules").join(path);
    assert!(
        p.exists(),
        "{} is missing: run `npm ci` in tests/mcp (.ci/run does)",
        p.display()
    );
    p.display().to_string()
}

fn everything() -> String {
    module("@modelcontextprotocol/server-everything/dist/index.js")
}

/// A config with the three reference servers, `extra` appended; its folder holds a file
/// the filesystem server may read.
fn setup(extra: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("note.txt"), "NOTE_CONTENT_42").unwrap();
    let config = format!(
        r#"
[catalog]
paths = []

[mcp.servers.everything]
command = "node"
args = ["{everything}", "stdio"]

[mcp.servers.files]
command = "node"
args = ["{fs}", "{files}"]

[mcp.servers.memory]
command = "node"
args = ["{memory}"]
env = {{ MEMORY_FILE_PATH = "{mem}" }}
{extra}
"#,
        everything = everything(),
        fs = module("@modelcontextprotocol/server-filesystem/dist/index.js"),
        files = files.display(),
        memory = module("@modelcontextprotocol/server-memory/dist/index.js"),
        mem = dir.path().join("memory.jsonl").display(),
    );
    let path = dir.path().join("toolsearch.toml");
    std::fs::write(&path, config).unwrap();
    (dir, path)
}

fn toolsearch(config: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .args(["--state-dir"])
        .arg(config.parent().unwrap().join("state"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        value,
        String::from_utf8_lossy(&out.stderr).into_owned() + &stdout,
    )
}

/// A temporary folder holding only `toolsearch.toml` with this text: the folder (removed
/// when dropped) and the config's path.
fn config_with(toml: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolsearch.toml");
    std::fs::write(&path, toml).unwrap();
    (dir, path)
}

/// The string `key` of each object in the array `list`.
fn field<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .map(|items| items.iter().filter_map(|i| i[key].as_str()).collect())
        .unwrap_or_default()
}

/// Starts `toolsearch ARGS` (a server) and returns it with the URL of its
/// `listening on URL` line.
fn start_server(config: &Path, args: &[&str]) -> (Guard, String) {
    start_listening(
        Command::new(BIN)
            .arg("--config")
            .arg(config)
            .arg("--state-dir")
            .arg(config.parent().unwrap().join("state"))
            .args(args),
    )
}

/// Processes whose parent is `pid`, with their command lines.
fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        // The fields after the command name (which may hold spaces) start after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid == Some(pid) && !stat.contains(") Z ") {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            out.push((p, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    out
}

#[test]
fn the_three_reference_servers_are_cataloged_and_searchable() {
    let (_dir, config) = setup("");
    let (code, catalog, all) = toolsearch(&config, &["catalog", "--json"]);
    assert_eq!(code, 0, "{all}");
    let servers = catalog["mcp_servers"].as_array().expect(&all);
    assert_eq!(servers.len(), 3, "{all}");
    for s in servers {
        assert_eq!(s["up"], json!(true), "{s}");
        assert!(s["tools"].as_u64().unwrap() >= 5, "{s}");
    }
    let ids = field(&catalog["cataloged"], "id");
    for id in [
        "mcp:everything:echo",
        "mcp:files:read_text_file",
        "mcp:memory:create_entities",
    ] {
        assert!(ids.contains(&id), "{id} not in {ids:?}");
    }
    // Untrusted schemas: shown as unknown in compact descriptors.
    let echo = catalog["cataloged"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "mcp:everything:echo")
        .unwrap();
    assert_eq!(echo["input"], json!("unknown"));
    assert_eq!(echo["source_name"], json!("everything"));

    let (code, hits, all) = toolsearch(
        &config,
        &["search", "read the contents of a text file", "--json"],
    );
    assert_eq!(code, 0, "{all}");
    let top: Vec<&str> = field(&hits, "id").into_iter().take(5).collect();
    assert!(
        top.iter().any(|id| id.starts_with("mcp:files:read")),
        "{top:?}"
    );
    // Describe gives the server's full schema.
    let (code, d, all) = toolsearch(&config, &["describe", "mcp:everything:echo", "--json"]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(d["input_schema"]["required"], json!(["message"]), "{d}");
}

#[test]
fn code_mode_calls_mcp_tools_through_the_bridge() {
    let (_dir, config) = setup("");
    let body = r#"
        const echo = await openclaw.tools.call("mcp:everything:echo", {message: "hi"});
        const hits = await openclaw.tools.search("read text file", {limit: 10});
        const file = hits.find((h) => h.id === "mcp:files:read_text_file");
        const note = await openclaw.tools.call(file.id, {path: FILES + "/note.txt"});
        await openclaw.tools.call("mcp:memory:create_entities", {entities: [
            {name: "toolsearch", entityType: "project", observations: ["uses MCP"]}]});
        const graph = await openclaw.tools.call("mcp:memory:read_graph", {});
        return {
            echo: echo.result.content[0].text,
            note: note.result.content[0].text,
            graph: graph.result.content[0].text,
        };
    "#
    .replace(
        "FILES",
        &format!(
            "{:?}",
            config.parent().unwrap().join("files").display().to_string()
        ),
    );
    let (code, out, all) = toolsearch(&config, &["code", &body, "--json"]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(out["ok"], json!(true), "{all}");
    assert_eq!(out["value"]["echo"], json!("Echo: hi"), "{all}");
    assert!(
        out["value"]["note"]
            .as_str()
            .unwrap()
            .contains("NOTE_CONTENT_42"),
        "{all}"
    );
    assert!(
        out["value"]["graph"].as_str().unwrap().contains("uses MCP"),
        "{all}"
    );
    assert_eq!(out["telemetry"]["call_count"], json!(4), "{all}");
}

#[test]
fn a_server_killed_mid_run_is_named_and_the_others_keep_working() {
    let (_dir, config) = setup("");
    let body = r#"
        let first, second;
        try {
            const r = await openclaw.tools.call("mcp:everything:trigger-long-running-operation",
                {duration: 20, steps: 2});
            first = r.result.content[0].text;
        } catch (e) { first = "threw: " + e.message; }
        try {
            const r = await openclaw.tools.call("mcp:everything:echo", {message: "again"});
            second = r.result.content[0].text;
        } catch (e) { second = "threw: " + e.message; }
        const other = await openclaw.tools.call("mcp:memory:read_graph", {});
        return {first, second, other_ok: !other.result.is_error};
    "#;
    let child = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .args(["code", "--timeout-ms", "30000", body, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the everything server to be running the long operation, then kill it.
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut killed = false;
    while Instant::now() < deadline && !killed {
        std::thread::sleep(Duration::from_millis(300));
        for (p, cmd) in children_of(pid) {
            if cmd.contains("server-everything") {
                // Give the call time to reach the server.
                std::thread::sleep(Duration::from_millis(1500));
                let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
                killed = true;
            }
        }
    }
    assert!(killed, "never saw the everything server start");
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["ok"], json!(true), "{all}");
    for key in ["first", "second"] {
        let text = v["value"][key].as_str().unwrap_or_default();
        assert!(
            text.contains("MCP server `everything` is unavailable"),
            "{key}: {all}"
        );
    }
    assert_eq!(v["value"]["other_ok"], json!(true), "{all}");
}

#[test]
fn a_server_that_cannot_start_is_named_and_its_tools_fail_closed() {
    let (dir, config) = setup(
        r#"
[mcp.servers.broken]
command = "/nonexistent/mcp-server"

[mcp.servers.exits]
command = "node"
args = ["-e", "process.stderr.write('boom: no token'); process.exit(3)"]
"#,
    );
    let _ = dir;
    let (code, catalog, all) = toolsearch(&config, &["catalog", "--json"]);
    assert_eq!(code, 0, "{all}");
    let servers = catalog["mcp_servers"].as_array().unwrap();
    let broken = servers.iter().find(|s| s["name"] == "broken").unwrap();
    assert_eq!(broken["up"], json!(false));
    assert!(
        broken["notes"][0]
            .as_str()
            .unwrap()
            .contains("/nonexistent/mcp-server"),
        "{broken}"
    );
    let exits = servers.iter().find(|s| s["name"] == "exits").unwrap();
    assert_eq!(exits["up"], json!(false));
    let why = exits["notes"][0].as_str().unwrap();
    assert!(why.contains("boom: no token"), "{why}");
    assert!(servers.iter().filter(|s| s["up"] == json!(true)).count() == 3);
    let (code, err, all) = toolsearch(&config, &["call", "mcp:broken:anything", "{}", "--json"]);
    assert_eq!(code, 1, "{all}");
    assert_eq!(err["error"]["code"], json!("unavailable-tool"), "{all}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MCP server `broken` is unavailable"),
        "{all}"
    );
}

#[test]
fn a_server_that_never_answers_times_out_and_is_named() {
    let (_dir, config) = setup(
        r#"
[mcp.servers.silent]
command = "sleep"
args = ["30"]
startup_timeout_ms = 500
"#,
    );
    let started = Instant::now();
    let (code, catalog, all) = toolsearch(&config, &["catalog", "--json"]);
    assert_eq!(code, 0, "{all}");
    assert!(started.elapsed() < Duration::from_secs(20), "{all}");
    let silent = catalog["mcp_servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "silent")
        .cloned()
        .unwrap();
    assert_eq!(silent["up"], json!(false));
    assert!(
        silent["notes"][0]
            .as_str()
            .unwrap()
            .contains("did not start within 500 ms"),
        "{silent}"
    );
}

/// `toolsearch mcp serve ...` for the SDK client.
fn sdk_client(args: &[&str], input: Value) -> Value {
    sdk_client_text(args, &input.to_string())
}

/// The same with the input as JSON text, which may hold what serde cannot write (a lone
/// surrogate escape, as JavaScript writes half of a character cut in two).
fn sdk_client_text(args: &[&str], input: &str) -> Value {
    let mut child = Command::new("node")
        .arg(mcp_dir().join("sdk-client.mjs"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|_| {
        panic!(
            "sdk client printed no JSON: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

const CODE_BODY: &str = r#"
    const hits = await openclaw.tools.search("echo back a message");
    const t = await openclaw.tools.describe("mcp:everything:echo");
    const r = await openclaw.tools.call(t.id, {message: "from the SDK"});
    return {ids: hits.map((h) => h.id), echo: r.result.content[0].text};
"#;

fn check_code_result(out: &Value) {
    let result = &out["results"][0];
    assert_eq!(result["isError"], json!(false), "{out}");
    let text = result["content"][0]["text"].as_str().unwrap();
    let run: Value = serde_json::from_str(text).unwrap();
    assert_eq!(run["ok"], json!(true), "{run}");
    assert_eq!(run["value"]["echo"], json!("Echo: from the SDK"), "{run}");
    assert!(
        run["value"]["ids"]
            .as_array()
            .unwrap()
            .contains(&json!("mcp:everything:echo")),
        "{run}"
    );
}

#[test]
fn the_sdk_client_runs_tool_search_code_over_stdio() {
    let (_dir, config) = setup("");
    let config = config.display().to_string();
    let out = sdk_client(
        &["stdio", BIN, "--config", &config, "mcp", "serve"],
        json!({"calls": [
            {"name": "tool_search_code", "arguments": {"code": CODE_BODY}},
            {"name": "no_such_tool", "arguments": {}},
        ]}),
    );
    assert_eq!(out["server"]["name"], json!("toolsearch"), "{out}");
    let names = field(&out["tools"], "name");
    // The control tool, then the demo catalog's direct-only tools.
    assert_eq!(
        names,
        ["tool_search_code", "message", "exec_command"],
        "{out}"
    );
    check_code_result(&out);
    let unknown = serde_json::to_string(&out["results"][1]).unwrap();
    assert!(unknown.contains("unknown tool `no_such_tool`"), "{unknown}");
}

/// Over stdio, `mcp serve` keeps the bounds of `--listen`: a call over 4 MiB, or one of
/// more JSON values than a request may hold, is answered with the reason (the official
/// SDK's call ends at once, not at its timeout), and the session goes on.
#[test]
fn over_stdio_a_request_past_the_bounds_is_answered_with_the_reason() {
    let (_dir, config) = setup("");
    let config = config.display().to_string();
    let big = "a".repeat(5 << 20);
    let dense = vec![0; 60_000];
    let out = sdk_client(
        &["stdio", BIN, "--config", &config, "mcp", "serve"],
        json!({"calls": [
            {"name": "tool_search_code", "arguments": {"code": big}},
            {"name": "tool_search_code", "arguments": {"code": "return 1", "x": dense}},
            {"name": "tool_search_code", "arguments": {"code": CODE_BODY}},
        ]}),
    );
    let thrown = |i: usize| {
        out["results"][i]["thrown"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        thrown(0).contains("bytes; at most 4194304"),
        "{:.400}",
        thrown(0)
    );
    assert!(thrown(1).contains("JSON values"), "{:.400}", thrown(1));
    let results = out["results"].as_array().unwrap();
    check_code_result(&json!({"results": [results[2]]}));
}

/// A lone surrogate escape (text cut inside a character by a JavaScript client) is read as
/// U+FFFD, as JavaScript reads it, over stdio and over HTTP; before, serde refused the line
/// and the call was never answered (front round 21 F1, F2).
#[test]
fn a_request_with_a_lone_surrogate_is_answered_over_stdio_and_http() {
    let (_dir, config) = setup("");
    let config_arg = config.display().to_string();
    let input = r#"{"calls": [{"name": "tool_search_code", "arguments": {"code": "return ['R\ud83d', '\udc00x'].join('|')"}}]}"#;
    let out = sdk_client_text(
        &["stdio", BIN, "--config", &config_arg, "mcp", "serve"],
        input,
    );
    let text = out["results"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{out}"));
    let run: Value = serde_json::from_str(text).unwrap();
    assert_eq!(run["value"], json!("R\u{fffd}|\u{fffd}x"), "{run}");

    let (_serve, url) = start_server(&config, &["mcp", "serve", "--listen", "127.0.0.1:0"]);
    block_on(async {
        let client = reqwest::Client::new();
        let (status, session) = mcp_post(&client, &url, None, initialize_with(json!({}))).await;
        assert_eq!(status, 200);
        let session = session.unwrap();
        let post = |body: &'static str| {
            client
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .header("mcp-session-id", &session)
                .body(body)
                .send()
        };
        let r = post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        let r = post(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tool_search_code","arguments":{"code":"return 'R\ud83d'"}}}"#)
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body = r.text().await.unwrap();
        assert!(
            body.contains(r#"\"value\":\"R\ufffd\""#) || body.contains("R\u{fffd}"),
            "{body}"
        );
        // Not JSON at all: a JSON-RPC parse error under 400, not rmcp's 415; not a message
        // (a batch, a string): an invalid request under 400, that says what is wrong (an
        // `id` of null or an object was "not one JSON-RPC message (MCP has no batches)":
        // front round 27 F2).
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":"deep","method":"ping","params":{{"x":{}{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let nested = format!("{}{}", "[".repeat(200), "]".repeat(200));
        // Read for an id in its first value only, and only a request's string or `i64` id
        // (front round 33 F4: a second object's id, a 30-digit id rounded, an answer's).
        let beyond: std::collections::HashMap<Vec<u8>, Value> = [
            (
                format!(r#"{{"jsonrpc":"2.0","id":16,"method":"ping","params":{{"x":{nested}}}}}{{"id":17}}"#).into_bytes(),
                json!(16),
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping","params":{{"x":{nested}}}}}"#).into_bytes(),
                Value::Null,
            ),
            (
                format!(r#"{{"jsonrpc":"2.0","id":13,"result":{{"x":{nested}}}}}"#).into_bytes(),
                Value::Null,
            ),
            (deep.into_bytes(), json!("deep")),
            (
                br#"{"jsonrpc":"2.0","id":8,"method":"ping","params":{"n":1e999}}"#.to_vec(),
                json!(8),
            ),
        ]
        .into();
        for (body, code, says) in [
            (
                &br#"{"jsonrpc":"2.0","id":3,"method":"#[..],
                -32700,
                "Parse error",
            ),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"p\xffing\"}",
                -32700,
                "UTF-8",
            ),
            (
                br#"[{"jsonrpc":"2.0","id":4,"method":"ping"}]"#,
                -32600,
                "batches",
            ),
            (br#""just a string""#, -32600, "is an object"),
            (br#"{}"#, -32600, "jsonrpc"),
            (br#"{"jsonrpc":"2.0","id":1}"#, -32600, "`method`"),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                -32600,
                "`id`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                -32600,
                "`id`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
                -32600,
                "`id`",
            ),
            (
                br#"{"jsonrpc":"2.0","id":5,"method":7}"#,
                -32600,
                "`method`",
            ),
            (
                br#"{"jsonrpc":"1.0","id":6,"method":"ping"}"#,
                -32600,
                "jsonrpc",
            ),
            (
                br#"{"jsonrpc":"2.0","id":"seven","method":"tools/call","params":[1]}"#,
                -32600,
                "`params`",
            ),
        ]
        .into_iter()
        .map(|(body, code, says)| (body.to_vec(), code, says))
        .chain(beyond.keys().map(|b| (b.clone(), -32700, "not read")))
        {
            let r = client
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .header("mcp-session-id", &session)
                .body(body.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 400, "{}", String::from_utf8_lossy(&body));
            let error: Value = r.json().await.unwrap();
            assert_eq!(error["error"]["code"], json!(code), "{error}");
            assert!(
                error["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(says),
                "{error}"
            );
            // Under the request's id when rmcp could answer under it, as over stdio.
            // JSON nested or numbered beyond serde's reach is read for its id all the same
            // (it was answered under none over HTTP, under its id over stdio).
            let sent: Option<Value> = serde_json::from_slice(&body).ok();
            let id = sent
                .as_ref()
                .filter(|v| v.get("method").is_some())
                .and_then(|v| v.get("id"))
                .filter(|id| id.is_string() || id.is_i64())
                .cloned()
                .or_else(|| beyond.get(body.as_slice()).cloned())
                .unwrap_or(Value::Null);
            assert_eq!(error["id"], id, "{error}");
        }
    });
}

#[test]
fn tools_mode_over_streamable_http_and_a_changing_upstream_list() {
    let (dir, config) = setup(&format!(
        r#"
[mcp.servers.dynamic]
command = "node"
args = ["{}"]

[tools.toolSearch]
mode = "tools"
"#,
        mcp_dir().join("dynamic-server.mjs").display()
    ));
    let (serve, url) = start_server(&config, &["mcp", "serve", "--listen", "127.0.0.1:0"]);
    let _ = dir;
    let out = sdk_client(
        &["http", &url],
        json!({"calls": [
            {"name": "tool_search", "arguments": {"query": "register a new tool"}},
            {"name": "tool_call", "arguments": {"id": "mcp:dynamic:add_tool", "args": {"name": "late_tool"}}},
        ]}),
    );
    let names = field(&out["tools"], "name");
    assert_eq!(
        names,
        [
            "tool_search",
            "tool_describe",
            "tool_call",
            "message",
            "exec_command"
        ],
        "{out}"
    );
    let search = out["results"][0]["content"][0]["text"].as_str().unwrap();
    assert!(search.contains("mcp:dynamic:add_tool"), "{search}");
    let added = out["results"][1]["content"][0]["text"].as_str().unwrap();
    assert!(added.contains("added late_tool"), "{added}");
    // The server announced the new tool; the catalog was rebuilt with it.
    let mut found = String::new();
    for _ in 0..100 {
        let out = sdk_client(
            &["http", &url],
            json!({"calls": [
                {"name": "tool_call", "arguments": {"id": "mcp:dynamic:late_tool", "args": {}}},
            ]}),
        );
        found = out["results"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if found.contains("LATE_TOOL_OK") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(found.contains("LATE_TOOL_OK"), "{found}");
    // The upstream connections run on a thread of their own, not on the host's workers,
    // whose timers end sandbox runs (review 23 F2: decoding a 10,000-tool server's
    // listings after each list_changed held a 1 s deadline up by seconds).
    let mut serve = serve;
    let pid = serve.0.id();
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|t| std::fs::read_to_string(t.path().join("comm")).unwrap_or_default())
        .collect();
    assert!(
        threads.iter().any(|t| t.trim() == "mcp-upstream"),
        "{threads:?}"
    );
    // SIGTERM stops the server and its upstream servers with it.
    assert!(!children_of(pid).is_empty());
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let status = serve.0.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(children_of(pid).is_empty());
}

#[test]
fn a_streamable_http_upstream_is_cataloged_and_called() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let server = Guard(
        Command::new("node")
            .args([&everything(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Wait for it to listen.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "server-everything never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_dir, config) = config_with(&format!(
        "[catalog]\npaths = []\n[mcp.servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
    ));
    let (code, out, all) = toolsearch(
        &config,
        &[
            "call",
            "mcp:remote:echo",
            r#"{"message":"over http"}"#,
            "--json",
        ],
    );
    drop(server);
    assert_eq!(code, 0, "{all}");
    assert_eq!(
        out["result"]["content"][0]["text"],
        json!("Echo: over http"),
        "{all}"
    );
}

#[test]
fn the_gateway_runs_a_turn_that_calls_an_mcp_tool() {
    let (_mock_dir, mock_config) = config_with("");
    let (_mock, mock_url) =
        start_server(&mock_config, &["mock-provider", "--listen", "127.0.0.1:0"]);
    let (_dir, config) = setup(&format!("[provider]\nbase_url = \"{mock_url}/v1\"\n"));
    let (_gateway, url) = start_server(&config, &["gateway", "--listen", "127.0.0.1:0"]);
    let reply = Command::new("curl")
        .args([
            "-s",
            &format!("{url}/v1/responses"),
            "-H",
            "content-type: application/json",
        ])
        .args([
            "-d",
            r#"{"input": "tool search qa check target=read_graph"}"#,
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.stdout).unwrap_or(Value::Null);
    let text = v["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("QA_DONE"), "{v}");
    assert!(text.contains("mcp:memory:read_graph"), "{text}");
    assert!(text.contains(r#""is_error":false"#), "{text}");
}

#[test]
fn every_page_of_tools_list_is_followed() {
    let (_dir, config) = config_with(&format!(
        "[catalog]\npaths = []\n[mcp.servers.paged]\ncommand = \"node\"\nargs = [\"{}\"]\n",
        mcp_dir().join("paged-server.mjs").display()
    ));
    let (code, catalog, all) = toolsearch(&config, &["catalog", "--json"]);
    assert_eq!(code, 0, "{all}");
    let ids: Vec<&str> = field(&catalog["cataloged"], "id")
        .into_iter()
        .filter(|id| id.starts_with("mcp:paged:"))
        .collect();
    assert_eq!(
        ids,
        (0..5)
            .map(|i| format!("mcp:paged:paged_tool_{i}"))
            .collect::<Vec<_>>(),
        "{all}"
    );
    let (code, out, all) = toolsearch(&config, &["call", "paged_tool_4", "--json"]);
    assert_eq!(code, 0, "{all}");
    assert_eq!(
        out["result"]["content"][0]["text"],
        json!("paged_tool_4 ran")
    );
}

/// An answer past the line bound fails its call at once, saying why, and the server
/// answers the next call (review 25: rmcp dropped the line and the call waited out its
/// timeout, reported as one).
#[test]
fn an_answer_past_the_line_bound_fails_at_once_and_says_why() {
    let (_dir, config) = config_with(&format!(
        "[catalog]\npaths = []\n[mcp.servers.paged]\ncommand = \"node\"\nargs = [\"{}\"]\ncall_timeout_ms = 120000\n",
        mcp_dir().join("paged-server.mjs").display()
    ));
    let started = Instant::now();
    let (code, out, all) = toolsearch(
        &config,
        &["call", "paged_tool_1", r#"{"size": 17000000}"#, "--json"],
    );
    assert_ne!(code, 0, "{all}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "waited for the call's timeout: {all}"
    );
    let message = out["error"]["message"].as_str().unwrap_or(&all);
    assert!(message.contains("longer than 16 MiB"), "{all}");
    let (code, out, all) = toolsearch(
        &config,
        &["call", "paged_tool_1", r#"{"size": 1000000}"#, "--json"],
    );
    assert_eq!(code, 0, "{all}");
    // (Shortened to the result bound on the way out.)
    assert!(
        out["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("xxxx")),
        "{all}"
    );
}

/// Live processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        if !stat.contains(") Z ") && String::from_utf8_lossy(&cmd).contains(marker) {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_server_group_member_that_ignores_sigterm_is_killed_with_the_host() {
    let marker = format!("stubborn-{}", std::process::id());
    let script = format!(
        "node -e 'process.on(\"SIGTERM\", () => {{}}); setInterval(() => {{}}, 1000)' {marker} & exec node {} stdio",
        everything()
    );
    let (_dir, config) = config_with(&format!(
        "[catalog]\npaths = []\n[mcp.servers.wrapped]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n"
    ));
    // A one-shot command's hub is often let go last by a task of the upstream runtime,
    // after `main` has returned: its stubborn member outlived 12 of 20 release runs. A
    // one-shot command stopped by a signal, and a server stopped by SIGHUP, died alone
    // (front round 33 F1, F2).
    for how in [
        "catalog",
        "catalog",
        "catalog",
        "serve-sigterm",
        "serve-sighup",
        "stdio-sigterm",
        "oneshot-sigint",
        "oneshot-sighup",
    ] {
        match how {
            "catalog" => {
                let (code, _, all) = toolsearch(&config, &["catalog", "--json"]);
                assert_eq!(code, 0, "{all}");
            }
            "serve-sigterm" | "serve-sighup" => {
                let (mut serve, _url) =
                    start_server(&config, &["mcp", "serve", "--listen", "127.0.0.1:0"]);
                assert!(
                    !processes_with(&marker).is_empty(),
                    "the member never started"
                );
                let pid = serve.0.id().to_string();
                let signal = if how == "serve-sigterm" {
                    "-TERM"
                } else {
                    "-HUP"
                };
                let _ = Command::new("kill").args([signal, &pid]).status();
                let status = serve.0.wait().unwrap();
                assert!(status.success(), "{how}: {status}");
            }
            "oneshot-sigint" | "oneshot-sighup" => {
                let mut run = Guard(
                    Command::new(BIN)
                        .arg("--config")
                        .arg(&config)
                        .args(["code", "--timeout-ms", "60000"])
                        .arg("const t = Date.now(); while (Date.now() - t < 30000) {} return 1")
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap(),
                );
                let deadline = Instant::now() + Duration::from_secs(30);
                while processes_with(&marker).is_empty() {
                    assert!(Instant::now() < deadline, "the member never started");
                    std::thread::sleep(Duration::from_millis(50));
                }
                std::thread::sleep(Duration::from_millis(500));
                let (signal, code) = if how == "oneshot-sigint" {
                    ("-INT", 130)
                } else {
                    ("-HUP", 129)
                };
                let pid = run.0.id().to_string();
                let _ = Command::new("kill").args([signal, &pid]).status();
                let status = run.0.wait().unwrap();
                assert_eq!(status.code(), Some(code), "{how}: {status}");
            }
            _ => {
                let mut serve = Guard(
                    Command::new(BIN)
                        .arg("--config")
                        .arg(&config)
                        .args(["mcp", "serve"])
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap(),
                );
                let deadline = Instant::now() + Duration::from_secs(30);
                while processes_with(&marker).is_empty() {
                    assert!(Instant::now() < deadline, "the member never started");
                    std::thread::sleep(Duration::from_millis(50));
                }
                // Let the hub finish starting, then stop it as MCP clients do.
                std::thread::sleep(Duration::from_millis(500));
                let pid = serve.0.id().to_string();
                let _ = Command::new("kill").args(["-TERM", &pid]).status();
                let status = serve.0.wait().unwrap();
                let mut err = String::new();
                if let Some(mut e) = serve.0.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                assert!(status.success(), "{how}: {status}: {err}");
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !processes_with(&marker).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = processes_with(&marker);
        for p in &left {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
        assert!(left.is_empty(), "{how}: a group member outlived the host");
    }
}

/// A one-shot command signalled while it starts its servers leaves none of their groups
/// behind: a group being started when the signal's handler killed the listed ones, or a
/// leader whose parent exited before it asked for the parent-death signal, lived on (front
/// round 34 F1: 8 of 300 runs signalled in their first 12 ms).
#[test]
fn a_one_shot_command_signalled_as_it_starts_leaves_no_group() {
    let marker = format!("early-{}", std::process::id());
    let script = format!(
        "node -e 'process.on(\"SIGTERM\", () => {{}}); setInterval(() => {{}}, 1000)' {marker} & exec node {} stdio",
        everything()
    );
    let (_dir, config) = config_with(&format!(
        "[catalog]\npaths = []\n[mcp.servers.wrapped]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\n"
    ));
    for i in 0..200u64 {
        let mut run = Guard(
            Command::new(BIN)
                .arg("--config")
                .arg(&config)
                .arg("catalog")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        // Spread over the command's first milliseconds, where it starts the server.
        std::thread::sleep(Duration::from_micros(i % 100 * 150));
        let pid = run.0.id().to_string();
        let signal = ["-INT", "-TERM", "-HUP"][i as usize % 3];
        let _ = Command::new("kill").args([signal, &pid]).status();
        let _ = run.0.wait();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(&marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = processes_with(&marker);
    for p in &left {
        let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
    }
    assert!(
        left.is_empty(),
        "{} group members outlived their host",
        left.len()
    );
}

#[test]
fn mcp_serve_listens_on_loopback_only() {
    let (_dir, config) = config_with("");
    let (code, _, all) = toolsearch(&config, &["mcp", "serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(code, 2, "{all}");
    assert!(all.contains("only a loopback address"), "{all}");
}

/// An `initialize` request with `capabilities`.
fn initialize_with(capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": capabilities,
        "clientInfo": {"name": "t", "version": "1"}}})
}

/// `future` run to its end on a runtime of this thread.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A JSON-RPC POST to `mcp serve`'s `/mcp`, in `session` when given: the status and the
/// session id the answer names.
async fn mcp_post(
    client: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    body: Value,
) -> (u16, Option<String>) {
    let mut r = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    let r = r.send().await.unwrap();
    let id = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (r.status().as_u16(), id)
}

#[test]
fn mcp_serve_bounds_its_sessions_without_closing_one_in_use() {
    let (_dir, config) = config_with("");
    let (_serve, url) = start_server(&config, &["mcp", "serve", "--listen", "127.0.0.1:0"]);
    let initialize = initialize_with(json!({}));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    block_on(async {
        let client = reqwest::Client::new();
        // A client's session, past its handshake.
        let (status, victim) = mcp_post(&client, &url, None, initialize.clone()).await;
        assert_eq!(status, 200);
        let victim = victim.expect("a session id");
        let (status, _) = mcp_post(&client, &url, Some(&victim), initialized.clone()).await;
        assert_eq!(status, 202);

        // Bare `initialize`s, well over the bound (256): they push out their own kind.
        let mut bare = Vec::new();
        for _ in 0..300 {
            let (status, id) = mcp_post(&client, &url, None, initialize.clone()).await;
            assert_eq!(status, 200);
            bare.push(id.expect("a session id"));
        }
        let (status, _) = mcp_post(&client, &url, Some(&bare[0]), ping.clone()).await;
        assert_eq!(status, 404, "the oldest bare session is still open");
        let (status, _) = mcp_post(&client, &url, Some(&victim), ping.clone()).await;
        assert_eq!(status, 200, "bare initializes closed a client's session");

        // Sessions that finish their handshake are kept: once all places are
        // taken, a new one is refused, and no established session goes.
        let mut refused = None;
        for n in 0..300 {
            let r = client
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .json(&initialize)
                .send()
                .await
                .unwrap();
            if r.status().as_u16() == 503 {
                assert!(r.headers().contains_key("retry-after"));
                refused = Some(n);
                break;
            }
            assert_eq!(r.status().as_u16(), 200);
            let id = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
            let (status, _) = mcp_post(&client, &url, Some(&id), initialized.clone()).await;
            assert_eq!(status, 202);
        }
        assert_eq!(refused, Some(255), "the 257th session was not refused");
        let (status, _) = mcp_post(&client, &url, Some(&victim), ping.clone()).await;
        assert_eq!(status, 200, "a session in use was closed for a new one");

        // A session holds at most 2 GET streams; each holds a connection.
        let stream = || {
            client
                .get(&url)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", &victim)
                .send()
        };
        let mut streams = Vec::new();
        for _ in 0..2 {
            let r = stream().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            streams.push(r);
        }
        let third = stream().await.unwrap();
        assert_ne!(third.status().as_u16(), 200, "a third stream was opened");
        let text = third.text().await.unwrap();
        assert!(text.contains("2 streams"), "{text}");
        drop(streams.pop());
        let mut again = None;
        for _ in 0..100 {
            let r = stream().await.unwrap();
            if r.status().as_u16() == 200 {
                again = Some(r);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(again.is_some(), "a closed stream's place never came back");

        // A web page is refused before any session is made.
        let r = client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("origin", "http://evil.example")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403);
    });
}

/// A DELETE naming a session the server does not hold, never opened or already ended, is
/// a 404, as MCP (2025-06-18, Session Management) asks and as POST and GET answer (it was
/// a 202); a live session's DELETE ends it. A POST with no body and no type is answered
/// with the parse error of any unreadable body, a 400 with its reason.
#[test]
fn mcp_serve_answers_404_to_a_delete_of_an_unknown_or_ended_session() {
    let (_dir, config) = config_with("");
    let (_serve, url) = start_server(&config, &["mcp", "serve", "--listen", "127.0.0.1:0"]);
    block_on(async {
        let client = reqwest::Client::new();
        let delete = |id: &str| {
            client
                .delete(&url)
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", "2025-06-18")
                .send()
        };
        let r = delete("no-such-session").await.unwrap();
        assert_eq!(r.status().as_u16(), 404, "an unknown session");
        assert_eq!(r.text().await.unwrap(), "Not Found: Session not found");

        let (status, id) = mcp_post(&client, &url, None, initialize_with(json!({}))).await;
        assert_eq!(status, 200);
        let id = id.expect("a session id");
        let r = delete(&id).await.unwrap();
        assert!(r.status().is_success(), "a live session: {}", r.status());
        let r = delete(&id).await.unwrap();
        assert_eq!(r.status().as_u16(), 404, "a session already ended");
        let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
        let (status, _) = mcp_post(&client, &url, Some(&id), ping).await;
        assert_eq!(status, 404);

        let r = client
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "a body-less POST");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32700, "{v}");
    });
}

/// `mcp serve --listen` in tools mode on a catalog of one tool, `nap`, that sleeps
/// `seconds`: its folder, its guard and its URL.
fn nap_server(seconds: u32) -> (tempfile::TempDir, Guard, String) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("nap.json");
    std::fs::write(
        &catalog,
        format!(
            r#"{{"tools": [{{"name": "nap", "description": "sleeps", "executor": {{"kind": "command", "command": ["/bin/sleep", "{seconds}"], "timeout_ms": 20000}}}}]}}"#
        ),
    )
    .unwrap();
    let config = dir.path().join("toolsearch.toml");
    std::fs::write(
        &config,
        format!(
            "[catalog]\npaths = [{:?}]\n\n[tools.toolSearch]\nmode = \"tools\"\n",
            catalog.display().to_string()
        ),
    )
    .unwrap();
    let (serve, url) = start_server(&config, &["mcp", "serve", "--listen", "127.0.0.1:0"]);
    (dir, serve, url)
}

/// A call keeps its place for as long as it runs, not as long as its HTTP exchange: a
/// client that sends calls and hangs up at once gets 32 running, and the next is `busy`
/// at once, for everyone, until they end (without the bound one client started 300 tool
/// processes, or queued ~1,000 code runs).
#[test]
fn mcp_serve_bounds_the_calls_it_runs_even_when_their_clients_hang_up() {
    let (_dir, _serve, url) = nap_server(6);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let call = |id: u64, tool: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "tool_call", "arguments": {"id": tool, "args": {}}}})
    };
    block_on(async {
        let client = reqwest::Client::new();
        let (status, session) = mcp_post(&client, &url, None, initialize_with(json!({}))).await;
        assert_eq!(status, 200);
        let session = session.unwrap();
        mcp_post(&client, &url, Some(&session), initialized).await;
        for n in 0..40u64 {
            // Sent, then the connection dropped before any answer.
            let _ = client
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .json(&call(100 + n, "nap"))
                .timeout(std::time::Duration::from_millis(150))
                .send()
                .await;
        }
        let answer = |r: reqwest::Response| async move { r.text().await.unwrap() };
        let post = |body: Value| {
            client
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .json(&body)
                .send()
        };
        let text = answer(post(call(200, "nap")).await.unwrap()).await;
        assert!(
            text.contains("busy") && text.contains("32 tool calls"),
            "{text}"
        );
        // Once they have ended, calls run again.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let text = answer(post(call(300, "no-such-tool")).await.unwrap()).await;
            if !text.contains("busy") {
                assert!(text.contains("unknown"), "{text}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "still busy: {text}");
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    });
}

/// Forty calls at once on one session over HTTP, the client waiting for each: every one
/// is answered 200 with a tool result, those past the 32 running `busy` as over stdio (with
/// the HTTP bound at 32 too, the 33rd was a 503 the official SDK throws: front round 27
/// F3).
#[test]
fn calls_past_the_bound_over_http_are_busy_results_not_refusals() {
    let (_dir, _serve, url) = nap_server(4);
    block_on(async {
        let client = reqwest::Client::new();
        let (status, session) = mcp_post(&client, &url, None, initialize_with(json!({}))).await;
        assert_eq!(status, 200);
        let session = session.unwrap();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        mcp_post(&client, &url, Some(&session), initialized).await;
        let calls = (0..40u64).map(|n| {
            let (client, url, session) = (client.clone(), url.clone(), session.clone());
            async move {
                let r = client
                    .post(&url)
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-session-id", &session)
                    .json(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                        "params": {"name": "tool_call", "arguments": {"id": "nap", "args": {}}}}))
                    .send()
                    .await
                    .unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            }
        });
        let answers = futures::future::join_all(calls).await;
        let busy = answers
            .iter()
            .filter(|(_, text)| text.contains("busy"))
            .count();
        for (status, text) in &answers {
            assert_eq!(*status, 200, "{text}");
        }
        assert_eq!(busy, 8, "{answers:?}");
    });
}

/// The children's working directory is looked at before each spawn: removed under a
/// running host (a temp cleaner; another host that took it for a dead one's), it is made
/// anew, and code mode goes on.
#[test]
fn code_mode_survives_its_working_directory_being_removed() {
    let (_dir, config) = config_with("[sandbox]\nspares = 0\nmax_spares = 0\n");
    let (serve, url) = start_server(&config, &["mcp", "serve", "--listen", "127.0.0.1:0"]);
    let prefix = format!("toolsearch-sandbox-{}-", serve.0.id());
    let workdirs = || -> Vec<PathBuf> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect()
    };
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "tool_search_code", "arguments": {"code": "return 40 + 2"}}})
    };
    block_on(async {
        let client = reqwest::Client::new();
        let (_, session) = mcp_post(&client, &url, None, initialize_with(json!({}))).await;
        let session = session.unwrap();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        mcp_post(&client, &url, Some(&session), initialized).await;
        let run = |id: u64| {
            let r = client
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .json(&call(id))
                .send();
            async move { r.await.unwrap().text().await.unwrap() }
        };
        assert!(run(2).await.contains("\\\"value\\\":42"));
        let before = workdirs();
        assert_eq!(before.len(), 1, "{before:?}");
        std::fs::remove_dir(&before[0]).unwrap();
        let text = run(3).await;
        assert!(text.contains("\\\"value\\\":42"), "{text}");
        let after = workdirs();
        assert_eq!(after.len(), 1, "{after:?}");
        assert_ne!(after, before);
    });
}

#[test]
fn mcp_serve_reads_bounded_bodies_and_holds_bounded_streams() {
    let (_dir, config) = config_with("");
    let (_serve, url) = start_server(&config, &["mcp", "serve", "--listen", "127.0.0.1:0"]);
    let initialize = |experimental: Value| initialize_with(json!({"experimental": experimental}));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    block_on(async {
        // No kept-alive connections: the server closes one after refusing a body it did
        // not read, and a pooled connection reused for the next request raced that close
        // (IncompleteMessage, once in a CI run).
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let post = |session: Option<String>, body: String| {
            let mut r = client
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(body);
            if let Some(s) = session {
                r = r.header("mcp-session-id", s);
            }
            r.send()
        };
        // An initialize that is a 4 MiB heap of tiny values, or just large: refused
        // before rmcp parses (and keeps) it.
        let dense = format!("[{}]", vec!["[0]"; 800_000].join(","));
        let r = post(
            None,
            initialize(json!({"x": {"y": "@"}}))
                .to_string()
                .replace("\"@\"", &dense),
        )
        .await
        .unwrap();
        assert_eq!(r.status().as_u16(), 413);
        let r = post(
            None,
            initialize(json!({"pad": "x".repeat(20_000)})).to_string(),
        )
        .await
        .unwrap();
        assert_eq!(r.status().as_u16(), 413);
        // A session's request: bytes up to 4 MiB, but not 800,000 values.
        let (status, id) = mcp_post(&client, &url, None, initialize(json!({}))).await;
        assert_eq!(status, 200);
        let id = id.unwrap();
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "tool_search", "arguments": {"query": "@"}}})
        .to_string()
        .replace("\"@\"", &dense);
        let r = post(Some(id.clone()), call).await.unwrap();
        assert_eq!(r.status().as_u16(), 413);
        assert!(r.text().await.unwrap().contains("JSON values"));

        // A second initialize on the open session is held to the opening bound too: rmcp
        // keeps the latest one's parameters for the session's life.
        let r = post(
            Some(id.clone()),
            initialize(json!({"pad": "x".repeat(20_000)})).to_string(),
        )
        .await
        .unwrap();
        assert_eq!(r.status().as_u16(), 413);
        assert!(r.text().await.unwrap().contains("initialize"));

        // Streams: 2 a session, 128 in all; the 129th is refused, not queued.
        let mut streams = Vec::new();
        let mut refused = None;
        'open: for n in 0..70 {
            let (status, id) = mcp_post(&client, &url, None, initialize(json!({}))).await;
            assert_eq!(status, 200);
            let id = id.unwrap();
            mcp_post(&client, &url, Some(&id), initialized.clone()).await;
            for k in 0..2 {
                let r = client
                    .get(&url)
                    .header("accept", "text/event-stream")
                    .header("mcp-session-id", &id)
                    .send()
                    .await
                    .unwrap();
                if r.status().as_u16() != 200 {
                    assert_eq!(r.status().as_u16(), 503);
                    refused = Some(n * 2 + k);
                    break 'open;
                }
                streams.push(r);
            }
        }
        assert_eq!(refused, Some(128), "the stream past 128 was not refused");
        // The server still answers others.
        let (status, _) = mcp_post(&client, &url, None, initialize(json!({}))).await;
        assert_eq!(status, 200);
        drop(streams);
    });
}

#[test]
fn mcp_serve_gives_no_place_to_an_unsent_body_and_logs_no_client_text_whole() {
    use std::io::BufRead;
    let (dir, config) = config_with("");
    let log = dir.path().join("stderr.log");
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["mcp", "serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _serve = Guard(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    // More heads than places (32), each promising a body it never sends.
    let held: Vec<std::net::TcpStream> = (0..40)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.write_all(b"POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-session-id: made-up\r\ncontent-length: 4000000\r\n\r\n{")
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let initialize = initialize_with(json!({}));
    block_on(async {
        let client = reqwest::Client::new();
        let (status, id) = mcp_post(&client, &url, None, initialize).await;
        assert_eq!(
            status, 200,
            "unsent bodies held the places of answered requests"
        );
        // A tool name of 1 MiB is one JSON value; its error answer is logged, cut.
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "x".repeat(1 << 20), "arguments": {}}});
        for _ in 0..5 {
            mcp_post(&client, &url, id.as_deref(), call.clone()).await;
        }
    });
    drop(held);
    let logged = std::fs::metadata(&log).unwrap().len();
    assert!(
        logged < 200_000,
        "five calls with a 1 MiB name logged {logged} bytes"
    );
}

/// A run that ends while an upstream call is still out tells the server it may stop
/// (`notifications/cancelled` with the call's id): it had been left doing the work, and a
/// model that retried did it twice (review 20 F2). Under `mcp serve`, a long-lived host,
/// driven by the official SDK client.
#[test]
fn a_call_given_up_on_is_cancelled_at_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.txt");
    let server =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tests/mcp/never_answers_calls.py");
    let config = dir.path().join("toolsearch.toml");
    std::fs::write(
        &config,
        format!(
            "[tools.toolSearch]\nmode = \"code\"\ncodeTimeoutMs = 1000\n\n[catalog]\npaths = []\n\n[mcp.servers.never]\ncommand = \"python3\"\nargs = [{:?}, {:?}]\n",
            server.display().to_string(),
            record.display().to_string()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let out = sdk_client(
        &["stdio", BIN, "--config", &config, "mcp", "serve"],
        json!({"calls": [
            {"name": "tool_search_code", "arguments": {"code": "await openclaw.tools.call('mcp:never:slow_write', {}); return 1;"}},
            // Time for the server to read the notification before the host stops it.
            {"name": "tool_search_code", "arguments": {"code": "const t = Date.now(); while (Date.now() - t < 500) {} return 2;"}},
        ]}),
    );
    let first = serde_json::to_string(&out["results"][0]).unwrap();
    assert!(first.contains("timeout"), "{out}");
    let lines = std::fs::read_to_string(&record).unwrap_or_default();
    let called = lines
        .lines()
        .find_map(|l| l.strip_prefix("CALL "))
        .unwrap_or_else(|| panic!("the call never reached the server: {lines} {out}"));
    assert!(
        lines.lines().any(|l| l == format!("CANCELLED {called}")),
        "no cancellation for {called}: {lines}"
    );
}

/// `mcp serve` over stdio spoken to line by line: what a client sends, raw, and each JSON
/// line it answers.
struct RawStdio {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl RawStdio {
    /// `mcp serve` with its state in `dir`, its config `config` if any, and `args` before
    /// the command.
    fn start(dir: &Path, config: Option<&Path>, args: &[&str]) -> RawStdio {
        let mut command = Command::new(BIN);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        let mut child = command
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args(args)
            .args(["mcp", "serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel::<Value>();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Ok(v) = serde_json::from_str(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        RawStdio {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
    }

    fn send_bytes(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer within 60 s")
    }

    /// `initialize` answered, then `initialized`.
    fn initialize(&mut self) -> Value {
        self.send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        );
        let initialized = self.next();
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        initialized
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A request the client cancels is still answered (as cancelled), and a request sent after
/// the cancel under the same id waits for that answer and is answered itself (sandbox
/// round 31: rmcp forgot the cancelled request at once, its late answer took the new
/// request's place, and the new request was cancelled with it and never answered).
#[test]
fn a_cancelled_id_sent_again_is_answered_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = RawStdio::start(dir.path(), None, &[]);
    server.initialize();
    let call = |code: &str| {
        json!({"jsonrpc": "2.0", "id": "x", "method": "tools/call",
               "params": {"name": "tool_search_code", "arguments": {"code": code}}})
    };
    for round in 0..3 {
        server.send(&call(
            "const t = Date.now(); while (Date.now() - t < 200) {} return 'first'",
        ));
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "x"}}));
        server.send(&call("return 'second'"));
        let answers: Vec<String> = (0..2)
            .map(|_| {
                let answer = server.next();
                assert_eq!(answer["id"], "x", "round {round}: {answer}");
                answer.to_string()
            })
            .collect();
        assert!(
            answers[0].contains("cancelled"),
            "round {round}: {answers:?}"
        );
        assert!(answers[1].contains("second"), "round {round}: {answers:?}");
    }
}

/// A bridge call's work runs off the runtime: two runs whose first search waits for the
/// index of a large catalog leave `mcp serve` answering (sandbox round 32 F1, F2: the
/// index build and describes of huge schemas ran in the run loop, held both workers, and a
/// `ping` waited 6.6 s with every run past its deadline).
#[test]
fn a_search_waiting_for_a_large_index_leaves_the_server_answering() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    std::fs::create_dir(&catalog).unwrap();
    let mut tools = String::new();
    for i in 0..10_000 {
        let words: Vec<String> = (0..150)
            .map(|j| format!("w{}", (i * 7 + j * 13) % 4999))
            .collect();
        tools.push_str(&json!({"name": format!("tool_{i}"), "description": words.join(" "), "input_schema": {"type": "object", "properties": {}}, "executor": {"kind": "fixture", "text": "ok"}}).to_string());
        tools.push('\n');
    }
    std::fs::write(catalog.join("tools.jsonl"), tools).unwrap();
    let config = dir.path().join("toolsearch.toml");
    std::fs::write(&config, "[catalog]\npaths = [\"cat\"]\ncache = false\n").unwrap();
    // What loading and indexing take here, for the measure of "answering" below.
    let started = Instant::now();
    let (code, _, out) = toolsearch(&config, &["search", "w17"]);
    assert_eq!(code, 0, "{out}");
    let indexing = started.elapsed();

    let mut server = RawStdio::start(dir.path(), Some(&config), &[]);
    server.initialize();
    // Sixteen searches a run, all waiting for the index.
    for id in [10, 11] {
        server.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "tool_search_code",
            "arguments": {"code": "const all = []; for (let i = 0; i < 16; i++) all.push(openclaw.tools.search('w17 ' + i)); const hits = await Promise.all(all); return hits.length"}}}));
    }
    // A describe needs no index: it is not held back by the searches waiting for one
    // (round 34 F2: in one lane with them, every other client's describe timed out).
    server.send(
        &json!({"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {
        "name": "tool_search_code",
        "arguments": {"code": "await openclaw.tools.describe('tool_1'); return 'described'"}}}),
    );
    std::thread::sleep(Duration::from_millis(200));
    let pinged = Instant::now();
    server.send(&json!({"jsonrpc": "2.0", "id": 12, "method": "ping"}));
    let threads = || {
        std::fs::read_to_string(format!("/proc/{}/status", server.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or(0)
    };
    let mut answered: Vec<Value> = Vec::new();
    while answered.len() < 4 {
        let answer = server.next();
        if answer["id"] == 13 {
            assert!(answer.to_string().contains("described"), "{answer}");
            assert!(
                answered.iter().all(|a| a["id"] != 10 && a["id"] != 11),
                "the describe waited for the searches: {answered:?}"
            );
        }
        if answer["id"] == 12 {
            assert!(
                pinged.elapsed() < indexing / 2,
                "ping answered after {:?}; loading and indexing take {indexing:?}",
                pinged.elapsed()
            );
            // The 32 waiting searches hold a thread each only up to one per core (round
            // 33 F3: a blocking thread each, 294 in a flood).
            let now = threads();
            assert!(now < 32, "{now} threads while 32 searches wait");
        }
        answered.push(answer);
    }
    for run in answered.iter().filter(|a| a["id"] == 10 || a["id"] == 11) {
        assert!(run.to_string().contains(r#"\"value\":16"#), "{run}");
    }
    drop(server);

    // Tools mode's `tool_search` the same (round 34 F3: run on the runtime's workers, it
    // held them for the whole build).
    let mut server = RawStdio::start(dir.path(), Some(&config), &["--mode", "tools"]);
    server.initialize();
    for id in [20, 21] {
        server.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "tool_search", "arguments": {"query": format!("w17 {id}")}}}),
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    let pinged = Instant::now();
    server.send(&json!({"jsonrpc": "2.0", "id": 22, "method": "ping"}));
    let mut answered = 0;
    while answered < 3 {
        let answer = server.next();
        if answer["id"] == 22 {
            assert!(
                pinged.elapsed() < indexing / 2,
                "tools mode: ping answered after {:?}; loading and indexing take {indexing:?}",
                pinged.elapsed()
            );
        } else {
            assert!(answer["error"].is_null(), "{answer}");
        }
        answered += 1;
    }
}

/// Unknown ids cost the host a bounded time however many a run sends, on a catalog of the
/// longest names: three runs of 32 calls and 32 describes of unknown 256-byte ids each (a
/// run's 64 bridge calls) leave the server answering pings and another run's one describe
/// answered ahead of them, and their telemetry counts what the session log has. Their "did you mean" was an
/// edit distance against every entry (600 ms each here, the calls' on the runtime's
/// workers): runs past their deadlines by 40 s, pings unanswered as long, and the other
/// run's describe behind all of theirs (sandbox round 35 F1, F2, F3).
#[test]
fn unknown_ids_by_the_hundred_leave_the_server_and_other_runs_answered() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    std::fs::create_dir(&catalog).unwrap();
    let mut tools = String::new();
    for i in 0..10_000 {
        let name = &format!("tool_{i:05}_{}", "golf_romeo_ticket_".repeat(7))[..128];
        tools.push_str(&json!({"name": name, "description": format!("tool {i}"), "input_schema": {"type": "object", "properties": {}}, "executor": {"kind": "fixture", "text": "ok"}}).to_string());
        tools.push('\n');
    }
    std::fs::write(catalog.join("tools.jsonl"), tools).unwrap();
    let config = dir.path().join("toolsearch.toml");
    std::fs::write(
        &config,
        "[catalog]\npaths = [\"cat\"]\ncache = false\n[tools.toolSearch]\ncodeTimeoutMs = 60000\n",
    )
    .unwrap();
    let mut server = RawStdio::start(dir.path(), Some(&config), &["--session", "k"]);
    server.initialize();
    let hostile = "const id = (i) => 'openclaw:core:' + 'g'.repeat(238) + String(i).padStart(4, '0');\n\
                   const all = [];\n\
                   for (let i = 0; i < 32; i++) {\n\
                     all.push(openclaw.tools.call(id(i), {}).then(() => 'ran', (e) => e.code));\n\
                     all.push(openclaw.tools.describe(id(i)).then(() => 'found', (e) => e.code));\n\
                   }\n\
                   const codes = await Promise.all(all);\n\
                   return codes.filter((c) => c === 'unknown-tool').length";
    for id in [10, 11, 12] {
        server.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "tool_search_code", "arguments": {"code": hostile}}}),
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    let honest = format!(
        "const d = await openclaw.tools.describe('{}'); return d ? 'described' : 'none'",
        &format!("tool_00001_{}", "golf_romeo_ticket_".repeat(7))[..128]
    );
    server.send(
        &json!({"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {
        "name": "tool_search_code", "arguments": {"code": honest}}}),
    );
    server.send(&json!({"jsonrpc": "2.0", "id": 14, "method": "ping"}));
    let mut answered: Vec<Value> = Vec::new();
    while answered.len() < 5 {
        let answer = server.next();
        if answer["id"] == 13 || answer["id"] == 14 {
            assert!(
                answered
                    .iter()
                    .all(|a| a["id"] != 10 && a["id"] != 11 && a["id"] != 12),
                "{} waited for the runs of unknown ids: {answered:?}",
                answer["id"]
            );
        }
        if answer["id"] == 13 {
            assert!(answer.to_string().contains("described"), "{answer}");
        }
        answered.push(answer);
    }
    let mut counted = 0;
    for run in answered
        .iter()
        .filter(|a| a["id"] == 10 || a["id"] == 11 || a["id"] == 12)
    {
        let text = run["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        let result: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {run}"));
        assert_eq!(result["value"], 64, "{result}");
        assert_eq!(result["telemetry"]["describe_count"], 32, "{result}");
        assert_eq!(result["telemetry"]["call_count"], 32, "{result}");
        counted += 1;
    }
    assert_eq!(counted, 3);
    drop(server);
    // The session log has what the telemetry counted: every describe before its run's end.
    let log = std::fs::read_to_string(dir.path().join("state/sessions/k.jsonl")).unwrap();
    let describes = log
        .lines()
        .filter(|l| l.contains(r#""event":"describe""#))
        .count();
    assert_eq!(describes, 3 * 32 + 1, "{}", &log[..log.len().min(2000)]);
}

/// A schema that costs its author's choice to compile (64 patterns of a large class
/// repeated 900 times, and one that does not compile) is compiled off the runtime's
/// workers, once however many calls come at once, and its failure kept: three runs
/// calling it leave a ping answered first, and a second call is answered from what the
/// first found (sandbox round 36 F1: compiled on the worker polling the call, again on
/// every call, runs ended 3 s past their deadlines and `mcp serve` was silent 7.7 s).
/// Writes `tools` as the catalog `cat/tools.jsonl` under `dir` and a config reading it with
/// code runs' deadline `timeout_ms`: the config's path.
fn catalog_of(dir: &Path, tools: &[Value], timeout_ms: u64) -> PathBuf {
    let lines: String = tools.iter().map(|t| t.to_string() + "\n").collect();
    std::fs::write(dir.join("cat").join("tools.jsonl"), lines).unwrap();
    let config = dir.join("toolsearch.toml");
    std::fs::write(
        &config,
        format!("[catalog]\npaths = [\"cat\"]\ncache = false\n[tools.toolSearch]\ncodeTimeoutMs = {timeout_ms}\n"),
    )
    .unwrap();
    config
}

#[test]
fn a_costly_schema_is_compiled_once_off_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    std::fs::create_dir(&catalog).unwrap();
    let mut props = serde_json::Map::new();
    for i in 0..63 {
        props.insert(
            format!("p{i}"),
            json!({"type": "string", "pattern": format!("^[^\\x00]{{0,900}}-{i}$")}),
        );
    }
    props.insert("zzz".into(), json!({"type": "string", "pattern": "(?<=a"}));
    let tools = [
        json!({"name": "slow", "description": "a costly schema", "input_schema": {"type": "object", "properties": props}, "executor": {"kind": "fixture", "text": "ok"}}),
        json!({"name": "ok", "description": "a plain tool", "input_schema": {"type": "object"}, "executor": {"kind": "fixture", "text": "ok"}}),
    ];
    let config = catalog_of(dir.path(), &tools, 60000);
    let mut server = RawStdio::start(dir.path(), Some(&config), &[]);
    server.initialize();
    let body = "const times = [];\n\
                for (let i = 0; i < 2; i++) {\n\
                  const t = Date.now();\n\
                  const code = await openclaw.tools.call('slow', {}).then(() => 'ran', (e) => e.code);\n\
                  times.push([code, Date.now() - t]);\n\
                }\n\
                return times";
    for id in [10, 11, 12] {
        server.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "tool_search_code", "arguments": {"code": body}}}),
        );
    }
    std::thread::sleep(Duration::from_millis(100));
    server.send(&json!({"jsonrpc": "2.0", "id": 14, "method": "ping"}));
    let mut answered: Vec<Value> = Vec::new();
    while answered.len() < 4 {
        let answer = server.next();
        if answer["id"] == 14 {
            assert!(
                answered.is_empty(),
                "the ping waited for the runs: {answered:?}"
            );
        }
        answered.push(answer);
    }
    let first = answered.iter().find(|a| a["id"] == 10).unwrap();
    let text = first["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let result: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {first}"));
    let times = result["value"]
        .as_array()
        .unwrap_or_else(|| panic!("{result}"));
    assert_eq!(times[0][0], "bad-schema", "{result}");
    assert_eq!(times[1][0], "bad-schema", "{result}");
    let (once, again) = (times[0][1].as_u64().unwrap(), times[1][1].as_u64().unwrap());
    assert!(
        again * 4 <= once.max(20),
        "the second call took {again} ms, the first {once} ms: compiled again"
    );
}

/// A schema whose check costs hours passes every load-time rule (a pattern the lazy DFA
/// gives up on, referenced 40 times, against a 60 KB argument: sandbox round 40 F1): its
/// checks are stopped at their run's end or their budget, and never keep a light schema's
/// check waiting (they held both check places for hours, and every other call timed out).
#[test]
fn a_check_that_costs_hours_is_stopped_and_keeps_no_other_call_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = dir.path().join("cat");
    std::fs::create_dir(&catalog).unwrap();
    let refs: Vec<Value> = (0..40).map(|_| json!({"$ref": "#/$defs/p"})).collect();
    // The same pattern kept in data, which a reference makes a schema of (round 41 F1:
    // taken for light, checked in the host for minutes).
    let hidden_refs: Vec<Value> = (0..40).map(|_| json!({"$ref": "#/examples/0"})).collect();
    let tools = [
        json!({"name": "hidden", "description": "a costly schema in data", "executor": {"kind": "fixture", "text": "ok"},
            "input_schema": {"type": "object", "examples": [{"type": "string", "pattern": "a[ab]{10000}c"}],
                "properties": {"a": {"type": "array", "items": {"allOf": hidden_refs}}}}}),
        json!({"name": "costly", "description": "a costly schema", "executor": {"kind": "fixture", "text": "ok"},
            "input_schema": {"type": "object", "$defs": {"p": {"type": "string", "pattern": "a[ab]{10000}c"}},
                "properties": {"a": {"type": "array", "items": {"allOf": refs}}}}}),
        json!({"name": "cheap", "description": "a plain schema", "executor": {"kind": "fixture", "text": "ok"},
            "input_schema": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}}),
    ];
    let config = catalog_of(dir.path(), &tools, 4000);
    let mut server = RawStdio::start(dir.path(), Some(&config), &[]);
    server.initialize();
    // Random a/b: on a repeating text the DFA's cache would hold.
    let costly = |tool: &str| {
        format!(
            "let x = 7, s = '';\n\
             for (let i = 0; i < 60000; i++) {{ x = (x * 1103515245 + 12345) % 2147483648; s += x & 1024 ? 'a' : 'b'; }}\n\
             return await openclaw.tools.call('{tool}', {{a: [s]}}).then(() => 'ran', (e) => e.code);"
        )
    };
    let cheap = "const t = Date.now();\n\
                 const code = await openclaw.tools.call('cheap', {a: [1, 2]}).then(() => 'ran', (e) => e.code);\n\
                 return [code, Date.now() - t];";
    let run = |id: u64, code: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "tool_search_code", "arguments": {"code": code}}})
    };
    // Two runs of the hidden one: checked in the host they held both check places.
    server.send(&run(10, &costly("costly")));
    server.send(&run(11, &costly("hidden")));
    server.send(&run(14, &costly("hidden")));
    std::thread::sleep(Duration::from_millis(1500));
    server.send(&run(12, cheap));
    let value = |answer: &Value| -> Value {
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {answer}"))
    };
    let mut answers = std::collections::HashMap::new();
    while answers.len() < 4 {
        let answer = server.next();
        answers.insert(answer["id"].as_u64().unwrap_or_default(), answer);
    }
    let cheap_run = value(&answers[&12]);
    assert_eq!(
        cheap_run["value"][0], "ran",
        "the light check waited: {cheap_run}"
    );
    for id in [10, 11, 14] {
        let costly_run = value(&answers[&id]);
        assert_eq!(costly_run["error"]["code"], "timeout", "{costly_run}");
    }
    // Their checkers were killed with their runs: a check of the costly schema with a
    // short argument finds a place and answers at once.
    server.send(&run(
        13,
        "return await openclaw.tools.call('costly', {a: ['b']}).then(() => 'ran', (e) => e.code);",
    ));
    let after = value(&server.next());
    assert_eq!(after["value"], "invalid-arguments", "{after}");
    // An idle checker that dies (killed, out of memory) is let go, not asked: the next
    // check gets a fresh one (front round 34 F4: it failed on the dead one's pipe).
    let server_pid = server.child.id().to_string();
    let checkers: Vec<u32> = processes_with("internal-schema-checker")
        .into_iter()
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            after_name.split_whitespace().nth(1) == Some(server_pid.as_str())
        })
        .collect();
    assert!(!checkers.is_empty(), "no idle checker");
    for p in &checkers {
        let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
    }
    std::thread::sleep(Duration::from_millis(200));
    server.send(&run(
        15,
        "return await openclaw.tools.call('costly', {a: ['b']}).then(() => 'ran', (e) => e.code);",
    ));
    let again = value(&server.next());
    assert_eq!(again["value"], "invalid-arguments", "{again}");
    drop(server);
    // Without a run's deadline, the check's own budget stops it.
    let arg = json!({"a": [(0..60000u64).scan(7u64, |x, _| {
        *x = (*x * 1103515245 + 12345) % 2147483648;
        Some(if *x & 1024 != 0 { 'a' } else { 'b' })
    }).collect::<String>()]});
    let started = Instant::now();
    let (code, out, all) = toolsearch(&config, &["call", "costly", &arg.to_string(), "--json"]);
    assert_ne!(code, 0, "{all}");
    assert_eq!(out["error"]["code"], "check-stopped", "{all}");
    assert!(
        out["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the check was stopped")),
        "{all}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the budget did not stop it: {all}"
    );
}

/// A request whose id rmcp could answer under is answered under it, whatever else is
/// wrong with it, and a known method with params that do not read is `invalid params`
/// (front round 25 F3, F4: no `jsonrpc`, `jsonrpc: "1.0"`, `params: []` or a line that is
/// not UTF-8 were answered under no id or not at all, and `tools/call` with string
/// arguments was "method not found").
#[test]
fn a_malformed_request_is_answered_under_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = RawStdio::start(dir.path(), None, &[]);
    server.initialize();
    let lines: [(&[u8], i64, &str); 5] = [
        (br#"{"id":15,"method":"tools/list"}"#, -32600, "jsonrpc"),
        (br#"{"jsonrpc":"1.0","id":16,"method":"tools/list"}"#, -32600, "jsonrpc"),
        (br#"{"jsonrpc":"2.0","id":18,"method":"tools/list","params":[]}"#, -32600, "params"),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{\"name\":\"tool_search_code\",\"arguments\":{\"code\":\"return '\xff'\"}}}",
            -32600,
            "UTF-8",
        ),
        (
            br#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"tool_search_code","arguments":"x"}}"#,
            -32602,
            "invalid params for `tools/call`",
        ),
    ];
    for (line, code, says) in lines {
        server.send_bytes(line);
        let answer = server.next();
        let shown = String::from_utf8_lossy(line);
        let id = serde_json::from_str::<Value>(&shown).unwrap()["id"].clone();
        assert_eq!(answer["id"], id, "{shown}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{shown}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(says),
            "{shown}: {answer}"
        );
    }
    // And the session goes on.
    server.send(&json!({"jsonrpc": "2.0", "id": 20, "method": "ping"}));
    assert_eq!(server.next()["id"], 20);
}

/// A client that says `notifications/initialized` again and again is told of a tool change
/// once: each repeat was an entry more among the peers told (quadratic work, and one
/// `list_changed` per repeat at every change: review 24 F1).
#[test]
fn a_repeated_initialized_notification_is_one_peer() {
    // Only the changing server, in direct mode: its tools are the surface's, so a new
    // one changes the list the clients are told of.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolsearch.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[catalog]
paths = []

[mcp.servers.dynamic]
command = "node"
args = ["{}"]

[tools]
toolSearch = false
"#,
            mcp_dir().join("dynamic-server.mjs").display()
        ),
    )
    .unwrap();
    let mut server = RawStdio::start(dir.path(), Some(&config), &[]);
    let initialized = server.initialize();
    assert_eq!(initialized["id"], 1, "{initialized}");
    for _ in 0..49 {
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }
    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let listed = loop {
        let v = server.next();
        if v["id"] == 2 {
            break v;
        }
    };
    let add = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .find(|n| n.contains("add_tool"))
        .unwrap_or_else(|| panic!("{listed}"))
        .to_string();
    server.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": add, "arguments": {"name": "late_tool"}}}),
    );
    // The change's notifications come together once the catalog is rebuilt; a second
    // after the first, none is still on its way.
    let mut changed = 0;
    let mut first_at = None;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60)
        && first_at.is_none_or(|t: Instant| t.elapsed() < Duration::from_secs(1))
    {
        let Ok(v) = server.lines.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        if v["method"] == "notifications/tools/list_changed" {
            changed += 1;
            first_at.get_or_insert_with(Instant::now);
        }
    }
    drop(server);
    assert_eq!(changed, 1);
}
