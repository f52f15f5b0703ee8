//! Integration tests of `toolsearch call`: the whole dispatch path from the command line
//! (resolve, validate, approve, before hooks, execute, after hooks, envelope, session log).
//!
//! Every command runs in its own temporary folder (`current_dir`) with `--state-dir
//! <tmp>/state`, and with the variables any test sets removed (`common::SCRUBBED_ENV`).
//! The catalog is `fixtures/tests/call/tools.json` with `@DIR@` replaced by the temporary
//! folder: its command tools append their arguments to `<tmp>/ran`, so a test can tell
//! whether an executor ran. Hooks are `#!/bin/sh` scripts written into the temporary
//! folder. Command tools and hooks get an empty environment, so every program is named by
//! absolute path.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::{Value, json};

mod common;
use common::{COMPACT_KEYS, GENEROUS, Sandbox, err_json, exit_json, fixture, run, untagged};

/// The session key most runs use: the log is `<state>/sessions/t.jsonl`.
const SESSION: &str = "t";

/// A JSON (and TOML basic) string literal.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// The commands of this file, on the shared temporary folder.
impl Sandbox {
    fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    /// Writes an executable `#!/bin/sh` script; `{dir}` in `body` is the temporary folder.
    fn script(&self, rel: &str, body: &str) -> PathBuf {
        let body = body.replace("{dir}", self.dir_str());
        let path = self.write(rel, format!("#!/bin/sh\n{body}\n"));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod 755");
        path
    }

    /// The test catalog, with `@DIR@` replaced by this folder.
    fn catalog(&self) -> PathBuf {
        let text = fs::read_to_string(fixture("call/tools.json")).expect("read the call fixture");
        self.write("catalog/tools.json", text.replace("@DIR@", self.dir_str()))
    }

    /// `toolsearch --state-dir <tmp>/state` in this folder, with a scrubbed environment.
    fn with_state(&self) -> Command {
        let mut cmd = self.cmd();
        cmd.arg("--state-dir").arg(self.state());
        cmd
    }

    /// On the embedded demo catalog, session [`SESSION`].
    fn demo(&self) -> Command {
        let mut cmd = self.with_state();
        cmd.args(["--session", SESSION]);
        cmd
    }

    /// On the test catalog, session [`SESSION`], with `config` (TOML) when given.
    fn tools(&self, config: Option<&str>) -> Command {
        let catalog = self.catalog();
        let mut cmd = self.with_state();
        if let Some(toml) = config {
            let file = self.write("test-config.toml", toml);
            cmd.arg("--config").arg(file);
        }
        cmd.arg("--catalog").arg(catalog);
        cmd.args(["--session", SESSION]);
        cmd
    }

    /// `call ID [ARGS] --json` on the test catalog.
    fn call(&self, config: Option<&str>, id: &str, args: Option<&str>) -> Command {
        let mut cmd = self.tools(config);
        cmd.args(["call", id]);
        if let Some(a) = args {
            cmd.arg(a);
        }
        cmd.arg("--json");
        cmd
    }

    /// What the command tools recorded in `<tmp>/ran` (their stdin), if any ran.
    fn ran(&self) -> Option<String> {
        fs::read_to_string(self.path().join("ran")).ok()
    }

    fn assert_not_run(&self) {
        if let Some(text) = self.ran() {
            panic!("the executor ran, and must not have; it got: {text}");
        }
    }

    fn assert_ran_with(&self, args: &str) {
        assert_eq!(
            self.ran().as_deref(),
            Some(args),
            "the executor should have run once with these arguments"
        );
    }

    fn read(&self, rel: &str) -> Option<String> {
        fs::read_to_string(self.path().join(rel)).ok()
    }

    fn session_file(&self, session: &str) -> PathBuf {
        self.state()
            .join("sessions")
            .join(format!("{session}.jsonl"))
    }

    /// Every line of a session log, each asserted to be one JSON object.
    fn log_of(&self, session: &str) -> Vec<Value> {
        let path = self.session_file(session);
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read the session log {}: {e}", path.display()));
        assert!(text.ends_with('\n'), "the log ends with a whole line");
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {l}"));
                assert!(v.is_object(), "a log line is an object: {l}");
                v
            })
            .collect()
    }

    fn log(&self) -> Vec<Value> {
        self.log_of(SESSION)
    }

    /// The events of session [`SESSION`] named `event`, in order.
    fn events(&self, event: &str) -> Vec<Value> {
        self.log()
            .into_iter()
            .filter(|e| e["event"] == event)
            .collect()
    }
}

/// Runs a `call --json` that prints an envelope: asserts the exit code and the envelope's
/// shape, returns it.
fn envelope(cmd: &mut Command, exit: i32) -> Value {
    let (_, v) = exit_json(cmd, exit);
    let keys: Vec<&String> = v
        .as_object()
        .expect("an envelope is an object")
        .keys()
        .collect();
    assert!(
        keys.iter()
            .take(3)
            .map(|k| k.as_str())
            .eq(["tool", "call_id", "result"]),
        "envelope keys: {keys:?}"
    );
    let tool_keys: Vec<&str> = v["tool"]
        .as_object()
        .expect("tool is an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert!(
        tool_keys.iter().all(|k| COMPACT_KEYS.contains(k)),
        "tool is a compact descriptor: {tool_keys:?}"
    );
    let content = v["result"]["content"]
        .as_array()
        .expect("content is an array");
    assert_eq!(content.len(), 1, "one content block: {v}");
    assert_eq!(content[0]["type"], "text");
    assert!(content[0]["text"].is_string());
    assert_eq!(
        v["result"]["is_error"],
        exit != 0,
        "is_error matches the exit code: {v}"
    );
    v
}

fn text(envelope: &Value) -> &str {
    envelope["result"]["content"][0]["text"]
        .as_str()
        .expect("the content text is a string")
}

fn details(envelope: &Value) -> &Value {
    &envelope["result"]["details"]
}

/// Asserts a blocked envelope: `blocked: ` text and `{status: blocked, by, reason}`
/// details. Returns the reason.
fn assert_blocked(envelope: &Value, by: &str) -> String {
    let d = details(envelope);
    assert_eq!(d["status"], "blocked", "{envelope}");
    assert_eq!(d["by"], by, "{envelope}");
    let reason = d["reason"].as_str().expect("a blocked call has a reason");
    assert_eq!(text(envelope), format!("blocked: {reason}"));
    assert_eq!(envelope["result"]["is_error"], true);
    reason.to_string()
}

/// `[[hooks.<phase>]]` tables for these programs, with a timeout.
fn hooks(phase: &str, programs: &[&Path], timeout_ms: u64) -> String {
    programs
        .iter()
        .map(|p| {
            format!(
                "[[hooks.{phase}]]\ncommand = [{}]\ntimeout_ms = {timeout_ms}\n",
                quoted(p.to_str().expect("UTF-8 path"))
            )
        })
        .collect()
}

fn before(programs: &[&Path]) -> String {
    hooks("before_tool_call", programs, 5_000)
}

fn after(programs: &[&Path]) -> String {
    hooks("after_tool_call", programs, 5_000)
}

const TITLE_X: &str = r#"{"title":"x"}"#;

// ---------------------------------------------------------------------------------------
// 1. The embedded demo catalog
// ---------------------------------------------------------------------------------------

