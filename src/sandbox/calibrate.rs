//! Building a [`Sandbox`]: Node found and probed, the flags that shape the runtime, the
//! startup snapshot, and the barriers calibrated with real starts — a barrier this host
//! refuses is found by starting without each in turn, then switched off and reported (or,
//! with `strict`, the sandbox is unavailable). A calibration that switched nothing off is
//! cached per host ([`cache`]), so later hosts skip the starts.
//!
//! May call `spawn.rs` for the one child command; never runs guest code.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::barriers::{Barrier, Plan};
use super::protocol::{self, ChildFrame};
use super::spawn::{Entry, empty_dir};
use super::{RUNTIME_JS, Sandbox, SandboxError, SandboxPolicy, cache, node, snapshot};

impl Sandbox {
    /// Finds and probes Node, prepares the barriers and calibrates them with one real
    /// start: a barrier the host refuses is switched off and reported (or, with `strict`,
    /// the sandbox is unavailable).
    pub fn new(
        node: Option<&Path>,
        policy: SandboxPolicy,
        strict: bool,
    ) -> Result<Self, SandboxError> {
        match Self::build(node, policy.clone(), strict) {
            Ok(sandbox) => Ok(sandbox),
            Err(e) => {
                // A cached probe may be what is wrong (a flag this Node refuses): forget it
                // and try once more from scratch, so a bad entry never sticks.
                let path = node::choose(node).map_err(|m| SandboxError::new("unavailable", m))?;
                if node::forget(&path) {
                    tracing::warn!("sandbox: {e}; probing node again");
                    Self::build(node, policy, strict)
                } else {
                    Err(e)
                }
            }
        }
    }

    fn build(
        node: Option<&Path>,
        policy: SandboxPolicy,
        strict: bool,
    ) -> Result<Self, SandboxError> {
        let path = node::choose(node).map_err(|m| SandboxError::new("unavailable", m))?;
        let info = node::probe(&path).map_err(|m| SandboxError::new("unavailable", m))?;
        let plan = Plan::new(&policy, &info.path);
        // A sandbox that cannot make its children's working directory is unavailable now,
        // not at its first spawn.
        empty_dir().map_err(|e| SandboxError::new("unavailable", e))?;
        // The flags that shape the runtime at start: they key the startup snapshot and are
        // given to its builder too. No code generation from strings in the outer realm
        // either, so an outer Function that reached a guest could compile nothing; the
        // internals, so the runtime can make its inner functions the isolate's
        // prepareStackTrace and import() callbacks (bridge-js/runtime.js, "The outer
        // realm"); the heap cap; the policy's extras.
        let mut v8_flags = vec!["--disallow-code-generation-from-strings".to_string()];
        if policy.node.inner_hooks {
            v8_flags.push("--expose-internals".to_string());
        }
        if policy.node.max_old_space_mib > 0 {
            v8_flags.push(format!(
                "--max-old-space-size={}",
                policy.node.max_old_space_mib
            ));
        }
        v8_flags.extend(policy.node.extra_flags.iter().cloned());
        // --experimental-vm-modules makes Node call the script's importModuleDynamically
        // callback, which rejects import() with an inner error: a belt under the isolate
        // hook and the compile-time refusal of import() (without either, Node rejected with
        // an outer-realm error, an escape found by the escape suite).
        let mut args = vec![
            info.permission_flag.clone(),
            "--no-warnings".to_string(),
            "--experimental-vm-modules".to_string(),
        ];
        args.extend(v8_flags.iter().cloned());
        let snapshot = match snapshot::default_dir() {
            Some(dir) if policy.node.snapshot && !v8_flags.is_empty() => {
                match snapshot::ensure(&dir, &info, &v8_flags, RUNTIME_JS) {
                    Ok(blob) => Some(blob),
                    Err(e) => {
                        tracing::warn!("sandbox: no startup snapshot ({e}); starting inline");
                        None
                    }
                }
            }
            _ => None,
        };
        let policy_runs = policy.limits.max_concurrent_runs.max(1);
        let calibration =
            cache::default_dir()
                .zip(cache::binary_key(&info.path))
                .map(|(dir, binary)| {
                    let key = cache::host_key(
                        &binary,
                        &format!("{policy:?} strict={strict}"),
                        RUNTIME_JS,
                        snapshot.as_deref(),
                    );
                    (dir, key)
                });
        let mut sandbox = Sandbox {
            node: info,
            policy,
            plan,
            args,
            snapshot,
            snapshot_failures: AtomicU32::new(0),
            snapshot_refused: AtomicBool::new(false),
            calibration,
            calibrated_from_cache: false,
            runs: Arc::new(Semaphore::new(policy_runs)),
        };
        if let Some((dir, key)) = &sandbox.calibration
            && cache::load(dir, "calibration", key, &sandbox.node.path).as_ref()
                == Some(&sandbox.node)
        {
            sandbox.calibrated_from_cache = true;
            return Ok(sandbox);
        }
        let refused_before = sandbox.refused();
        let snapshot_before = sandbox.snapshot.is_some();
        sandbox.calibrate(strict)?;
        // Only a calibration that switched nothing off is kept: a cached entry can then
        // never be the reason a barrier is missing.
        if sandbox.refused() == refused_before
            && sandbox.snapshot.is_some() == snapshot_before
            && let Some((dir, key)) = &sandbox.calibration
        {
            cache::store(dir, "calibration", key, &sandbox.node);
        }
        Ok(sandbox)
    }

