//! Two `toolsearch` processes appending to one session log (`--session KEY`, a documented
//! use) while it rotates: the generation the first one sets aside is kept.
//!
//! The log is made just short of its bound with a sparse file, so the test writes a few
//! lines, not 64 MiB. The order of the two processes' events is the test's own: the first
//! process's tool waits for a file the test creates, so nothing depends on timing.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;
use toolsearch::telemetry::MAX_LOG_FILE_BYTES;

mod common;
use common::{BIN, GENEROUS, Guard, SCRUBBED_ENV, Sandbox, ok_json};

const SESSION: &str = "shared";

/// How far short of the bound the sparse generation stops: less than any one line.
const SHORT: u64 = 10;

/// `held` signals that it runs and waits for the test's `go`; `echo` answers at once.
const CATALOG: &str = r#"{"tools": [
  {"name": "held", "description": "Waits for the test.",
   "executor": {"kind": "command", "timeout_ms": 60000, "command": ["/bin/sh", "-c",
     "/usr/bin/touch '@DIR@/started'; while [ ! -e '@DIR@/go' ]; do /bin/sleep 0.01; done; echo held"]}},
  {"name": "echo", "description": "Answers at once.",
   "executor": {"kind": "fixture", "text": "echo"}}
]}"#;

impl Sandbox {
    fn state(&self) -> PathBuf {
        self.path().join("state")
    }

    fn log(&self) -> PathBuf {
        self.state().join(format!("sessions/{SESSION}.jsonl"))
    }

    /// The arguments of `call ID --json` in session [`SESSION`] on [`CATALOG`].
    fn call_args(&self, id: &str) -> Vec<String> {
        let catalog = self.write(
            "catalog/tools.json",
            CATALOG.replace("@DIR@", self.dir_str()),
        );
        [
            "--state-dir",
            self.state().to_str().expect("UTF-8"),
            "--catalog",
            catalog.to_str().expect("UTF-8"),
            "--session",
            SESSION,
            "call",
            id,
            "--json",
        ]
        .map(String::from)
        .to_vec()
    }
}

/// Waits (only a hang is a failure) until `path` exists.
fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < GENEROUS, "{} never came", path.display());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The tool ids of the `call` events in the log at `path`.
fn calls_in(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .expect("read the session log")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a log line is JSON"))
        .filter(|e| e["event"] == "call")
        .map(|e| e["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Process B holds the log open while process A's event takes it past the bound and sets
/// it aside; B's next event then goes to A's new file. B used to rotate it again on the
/// word of its own handle (the file A had set aside, past the bound): it moved A's new
/// file over the older generation, and that generation was gone.
#[test]
fn a_second_process_keeps_the_generation_the_first_set_aside() {
    let sb = Sandbox::new();
    let mut held = Command::new(BIN);
    held.current_dir(sb.path())
        .args(sb.call_args("held"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for var in SCRUBBED_ENV {
        held.env_remove(var);
    }
    let mut held = Guard(held.spawn().expect("start toolsearch"));
    // B's tool runs: B has opened the log and written its first events.
    wait_for(&sb.path().join("started"));
    fs::OpenOptions::new()
        .write(true)
        .open(sb.log())
        .expect("open the session log")
        .set_len(MAX_LOG_FILE_BYTES - SHORT)
        .expect("make the log sparse");

    ok_json(sb.cmd().args(sb.call_args("echo")));
    fs::write(sb.path().join("go"), "").expect("let the held tool end");
    let status = held.0.wait().expect("wait for toolsearch");
    assert!(status.success(), "{status}");

    let old = sb.state().join(format!("sessions/{SESSION}~old.jsonl"));
    assert_eq!(
        fs::metadata(&old).expect("the older generation").len(),
        MAX_LOG_FILE_BYTES - SHORT,
        "the generation set aside was replaced"
    );
    let calls = calls_in(&sb.log());
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        calls[0].ends_with("echo") && calls[1].ends_with("held"),
        "{calls:?}"
    );
}