#[test]
fn demo_call_by_id_creates_the_issue() {
    let sb = Sandbox::new();
    let v = envelope(
        sb.demo().args([
            "call",
            "openclaw:github:create_issue",
            r#"{"title": "Crash on start"}"#,
            "--json",
        ]),
        0,
    );
    assert_eq!(text(&v), r#"Created issue #128 "Crash on start""#);
    assert_eq!(untagged(&v["call_id"]), "cli:direct:create_issue:1");
    assert_eq!(v["tool"]["id"], "openclaw:github:create_issue");
    assert_eq!(v["tool"]["source"], "openclaw");
    assert_eq!(v["tool"]["source_name"], "github");
    assert_eq!(v["tool"]["name"], "create_issue");
    assert_eq!(details(&v)["number"], 128);
    assert_eq!(v["result"]["is_error"], false);
    assert!(
        v.get("stop_after_batch").is_none(),
        "absent unless asked: {v}"
    );
}

#[test]
fn demo_call_by_exact_name() {
    let sb = Sandbox::new();
    let v = envelope(
        sb.demo().args([
            "call",
            "create_issue",
            r#"{"title": "Crash on start"}"#,
            "--json",
        ]),
        0,
    );
    assert_eq!(v["tool"]["id"], "openclaw:github:create_issue");
    assert_eq!(text(&v), r#"Created issue #128 "Crash on start""#);
    assert_eq!(untagged(&v["call_id"]), "cli:direct:create_issue:1");
}

#[test]
fn demo_args_from_stdin_with_dash() {
    let sb = Sandbox::new();
    let v = envelope(
        sb.demo()
            .args(["call", "openclaw:github:create_issue", "-", "--json"])
            .write_stdin(r#"{"title": "From stdin"}"#),
        0,
    );
    assert_eq!(text(&v), r#"Created issue #128 "From stdin""#);
}

#[test]
fn demo_stdin_that_is_not_json_is_a_usage_error() {
    let sb = Sandbox::new();
    let m = err_json(
        sb.demo()
            .args(["call", "create_issue", "-", "--json"])
            .write_stdin("title = x"),
        2,
        "usage",
    );
    assert!(m.contains("ARGS_JSON is not valid JSON"), "{m}");
}

#[test]
fn demo_no_args_means_an_empty_object_which_misses_title() {
    let sb = Sandbox::new();
    let m = err_json(
        sb.demo().args(["call", "create_issue", "--json"]),
        1,
        "invalid-arguments",
    );
    assert!(m.contains("openclaw:github:create_issue"), "{m}");
    assert!(m.contains("\"title\""), "names the missing property: {m}");
    assert!(m.contains("required"), "{m}");
    // The missing property is reported at the object holding it: the root.
    assert!(m.contains(": /: "), "the JSON pointer of the failure: {m}");
    let calls = sb.events("call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["outcome"], "invalid-arguments");
    assert_eq!(calls[0]["id"], "openclaw:github:create_issue");
}

/// Processes that write one session log never repeat a call id (review 19 F2: every CLI
/// run numbered from 1 under the same parent, so three runs wrote one id three times).
#[test]
fn call_ids_of_processes_sharing_a_session_log_are_distinct() {
    let sb = Sandbox::new();
    for _ in 0..3 {
        let out = run(sb
            .demo()
            .args(["call", "create_issue", r#"{"title": "Again"}"#, "--json"]));
        assert_eq!(out.code, 0, "{}", out.stderr);
    }
    let mut ids: Vec<String> = sb
        .events("call")
        .iter()
        .map(|e| e["call_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "{ids:?}");
}

#[test]
fn demo_call_without_json_prints_the_result_as_text() {
    let sb = Sandbox::new();
    let out = run(sb
        .demo()
        .args(["call", "create_issue", r#"{"title": "Plain"}"#]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let first = out.stdout.lines().next().unwrap_or_default();
    let id = first
        .strip_prefix("openclaw:github:create_issue (ok, ")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert_eq!(
        untagged(&serde_json::json!(id)),
        "cli:direct:create_issue:1"
    );
    assert!(
        out.stdout.contains(r#"Created issue #128 "Plain""#),
        "{}",
        out.stdout
    );
}

// ---------------------------------------------------------------------------------------
// 2. Resolution failures
// ---------------------------------------------------------------------------------------

#[test]
fn a_positive_control_the_record_tool_runs_and_echoes_its_arguments() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "record", Some(TITLE_X)), 0);
    assert_eq!(v["tool"]["id"], "openclaw:core:record");
    assert_eq!(untagged(&v["call_id"]), "cli:direct:record:1");
    assert_eq!(text(&v), TITLE_X);
    sb.assert_ran_with(TITLE_X);
}

#[test]
fn unknown_id_is_unknown_tool_with_suggestions() {
    let sb = Sandbox::new();
    let m = err_json(
        &mut sb.call(None, "openclaw:core:recrod", Some(TITLE_X)),
        1,
        "unknown-tool",
    );
    assert!(m.starts_with("unknown tool `openclaw:core:recrod`"), "{m}");
    assert!(m.contains("did you mean"), "{m}");
    assert!(m.contains("`openclaw:core:record`"), "{m}");
    assert!(
        m.contains("`toolsearch search WORDS`"),
        "the CLI's recovery hint: {m}"
    );
    sb.assert_not_run();
    let calls = sb.events("call");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["requested"], "openclaw:core:recrod");
    assert_eq!(calls[0]["message"], m.as_str());
    assert_eq!(calls[0]["outcome"], "unknown-tool");
    assert_eq!(calls[0]["caller"], "cli");
}

#[test]
fn unknown_bare_name_suggests_too() {
    let sb = Sandbox::new();
    let m = err_json(
        &mut sb.call(None, "recrod", Some(TITLE_X)),
        1,
        "unknown-tool",
    );
    assert!(m.contains("did you mean"), "{m}");
    assert!(m.contains("`openclaw:core:record`"), "{m}");
    sb.assert_not_run();
}

#[test]
fn ambiguous_bare_name_lists_both_ids() {
    let sb = Sandbox::new();
    let m = err_json(&mut sb.call(None, "twin", None), 1, "ambiguous-tool");
    assert!(m.contains("`twin`"), "{m}");
    assert!(m.contains("openclaw:core:twin"), "{m}");
    assert!(m.contains("mcp:alpha:twin"), "{m}");
    assert!(m.contains("exact tool id"), "{m}");
    sb.assert_not_run();
    assert_eq!(sb.events("call")[0]["outcome"], "ambiguous-tool");
}

/// `--approve NAME` must name one tool: a name two sources share is refused before
/// anything runs, naming both ids (review 18: it approved the server's tool with the
/// plugin's); an id approves its tool alone.
#[test]
fn approving_a_shared_name_asks_for_the_id() {
    let sb = Sandbox::new();
    let mut cmd = sb.call(None, "mcp:alpha:twin", Some(r#"{"k":1}"#));
    cmd.args(["--approve", "Twin"]);
    let m = err_json(&mut cmd, 2, "usage");
    assert!(m.contains("openclaw:core:twin"), "{m}");
    assert!(m.contains("mcp:alpha:twin"), "{m}");
    assert!(m.contains("by its id"), "{m}");
    sb.assert_not_run();
    let mut cmd = sb.call(None, "mcp:alpha:twin", Some(r#"{"k":1}"#));
    cmd.args(["--approve", "mcp:alpha:twin"]);
    envelope(&mut cmd, 0);
}

#[test]
fn an_ambiguous_name_still_runs_by_id() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "mcp:alpha:twin", Some(r#"{"k":1}"#)), 0);
    assert_eq!(v["tool"]["id"], "mcp:alpha:twin");
    assert_eq!(v["tool"]["source"], "mcp");
    sb.assert_ran_with(r#"{"k":1}"#);
    let calls = sb.events("call");
    assert_eq!(calls[0]["source"], "mcp");
    assert_eq!(calls[0]["source_name"], "alpha");
}

#[test]
fn hidden_tool_is_unavailable_by_name_and_by_id() {
    let sb = Sandbox::new();
    for requested in ["hidden_tool", "openclaw:core:hidden_tool"] {
        let m = err_json(
            &mut sb.call(None, requested, Some(TITLE_X)),
            1,
            "unavailable-tool",
        );
        assert!(
            m.starts_with("tool `openclaw:core:hidden_tool` is unavailable"),
            "{m}"
        );
        assert!(
            m.contains("TS_CALL_NEVER_SET"),
            "says which signal failed: {m}"
        );
    }
    sb.assert_not_run();
    let calls = sb.events("call");
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c["outcome"] == "unavailable-tool"));
}

#[test]
fn policy_denied_tool_is_unknown_not_revealed() {
    let sb = Sandbox::new();
    let config = "[tools]\ndeny = [\"denied_tool\"]\n";
    for requested in ["denied_tool", "openclaw:core:denied_tool"] {
        let m = err_json(
            &mut sb.call(Some(config), requested, Some(TITLE_X)),
            1,
            "unknown-tool",
        );
        assert!(m.starts_with(&format!("unknown tool `{requested}`")), "{m}");
        // Nothing about a denied tool reaches the caller: not suggested, not "unavailable".
        let rest = &m[format!("unknown tool `{requested}`").len()..];
        assert!(
            !rest.contains("denied_tool"),
            "suggested a denied tool: {m}"
        );
        assert!(!m.contains("unavailable"), "{m}");
    }
    sb.assert_not_run();
}

// ---------------------------------------------------------------------------------------
// 3. Argument validation
// ---------------------------------------------------------------------------------------

#[test]
fn wrong_type_is_invalid_arguments_with_its_pointer() {
    let sb = Sandbox::new();
    let m = err_json(
        &mut sb.call(None, "record", Some(r#"{"title": 5}"#)),
        1,
        "invalid-arguments",
    );
    assert!(
        m.starts_with("invalid arguments for `openclaw:core:record`"),
        "{m}"
    );
    assert!(m.contains("/title: "), "{m}");
    assert!(m.contains("string"), "says the expected type: {m}");
    sb.assert_not_run();
    let calls = sb.events("call");
    assert_eq!(calls[0]["outcome"], "invalid-arguments");
    assert_eq!(calls[0]["id"], "openclaw:core:record");
}

#[test]
fn every_failure_is_listed_with_its_pointer() {
    let sb = Sandbox::new();
    let m = err_json(
        &mut sb.call(None, "record", Some(r#"{"title": 5, "count": "many"}"#)),
        1,
        "invalid-arguments",
    );
    assert!(m.contains("/title: "), "{m}");
    assert!(m.contains("/count: "), "{m}");
    sb.assert_not_run();
}

#[test]
fn missing_required_is_invalid_arguments_at_the_root() {
    let sb = Sandbox::new();
    let m = err_json(
        &mut sb.call(None, "record", Some(r#"{"count": 2}"#)),
        1,
        "invalid-arguments",
    );
    assert!(m.contains("/: "), "{m}");
    assert!(m.contains("\"title\""), "{m}");
    assert!(m.contains("required"), "{m}");
    sb.assert_not_run();
}

#[test]
fn args_that_are_not_json_are_a_usage_error() {
    let sb = Sandbox::new();
    let m = err_json(&mut sb.call(None, "record", Some("{title: x}")), 2, "usage");
    assert!(m.contains("ARGS_JSON is not valid JSON"), "{m}");
    sb.assert_not_run();
}

#[test]
fn non_object_args_are_invalid_arguments_without_a_panic() {
    let sb = Sandbox::new();
    for args in ["[1,2]", r#""x""#, "42", "null", "true"] {
        let m = err_json(
            &mut sb.call(None, "record", Some(args)),
            1,
            "invalid-arguments",
        );
        assert!(m.contains("/: "), "{args}: {m}");
        assert!(m.contains("object"), "{args}: {m}");
    }
    // A tool with no declared schema takes an object too.
    let m = err_json(
        &mut sb.call(None, "openclaw:core:twin", Some("[1,2]")),
        1,
        "invalid-arguments",
    );
    assert!(m.contains("object"), "{m}");
    sb.assert_not_run();
}

#[test]
fn validation_comes_before_approval_and_hooks() {
    let sb = Sandbox::new();
    let hook = sb.script("seen.sh", "/bin/cat > '{dir}/hook-ran'");
    let config = format!(
        "[[approvals]]\ntools = [\"record\"]\n\n{}",
        before(&[&hook])
    );
    err_json(
        &mut sb.call(Some(&config), "record", Some(r#"{"title": 5}"#)),
        1,
        "invalid-arguments",
    );
    sb.assert_not_run();
    assert!(
        sb.read("hook-ran").is_none(),
        "no hook runs for invalid arguments"
    );
    assert!(sb.events("approval").is_empty(), "no approval asked");
}

// ---------------------------------------------------------------------------------------
// 4. Approvals
// ---------------------------------------------------------------------------------------

const APPROVE_RECORD: &str = "[[approvals]]\ntools = [\"record\"]\ntimeout_ms = 500\n";

#[test]
fn approval_needed_and_not_given_blocks() {
    let sb = Sandbox::new();
    let v = envelope(
        &mut sb.call(Some(APPROVE_RECORD), "record", Some(TITLE_X)),
        1,
    );
    let reason = assert_blocked(&v, "approval");
    assert!(
        reason.contains("`openclaw:core:record` needs approval"),
        "{reason}"
    );
    assert!(
        reason.contains("--approve openclaw:core:record"),
        "says how: {reason}"
    );
    assert_eq!(v["tool"]["id"], "openclaw:core:record");
    assert_eq!(untagged(&v["call_id"]), "cli:direct:record:1");
    sb.assert_not_run();

    let approvals = sb.events("approval");
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["decision"], "deny");
    assert_eq!(approvals[0]["id"], "openclaw:core:record");
    assert_eq!(untagged(&approvals[0]["call_id"]), "cli:direct:record:1");
    let blocked = sb.events("blocked");
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0]["by"], "approval");
    assert_eq!(blocked[0]["id"], "openclaw:core:record");
    assert_eq!(blocked[0]["reason"], reason.as_str());
    let calls = sb.events("call");
    assert_eq!(calls[0]["outcome"], "blocked");
    assert_eq!(calls[0]["is_error"], true);
}

#[test]
fn approval_is_denied_with_piped_stdin_too() {
    // Arguments read from a pipe: stdin is not a terminal, so nobody can be asked.
    let sb = Sandbox::new();
    let mut cmd = sb.tools(Some(APPROVE_RECORD));
    cmd.args(["call", "record", "-", "--json"])
        .write_stdin(TITLE_X);
    let v = envelope(&mut cmd, 1);
    assert_blocked(&v, "approval");
    sb.assert_not_run();
}

#[test]
fn approve_by_id_runs_the_call() {
    let sb = Sandbox::new();
    let mut cmd = sb.call(Some(APPROVE_RECORD), "record", Some(TITLE_X));
    cmd.args(["--approve", "openclaw:core:record"]);
    let v = envelope(&mut cmd, 0);
    assert_eq!(text(&v), TITLE_X);
    sb.assert_ran_with(TITLE_X);
    let approvals = sb.events("approval");
    assert_eq!(approvals.len(), 1);
    assert_eq!(approvals[0]["decision"], "allow");
    assert!(sb.events("blocked").is_empty());
    assert_eq!(sb.events("call")[0]["outcome"], "ok");
}

#[test]
fn approve_by_glob_runs_the_call() {
    for pattern in ["rec*", "openclaw:core:*", "RECORD"] {
        let sb = Sandbox::new();
        let mut cmd = sb.call(Some(APPROVE_RECORD), "record", Some(TITLE_X));
        cmd.args(["--approve", "json_out", "--approve", pattern]);
        envelope(&mut cmd, 0);
        sb.assert_ran_with(TITLE_X);
        assert_eq!(sb.events("approval")[0]["decision"], "allow", "{pattern}");
    }
}

#[test]
fn approving_another_tool_does_not_approve_this_one() {
    let sb = Sandbox::new();
    let mut cmd = sb.call(Some(APPROVE_RECORD), "record", Some(TITLE_X));
    cmd.args(["--approve", "json_out", "--approve", "mcp:*"]);
    let v = envelope(&mut cmd, 1);
    assert_blocked(&v, "approval");
    sb.assert_not_run();
}

#[test]
fn tools_outside_the_approval_rules_need_no_approval() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(Some(APPROVE_RECORD), "json_out", None), 0);
    assert_eq!(text(&v), "structured");
    assert!(sb.events("approval").is_empty());
}

#[test]
fn approval_rules_match_globs_and_ids() {
    let sb = Sandbox::new();
    let config = "[[approvals]]\ntools = [\"mcp:*:*\"]\n\n[[approvals]]\ntools = [\"rec?rd\"]\n";
    let v = envelope(&mut sb.call(Some(config), "mcp:alpha:twin", None), 1);
    assert_blocked(&v, "approval");
    let v = envelope(&mut sb.call(Some(config), "record", Some(TITLE_X)), 1);
    assert_blocked(&v, "approval");
    sb.assert_not_run();
    envelope(&mut sb.call(Some(config), "openclaw:core:twin", None), 0);
}

#[test]
fn approve_by_toolset_name_runs_the_call() {
    // Every MCP server name is an implicit toolset of its tools.
    let sb = Sandbox::new();
    let config = "[[approvals]]\ntools = [\"mcp:*:*\"]\n";
    let mut cmd = sb.call(Some(config), "mcp:alpha:twin", Some(r#"{"k":1}"#));
    cmd.args(["--approve", "alpha"]);
    envelope(&mut cmd, 0);
    sb.assert_ran_with(r#"{"k":1}"#);
}

#[test]
fn a_bad_approve_pattern_is_a_usage_error() {
    let sb = Sandbox::new();
    let mut cmd = sb.call(Some(APPROVE_RECORD), "record", Some(TITLE_X));
    cmd.args(["--approve", "group:nope"]);
    let m = err_json(&mut cmd, 2, "usage");
    assert!(m.contains("--approve"), "{m}");
    assert!(m.contains("group:nope"), "{m}");
    sb.assert_not_run();
}

#[test]
fn a_denied_approval_runs_no_before_hook() {
    let sb = Sandbox::new();
    let hook = sb.script("seen.sh", "/bin/cat > '{dir}/hook-ran'");
    let config = format!("{APPROVE_RECORD}\n{}", before(&[&hook]));
    let v = envelope(&mut sb.call(Some(&config), "record", Some(TITLE_X)), 1);
    assert_blocked(&v, "approval");
    assert!(sb.read("hook-ran").is_none());
    sb.assert_not_run();
}

// ---------------------------------------------------------------------------------------
// 5. Before hooks
// ---------------------------------------------------------------------------------------

#[test]
fn before_hooks_that_pass_let_the_call_run() {
    for (name, body) in [
        ("silent.sh", "/bin/cat > /dev/null"),
        ("empty.sh", "/bin/cat > /dev/null; echo '{}'"),
        (
            "pass.sh",
            "/bin/cat > /dev/null; echo '{\"decision\": \"pass\"}'",
        ),
        ("deaf.sh", "exit 0"),
    ] {
        let sb = Sandbox::new();
        let hook = sb.script(name, body);
        let v = envelope(
            &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
            0,
        );
        assert_eq!(text(&v), TITLE_X, "{name}");
        sb.assert_ran_with(TITLE_X);
        let hooks = sb.events("hook");
        assert_eq!(hooks.len(), 1, "{name}: {hooks:?}");
        assert_eq!(hooks[0]["phase"], "before_tool_call");
        assert_eq!(hooks[0]["hook"], format!("before_tool_call[0] ({name})"));
        assert_eq!(hooks[0]["decision"], "pass");
    }
}

#[test]
fn before_hook_receives_the_event_on_stdin() {
    let sb = Sandbox::new();
    let hook = sb.script("audit.sh", "/bin/cat > '{dir}/event.json'");
    let v = envelope(
        &mut sb.call(
            Some(&before(&[&hook])),
            "record",
            Some(r#"{"title": "Crash", "count": 3}"#),
        ),
        0,
    );
    let event: Value =
        serde_json::from_str(&sb.read("event.json").expect("the hook saved its stdin"))
            .expect("the hook's stdin is JSON");
    assert_eq!(event["event"], "before_tool_call");
    assert_eq!(event["session"], SESSION);
    assert_eq!(event["call_id"], v["call_id"]);
    assert_eq!(untagged(&event["call_id"]), "cli:direct:record:1");
    assert_eq!(
        event["tool"],
        json!({"id": "openclaw:core:record", "name": "record", "source": "openclaw", "source_name": "core"})
    );
    assert_eq!(event["args"], json!({"title": "Crash", "count": 3}));
    assert!(
        event.get("result").is_none(),
        "no result before the call: {event}"
    );
}

#[test]
fn before_hook_replace_changes_what_the_executor_gets() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "rewrite.sh",
        "/bin/cat > /dev/null; echo '{\"decision\": \"replace\", \"args\": {\"title\": \"replaced\"}}'",
    );
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        0,
    );
    assert_eq!(text(&v), r#"{"title":"replaced"}"#);
    sb.assert_ran_with(r#"{"title":"replaced"}"#);
    assert_eq!(sb.events("hook")[0]["decision"], "replace");
}

#[test]
fn before_hook_replace_reaches_a_fixture_executor() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "rewrite.sh",
        "/bin/cat > /dev/null; echo '{\"decision\": \"replace\", \"args\": {\"title\": \"new\"}}'",
    );
    let v = envelope(
        &mut sb.call(
            Some(&before(&[&hook])),
            "fixture_echo",
            Some(r#"{"title":"old"}"#),
        ),
        0,
    );
    assert_eq!(text(&v), r#"FAKE fixture_echo {"title":"new"} new"#);
    assert_eq!(details(&v)["input"], json!({"title": "new"}));
}

#[test]
fn a_later_before_hook_sees_the_replaced_args() {
    let sb = Sandbox::new();
    let first = sb.script(
        "rewrite.sh",
        "/bin/cat > /dev/null; echo '{\"decision\": \"replace\", \"args\": {\"title\": \"replaced\"}}'",
    );
    let second = sb.script("audit.sh", "/bin/cat > '{dir}/event.json'");
    envelope(
        &mut sb.call(Some(&before(&[&first, &second])), "record", Some(TITLE_X)),
        0,
    );
    let event: Value =
        serde_json::from_str(&sb.read("event.json").expect("second hook ran")).expect("JSON");
    assert_eq!(event["args"], json!({"title": "replaced"}));
    sb.assert_ran_with(r#"{"title":"replaced"}"#);
}

#[test]
fn before_hook_replace_with_invalid_args_blocks() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "rewrite.sh",
        "/bin/cat > /dev/null; echo '{\"decision\": \"replace\", \"args\": {\"title\": 5}}'",
    );
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    let reason = assert_blocked(&v, "before_tool_call[0] (rewrite.sh)");
    assert!(
        reason.contains("replaced the arguments with invalid ones"),
        "{reason}"
    );
    assert!(reason.contains("/title"), "{reason}");
    sb.assert_not_run();
    assert_eq!(sb.events("call")[0]["outcome"], "blocked");
}

#[test]
fn before_hook_block_decision_blocks_with_its_reason() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "block.sh",
        "/bin/cat > /dev/null; echo '{\"decision\": \"block\", \"reason\": \"no crashes today\"}'",
    );
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    let reason = assert_blocked(&v, "before_tool_call[0] (block.sh)");
    assert_eq!(reason, "no crashes today");
    assert_eq!(text(&v), "blocked: no crashes today");
    sb.assert_not_run();
    let blocked = sb.events("blocked");
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0]["by"], "before_tool_call[0] (block.sh)");
    assert_eq!(blocked[0]["reason"], "no crashes today");
    assert_eq!(sb.events("hook")[0]["decision"], "block");
    assert_eq!(sb.events("call")[0]["outcome"], "blocked");
}

#[test]
fn before_hook_block_without_reason_says_blocked() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "block.sh",
        "/bin/cat > /dev/null; echo '{\"decision\": \"block\"}'",
    );
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    assert_eq!(
        assert_blocked(&v, "before_tool_call[0] (block.sh)"),
        "blocked"
    );
    sb.assert_not_run();
}

#[test]
fn before_hook_exit_2_blocks_with_stderr_as_the_reason() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "veto.sh",
        "/bin/cat > /dev/null; echo 'policy says no' >&2; exit 2",
    );
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    assert_eq!(
        assert_blocked(&v, "before_tool_call[0] (veto.sh)"),
        "policy says no"
    );
    sb.assert_not_run();
}

#[test]
fn before_hook_exit_2_without_stderr_still_blocks() {
    let sb = Sandbox::new();
    let hook = sb.script("veto.sh", "exit 2");
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    assert_eq!(
        assert_blocked(&v, "before_tool_call[0] (veto.sh)"),
        "blocked"
    );
    sb.assert_not_run();
}

#[test]
fn before_hook_that_fails_blocks_naming_the_hook() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "broken.sh",
        "/bin/cat > /dev/null; echo 'lost my config' >&2; exit 1",
    );
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    let reason = assert_blocked(&v, "before_tool_call[0] (broken.sh)");
    assert!(
        reason.contains("before_tool_call[0] (broken.sh)"),
        "{reason}"
    );
    assert!(reason.contains("exit code 1"), "{reason}");
    assert!(reason.contains("lost my config"), "{reason}");
    sb.assert_not_run();
}

#[test]
fn before_hook_that_answers_non_json_blocks_naming_the_hook() {
    let sb = Sandbox::new();
    let hook = sb.script("chatty.sh", "/bin/cat > /dev/null; echo 'sure, go ahead'");
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    let reason = assert_blocked(&v, "before_tool_call[0] (chatty.sh)");
    assert!(
        reason.contains("before_tool_call[0] (chatty.sh)"),
        "{reason}"
    );
    assert!(reason.contains("not a decision"), "{reason}");
    sb.assert_not_run();
}

#[test]
fn before_hook_with_an_unknown_or_incomplete_answer_blocks() {
    for (body, needle) in [
        ("echo '{\"decision\": \"maybe\"}'", "maybe"),
        ("echo '{\"decision\": \"replace\"}'", "without `args`"),
        ("echo '{\"verdict\": \"pass\"}'", "not a decision"),
        ("echo 'null'", "not a decision"),
        ("echo '\"pass\"'", "not a decision"),
    ] {
        let sb = Sandbox::new();
        let hook = sb.script("odd.sh", &format!("/bin/cat > /dev/null; {body}"));
        let v = envelope(
            &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
            1,
        );
        let reason = assert_blocked(&v, "before_tool_call[0] (odd.sh)");
        assert!(reason.contains(needle), "{body}: {reason}");
        sb.assert_not_run();
    }
}

#[test]
fn before_hook_that_answers_a_json_array_blocks() {
    for body in ["echo '[]'", "echo '[\"pass\"]'"] {
        let sb = Sandbox::new();
        let hook = sb.script("odd.sh", &format!("/bin/cat > /dev/null; {body}"));
        let out = run(&mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)));
        assert_eq!(
            out.code, 1,
            "{body}: the call should be blocked\n{}",
            out.stdout
        );
        let v = out.json();
        let reason = assert_blocked(&v, "before_tool_call[0] (odd.sh)");
        assert!(reason.contains("not a decision"), "{body}: {reason}");
        sb.assert_not_run();
    }
}

#[test]
fn before_hook_that_times_out_blocks_naming_the_hook() {
    let sb = Sandbox::new();
    let hook = sb.script("stuck.sh", "/bin/sleep 30");
    let config = hooks("before_tool_call", &[&hook], 400);
    let out = run(&mut sb.call(Some(&config), "record", Some(TITLE_X)));
    assert!(out.elapsed < GENEROUS, "took {:?}", out.elapsed);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v = out.json();
    let reason = assert_blocked(&v, "before_tool_call[0] (stuck.sh)");
    assert!(
        reason.contains("before_tool_call[0] (stuck.sh)"),
        "{reason}"
    );
    assert!(reason.contains("timed out after 400 ms"), "{reason}");
    sb.assert_not_run();
}

#[test]
fn before_hook_that_cannot_start_blocks() {
    let sb = Sandbox::new();
    let config = "[[hooks.before_tool_call]]\ncommand = [\"/nonexistent/no-such-hook\"]\n";
    let v = envelope(&mut sb.call(Some(config), "record", Some(TITLE_X)), 1);
    let reason = assert_blocked(&v, "before_tool_call[0] (no-such-hook)");
    assert!(reason.contains("could not start"), "{reason}");
    assert!(reason.contains("/nonexistent/no-such-hook"), "{reason}");
    sb.assert_not_run();
}

#[test]
fn before_hook_that_is_not_executable_blocks() {
    let sb = Sandbox::new();
    let hook = sb.write("plain.sh", "#!/bin/sh\nexit 0\n");
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o644)).expect("chmod 644");
    let v = envelope(
        &mut sb.call(Some(&before(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    let reason = assert_blocked(&v, "before_tool_call[0] (plain.sh)");
    assert!(reason.contains("could not start"), "{reason}");
    sb.assert_not_run();
}

#[test]
fn the_second_before_hook_can_block_after_the_first_passes() {
    let sb = Sandbox::new();
    let first = sb.script("pass.sh", "/bin/cat > /dev/null");
    let second = sb.script(
        "block.sh",
        "echo '{\"decision\": \"block\", \"reason\": \"second says no\"}'",
    );
    let v = envelope(
        &mut sb.call(Some(&before(&[&first, &second])), "record", Some(TITLE_X)),
        1,
    );
    assert_eq!(
        assert_blocked(&v, "before_tool_call[1] (block.sh)"),
        "second says no"
    );
    sb.assert_not_run();
    let decisions: Vec<Value> = sb
        .events("hook")
        .iter()
        .map(|h| h["decision"].clone())
        .collect();
    assert_eq!(decisions, [json!("pass"), json!("block")]);
}

#[test]
fn a_blocking_hook_stops_the_hooks_after_it() {
    let sb = Sandbox::new();
    let first = sb.script(
        "block.sh",
        "echo '{\"decision\": \"block\", \"reason\": \"no\"}'",
    );
    let second = sb.script("seen.sh", "/bin/cat > '{dir}/hook-ran'");
    let v = envelope(
        &mut sb.call(Some(&before(&[&first, &second])), "record", Some(TITLE_X)),
        1,
    );
    assert_blocked(&v, "before_tool_call[0] (block.sh)");
    assert!(sb.read("hook-ran").is_none());
    sb.assert_not_run();
}

#[test]
fn hooks_do_not_run_for_an_unknown_tool() {
    let sb = Sandbox::new();
    let hook = sb.script("seen.sh", "/bin/cat > '{dir}/hook-ran'");
    err_json(
        &mut sb.call(Some(&before(&[&hook])), "no_such_tool", Some(TITLE_X)),
        1,
        "unknown-tool",
    );
    assert!(sb.read("hook-ran").is_none());
}

#[test]
fn hooks_get_only_the_variables_named_for_them() {
    let sb = Sandbox::new();
    let plain = sb.script("plain.sh", "/usr/bin/env > '{dir}/plain-env.txt'");
    let named = sb.script("named.sh", "/usr/bin/env > '{dir}/named-env.txt'");
    let config = format!(
        "{}[[hooks.before_tool_call]]\ncommand = [{}]\nenv = [\"TS_SECRET\"]\n",
        before(&[&plain]),
        quoted(named.to_str().expect("UTF-8"))
    );
    let mut cmd = sb.call(Some(&config), "record", Some(TITLE_X));
    cmd.env("TS_SECRET", "hunter2");
    envelope(&mut cmd, 0);
    let plain_env = sb.read("plain-env.txt").expect("first hook ran");
    let named_env = sb.read("named-env.txt").expect("second hook ran");
    assert!(!plain_env.contains("TS_SECRET"), "{plain_env}");
    assert!(!plain_env.contains("HOME="), "{plain_env}");
    assert!(
        named_env.lines().any(|l| l == "TS_SECRET=hunter2"),
        "{named_env}"
    );
}

#[test]
fn a_hook_without_a_program_is_bad_config() {
    let sb = Sandbox::new();
    let config = "[[hooks.before_tool_call]]\ncommand = []\n";
    let m = err_json(
        &mut sb.call(Some(config), "record", Some(TITLE_X)),
        2,
        "bad-config",
    );
    assert!(m.contains("hooks.before_tool_call[0].command"), "{m}");
    sb.assert_not_run();
}

// ---------------------------------------------------------------------------------------
// 6. After hooks
// ---------------------------------------------------------------------------------------

#[test]
fn after_hook_rewrites_the_content() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "redact.sh",
        "/bin/cat > /dev/null; echo '{\"content\": \"new text\"}'",
    );
    let v = envelope(&mut sb.call(Some(&after(&[&hook])), "json_out", None), 0);
    assert_eq!(text(&v), "new text");
    assert_eq!(details(&v), &json!({"n": 7}), "details kept");
    let hooks = sb.events("hook");
    assert_eq!(hooks[0]["phase"], "after_tool_call");
    assert_eq!(hooks[0]["hook"], "after_tool_call[0] (redact.sh)");
    assert_eq!(hooks[0]["decision"], "change");
}

#[test]
fn after_hook_that_keeps_changes_nothing() {
    let sb = Sandbox::new();
    let hook = sb.script("keep.sh", "/bin/cat > /dev/null; echo '{}'");
    let v = envelope(&mut sb.call(Some(&after(&[&hook])), "json_out", None), 0);
    assert_eq!(text(&v), "structured");
    assert_eq!(details(&v), &json!({"n": 7}));
    assert_eq!(sb.events("hook")[0]["decision"], "keep");
}

#[test]
fn after_hook_can_mark_the_result_an_error() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "judge.sh",
        "/bin/cat > /dev/null; echo '{\"is_error\": true}'",
    );
    let v = envelope(
        &mut sb.call(Some(&after(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    assert_eq!(v["result"]["is_error"], true);
    assert_eq!(text(&v), TITLE_X, "content kept");
    sb.assert_ran_with(TITLE_X);
    let calls = sb.events("call");
    assert_eq!(calls[0]["outcome"], "tool-error");
    assert_eq!(calls[0]["is_error"], true);
}

#[test]
fn after_hook_can_clear_an_error_and_replace_details() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "forgive.sh",
        "/bin/cat > /dev/null; echo '{\"is_error\": false, \"details\": {\"reviewed\": true}}'",
    );
    let v = envelope(&mut sb.call(Some(&after(&[&hook])), "fail_exit", None), 0);
    assert_eq!(details(&v), &json!({"reviewed": true}));
    assert!(text(&v).contains("exit code 3"), "{}", text(&v));
}

#[test]
fn after_hook_can_ask_to_stop_after_the_batch() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "stop.sh",
        "/bin/cat > /dev/null; echo '{\"stop_after_batch\": true}'",
    );
    let v = envelope(&mut sb.call(Some(&after(&[&hook])), "json_out", None), 0);
    assert_eq!(v["stop_after_batch"], true);
}

#[test]
fn after_hook_receives_the_result() {
    let sb = Sandbox::new();
    let hook = sb.script("audit.sh", "/bin/cat > '{dir}/after.json'");
    let v = envelope(
        &mut sb.call(Some(&after(&[&hook])), "json_out", Some(r#"{"q": 1}"#)),
        0,
    );
    let event: Value =
        serde_json::from_str(&sb.read("after.json").expect("hook saved stdin")).expect("JSON");
    assert_eq!(event["event"], "after_tool_call");
    assert_eq!(event["session"], SESSION);
    assert_eq!(event["call_id"], v["call_id"]);
    assert_eq!(event["tool"]["id"], "openclaw:core:json_out");
    assert_eq!(event["args"], json!({"q": 1}));
    assert_eq!(
        event["result"],
        json!({"content": [{"type": "text", "text": "structured"}], "details": {"n": 7}, "is_error": false})
    );
}

#[test]
fn a_failing_after_hook_marks_the_result_hook_failed() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "broken.sh",
        "/bin/cat > /dev/null; echo 'after went wrong' >&2; exit 1",
    );
    let v = envelope(
        &mut sb.call(Some(&after(&[&hook])), "record", Some(TITLE_X)),
        1,
    );
    assert_eq!(details(&v)["status"], "hook-failed");
    assert_eq!(details(&v)["hook"], "after_tool_call[0] (broken.sh)");
    assert!(
        text(&v).contains("after_tool_call[0] (broken.sh)"),
        "{}",
        text(&v)
    );
    assert!(text(&v).contains("after went wrong"), "{}", text(&v));
    // The tool ran; only its result is refused.
    sb.assert_ran_with(TITLE_X);
    let hooks = sb.events("hook");
    assert_eq!(hooks[0]["decision"], "error");
    assert_eq!(sb.events("call")[0]["outcome"], "tool-error");
}

#[test]
fn after_hooks_that_answer_non_json_or_time_out_mark_hook_failed() {
    let sb = Sandbox::new();
    let hook = sb.script("chatty.sh", "/bin/cat > /dev/null; echo 'looks fine'");
    let v = envelope(&mut sb.call(Some(&after(&[&hook])), "json_out", None), 1);
    assert_eq!(details(&v)["status"], "hook-failed");
    assert!(text(&v).contains("not a decision"), "{}", text(&v));

    let sb = Sandbox::new();
    let hook = sb.script("stuck.sh", "/bin/sleep 30");
    let config = hooks("after_tool_call", &[&hook], 400);
    let out = run(&mut sb.call(Some(&config), "json_out", None));
    assert!(out.elapsed < GENEROUS, "took {:?}", out.elapsed);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v = out.json();
    assert_eq!(details(&v)["status"], "hook-failed");
    assert_eq!(details(&v)["hook"], "after_tool_call[0] (stuck.sh)");
    assert!(text(&v).contains("timed out"), "{}", text(&v));
}

#[test]
fn after_hook_that_answers_a_json_array_is_hook_failed() {
    let sb = Sandbox::new();
    let hook = sb.script("odd.sh", "/bin/cat > /dev/null; echo '[\"rewritten\"]'");
    let out = run(&mut sb.call(Some(&after(&[&hook])), "json_out", None));
    assert_eq!(out.code, 1, "the result should be an error\n{}", out.stdout);
    let v = out.json();
    assert_eq!(details(&v)["status"], "hook-failed");
    assert_ne!(text(&v), "rewritten");
}

#[test]
fn after_hooks_chain_and_a_later_one_sees_the_rewrite() {
    let sb = Sandbox::new();
    let first = sb.script(
        "rewrite.sh",
        "/bin/cat > /dev/null; echo '{\"content\": \"first pass\"}'",
    );
    let second = sb.script("audit.sh", "/bin/cat > '{dir}/after.json'");
    let v = envelope(
        &mut sb.call(Some(&after(&[&first, &second])), "json_out", None),
        0,
    );
    assert_eq!(text(&v), "first pass");
    let event: Value =
        serde_json::from_str(&sb.read("after.json").expect("second ran")).expect("JSON");
    assert_eq!(event["result"]["content"][0]["text"], "first pass");
}

#[test]
fn after_hooks_do_not_run_for_a_blocked_call() {
    let sb = Sandbox::new();
    let hook = sb.script("seen.sh", "/bin/cat > '{dir}/hook-ran'");
    let config = format!("{APPROVE_RECORD}\n{}", after(&[&hook]));
    let v = envelope(&mut sb.call(Some(&config), "record", Some(TITLE_X)), 1);
    assert_blocked(&v, "approval");
    assert!(sb.read("hook-ran").is_none());
}

// ---------------------------------------------------------------------------------------
// 7. The command executor
// ---------------------------------------------------------------------------------------

#[test]
fn command_stdout_json_object_gives_text_and_details() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "json_out", None), 0);
    assert_eq!(text(&v), "structured");
    assert_eq!(details(&v), &json!({"n": 7}));
}

#[test]
fn command_stdout_json_can_mark_an_error() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "json_error", None), 1);
    assert_eq!(text(&v), "soft failure");
    assert_eq!(sb.events("call")[0]["outcome"], "tool-error");
}

