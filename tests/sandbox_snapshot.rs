//! The startup snapshot as a host uses it: built in the cache directory at first use,
//! children started from it, and a blob that changes or goes away under a running host
//! costs that host its snapshot, not its runs. Its own test binary, so the cache directory
//! can be pointed at a temporary one before anything reads it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolsearch::sandbox::{Sandbox, SandboxPolicy};

mod common;
use common::Echo;

#[test]
fn children_start_from_the_snapshot_and_survive_it_being_replaced_or_removed() {
    let cache = tempfile::tempdir().unwrap();
    // SAFETY: the only test of this binary, before any thread that reads the environment.
    unsafe {
        std::env::set_var("XDG_CACHE_HOME", cache.path());
    }
    let sandbox = Sandbox::new(None, SandboxPolicy::default_policy().unwrap(), false)
        .expect("a sandbox on this machine");
    for b in sandbox.barriers() {
        assert!(b.applied, "{} not applied: {}", b.name, b.detail);
    }
    let blob = sandbox.snapshot().expect("a snapshot").to_path_buf();
    assert!(blob.starts_with(cache.path()), "{}", blob.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let run = || {
        rt.block_on(sandbox.run(
            "return await openclaw.tools.search('x')",
            Duration::from_secs(20),
            Arc::new(Echo),
        ))
        .outcome
    };
    assert_eq!(run().expect("a run from the snapshot")[0], json!("x"));
    // Another inode at the same path (as if rebuilt by someone else), then no file at all.
    let copy = blob.with_extension("copy");
    std::fs::copy(&blob, &copy).unwrap();
    std::fs::rename(&copy, &blob).unwrap();
    assert_eq!(run().expect("a run after the blob changed")[0], json!("x"));
    std::fs::remove_file(&blob).unwrap();
    assert_eq!(run().expect("a run after the blob went")[0], json!("x"));
    drop(sandbox);

    // A blob damaged where its length does not show (zeros, as a power cut may leave):
    // a run that dies on it is `child-exited`, not `out-of-memory` (no guest code ran);
    // the next host that calibrates finds Node refusing it, sets it aside and starts
    // inline; the host after that builds it again (review 25 F2: the damaged blob was
    // kept for good, each host paying a failed start).
    let host = || Sandbox::new(None, SandboxPolicy::default_policy().unwrap(), false).unwrap();
    let run_on = |sandbox: &Sandbox| {
        rt.block_on(sandbox.run(
            "return await openclaw.tools.search('x')",
            Duration::from_secs(20),
            Arc::new(Echo),
        ))
        .outcome
    };
    let rebuilt = host();
    let blob = rebuilt
        .snapshot()
        .expect("a snapshot built again")
        .to_path_buf();
    assert_eq!(run_on(&rebuilt).expect("a run")[0], json!("x"));
    drop(rebuilt);
    let len = std::fs::metadata(&blob).unwrap().len();
    std::fs::write(&blob, vec![0u8; len as usize]).unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let sandbox = host();
        outcomes.push(match run_on(&sandbox) {
            Ok(v) => v[0].to_string(),
            Err(e) => e.code.to_string(),
        });
    }
    assert!(
        !outcomes.iter().any(|o| o == "out-of-memory"),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes.last().map(String::as_str),
        Some("\"x\""),
        "{outcomes:?}"
    );
    let last = host();
    let again = last.snapshot().expect("the snapshot built again");
    let bytes = std::fs::read(again).unwrap();
    assert!(
        bytes.iter().any(|b| *b != 0),
        "the zeroed blob is still used"
    );
    assert_eq!(
        run_on(&last).expect("a run from the new blob")[0],
        json!("x")
    );

    // The same damage under a host that is running: its runs are served inline, it stops
    // using the blob after the second refusal, and sets it aside for the next host to build
    // again (review 26 F3: every run of a long-lived host failed after its spares).
    let blob = again.to_path_buf();
    let len = std::fs::metadata(&blob).unwrap().len();
    std::fs::write(&blob, vec![0u8; len as usize]).unwrap();
    for i in 0..4 {
        assert_eq!(
            run_on(&last).unwrap_or_else(|e| panic!("run {i} on the damaged blob: {e}"))[0],
            json!("x")
        );
    }
    assert_eq!(last.snapshot(), None, "the refused blob is still used");
    assert!(!blob.exists(), "the refused blob was not set aside");
    drop(last);
    let next = host();
    let fresh = next.snapshot().expect("the snapshot built again");
    assert!(std::fs::read(fresh).unwrap().iter().any(|b| *b != 0));
    assert_eq!(run_on(&next).expect("a run")[0], json!("x"));

    // Something else put at the blob's path under a running host — a link (whose target a
    // child's Landlock rule was made from, so a link to `/` let every later child read the
    // whole filesystem), a FIFO (Node waited on it to the startup timeout, every run), a
    // folder: never started from; the host goes inline at once and takes it away (sandbox
    // round 28 F1, F2, F5).
    drop(next);
    let fifo = |p: &std::path::Path| {
        let status = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(status.success());
    };
    for kind in ["link", "fifo", "folder"] {
        let sandbox = host();
        let blob = sandbox.snapshot().expect("a snapshot").to_path_buf();
        std::fs::remove_file(&blob).unwrap();
        match kind {
            "link" => std::os::unix::fs::symlink("/", &blob).unwrap(),
            "fifo" => fifo(&blob),
            _ => std::fs::create_dir(&blob).unwrap(),
        }
        // (A FIFO ended the run as `timeout`, at the startup timeout.)
        assert_eq!(run_on(&sandbox).expect(kind)[0], json!("x"), "{kind}");
        assert_eq!(sandbox.snapshot(), None, "{kind} still used");
        assert!(
            std::fs::symlink_metadata(&blob).is_err(),
            "{kind} left in the cache"
        );
        let names: Vec<String> = std::fs::read_dir(blob.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".aside")), "{names:?}");
    }

    // A blob that cannot be opened this once (this process out of descriptors) is left
    // alone: only what is at its path decides (sandbox round 29: a host short of
    // descriptors set the shared blob aside, and every host went inline).
    let sandbox = host();
    let blob = sandbox.snapshot().expect("a snapshot").to_path_buf();
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on this process's own limits, restored below.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    // The limit is on descriptor numbers: the lowest free one, taken and given back, is the
    // next any open gets, and the limit set to it leaves none.
    let lowest_free = {
        use std::os::fd::AsRawFd;
        std::fs::File::open("/dev/null").unwrap().as_raw_fd() as u64
    };
    let starved = libc::rlimit {
        rlim_cur: lowest_free,
        ..limit
    };
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &starved) };
    let starved_run = run_on(&sandbox);
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert!(
        starved_run.is_err(),
        "a run with no descriptor to spare: {starved_run:?}"
    );
    assert!(
        blob.exists(),
        "the blob was set aside for want of a descriptor"
    );
    assert_eq!(sandbox.snapshot(), Some(blob.as_path()));
    assert_eq!(run_on(&sandbox).expect("a run after")[0], json!("x"));
}
