//! What the integration tests share: the binary under test, a temporary working folder
//! with a scrubbed `toolsearch` command, one run's outcome and the checks of its JSON, the
//! fixtures under `fixtures/tests/`, servers started on a free port, and an echoing bridge
//! for sandbox tests. Each test file is its own crate and uses what it needs (`mod
//! common;`), hence the `dead_code` allowance. Nothing here decides what a test checks:
//! the assertions made for every run (no panic, an error document's shape) are the ones
//! every caller wants.

#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use toolsearch::sandbox::protocol::BridgeMethod;
use toolsearch::sandbox::{Bridge, BridgeFuture};

/// The `toolsearch` binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_toolsearch");

/// Variables that the fixture catalogs' availability signals, the tests or logging read;
/// removed from every run of [`Sandbox::cmd`] and set only where a test needs one.
pub const SCRUBBED_ENV: &[&str] = &[
    "RUST_LOG",
    "TS_TEST_VAR",
    "TWILIO_TOKEN",
    "GITHUB_ADMIN_TOKEN",
    "TS_SECRET",
    "TS_CALL_NEVER_SET",
];

/// The keys of a compact descriptor, as search hits and the envelope's
/// `tool` carry it.
pub const COMPACT_KEYS: &[&str] = &[
    "id",
    "source",
    "source_name",
    "name",
    "label",
    "description",
    "input",
];

/// Far more than any run here needs; only catches a hang, never a slow machine.
pub const GENEROUS: Duration = Duration::from_secs(20);

/// A file under `fixtures/tests/`.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/tests")
        .join(rel)
}

/// A temporary working folder and the commands run in it. The commands a test file needs
/// beyond [`cmd`](Self::cmd) are methods it adds in an `impl Sandbox` of its own.
pub struct Sandbox {
    dir: TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("create a temporary folder"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn dir_str(&self) -> &str {
        self.path().to_str().expect("the temporary folder is UTF-8")
    }

    /// Writes a file (creating its folders) and returns its path.
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path().join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("create fixture folder");
        }
        fs::write(&path, contents).expect("write fixture file");
        path
    }

    /// `toolsearch` with this folder as its current directory and the [`SCRUBBED_ENV`]
    /// removed, so that neither the machine nor a stray `toolsearch.toml` changes the outcome.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.current_dir(self.path()).env("NO_COLOR", "1");
        for var in SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        cmd
    }
}

/// What one run gave.
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Runs to the end; asserts an exit code (not a signal), UTF-8 output and no panic.
pub fn run(cmd: &mut Command) -> Outcome {
    let started = Instant::now();
    let out = cmd.output().expect("run toolsearch");
    let elapsed = started.elapsed();
    let outcome = Outcome {
        code: out.status.code().expect("toolsearch exited by a signal"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
        elapsed,
    };
    assert!(
        !outcome.stderr.contains("panicked"),
        "toolsearch panicked:\n{}",
        outcome.stderr
    );
    outcome
}

/// Runs, asserts the exit code and returns the outcome with its stdout as JSON.
pub fn exit_json(cmd: &mut Command, exit: i32) -> (Outcome, Value) {
    let out = run(cmd);
    assert_eq!(
        out.code, exit,
        "exit code\nstdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    let v = out.json();
    (out, v)
}

/// Runs, asserts exit 0 and returns stdout as JSON.
pub fn ok_json(cmd: &mut Command) -> Value {
    exit_json(cmd, 0).1
}

/// Runs a `--json` command that must fail with an error document: asserts the exit code,
/// the error code, that stdout holds only `{"error": {"code", "message"}}` and that stderr
/// repeats the message. Returns the message.
pub fn err_json(cmd: &mut Command, exit: i32, code: &str) -> String {
    let (out, v) = exit_json(cmd, exit);
    let obj = v.as_object().expect("an error document is an object");
    assert_eq!(
        obj.keys().collect::<Vec<_>>(),
        ["error"],
        "only `error` at the top: {v}"
    );
    assert_eq!(v["error"]["code"], code, "{v}");
    let message = v["error"]["message"]
        .as_str()
        .expect("error.message is a string")
        .to_string();
    assert!(!message.is_empty());
    assert!(
        out.stderr.contains(message.trim_end()),
        "stderr should repeat the message\nmessage: {message}\nstderr: {}",
        out.stderr
    );
    message
}

/// A child killed when the test ends, passed or not.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` (a `toolsearch` server listening on port 0; its stdout is piped, its stderr
/// dropped) and waits for its `listening on URL` line. Returns it guarded, with the URL.
pub fn start_listening(cmd: &mut std::process::Command) -> (Guard, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start toolsearch");
    let stdout = child.stdout.take().expect("stdout is piped");
    // Guarded before the read, so a server that never prints is killed too.
    let guard = Guard(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the first line");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| panic!("no `listening on` line: {line:?}"))
        .to_string();
    (guard, url)
}

/// A bridge that answers every call with its arguments.
pub struct Echo;

impl Bridge for Echo {
    fn call(&self, _: BridgeMethod, args: Vec<Value>, _: CancellationToken) -> BridgeFuture<'_> {
        Box::pin(async move { Ok(toolsearch::sandbox::answer(&args)) })
    }
}

/// A call id without its dispatcher's random instance, which keeps ids of processes
/// writing one session log apart: `cli:direct.ab12cd34:x:1` -> `cli:direct:x:1`.
pub fn untagged(id: &serde_json::Value) -> String {
    let id = id.as_str().unwrap_or_default();
    let mut parts: Vec<&str> = id.splitn(3, ':').collect();
    if parts.len() == 3 {
        parts[1] = parts[1]
            .rsplit_once('.')
            .map_or(parts[1], |(parent, _)| parent);
    }
    parts.join(":")
}