#[test]
fn command_stdout_plain_text_is_the_text() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "plain_out", None), 0);
    assert_eq!(text(&v), "just words\n");
    assert_eq!(details(&v), &json!({}));
}

#[test]
fn command_stdin_is_the_args_json() {
    let sb = Sandbox::new();
    let args = r#"{"title":"Ünïcode \"quoted\"","count":2}"#;
    let v = envelope(&mut sb.call(None, "record", Some(args)), 0);
    assert_eq!(text(&v), args);
    sb.assert_ran_with(args);
}

#[test]
fn command_nonzero_exit_is_an_error_with_its_exit_code() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "fail_exit", None), 1);
    assert_eq!(details(&v)["status"], "failed");
    assert_eq!(details(&v)["exit_code"], 3);
    assert!(text(&v).contains("exit code 3"), "{}", text(&v));
    assert!(
        text(&v).contains("boom"),
        "stderr in the text: {}",
        text(&v)
    );
    let calls = sb.events("call");
    assert_eq!(calls[0]["outcome"], "tool-error");
    assert_eq!(calls[0]["is_error"], true);
}

#[test]
fn command_timeout_is_an_error_and_returns_promptly() {
    let sb = Sandbox::new();
    let out = run(&mut sb.call(None, "slow", None));
    assert!(out.elapsed < GENEROUS, "took {:?}", out.elapsed);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v = out.json();
    assert_eq!(v["result"]["is_error"], true);
    assert_eq!(details(&v)["status"], "timeout");
    assert!(text(&v).contains("timed out after 400 ms"), "{}", text(&v));
}

