//! The probe and calibration cache (`src/sandbox/cache.rs`) from the outside: a one-shot
//! `toolsearch code` fills it, uses it, and recovers from an entry that is wrong.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;

fn code(cache: &Path, state: &Path) -> Value {
    let out = Command::new(common::BIN)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("RUST_LOG")
        .arg("--state-dir")
        .arg(state)
        .args(["code", "return 6 * 7", "--json"])
        .output()
        .expect("run toolsearch");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn entries(dir: &Path, kind: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(kind) && n.ends_with(".json"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_cache_is_filled_used_and_heals_from_a_wrong_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let (cache, state) = (tmp.path().join("cache"), tmp.path().join("state"));
    assert_eq!(code(&cache, &state)["value"], 42);
    let hosts = cache.join("toolsearch/hosts");
    let probes = entries(&hosts, "probe-");
    assert_eq!(probes.len(), 1, "one probe entry");
    assert_eq!(
        entries(&hosts, "calibration-").len(),
        1,
        "one calibration entry"
    );
    // A probe entry naming the other permission flag (one this Node refuses, or one it
    // accepts but was not probed with): the next run probes again and works.
    let text = std::fs::read_to_string(&probes[0]).unwrap();
    let flipped = if text.contains("\"--permission\"") {
        text.replace("\"--permission\"", "\"--experimental-permission\"")
    } else {
        text.replace("\"--experimental-permission\"", "\"--permission\"")
    };
    assert_ne!(text, flipped);
    std::fs::write(&probes[0], &flipped).unwrap();
    assert_eq!(
        code(&cache, &state)["value"],
        42,
        "a wrong probe entry heals"
    );
    assert_eq!(code(&cache, &state)["value"], 42);
    // Garbage in both: refused as entries, probed and calibrated again.
    for p in entries(&hosts, "") {
        std::fs::write(&p, b"{not json").unwrap();
    }
    assert_eq!(
        code(&cache, &state)["value"],
        42,
        "garbage entries are ignored"
    );
}
