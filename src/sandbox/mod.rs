//! The Node child that runs a `tool_search_code` body: found and probed ([`node`]),
//! started with the permission model, an empty environment and the OS barriers
//! ([`barriers`], values in `sandbox-policy/default.toml`), spoken to over a socketpair
//! ([`protocol`]), and killed — its whole process group — after every run and at the
//! deadline.
//!
//! Building a sandbox probes Node and calibrates the barriers with real starts
//! (`calibrate.rs`); every child, a calibration's too, is started by one command
//! (`spawn.rs`); a run drives a ready child to its result or its deadline (`run.rs`).
//!
//! The sandbox only relays: each `bridge` frame goes to a [`Bridge`] (the dispatch path,
//! through `crate::code`), and it never decides policy itself.

pub mod barriers;
pub mod cache;
mod calibrate;
pub mod doctor;
pub mod node;
pub mod policy;
pub mod protocol;
mod run;
pub mod snapshot;
pub mod spares;
mod spawn;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use barriers::{BarrierStatus, Plan};
pub use node::NodeInfo;
pub use policy::SandboxPolicy;
use protocol::{BridgeMethod, LogLevel};
pub use run::Deadline;
pub use spawn::Child;

/// The program the child runs: from a startup snapshot built from it ([`snapshot`]), or
/// inline with `-e`; either way no file grant is needed.
pub const RUNTIME_JS: &str = include_str!("../../bridge-js/runtime.js");

/// A failed run, with one of the stable codes: `timeout`, `child-exited`, `protocol`,
/// `output-too-large`, `code-error`, `out-of-memory`, `unavailable`, `busy` (no slot for
/// a run in time), `cancelled` (the caller went away).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxError {
    pub code: &'static str,
    pub message: String,
}

impl SandboxError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        SandboxError {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// A bridge call the dispatch path refused or failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BridgeFailure {
    pub code: String,
    pub message: String,
}

/// A bridge call's answer as JSON text: made where the call's work is done (the dispatch
/// path's CPU-bound work runs on a blocking thread), so the run loop only copies it out.
pub type Answer = Box<serde_json::value::RawValue>;

/// `value` as an [`Answer`].
pub fn answer(value: &impl Serialize) -> Answer {
    // A value that does not serialize (a map with keys that are not strings) is none.
    serde_json::value::to_raw_value(value).unwrap_or_default()
}

pub type BridgeFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Answer, BridgeFailure>> + Send + 'a>>;

/// Where `openclaw.tools.*` calls go.
pub trait Bridge: Send + Sync + 'static {
    fn call(
        &self,
        method: BridgeMethod,
        args: Vec<Value>,
        cancel: CancellationToken,
    ) -> BridgeFuture<'_>;
}

/// One console line of the guest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogLine {
    pub level: LogLevel,
    pub text: String,
}

/// What a run gave: its value or its error, and every console line the guest wrote before
/// it ended. The logs are kept on failure too (a timeout, a thrown error, a dead child):
/// they are what a model needs to fix its code.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub outcome: Result<Value, SandboxError>,
    pub logs: Vec<LogLine>,
}

impl RunReport {
    /// A run that failed before its body ran (no slot, no child): nothing was logged.
    pub fn failed(error: SandboxError) -> Self {
        RunReport {
            outcome: Err(error),
            logs: Vec::new(),
        }
    }
}

/// A configured, calibrated sandbox.
pub struct Sandbox {
    node: NodeInfo,
    policy: SandboxPolicy,
    plan: Plan,
    args: Vec<String>,
    /// The runtime's startup snapshot, when V8 flags are used and the cache is usable.
    snapshot: Option<PathBuf>,
    /// Starts from the snapshot that died before `ready` in a row while inline starts
    /// worked, and whether this host has stopped using it for that (`spawn.rs`).
    snapshot_failures: AtomicU32,
    snapshot_refused: AtomicBool,
    /// Where this host's calibration is cached, and whether it came from there (then a
    /// child that cannot start removes it).
    calibration: Option<(PathBuf, String)>,
    calibrated_from_cache: bool,
    /// Slots for runs at once (`max_concurrent_runs`).
    runs: Arc<Semaphore>,
}

impl Sandbox {
    /// The sandbox a config asks for (`[sandbox] node` and `strict`), with the embedded
    /// policy: what every command and host that runs code builds.
    pub fn from_config(config: &crate::config::SandboxConfig) -> Result<Self, SandboxError> {
        let policy = SandboxPolicy::default_policy()
            .map_err(|e| SandboxError::new("unavailable", e.to_string()))?;
        Sandbox::new(config.node.as_deref(), policy, config.strict)
    }

    pub fn node(&self) -> &NodeInfo {
        &self.node
    }

    pub fn barriers(&self) -> &[BarrierStatus] {
        &self.plan.statuses
    }

    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// The snapshot the children start from, if any (`doctor` shows it): none once this
    /// host found Node refusing it.
    pub fn snapshot(&self) -> Option<&Path> {
        self.snapshot
            .as_deref()
            .filter(|_| !self.snapshot_refused.load(Ordering::Relaxed))
    }
}

/// Whether code mode can run: a usable Node, or why not. Cheap (two `node --version`
/// probes, cached); the full barrier calibration happens when a sandbox is built.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CodeModeStatus {
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

pub fn code_mode_status(configured_node: Option<&Path>) -> CodeModeStatus {
    match node::choose(configured_node).and_then(|p| node::probe(&p)) {
        Ok(info) => CodeModeStatus {
            available: true,
            node: Some(info),
            reason: None,
        },
        Err(reason) => CodeModeStatus {
            available: false,
            node: None,
            reason: Some(reason),
        },
    }
}