#[test]
fn command_timeout_also_kills_what_the_command_started() {
    let sb = Sandbox::new();
    let out = run(&mut sb.call(None, "slow_family", None));
    assert!(out.elapsed < GENEROUS, "took {:?}", out.elapsed);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(details(&out.json())["status"], "timeout");
    let pid = sb
        .read("child.pid")
        .expect("the tool wrote its child's pid")
        .trim()
        .to_string();
    assert!(!pid.is_empty());
    // Gone, or a zombie waiting to be reaped: either way no longer running.
    let stat = Path::new("/proc").join(&pid).join("stat");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive = fs::read_to_string(&stat).is_ok_and(|s| {
            let state = s.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        });
        if !alive {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the background child {pid} outlived the timeout"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn command_that_cannot_start_is_a_spawn_failure() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "missing_program", None), 1);
    assert_eq!(details(&v)["status"], "spawn-failed");
    assert!(
        text(&v).contains("/nonexistent/toolsearch-test-program"),
        "{}",
        text(&v)
    );
}

#[test]
fn command_gets_only_the_variables_named_in_env() {
    let sb = Sandbox::new();
    let mut cmd = sb.call(None, "env_plain", None);
    cmd.env("TS_SECRET", "hunter2");
    let v = envelope(&mut cmd, 0);
    assert!(!text(&v).contains("TS_SECRET"), "{}", text(&v));
    assert_eq!(text(&v), "", "an empty environment");

    let mut cmd = sb.call(None, "env_secret", None);
    cmd.env("TS_SECRET", "hunter2");
    let v = envelope(&mut cmd, 0);
    assert_eq!(text(&v), "TS_SECRET=hunter2\n", "only the named variable");
}

#[test]
fn a_named_variable_that_is_unset_is_not_passed() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "env_secret", None), 0);
    assert_eq!(text(&v), "");
}

