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
}
