//! A host process whose fd 3 is free: the Landlock ruleset the sandbox prepares then gets
//! fd 3, the very number the channel is moved to in the child. Once, restricting after that
//! move handed Landlock the socket: every spawn failed (EINVAL), and calibration took it for
//! a host that refuses Landlock and ran without it. Its own test binary, so closing fd 3
//! touches nothing else.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolsearch::sandbox::{Sandbox, SandboxPolicy};

mod common;
use common::Echo;

#[test]
fn with_fd_3_free_every_barrier_applies_and_runs_work() {
    // SAFETY: fd 3 of this test process is not used by anything here (one test, no
    // threads yet); closing an fd that is not open is harmless.
    unsafe {
        libc::close(3);
    }
    let sandbox = Sandbox::new(None, SandboxPolicy::default_policy().unwrap(), false)
        .expect("a sandbox on this machine");
    for b in sandbox.barriers() {
        assert!(b.applied, "{} not applied: {}", b.name, b.detail);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for _ in 0..3 {
        let out = rt
            .block_on(sandbox.run(
                "return await openclaw.tools.search('x')",
                Duration::from_secs(20),
                Arc::new(Echo),
            ))
            .outcome
            .expect("a run");
        assert_eq!(out[0], json!("x"));
    }
}