    /// Whether a child of `plan` starts and says `ready`: the runtime itself, from the
    /// snapshot when `snapshot` (so a blob Node refuses is found here, not in a run).
    fn try_start(&self, plan: &Plan, snapshot: bool) -> Result<(), String> {
        self.start_once(plan, snapshot).map_err(|f| f.message)
    }

    /// The same, saying whether a start that failed was refused (the child exited) or
    /// only slow (still running at the startup timeout): slowness says nothing about a
    /// barrier.
    fn start_once(&self, plan: &Plan, snapshot: bool) -> Result<(), StartFailure> {
        let failed = |message: String| StartFailure {
            message,
            slow: false,
        };
        let file = match (&self.snapshot, snapshot) {
            (Some(blob), true) => Some(super::snapshot::open(blob).map_err(failed)?),
            _ => None,
        };
        let (entry, blob) = match (&self.snapshot, &file) {
            (Some(blob), Some(file)) => (Entry::Snapshot(blob, file), Some(file)),
            _ => (Entry::Inline(RUNTIME_JS, &[]), None),
        };
        let (mut cmd, parent, child_end) = self
            .command(entry, plan.prepare(5, blob).map_err(failed)?)
            .map_err(|e| failed(e.to_string()))?;
        let mut process = cmd.spawn().map_err(|e| failed(e.to_string()))?;
        drop(child_end);
        let startup = Duration::from_millis(self.policy.limits.startup_timeout_ms);
        let _ = parent.set_read_timeout(Some(startup));
        let mut line = Vec::new();
        let read = std::io::BufRead::read_until(
            &mut std::io::BufReader::new(std::io::Read::take(&parent, 4096)),
            b'\n',
            &mut line,
        );
        let ready =
            read.is_ok() && matches!(protocol::decode(&line, 4096), Ok(ChildFrame::Ready {}));
        let timed_out = read.as_ref().is_err_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        });
        let slow = timed_out && matches!(process.try_wait(), Ok(None));
        // The child is its own group leader only if setsid applied: kill it by pid.
        let _ = process.kill();
        let out = process
            .wait_with_output()
            .map_err(|e| failed(e.to_string()))?;
        drop(parent);
        if ready {
            return Ok(());
        }
        if slow {
            return Err(StartFailure {
                message: format!("node was not ready within {} ms", startup.as_millis()),
                slow: true,
            });
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        Err(failed(if err.is_empty() {
            format!("node exited with {} before `ready`", out.status)
        } else {
            format!("node exited with {}: {err}", out.status)
        }))
    }

    /// One real start with every barrier; if that fails, finds the barrier the host
    /// refuses by starting without each in turn. A snapshot that fails where an inline
    /// start works is not used.
    ///
    /// A barrier is switched off only on evidence that it is refused, never on slowness
    /// (review 19: two starts slowed past their timeout by load, then a third that started
    /// without the address-space limit, switched that limit off for the process): starts
    /// that were only slow keep every barrier, and a barrier whose absence let a child start
    /// is switched off only if the whole plan still fails right after.
    fn calibrate(&mut self, strict: bool) -> Result<(), SandboxError> {
        let first = match self.start_once(&self.plan, true) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        // Once more as it is: a start slowed past its timeout on a loaded host is not a
        // refused barrier, and switching one off is for the rest of the process.
        let second = match self.start_once(&self.plan, true) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if first.slow && second.slow {
            tracing::warn!(
                "sandbox: node starts slowly here ({}); every barrier kept",
                first.message
            );
            return Ok(());
        }
        let first = first.message;
        if self.snapshot.is_some() && self.try_start(&self.plan, false).is_ok() {
            tracing::warn!(
                "sandbox: node refused the startup snapshot ({first}); starting inline, and it is built again by the next host"
            );
            if let Some(blob) = &self.snapshot {
                snapshot::discard(blob);
            }
            self.drop_snapshot();
            return Ok(());
        }
        for name in Barrier::REFUSABLE {
            if !self.plan.is_applied(name) {
                continue;
            }
            let mut trial = Plan::new(&self.policy, &self.node.path);
            for s in &self.plan.statuses {
                if !s.applied {
                    trial.disable(s.name, s.detail.clone());
                }
            }
            trial.disable(name, String::new());
            if self.try_start(&trial, true).is_ok() && self.try_start(&self.plan, true).is_err() {
                let why = format!("refused by this host ({first})");
                if strict {
                    return Err(SandboxError::new(
                        "unavailable",
                        format!("sandbox.strict: the {name} barrier cannot be applied: {why}"),
                    ));
                }
                tracing::warn!("sandbox: the {name} barrier cannot be applied here: {first}");
                self.plan.disable(name, why);
                return Ok(());
            }
        }
        if self.snapshot.is_some() {
            // Nothing started from the snapshot: try everything again inline.
            self.drop_snapshot();
            return self.calibrate(strict);
        }
        Err(SandboxError::new(
            "unavailable",
            format!("node cannot start in the sandbox: {first}"),
        ))
    }

    /// How many barriers are not applied.
    fn refused(&self) -> usize {
        self.plan.statuses.iter().filter(|s| !s.applied).count()
    }

    /// Starts children inline from now on. The blob stays: other processes may be using
    /// it, and deleting it would break their children.
    fn drop_snapshot(&mut self) {
        if let Some(blob) = self.snapshot.take() {
            tracing::warn!("sandbox: not using the startup snapshot {}", blob.display());
        }
    }
}

/// Why a calibration start failed.
struct StartFailure {
    message: String,
    /// The child was still starting at the timeout: the host is slow, not refusing.
    slow: bool,
}
