//! Finding and probing Node: `sandbox.node` in the config, else `TOOLSEARCH_NODE`, else
//! `node` on `PATH`; its version, and which permission flag it accepts (`--permission` from
//! 22.13, `--experimental-permission` before; the old name is gone in 24). Probed once per
//! process and path: a probe is one `node --FLAG --version` per candidate flag (~6 ms).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use parking_lot::Mutex;

use serde::Serialize;

/// A usable Node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeInfo {
    /// Canonical path of the binary (what Landlock lets execute).
    pub path: PathBuf,
    pub version: String,
    pub permission_flag: String,
}

/// Where the Node to use comes from, in order of precedence.
pub fn choose(configured: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = configured {
        return Ok(p.to_path_buf());
    }
    let named = std::env::var_os("TOOLSEARCH_NODE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("node"));
    // A bare name is looked up on PATH, like a shell would.
    if named.components().count() > 1 {
        return Ok(named);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(&named);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "no `{}` on PATH (set sandbox.node in the config or TOOLSEARCH_NODE)",
        named.display()
    ))
}

type ProbeCache = Mutex<HashMap<PathBuf, Result<NodeInfo, String>>>;

fn probes() -> &'static ProbeCache {
    static CACHE: OnceLock<ProbeCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Forgets what is known of `path` (this process's probe and the machine's cached one);
/// whether there was a cached one on disk to forget.
pub fn forget(path: &Path) -> bool {
    probes().lock().remove(path);
    let Ok(canonical) = std::fs::canonicalize(path) else {
        return false;
    };
    match super::cache::default_dir().zip(super::cache::binary_key(&canonical)) {
        Some((dir, key)) => super::cache::forget(&dir, "probe", &key),
        None => false,
    }
}

/// Probes `path`, once per process.
pub fn probe(path: &Path) -> Result<NodeInfo, String> {
    let cache = probes();
    if let Some(r) = cache.lock().get(path) {
        return r.clone();
    }
    let result = probe_uncached(path);
    cache.lock().insert(path.to_path_buf(), result.clone());
    result
}

/// From the machine's probe cache ([`super::cache`]) when this very binary was probed
/// before, else by running it.
fn probe_uncached(path: &Path) -> Result<NodeInfo, String> {
    let canonical =
        std::fs::canonicalize(path).map_err(|e| format!("node at {}: {e}", path.display()))?;
    let cached = super::cache::default_dir().zip(super::cache::binary_key(&canonical));
    if let Some((dir, key)) = &cached
        && let Some(info) = super::cache::load(dir, "probe", key, &canonical)
    {
        return Ok(info);
    }
    let info = run_probe(canonical)?;
    if let Some((dir, key)) = &cached {
        super::cache::store(dir, "probe", key, &info);
    }
    Ok(info)
}

fn run_probe(canonical: PathBuf) -> Result<NodeInfo, String> {
    let run = |flag: Option<&str>| {
        let mut cmd = Command::new(&canonical);
        if let Some(f) = flag {
            cmd.arg(f);
        }
        cmd.arg("--version")
            .env_clear()
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
    };
    let out = run(None).map_err(|e| format!("node at {}: cannot run: {e}", canonical.display()))?;
    if !out.status.success() {
        return Err(format!(
            "node at {}: `--version` failed",
            canonical.display()
        ));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    for flag in ["--permission", "--experimental-permission"] {
        if run(Some(flag)).is_ok_and(|o| o.status.success()) {
            return Ok(NodeInfo {
                path: canonical,
                version,
                permission_flag: flag.to_string(),
            });
        }
    }
    Err(format!(
        "node {version} at {} accepts neither --permission nor --experimental-permission (Node 20 or newer is needed)",
        canonical.display()
    ))
}