#[test]
fn command_stdout_over_one_mib_is_output_too_large() {
    let sb = Sandbox::new();
    let out = run(&mut sb.call(None, "huge", None));
    assert!(out.elapsed < GENEROUS, "took {:?}", out.elapsed);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v = out.json();
    assert_eq!(details(&v)["status"], "output-too-large");
    assert!(text(&v).contains("1048576 bytes"), "{}", text(&v));
    assert!(out.stdout.len() < 16 * 1024, "the output is not echoed");
}

#[test]
fn progress_lines_on_stderr_become_progress_events() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "progress", None), 0);
    assert_eq!(text(&v), "done\n");
    let log = sb.log();
    let progress: Vec<&Value> = log.iter().filter(|e| e["event"] == "progress").collect();
    let messages: Vec<&str> = progress
        .iter()
        .map(|e| e["message"].as_str().expect("message"))
        .collect();
    assert_eq!(messages, ["step one", "step two"]);
    assert!(progress.iter().all(|e| e["call_id"] == v["call_id"]));
    let call_seq = log
        .iter()
        .find(|e| e["event"] == "call")
        .expect("a call event")["seq"]
        .as_u64()
        .expect("seq");
    assert!(
        progress
            .iter()
            .all(|e| e["seq"].as_u64().expect("seq") < call_seq),
        "progress is logged before the call ends"
    );
}

