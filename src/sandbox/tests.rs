//! The run loop against real Node children: the runtime under back-pressure and load, and
//! forged children that break the protocol's bounds on purpose (what a guest that escaped
//! the vm could write on fd 3). Deadlines here are asserted as outcomes (`timeout`), with
//! wide time bounds: the exact overshoot is measured by `benches/code.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::protocol::{ChildFrame, Frame};
use super::spawn::remove_stale_workdirs;
use super::*;

fn sandbox() -> Arc<Sandbox> {
    static SANDBOX: std::sync::OnceLock<Arc<Sandbox>> = std::sync::OnceLock::new();
    Arc::clone(SANDBOX.get_or_init(|| {
        Arc::new(
            Sandbox::new(None, SandboxPolicy::default_policy().unwrap(), false)
                .expect("a sandbox on this machine"),
        )
    }))
}

/// Answers every call with `reply`, counting calls.
struct Echo {
    reply: Value,
    calls: AtomicUsize,
}

impl Echo {
    fn new(reply: Value) -> Arc<Self> {
        Arc::new(Echo {
            reply,
            calls: AtomicUsize::new(0),
        })
    }
}

impl Bridge for Echo {
    fn call(&self, _: BridgeMethod, _: Vec<Value>, _: CancellationToken) -> BridgeFuture<'_> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let reply = super::answer(&self.reply);
        Box::pin(async move { Ok(reply) })
    }
}

fn code_of(report: &RunReport) -> &'static str {
    match &report.outcome {
        Ok(_) => "ok",
        Err(e) => e.code,
    }
}

/// A child that says `ready`, waits for its `run` frame and then does `act(channel)`:
/// the protocol spoken by hand, as an escaped guest could.
const FORGED: &str = r#"
const net = require('net');
const channel = new net.Socket({ fd: 3, readable: true, writable: true });
let started = false;
channel.on('data', (chunk) => {
  if (started || !String(chunk).includes('\n')) return;
  started = true;
  act(channel);
});
channel.write('{"type":"ready"}\n');
"#;