#[test]
fn every_progress_line_becomes_an_event_however_much_stderr_there_is() {
    let sb = Sandbox::new();
    envelope(&mut sb.call(None, "chatty_progress", None), 0);
    let messages: Vec<String> = sb
        .events("progress")
        .iter()
        .map(|e| e["message"].as_str().expect("message").to_string())
        .collect();
    let expected: Vec<String> = (1..=100)
        .map(|i| format!("step {i} of 100 ........."))
        .collect();
    assert_eq!(messages, expected);
}

/// A tool's progress lines are rate-bounded in the log like every event that records no
/// effect (review 20 F3: one call's 2 million lines rotated the log and took an earlier
/// call's record with them): the flood leaves at most the burst and says how many it left
/// out, and the calls that ran are all there.
#[test]
fn a_flood_of_progress_lines_cannot_push_calls_out_of_the_log() {
    let sb = Sandbox::new();
    envelope(&mut sb.call(None, "progress", None), 0);
    envelope(&mut sb.call(None, "progress_flood", None), 0);
    envelope(&mut sb.call(None, "progress", None), 0);
    let progress = sb.events("progress");
    assert!(progress.len() < 2_000, "{} progress events", progress.len());
    assert_eq!(sb.events("call").len(), 3);
    let flood_call = &sb.events("call")[1];
    assert!(
        flood_call["events_not_written"].as_u64().unwrap_or(0) > 0,
        "the flood's call says how many lines it left out: {flood_call}"
    );
}

#[test]
fn progress_reported_before_a_timeout_is_logged() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "progress_then_hang", None), 1);
    assert_eq!(details(&v)["status"], "timeout");
    let messages: Vec<Value> = sb
        .events("progress")
        .iter()
        .map(|e| e["message"].clone())
        .collect();
    assert_eq!(messages, [json!("started")]);
}

// ---------------------------------------------------------------------------------------
// 8. The session log
// ---------------------------------------------------------------------------------------

#[test]
fn the_log_holds_a_catalog_event_then_the_call() {
    let sb = Sandbox::new();
    let v = envelope(&mut sb.call(None, "record", Some(TITLE_X)), 0);
    let log = sb.log();
    assert!(log.len() >= 2, "{log:?}");
    assert_eq!(log[0]["event"], "catalog");
    assert_eq!(log[0]["seq"], 0);
    assert!(log[0]["cataloged"].as_u64().expect("cataloged") > 0);
    for (i, e) in log.iter().enumerate() {
        assert_eq!(e["session"], SESSION);
        assert_eq!(e["seq"], i as u64, "sequence numbers count up: {e}");
        assert!(e["ts_ms"].as_u64().is_some(), "{e}");
    }
    let calls: Vec<&Value> = log.iter().filter(|e| e["event"] == "call").collect();
    assert_eq!(calls.len(), 1);
    let call = calls[0];
    assert_eq!(call["id"], "openclaw:core:record");
    assert_eq!(call["call_id"], v["call_id"]);
    assert_eq!(call["source"], "openclaw");
    assert_eq!(call["source_name"], "core");
    assert_eq!(call["caller"], "cli");
    assert_eq!(call["parent"], Value::Null);
    assert_eq!(call["outcome"], "ok");
    assert_eq!(call["is_error"], false);
    let ms = call["duration_ms"]
        .as_f64()
        .expect("duration_ms is a number");
    assert!(ms >= 0.0 && ms < GENEROUS.as_millis() as f64, "{ms}");
    assert_eq!(
        log.last().expect("events")["event"],
        "call",
        "the call ends the run"
    );
}