async fn forged(act: &str, timeout: Duration) -> (RunReport, Duration) {
    let sandbox = sandbox();
    // The act is part of the script's text: the child may not compile strings.
    let script = format!("'use strict';\nfunction act(channel) {{ {act} }}\n{FORGED}");
    let mut child = sandbox
        .spawn_script(&script, &[], timeout)
        .expect("a forged child");
    match child.frames.next().await {
        Some(Ok(Frame {
            frame: ChildFrame::Ready {},
            ..
        })) => {}
        other => panic!("the forged child did not say ready: {other:?}"),
    }
    let started = Instant::now();
    let report = sandbox
        .run_on(
            child,
            "",
            crate::sandbox::Deadline::after(timeout),
            Echo::new(json!([])),
            CancellationToken::new(),
        )
        .await;
    (report, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parent_refuses_bridge_arguments_over_its_own_bound() {
    // 1.5 MB of arguments in one frame, under the frame limit: the child's own 64 KiB check
    // is skipped by writing the frame by hand.
    let (report, _) = forged(
        r#"channel.write(JSON.stringify({type:'bridge',id:1,method:'call',args:['x',{s:'a'.repeat(1500000)}]})+'\n')"#,
        Duration::from_secs(20),
    )
    .await;
    let Err(e) = &report.outcome else {
        panic!("{report:?}")
    };
    assert_eq!(e.code, "protocol", "{e}");
    assert!(
        e.message.contains("its arguments may have at most 65536"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parent_counts_bridge_calls_itself() {
    let (report, _) = forged(
        r#"let out=''; for (let i=1;i<=65;i++) out += JSON.stringify({type:'bridge',id:i,method:'describe',args:['x']})+'\n'; channel.write(out)"#,
        Duration::from_secs(20),
    )
    .await;
    let Err(e) = &report.outcome else {
        panic!("{report:?}")
    };
    assert_eq!(e.code, "protocol", "{e}");
    assert!(e.message.contains("more than 64 bridge calls"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_line_is_refused_at_the_frame_limit_not_at_the_deadline() {
    // 3 MB with no newline, then the child waits forever.
    let (report, took) = forged(
        r#"channel.write('{"type":"log","items":["' + 'x'.repeat(3000000)); setInterval(() => {}, 1000)"#,
        Duration::from_secs(30),
    )
    .await;
    let Err(e) = &report.outcome else {
        panic!("{report:?}")
    };
    assert_eq!(e.code, "protocol", "{e}");
    assert!(e.message.contains("limit is 2097152"), "{e}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parent_bounds_the_result_itself() {
    let (report, _) = forged(
        r#"channel.write(JSON.stringify({type:'result',ok:true,value:'v'.repeat(1200000)})+'\n'); setInterval(() => {}, 1000)"#,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(code_of(&report), "output-too-large", "{report:?}");
}

/// A frame whose error quotes multi-byte text is a `protocol` error, not a panic of the
/// host (sandbox round 27 F1: the cut of serde's message at byte 200 fell inside `é`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_frame_quoting_multibyte_text_ends_the_run_as_protocol() {
    let (report, _) = forged(
        r#"channel.write('{"type":"' + 'é'.repeat(100) + '"}\n'); setInterval(() => {}, 1000)"#,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(code_of(&report), "protocol", "{report:?}");
}

/// A guest error's message is held to the runtime's own bound by the parent too (sandbox
/// round 27 F2: a forged 2 MB message reached the caller whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parent_bounds_an_error_message_itself() {
    let (report, _) = forged(
        r#"channel.write(JSON.stringify({type:'result',ok:false,error:{code:'code-error',message:'é'.repeat(1000000),line:3}})+'\n'); setInterval(() => {}, 1000)"#,
        Duration::from_secs(20),
    )
    .await;
    let Err(e) = &report.outcome else {
        panic!("{report:?}")
    };
    assert_eq!(e.code, "code-error", "{e}");
    assert!(
        e.message.len() <= 16 * 1024 + 32,
        "{} bytes",
        e.message.len()
    );
    assert!(
        e.message.ends_with("(line 3)"),
        "{}",
        &e.message[e.message.len() - 20..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_is_read_from_how_the_child_died_not_from_its_stderr() {
    // V8's own words on stderr, then an ordinary exit: not an out-of-memory.
    let (report, _) = forged(
        r#"process.stderr.write('FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\n'); setTimeout(() => process.exit(1), 50)"#,
        Duration::from_secs(20),
    )
    .await;
    let Err(e) = &report.outcome else {
        panic!("{report:?}")
    };
    assert_eq!(e.code, "child-exited", "{e}");
    assert!(e.message.contains("exit code 1"), "{e}");
    // An abort, as V8 does at the heap cap.
    let (report, _) = forged("process.abort()", Duration::from_secs(20)).await;
    assert_eq!(code_of(&report), "out-of-memory", "{report:?}");
}

/// Starts `calls` bridge calls whose answers are never read (each 256 KiB, so the socket
/// fills), then blocks the child's thread in `Atomics.wait` or a busy loop.
fn unread_answers_body(calls: usize, then: &str) -> String {
    format!(
        "for (let i = 0; i < {calls}; i++) openclaw.tools.search('q' + i).then(() => {{}});\n\
         await null;\n{then}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_blocked_with_unread_answers_ends_as_timeout() {
    let sandbox = sandbox();
    let bridge = Echo::new(json!("a".repeat(256 * 1024)));
    for then in [
        "Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);",
        "for (;;) {}",
    ] {
        let started = Instant::now();
        let report = sandbox
            .run(
                &unread_answers_body(60, then),
                Duration::from_millis(1000),
                bridge.clone(),
            )
            .await;
        let took = started.elapsed();
        assert_eq!(code_of(&report), "timeout", "{then}: {report:?}");
        // Wide: the property is that the deadline ends the run, not a hang or a CPU limit.
        assert!(took < Duration::from_secs(4), "{then}: took {took:?}");
    }
    assert!(bridge.calls.load(Ordering::SeqCst) >= 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_kept_when_a_run_fails() {
    let sandbox = sandbox();
    for (body, code) in [
        (
            "console.log('before the throw'); throw new Error('boom');",
            "code-error",
        ),
        ("console.log('before the loop'); for (;;) {}", "timeout"),
        (
            "console.log('before the await loop'); await null; for (;;) {}",
            "timeout",
        ),
    ] {
        let report = sandbox
            .run(body, Duration::from_millis(1000), Echo::new(json!([])))
            .await;
        assert_eq!(code_of(&report), code, "{body}: {report:?}");
        assert_eq!(report.logs.len(), 1, "{body}: {report:?}");
        assert!(report.logs[0].text.starts_with("before the"), "{report:?}");
    }
}

/// 200 runs of 48 concurrent calls with 45 KB arguments each: the framing survives
/// every interleaving of reads, answers and the deadline arm (a hand-written line reader
/// inside `select!` dropped half-read lines here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_large_calls_never_break_the_framing() {
    let sandbox = sandbox();
    let body = "const big = 'x'.repeat(45000);\n\
        const all = [];\n\
        for (let i = 0; i < 48; i++) all.push(openclaw.tools.call('memory_store', {content: big + i}));\n\
        const got = await Promise.all(all);\n\
        return got.length;";
    let mut failures = Vec::new();
    let runs: Vec<_> = (0..200)
        .map(|_| {
            let sandbox = Arc::clone(&sandbox);
            async move {
                sandbox
                    .run(
                        body,
                        Duration::from_secs(30),
                        Echo::new(json!({"ok": true})),
                    )
                    .await
            }
        })
        .collect();
    // Two at a time: the machine has two cores.
    let mut runs = futures::stream::iter(runs).buffer_unordered(2);
    while let Some(report) = runs.next().await {
        match &report.outcome {
            Ok(v) if v == &json!(48) => {}
            other => failures.push(format!("{other:?}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}

#[test]
fn a_killed_host_s_working_directory_is_removed_by_the_next_host() {
    let tmp = tempfile::tempdir().unwrap();
    // No process has a pid this large (Linux's pid_max is at most 2^22).
    let stale = tmp.path().join("toolsearch-sandbox-99999999-a1b2c3");
    let live = tmp
        .path()
        .join(format!("toolsearch-sandbox-{}-d4e5f6", std::process::id()));
    let not_empty = tmp.path().join("toolsearch-sandbox-99999998-0a0b0c");
    for d in [&stale, &live, &not_empty] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(not_empty.join("kept"), b"someone's file").unwrap();
    remove_stale_workdirs(tmp.path());
    assert!(!stale.exists(), "the dead host's directory is gone");
    assert!(live.exists(), "a live host's directory stays");
    assert!(
        not_empty.join("kept").exists(),
        "nothing but an empty directory is removed"
    );
}

/// The name is this process's and unpredictable: another user who creates
/// `toolsearch-sandbox-<PID>-host` (or any name it can guess) first cannot switch code mode
/// off; the directory is this user's, private and empty.
#[test]
fn the_working_directory_has_a_name_no_one_can_take_first() {
    use std::os::unix::fs::MetadataExt;
    let squatted =
        std::env::temp_dir().join(format!("toolsearch-sandbox-{}-host", std::process::id()));
    let _ = std::fs::create_dir(&squatted);
    let _ = std::fs::write(squatted.join("planted"), b"x");
    let dir = super::spawn::empty_dir().expect("a working directory");
    let name = dir.file_name().unwrap().to_str().unwrap().to_string();
    let tail = name
        .strip_prefix(&format!("toolsearch-sandbox-{}-", std::process::id()))
        .expect("named after this process");
    assert!(tail.len() >= 6 && tail != "host", "{name}");
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    let _ = std::fs::remove_file(squatted.join("planted"));
    let _ = std::fs::remove_dir(&squatted);
}

/// The runtime without the isolate hooks (`[node] inner_hooks = false`, or a Node without
/// the internals): the triggers are removed instead, and the family still finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_hooks_no_stack_and_no_import_leave_the_outer_realm_unreachable() {
    let mut policy = SandboxPolicy::default_policy().unwrap();
    policy.node.inner_hooks = false;
    let sandbox = Sandbox::new(None, policy, false).expect("a sandbox without the hooks");
    // The kit's import trigger is left out: here a body with import() does not compile.
    let kit: String = include_str!("../../fixtures/tests/sandbox/realm-kit.js")
        .lines()
        .filter(|l| !l.trim_start().starts_with("import:"))
        .collect::<Vec<_>>()
        .join("\n");
    for mode in ["sync", "await", "chain"] {
        let body = format!(
            "const ESCAPED = (w) => 'ESC' + 'APED: ' + w;\n\
             const TRIGGERS = ['stack', 'typeErrorStack', 'capture', 'toStringOfError', 'rejectUnhandled', 'logAnError', 'bridgeCall'];\n\
             const MODE = '{mode}';\n{kit}"
        );
        let report = sandbox
            .run(&body, Duration::from_secs(30), Echo::new(json!([])))
            .await;
        let text = format!("{:?}", report.outcome);
        assert!(report.outcome.is_ok(), "{mode}: {text}");
        assert!(!text.contains("ESCAPED"), "{mode}: {text}");
        assert!(
            text.contains("held: no outer-realm object"),
            "{mode}: {text}"
        );
    }
    // import() is refused when the body compiles; the word elsewhere is fine.
    for (body, refused) in [
        ("return await import('fs')", true),
        ("return import /* c */ ('fs')", true),
        ("const f = () => import('fs'); return 1", true),
        ("return `${import('fs')}`", true),
        (
            "return ['import', /import/.source, {x: 1}['import']]",
            false,
        ),
        ("// import('fs')\nreturn 'import'", false),
    ] {
        let report = sandbox
            .run(body, Duration::from_secs(10), Echo::new(json!([])))
            .await;
        let said_import =
            matches!(&report.outcome, Err(e) if e.message.contains("import() is not available"));
        assert_eq!(said_import, refused, "{body}: {:?}", report.outcome);
    }
    // Runtime errors carry no line here (no stacks); the message is still there.
    let report = sandbox
        .run("null.x", Duration::from_secs(10), Echo::new(json!([])))
        .await;
    let Err(e) = &report.outcome else {
        panic!("{report:?}")
    };
    assert!(e.message.contains("Cannot read properties of null"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_hooks_runtime_errors_keep_their_line_and_stacks_show_only_guest_frames() {
    let sandbox = sandbox();
    let report = sandbox
        .run(
            "const a = 1;\nconsole.log(new Error('where').stack);\nnull.x;",
            Duration::from_secs(10),
            Echo::new(json!([])),
        )
        .await;
    let Err(e) = &report.outcome else {
        panic!("{report:?}")
    };
    assert!(e.message.ends_with("(line 3)"), "{e}");
    let stack = &report.logs[0].text;
    assert!(stack.contains("tool_search_code.js:2"), "{stack}");
    assert!(
        !stack.contains("node:") && !stack.contains(".cache"),
        "{stack}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_beyond_the_host_s_slots_wait_and_then_end_as_busy() {
    let mut policy = SandboxPolicy::default_policy().unwrap();
    policy.limits.max_concurrent_runs = 2;
    let sandbox = Arc::new(Sandbox::new(None, policy, false).expect("a sandbox"));
    // Two long runs hold both slots; two short-deadline runs wait for a slot, never get
    // one, and start no child.
    let long = |s: Arc<Sandbox>| async move {
        s.run("for (;;) {}", Duration::from_secs(4), Echo::new(json!([])))
            .await
    };
    let first = tokio::spawn(long(Arc::clone(&sandbox)));
    let second = tokio::spawn(long(Arc::clone(&sandbox)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let waiting = futures::future::join_all((0..2).map(|_| {
        let s = Arc::clone(&sandbox);
        async move {
            s.run(
                "return 1",
                Duration::from_millis(1000),
                Echo::new(json!([])),
            )
            .await
        }
    }))
    .await;
    for report in &waiting {
        assert_eq!(code_of(report), "busy", "{report:?}");
    }
    assert!(started.elapsed() >= Duration::from_millis(900));
    for handle in [first, second] {
        assert_eq!(code_of(&handle.await.unwrap()), "timeout");
    }
    // Slots come back: a run now gets one.
    let report = sandbox
        .run("return 1", Duration::from_secs(10), Echo::new(json!([])))
        .await;
    assert_eq!(report.outcome, Ok(json!(1)));

    // A run that waited most of its deadline for a slot has only what is left of it:
    // given the whole again, a 4 s run that waited 3.7 s ended after 7.7 s (review 11 F4).
    let first = tokio::spawn(long(Arc::clone(&sandbox)));
    let second = tokio::spawn(long(Arc::clone(&sandbox)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let late = sandbox
        .run("for (;;) {}", Duration::from_secs(4), Echo::new(json!([])))
        .await;
    assert!(["busy", "timeout"].contains(&code_of(&late)), "{late:?}");
    assert!(
        started.elapsed() < Duration::from_millis(6500),
        "{:?} for a 4 s deadline",
        started.elapsed()
    );
    for handle in [first, second] {
        handle.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_ends_at_once_and_keeps_its_logs() {
    let sandbox = sandbox();
    let child = sandbox.spawn(Duration::from_secs(20)).await.unwrap();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let report = sandbox
        .run_on(
            child,
            "console.log('started'); for (;;) {}",
            crate::sandbox::Deadline::after(Duration::from_secs(20)),
            Echo::new(json!([])),
            cancel,
        )
        .await;
    assert_eq!(code_of(&report), "cancelled", "{report:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(report.logs.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_run_in_linear_time_and_oversized_ones_are_refused() {
    let sandbox = sandbox();
    // 900 KB of comment: reassembled from ~14 chunks without rescanning.
    let body = format!("/*{}*/\nreturn 1", "x".repeat(900_000));
    let report = sandbox
        .run(&body, Duration::from_secs(20), Echo::new(json!([])))
        .await;
    assert_eq!(report.outcome, Ok(json!(1)), "{report:?}");
    let body = format!("/*{}*/\nreturn 1", "x".repeat(2_000_000));
    let report = sandbox
        .run(&body, Duration::from_secs(20), Echo::new(json!([])))
        .await;
    let Err(e) = &report.outcome else {
        panic!("{report:?}")
    };
    assert_eq!(e.code, "code-error");
    assert!(e.message.contains("the limit is 1048576"), "{e}");
}

/// A child holds no capability in any namespace, when the host is root too: with only a
/// network namespace, a root host's child kept every capability in the host's namespaces
/// (review 11 F5); it is in a user namespace of its own, where its uid maps to nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_holds_no_capability_and_has_its_own_user_namespace() {
    let sandbox = sandbox();
    let applied = sandbox
        .barriers()
        .iter()
        .any(|b| b.name == crate::sandbox::barriers::Barrier::NetworkNamespace && b.applied);
    assert!(
        applied,
        "the namespace barrier is not applied on this machine"
    );
    let child = sandbox.spawn(Duration::from_secs(10)).await.unwrap();
    let pid = child.process.id().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for field in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} in {status}"));
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
    // Its own user, network and IPC namespaces: the host's IPC namespace let native code
    // read and write another process's SysV shared memory (review 12).
    for kind in ["user", "net", "ipc"] {
        let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/{kind}")).unwrap();
        assert_ne!(ns(&pid.to_string()), ns("self"), "{kind}");
    }
    // A task limit of its own, set inside that namespace (native code made 8,000 threads,
    // review 13): binding where the host is not root, whatever the user's other processes.
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let tasks = limits
        .lines()
        .find(|l| l.starts_with("Max processes"))
        .unwrap_or_else(|| panic!("no task limit in {limits}"));
    assert_eq!(
        tasks.split_whitespace().collect::<Vec<_>>()[2..4],
        ["64", "64"],
        "{tasks}"
    );
    child.process.kill_now_reap_later();
}

/// Slowness is not refusal (review 19): starts that never get ready in time keep every
/// barrier the host applies (a third start that happened to be quick without one switched
/// that barrier off for the process), and a child not ready in time is a `timeout`, which
/// leaves a cached calibration alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_starts_switch_no_barrier_off() {
    let applied = |s: &Sandbox| -> Vec<String> {
        s.barriers()
            .iter()
            .filter(|b| b.applied)
            .map(|b| b.name.to_string())
            .collect()
    };
    let expected = applied(&sandbox());
    let mut policy = SandboxPolicy::default_policy().unwrap();
    policy.limits.startup_timeout_ms = 1;
    let slow = tokio::task::spawn_blocking(move || Sandbox::new(None, policy, false))
        .await
        .unwrap()
        .expect("a sandbox whose starts are only slow");
    assert_eq!(applied(&slow), expected);
    let e = slow
        .spawn(Duration::from_secs(5))
        .await
        .err()
        .expect("not ready in 1 ms");
    assert_eq!(e.code, "timeout", "{e}");
}