#[test]
fn the_log_records_each_outcome() {
    let sb = Sandbox::new();
    envelope(&mut sb.call(None, "record", Some(TITLE_X)), 0);
    envelope(&mut sb.call(None, "fail_exit", None), 1);
    envelope(
        &mut sb.call(Some(APPROVE_RECORD), "record", Some(TITLE_X)),
        1,
    );
    err_json(&mut sb.call(None, "nope", None), 1, "unknown-tool");
    err_json(&mut sb.call(None, "twin", None), 1, "ambiguous-tool");
    err_json(
        &mut sb.call(None, "record", Some("{}")),
        1,
        "invalid-arguments",
    );
    let outcomes: Vec<Value> = sb
        .events("call")
        .iter()
        .map(|c| c["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        [
            json!("ok"),
            json!("tool-error"),
            json!("blocked"),
            json!("unknown-tool"),
            json!("ambiguous-tool"),
            json!("invalid-arguments")
        ]
    );
    assert!(sb.events("call").iter().all(|c| c["caller"] == "cli"));
}

#[test]
fn one_session_key_appends_to_one_file() {
    let sb = Sandbox::new();
    envelope(&mut sb.call(None, "record", Some(TITLE_X)), 0);
    envelope(&mut sb.call(None, "json_out", None), 0);
    let sessions: Vec<_> = fs::read_dir(sb.state().join("sessions"))
        .expect("the sessions folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(sessions, [format!("{SESSION}.jsonl")]);
    let log = sb.log();
    let kinds: Vec<&str> = log
        .iter()
        .map(|e| e["event"].as_str().expect("event"))
        .collect();
    assert_eq!(kinds, ["catalog", "call", "catalog", "call"]);
    assert_eq!(log[1]["id"], "openclaw:core:record");
    assert_eq!(log[3]["id"], "openclaw:core:json_out");
    // Each run numbers its own calls from 1.
    assert_eq!(untagged(&log[3]["call_id"]), "cli:direct:json_out:1");
}

#[test]
fn without_a_session_key_each_run_has_its_own_log() {
    let sb = Sandbox::new();
    let catalog = sb.catalog();
    for _ in 0..2 {
        let mut cmd = sb.with_state();
        cmd.arg("--catalog")
            .arg(&catalog)
            .args(["call", "json_out", "--json"]);
        envelope(&mut cmd, 0);
    }
    let files: Vec<PathBuf> = fs::read_dir(sb.state().join("sessions"))
        .expect("the sessions folder")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in files {
        let stem = f
            .file_stem()
            .expect("stem")
            .to_str()
            .expect("UTF-8")
            .to_string();
        let log = sb.log_of(&stem);
        assert_eq!(log[0]["event"], "catalog");
        assert_eq!(log[0]["session"], stem.as_str());
    }
}

#[test]
fn a_session_key_is_kept_to_a_safe_file_name() {
    let sb = Sandbox::new();
    let mut cmd = sb.with_state();
    cmd.args([
        "--session",
        "../escape/me",
        "call",
        "create_issue",
        TITLE_X,
        "--json",
    ]);
    envelope(&mut cmd, 0);
    assert!(!sb.path().join("escape").exists());
    let files: Vec<_> = fs::read_dir(sb.state().join("sessions"))
        .expect("sessions")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(!files[0].contains('/'), "{files:?}");
}

#[test]
fn an_unusable_state_dir_is_a_usage_error_and_nothing_runs() {
    let sb = Sandbox::new();
    let catalog = sb.catalog();
    let not_a_dir = sb.write("state-file", "");
    // Not `with_state`: this run's state directory is the file.
    let mut cmd = sb.cmd();
    cmd.arg("--state-dir")
        .arg(&not_a_dir)
        .arg("--catalog")
        .arg(&catalog)
        .args(["call", "record", TITLE_X, "--json"]);
    let m = err_json(&mut cmd, 2, "usage");
    assert!(m.contains("state directory"), "{m}");
    sb.assert_not_run();
}

#[test]
fn search_and_describe_write_their_events() {
    let sb = Sandbox::new();
    let out = run(sb.demo().args(["search", "create github issue", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let hits = out.json();
    let out = run(sb.demo().args(["describe", "create_issue", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = run(sb.demo().args(["describe", "no_such_tool", "--json"]));
    assert_eq!(out.code, 1, "{}", out.stderr);

    let log = sb.log();
    let kinds: Vec<&str> = log
        .iter()
        .map(|e| e["event"].as_str().expect("event"))
        .collect();
    assert_eq!(
        kinds,
        [
            "catalog", "search", "catalog", "describe", "catalog", "describe"
        ]
    );
    let search = &log[1];
    assert_eq!(search["query"], "create github issue");
    let hit_ids: Vec<Value> = hits
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["id"].clone())
        .collect();
    assert_eq!(search["ids"], Value::Array(hit_ids));
    assert!(
        search["ids"]
            .as_array()
            .expect("ids")
            .contains(&json!("openclaw:github:create_issue")),
        "{search}"
    );
    assert_eq!(log[3]["requested"], "create_issue");
    assert_eq!(log[3]["id"], "openclaw:github:create_issue");
    assert_eq!(log[5]["requested"], "no_such_tool");
    assert_eq!(log[5]["id"], Value::Null);
    assert_eq!(log[5]["error"], "unknown-tool");
}

#[test]
fn a_batch_search_writes_one_search_event_with_every_query() {
    let sb = Sandbox::new();
    let out = run(sb
        .demo()
        .args(["search", "create issue", "calendar event", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let searches = sb.events("search");
    assert_eq!(searches.len(), 1);
    let queries = searches[0]["queries"].as_array().expect("queries");
    assert_eq!(queries.len(), 2);
    assert_eq!(queries[0]["query"], "create issue");
    assert_eq!(queries[1]["query"], "calendar event");
    assert!(queries.iter().all(|q| q["ids"].is_array()));
}

// ---------------------------------------------------------------------------------------
// 9. Bounded results
// ---------------------------------------------------------------------------------------

#[test]
fn a_large_plain_text_result_is_cut_with_a_marker() {
    let sb = Sandbox::new();
    let out = run(&mut sb.call(None, "big_text", None));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = out.json();
    let t = text(&v);
    assert!(t.len() <= 64 * 1024, "{} bytes", t.len());
    assert!(
        t.starts_with("abcdefghijklmnopqrstuvwxyz\n"),
        "{}",
        &t[..40]
    );
    let marker = t.rfind("\n[result cut: ").expect("a cut marker");
    assert!(
        t[marker..].ends_with(" of 200000 bytes left out]"),
        "{}",
        &t[marker..]
    );
    assert!(out.stdout.len() < 80 * 1024, "the envelope is bounded too");
}

#[test]
fn a_large_after_hook_rewrite_is_bounded_too() {
    let sb = Sandbox::new();
    let hook = sb.script(
        "inflate.sh",
        "/bin/cat > /dev/null; printf '{\"content\": \"'; /usr/bin/yes x | /usr/bin/head -c 200000 | /usr/bin/tr -d '\\n'; printf '\"}'",
    );
    let v = envelope(&mut sb.call(Some(&after(&[&hook])), "json_out", None), 0);
    let t = text(&v);
    assert!(t.len() <= 64 * 1024, "{} bytes", t.len());
    assert!(
        t.contains("[result cut: "),
        "{}",
        &t[t.len().saturating_sub(80)..]
    );
}

/// A call whose executor began is in the session log even when its caller stops waiting:
/// a code-mode run that fires a call and returns ends while the tool is still running; the
/// tool has acted (its ledger line), and the log says so (`aborted`), so the log and the
/// telemetry's `call_count` agree.
#[test]
fn a_call_still_running_when_its_run_ends_is_logged_as_aborted() {
    let sb = Sandbox::new();
    let catalog = sb.write(
        "ledger.json",
        format!(
            r#"{{"tools": [{{"name": "ledger", "description": "append to a ledger", "executor": {{"kind": "command", "command": ["/bin/sh", "-c", "/bin/cat >> {dir}/ledger; /bin/sleep 5"], "timeout_ms": 20000}}}}]}}"#,
            dir = sb.dir_str()
        ),
    );
    let body = "openclaw.tools.call('ledger', {amount: 1000}).then(() => {});\n\
                const t = Date.now(); while (Date.now() - t < 3000) {}\n\
                return 'bye'";
    let out = run(sb.with_state().arg("--catalog").arg(&catalog).args([
        "--session",
        SESSION,
        "code",
        body,
        "--json",
    ]));
    let v = out.json();
    assert_eq!(v["value"], "bye", "{}", out.stdout);
    assert_eq!(v["telemetry"]["call_count"], 1);
    assert!(
        sb.read("ledger").is_some_and(|l| l.contains("1000")),
        "the tool did not start within 3 s"
    );
    let calls = sb.events("call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["outcome"], "aborted", "{calls:?}");
    assert_eq!(calls[0]["caller"], "code");
}

/// The run's telemetry counts what reached the dispatch path, and the dispatch path logs
/// all of it, refusals included: counts and log agree whatever the guest sends.
#[test]
fn a_run_s_telemetry_agrees_with_the_session_log() {
    let sb = Sandbox::new();
    let body = "const out = [];\n\
                for (const f of [() => openclaw.tools.search(42), () => openclaw.tools.search('x'.repeat(5000)),\n\
                                 () => openclaw.tools.search('issue'), () => openclaw.tools.describe(7),\n\
                                 () => openclaw.tools.describe('nope'), () => openclaw.tools.call(7, {}),\n\
                                 () => openclaw.tools.call('nope', {})]) {\n\
                  try { await f(); out.push('ok'); } catch (e) { out.push(e.code || 'error'); }\n\
                }\n\
                return out";
    let out = run(sb.demo().args(["code", body, "--json"]));
    let v = out.json();
    assert_eq!(v["ok"], true, "{}", out.stdout);
    let t = &v["telemetry"];
    for (event, count) in [
        ("search", "search_count"),
        ("describe", "describe_count"),
        ("call", "call_count"),
    ] {
        assert_eq!(
            sb.events(event).len() as u64,
            t[count].as_u64().unwrap(),
            "{event}: {:?} vs {}",
            sb.events(event),
            out.stdout
        );
    }
}

/// Calls, searches and describes a body leaves running when it returns are in the log as
/// many times as the telemetry counts them: unknown-id calls waiting for their suggestions
/// were counted and not logged (sandbox round 36 F2: 16 counted, 8 logged).
#[test]
fn work_a_body_leaves_running_is_logged_as_it_is_counted() {
    let sb = Sandbox::new();
    let body = "for (let i = 0; i < 16; i++) {\n\
                  openclaw.tools.call('nope_tool_' + i, {}).then(() => {}, () => {});\n\
                  openclaw.tools.describe('nope_tool_' + i).then(() => {}, () => {});\n\
                }\n\
                return 1";
    for _ in 0..3 {
        let out = run(sb.demo().args(["code", body, "--json"]));
        let v = out.json();
        assert_eq!(v["ok"], true, "{}", out.stdout);
        let t = &v["telemetry"];
        let logged = |event: &str| {
            let results = sb.events("code_result");
            let last = results.last().unwrap();
            // The events of this run: those before its `code_result`, after the one before.
            let log = sb.log_of(SESSION);
            let end = log.iter().position(|e| e == last).unwrap();
            let start = log[..end]
                .iter()
                .rposition(|e| e["event"] == "code")
                .unwrap();
            log[start..end]
                .iter()
                .filter(|e| e["event"] == event)
                .count() as u64
        };
        assert_eq!(
            logged("call"),
            t["call_count"].as_u64().unwrap(),
            "{}",
            out.stdout
        );
        assert_eq!(
            logged("describe"),
            t["describe_count"].as_u64().unwrap(),
            "{}",
            out.stdout
        );
        // Nothing of the run is logged after its end.
        let log = sb.log_of(SESSION);
        assert_eq!(
            log.last().unwrap()["event"],
            "code_result",
            "{:?}",
            log.last()
        );
    }
}

/// A run that ends while a call is still in its before-hook (which has seen the arguments)
/// leaves the call in the log as `aborted` at that stage, not nothing.
#[test]
fn a_call_stopped_in_its_before_hook_is_logged_with_its_stage() {
    let sb = Sandbox::new();
    let hook = sb.script("slow-hook.sh", "cat > {dir}/hook-saw; sleep 5; echo '{}'");
    let config = sb.write("hooks.toml", before(&[&hook]));
    let body = "openclaw.tools.call('record', {title: 'x'}).then(() => {});\n\
                const t = Date.now(); while (Date.now() - t < 3000) {}\n\
                return 'bye'";
    let out = run(sb
        .tools(None)
        .arg("--config")
        .arg(&config)
        .args(["code", body, "--json"]));
    let v = out.json();
    assert_eq!(v["value"], "bye", "{}", out.stdout);
    assert!(
        sb.read("hook-saw").is_some(),
        "the hook did not start within 3 s: {:?}",
        sb.log()
    );
    sb.assert_not_run();
    let calls = sb.events("call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["outcome"], "aborted", "{calls:?}");
    assert_eq!(calls[0]["stage"], "before-hooks", "{calls:?}");
    assert_eq!(v["telemetry"]["call_count"], 1);
}

/// What a guest chooses reaches a person made safe: in the terminal, no control character
/// acts (a body erased and forged the program's lines, set the title and wrote the
/// clipboard) and its lines continue indented; in the session log, an id that names no
/// tool is cut (64 KiB ids pushed a session's earlier events out of its log) and no raw C1
/// control is written (review 11 F1, F3).
#[test]
fn guest_text_reaches_the_terminal_and_the_log_made_safe() {
    let sb = Sandbox::new();
    let body = "console.log('x\\u001b[2K\\r\\u001b[1A[Log] fine\\n(0 searches)\\u001b]52;c;ZWNobw==\\u0007');\n\
                for (const id of ['\\u009b2J' + 'y'.repeat(60000), 'z'.repeat(60000)]) {\n\
                  try { await openclaw.tools.describe(id) } catch (e) {}\n\
                  try { await openclaw.tools.call(id, {}) } catch (e) {}\n\
                }\n\
                throw new Error('boom\\u001b[8mHIDDEN\\nerror [timeout]: fake')";
    let out = run(sb.demo().args(["code", body]));
    assert!(
        !out.stdout.contains('\u{1b}')
            && !out.stdout.contains('\r')
            && !out.stdout.contains('\u{7}'),
        "{:?}",
        out.stdout
    );
    assert!(out.stdout.contains("\\u{1b}[2K"), "{}", out.stdout);
    for line in out.stdout.lines() {
        assert!(
            !line.starts_with("error [timeout]") && !line.starts_with("(0 searches)"),
            "a guest line passed for the program's own: {:?}",
            out.stdout
        );
    }
    let log = std::fs::read_dir(sb.state().join("sessions"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect::<String>();
    assert!(!log.contains('\u{9b}'), "a raw C1 control in the log");
    for line in log.lines() {
        assert!(line.len() < 4096, "a log line of {} bytes", line.len());
    }
    assert_eq!(sb.events("describe").len(), 2);
    assert_eq!(sb.events("call").len(), 2);
}

/// Two calls of one body needing approval at once: one prompt on the terminal at a time,
/// and the answer typed under it is its own. With stdin locked only after printing, both
/// prompts showed, and the `y` typed under the last (a harmless read) approved the first
/// (a recursive delete) (review 16). Driven through a real terminal (a pty); the answers
/// are checked against the session log's decisions.
#[test]
fn concurrent_approval_prompts_are_asked_one_at_a_time() {
    let sb = Sandbox::new();
    let config = sb.write(
        "toolsearch.toml",
        "[[approvals]]\ntools = [\"openclaw:core:delete_file\", \"openclaw:core:read_file\"]\ntimeout_ms = 60000\n",
    );
    let body = r#"
const first = openclaw.tools.call("openclaw:core:delete_file", {path: "/home/user/important", recursive: true});
const t = Date.now(); while (Date.now() - t < 400) {}
const second = openclaw.tools.call("openclaw:core:read_file", {path: "README.md"});
await Promise.allSettled([first, second]);
return 1;
"#;
    // Waits for each prompt, says which tool it names, answers `n` to the first and `y`
    // to the second.
    let driver = r#"
import os, pty, re, select, sys, time
exe, config, state, session, body = sys.argv[1:6]
pid, fd = pty.fork()
if pid == 0:
    os.execv(exe, [exe, "--config", config, "--state-dir", state, "--session", session, "code", "--timeout-ms", "60000", body])
seen = b""
def read_for(seconds):
    global seen
    end = time.time() + seconds
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            if not data:
                return
            seen += data
def prompt(n):
    end = time.time() + 60
    while seen.count(b"needs approval") < n and time.time() < end:
        read_for(0.1)
    read_for(1.5)
    print("PROMPTS", n, seen.count(b"needs approval"))
    asked = re.findall(rb"`([^`]+)` needs approval", seen)
    print("ASKED", n, asked[-1].decode() if asked else "none")
prompt(1)
os.write(fd, b"n\n")
prompt(2)
os.write(fd, b"y\n")
read_for(5)
os.waitpid(pid, 0)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", driver])
        .arg(env!("CARGO_BIN_EXE_toolsearch"))
        .arg(&config)
        .arg(sb.state())
        .arg(SESSION)
        .arg(body)
        .output()
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout);
    // One prompt on the terminal before the first answer, the second only after it.
    assert!(text.contains("PROMPTS 1 1\n"), "{text}");
    assert!(text.contains("PROMPTS 2 2\n"), "{text}");
    let asked = |n: u8| {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("ASKED {n} ")))
            .unwrap_or_else(|| panic!("{text}"));
        line[format!("ASKED {n} ").len()..].to_string()
    };
    let (first, second) = (asked(1), asked(2));
    assert_ne!(first, second, "{text}");
    // Each decision is the one typed under its own prompt.
    let decisions: std::collections::HashMap<String, String> = sb
        .events("approval")
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap_or_default().to_string(),
                e["decision"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        decisions.get(&first).map(String::as_str),
        Some("deny"),
        "{first}: {decisions:?} {text}"
    );
    assert_eq!(
        decisions.get(&second).map(String::as_str),
        Some("allow"),
        "{second}: {decisions:?} {text}"
    );
}
