//! The Node child that runs a `tool_search_code` body: found and probed ([`node`]),
//! started with the permission model, an empty environment and the OS barriers
//! ([`barriers`], values in `sandbox-policy/default.toml`), spoken to over a socketpair
//! ([`protocol`]), and killed — its whole process group — after every run and at the
//! deadline.
//!
//! The sandbox only relays: each `bridge` frame goes to a [`Bridge`] (the dispatch path,
//! through `crate::code`), and it never decides policy itself.

pub mod barriers;
pub mod cache;
pub mod doctor;
pub mod node;
pub mod policy;
pub mod protocol;
pub mod snapshot;
pub mod spares;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::process::{Leader, StderrTail};

use barriers::{BarrierStatus, Plan};
pub use node::NodeInfo;
pub use policy::SandboxPolicy;
use protocol::{BridgeMethod, ChildFrame, Frame, FrameCodec, LogLevel, ProtocolError};

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

pub type BridgeFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, BridgeFailure>> + Send + 'a>>;

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
    workdir: PathBuf,
    args: Vec<String>,
    /// The runtime's startup snapshot, when V8 flags are used and the cache is usable.
    snapshot: Option<PathBuf>,
    /// Where this host's calibration is cached, and whether it came from there (then a
    /// child that cannot start removes it).
    calibration: Option<(PathBuf, String)>,
    calibrated_from_cache: bool,
    /// Slots for runs at once (`max_concurrent_runs`).
    runs: Arc<Semaphore>,
}

/// What a child starts with.
enum Entry<'a> {
    /// A script given with `-e`, and its arguments.
    Inline(&'a str, &'a [String]),
    /// The runtime's startup snapshot.
    Snapshot(&'a Path),
}

/// A spawned child, ready to take one run. Dropping it kills its group.
pub struct Child {
    process: Leader,
    frames: FramedRead<OwnedReadHalf, FrameCodec>,
    /// Taken by the run's outbox; a child runs once.
    writer: Option<OwnedWriteHalf>,
    stderr: StderrTail,
}

impl Child {
    /// Kills the child's group, then reaps it (killing first: see [`crate::process`]).
    pub(crate) async fn kill_and_reap(&mut self) {
        let _ = self.process.kill_and_reap().await;
    }

    /// One line of at most `max` bytes from a child that speaks no protocol frames (the
    /// doctor's probe script), before anything was read as frames.
    pub(crate) async fn read_raw_line(&mut self, max: u64) -> Option<String> {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt};
        let mut reader = tokio::io::BufReader::new(self.frames.get_mut().take(max));
        let mut line = String::new();
        match reader.read_line(&mut line).await {
            Ok(n) if n > 0 => Some(line),
            _ => None,
        }
    }

    /// Kills the child's group now and leaves the reaping to a task, so the caller's answer
    /// does not wait for the exit to be noticed.
    pub(crate) fn kill_now_reap_later(self) {
        self.process.kill_now_reap_later();
    }

    /// Whether the child is still running; if it has exited, it is now reaped and never
    /// killed again.
    pub(crate) fn alive(&mut self) -> bool {
        self.process.running()
    }
}

/// Frames to the child go through a task of their own. A child that stops reading fills
/// the socket and blocks that task, never the run loop, which keeps watching the deadline.
/// The queue holds at most one answer per bridge call plus the `run` frame, so it is
/// bounded by the calls a run may make and never has to wait for room.
struct Outbox {
    queue: mpsc::Sender<Vec<u8>>,
    task: tokio::task::JoinHandle<()>,
}

impl Outbox {
    fn start(mut writer: OwnedWriteHalf, capacity: usize) -> Self {
        let (queue, mut rx) = mpsc::channel::<Vec<u8>>(capacity.max(1));
        let task = tokio::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                if writer.write_all(&bytes).await.is_err() {
                    // The child closed its end: the read side says how it ended.
                    break;
                }
            }
        });
        Outbox { queue, task }
    }

    fn send(&self, frame: &Value) -> Result<(), SandboxError> {
        let mut bytes = frame.to_string().into_bytes();
        bytes.push(b'\n');
        match self.queue.try_send(bytes) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(SandboxError::new(
                "protocol",
                "more answers are queued for the child than it made calls",
            )),
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bytes a `bridge` frame may carry beyond its arguments (`{"type":"bridge","id":N,
/// "method":"describe","args":...}`), so the parent can bound the arguments by the line.
const BRIDGE_FRAME_OVERHEAD: usize = 128;

/// Bytes a `result` frame may carry beyond its value.
const RESULT_FRAME_OVERHEAD: usize = 64;

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
        let workdir = empty_dir().map_err(|e| SandboxError::new("unavailable", e))?;
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
            workdir,
            args,
            snapshot,
            calibration,
            calibrated_from_cache: false,
            runs: Arc::new(Semaphore::new(policy_runs)),
        };
        if let Some(blob) = &sandbox.snapshot {
            sandbox.plan.allow_read(blob);
        }
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

    /// Whether a child of `plan` starts and says `ready`: the runtime itself, from the
    /// snapshot when `snapshot` (so a blob Node refuses is found here, not in a run).
    fn try_start(&self, plan: &Plan, snapshot: bool) -> Result<(), String> {
        let mut prepared = plan.prepare(5)?;
        let (parent, child) = StdUnixStream::pair().map_err(|e| e.to_string())?;
        let fd = child.as_raw_fd();
        let mut cmd = std::process::Command::new(&self.node.path);
        cmd.args(&self.args);
        match (&self.snapshot, snapshot) {
            (Some(blob), true) => cmd.arg("--snapshot-blob").arg(blob),
            _ => cmd.arg("-e").arg(RUNTIME_JS),
        };
        cmd.env_clear()
            .current_dir(&self.workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: `apply` makes only raw system calls (see barriers.rs).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || prepared.apply(fd));
        }
        let mut process = cmd.spawn().map_err(|e| e.to_string())?;
        drop(child);
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
        // The child is its own group leader only if setsid applied: kill it by pid.
        let _ = process.kill();
        let out = process.wait_with_output().map_err(|e| e.to_string())?;
        drop(parent);
        if ready {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        Err(if err.is_empty() {
            format!("node exited with {} before `ready`", out.status)
        } else {
            format!("node exited with {}: {err}", out.status)
        })
    }

    /// One real start with every barrier; if that fails, finds the barrier the host
    /// refuses by starting without each in turn. A snapshot that fails where an inline
    /// start works is not used.
    fn calibrate(&mut self, strict: bool) -> Result<(), SandboxError> {
        let first = match self.try_start(&self.plan, true) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        // Once more as it is: a start slowed past its timeout on a loaded host is not a
        // refused barrier, and switching one off is for the rest of the process.
        if self.try_start(&self.plan, true).is_ok() {
            return Ok(());
        }
        if self.snapshot.is_some() && self.try_start(&self.plan, false).is_ok() {
            tracing::warn!("sandbox: node refused the startup snapshot ({first}); starting inline");
            self.drop_snapshot();
            return Ok(());
        }
        for name in ["address space", "network namespace", "landlock", "seccomp"] {
            if !self.plan.is_applied(name) {
                continue;
            }
            let mut trial = Plan::new(&self.policy, &self.node.path);
            if let Some(blob) = &self.snapshot {
                trial.allow_read(blob);
            }
            for s in &self.plan.statuses {
                if !s.applied {
                    trial.disable(s.name, s.detail.clone());
                }
            }
            trial.disable(name, String::new());
            if self.try_start(&trial, true).is_ok() {
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

    /// The snapshot the children start from, if any (`doctor` shows it).
    pub fn snapshot(&self) -> Option<&Path> {
        self.snapshot.as_deref()
    }

    /// Spawns a child and waits for its `ready`.
    pub async fn spawn(&self, timeout: Duration) -> Result<Child, SandboxError> {
        let spawned = self.spawn_any(timeout).await;
        if let Err(e) = &spawned
            && self.calibrated_from_cache
            && e.code != "timeout"
            && let Some((dir, key)) = &self.calibration
        {
            // The cached calibration may be what is wrong (the host changed in a way the
            // key cannot see): the next host calibrates again.
            tracing::warn!(
                "sandbox: a child failed under a cached calibration ({e}); forgetting it"
            );
            cache::forget(dir, "calibration", key);
        }
        spawned
    }

    async fn spawn_any(&self, timeout: Duration) -> Result<Child, SandboxError> {
        let Some(blob) = &self.snapshot else {
            return self
                .spawn_ready(Entry::Inline(RUNTIME_JS, &[]), timeout)
                .await;
        };
        match self.spawn_ready(Entry::Snapshot(blob), timeout).await {
            // The blob went away under a running host (someone cleared the cache): start
            // this child inline rather than fail the run.
            Err(e) if e.code == "child-exited" && !blob.exists() => {
                tracing::warn!("sandbox: the startup snapshot failed ({e}); starting inline");
                self.spawn_ready(Entry::Inline(RUNTIME_JS, &[]), timeout)
                    .await
            }
            other => other,
        }
    }

    async fn spawn_ready(
        &self,
        entry: Entry<'_>,
        timeout: Duration,
    ) -> Result<Child, SandboxError> {
        let mut child = self.spawn_entry(entry, timeout)?;
        let startup = Duration::from_millis(self.policy.limits.startup_timeout_ms);
        match tokio::time::timeout(startup, child.frames.next()).await {
            Ok(Some(Ok(Frame {
                frame: ChildFrame::Ready {},
                ..
            }))) => Ok(child),
            Ok(Some(Ok(other))) => Err(SandboxError::new(
                "protocol",
                format!("expected `ready` from the child, got {:?}", other.frame),
            )),
            Ok(None | Some(Err(ProtocolError::Io(_)))) => Err(self.exited(&mut child).await),
            Ok(Some(Err(e))) => Err(SandboxError::new("protocol", e.to_string())),
            Err(_) => Err(SandboxError::new(
                "child-exited",
                format!("the child was not ready within {} ms", startup.as_millis()),
            )),
        }
    }

    /// Spawns `script` (given inline with `-e`, then `script_args`) exactly as a run's child
    /// is spawned: same flags, environment, directory and barriers.
    pub(crate) fn spawn_script(
        &self,
        script: &str,
        script_args: &[String],
        timeout: Duration,
    ) -> Result<Child, SandboxError> {
        self.spawn_entry(Entry::Inline(script, script_args), timeout)
    }

    fn spawn_entry(&self, entry: Entry<'_>, timeout: Duration) -> Result<Child, SandboxError> {
        // CPU time, not wall time: V8's helper threads (GC, compilers) add CPU faster than
        // the clock (12.8 s in 8.6 s measured), so the backstop allows eight times the
        // deadline. The parent's kill at the deadline is the real limit; this one only
        // matters if the parent is alive but somehow failed to kill.
        let cpu_seconds = timeout.as_secs() * 8 + 1;
        let mut prepared = self
            .plan
            .prepare(cpu_seconds)
            .map_err(|e| SandboxError::new("unavailable", e))?;
        let (parent, child_end) = StdUnixStream::pair()
            .map_err(|e| SandboxError::new("unavailable", format!("socketpair: {e}")))?;
        let child_fd: OwnedFd = child_end.into();
        let raw = child_fd.as_raw_fd();
        let mut cmd = tokio::process::Command::new(&self.node.path);
        cmd.args(&self.args);
        match entry {
            Entry::Inline(script, script_args) => cmd.arg("-e").arg(script).args(script_args),
            Entry::Snapshot(blob) => cmd.arg("--snapshot-blob").arg(blob),
        };
        cmd.env_clear()
            .current_dir(&self.workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: `apply` makes only raw system calls (see barriers.rs).
        unsafe {
            cmd.pre_exec(move || prepared.apply(raw));
        }
        let process = cmd
            .spawn()
            .map_err(|e| SandboxError::new("unavailable", format!("cannot start node: {e}")))?;
        drop(child_fd);
        // The barriers made it a group leader (setsid).
        let mut process = Leader::adopt(process);
        parent
            .set_nonblocking(true)
            .map_err(|e| SandboxError::new("unavailable", e.to_string()))?;
        let stream = UnixStream::from_std(parent)
            .map_err(|e| SandboxError::new("unavailable", e.to_string()))?;
        let (read, writer) = stream.into_split();
        let stderr = process.keep_stderr_tail(self.policy.limits.stderr_tail_chars);
        Ok(Child {
            process,
            frames: FramedRead::new(read, FrameCodec::new(self.policy.limits.max_frame_bytes)),
            writer: Some(writer),
            stderr,
        })
    }

    /// A slot for one run, waited for at most `within` (then `busy`). Taken before a child
    /// is: a flood of calls waits here instead of starting children.
    pub async fn slot(&self, within: Duration) -> Result<OwnedSemaphorePermit, SandboxError> {
        match tokio::time::timeout(within, Arc::clone(&self.runs).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(SandboxError::new(
                "busy",
                format!(
                    "{} tool_search_code runs are already running in this host; try again when one has finished",
                    self.policy.limits.max_concurrent_runs
                ),
            )),
        }
    }

    /// Takes a slot, spawns a child and runs `code` on it.
    pub async fn run(&self, code: &str, timeout: Duration, bridge: Arc<dyn Bridge>) -> RunReport {
        let _slot = match self.slot(timeout).await {
            Ok(s) => s,
            Err(e) => return RunReport::failed(e),
        };
        match self.spawn(timeout).await {
            Ok(child) => {
                self.run_on(child, code, timeout, bridge, CancellationToken::new())
                    .await
            }
            Err(e) => RunReport::failed(e),
        }
    }

    /// Runs `code` on a ready child, then kills the child's group whatever happened.
    /// `cancel` ends the run early (as `cancelled`): the caller went away.
    pub async fn run_on(
        &self,
        mut child: Child,
        code: &str,
        timeout: Duration,
        bridge: Arc<dyn Bridge>,
        cancel: CancellationToken,
    ) -> RunReport {
        let cancel = cancel.child_token();
        let mut logs = Vec::new();
        let max = self.policy.limits.max_code_bytes;
        let outcome = if code.len() > max {
            Err(SandboxError::new(
                "code-error",
                format!("the code is {} bytes; the limit is {max}", code.len()),
            ))
        } else {
            self.drive(&mut child, code, timeout, bridge, &cancel, &mut logs)
                .await
        };
        cancel.cancel();
        child.kill_now_reap_later();
        RunReport { outcome, logs }
    }

    /// The run loop. Nothing in it waits on the child except the framed read, which is
    /// safe to cancel: writes are queued to the [`Outbox`], bridge calls run as tasks
    /// (at most `max_calls_in_flight` at once), so the deadline arm is always polled and
    /// wins whenever it has passed.
    async fn drive(
        &self,
        child: &mut Child,
        code: &str,
        timeout: Duration,
        bridge: Arc<dyn Bridge>,
        cancel: &CancellationToken,
        logs: &mut Vec<LogLine>,
    ) -> Result<Value, SandboxError> {
        let l = &self.policy.limits;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let writer = child
            .writer
            .take()
            .ok_or_else(|| SandboxError::new("protocol", "this child has already run"))?;
        let outbox = Outbox::start(writer, l.max_bridge_calls + 1);
        outbox.send(&json!({
            "type": "run",
            "code": code,
            "limits": {
                "maxResultBytes": l.max_result_bytes,
                "maxLogBytes": l.max_log_bytes,
                "maxLogLines": l.max_log_lines,
                "maxBridgeCalls": l.max_bridge_calls,
                "maxArgBytes": l.max_arg_bytes,
                "syncTimeoutMs": timeout.as_millis() as u64,
            },
        }))?;
        let timed_out = || {
            SandboxError::new(
                "timeout",
                format!(
                    "tool_search_code timed out after {} ms",
                    timeout.as_millis()
                ),
            )
        };
        let permits = Arc::new(Semaphore::new(l.max_calls_in_flight.max(1)));
        let mut log_bytes = 0usize;
        let mut in_flight: JoinSet<(u64, Result<Value, BridgeFailure>)> = JoinSet::new();
        let mut bridge_calls = 0usize;
        loop {
            tokio::select! {
                biased;
                _ = &mut deadline => return Err(timed_out()),
                _ = cancel.cancelled() => {
                    return Err(SandboxError::new("cancelled", "the run was cancelled by its caller"));
                }
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    let Ok((id, outcome)) = done else { continue };
                    let frame = match outcome {
                        Ok(value) => json!({"type": "bridge-result", "id": id, "ok": true, "value": value}),
                        Err(f) => json!({"type": "bridge-result", "id": id, "ok": false, "error": {"code": f.code, "message": f.message}}),
                    };
                    outbox.send(&frame)?;
                }
                frame = child.frames.next() => {
                    let Frame { frame, bytes } = match frame {
                        Some(Ok(f)) => f,
                        // The child closed its end, or the socket failed as it died: how
                        // it ended is the answer, unless the deadline passed first.
                        None | Some(Err(ProtocolError::Io(_))) => {
                            return Err(tokio::select! {
                                biased;
                                _ = &mut deadline => timed_out(),
                                e = self.exited(child) => e,
                            });
                        }
                        Some(Err(e)) => return Err(SandboxError::new("protocol", e.to_string())),
                    };
                    match frame {
                        ChildFrame::Ready {} => {
                            return Err(SandboxError::new("protocol", "a second `ready` from the child"));
                        }
                        ChildFrame::Log { level, items } => {
                            for text in items {
                                log_bytes += text.len();
                                if logs.len() > l.max_log_lines || log_bytes > l.max_log_bytes + 4096 {
                                    return Err(SandboxError::new("protocol", "the child sent more console output than its limits allow"));
                                }
                                logs.push(LogLine { level, text });
                            }
                        }
                        ChildFrame::Bridge { id, method, args } => {
                            bridge_calls += 1;
                            if bridge_calls > l.max_bridge_calls {
                                return Err(SandboxError::new("protocol", format!("more than {} bridge calls", l.max_bridge_calls)));
                            }
                            if bytes > l.max_arg_bytes + BRIDGE_FRAME_OVERHEAD {
                                return Err(SandboxError::new("protocol", format!(
                                    "a bridge call of {bytes} bytes; its arguments may have at most {}", l.max_arg_bytes)));
                            }
                            let bridge = Arc::clone(&bridge);
                            let cancel = cancel.child_token();
                            let permits = Arc::clone(&permits);
                            in_flight.spawn(async move {
                                let _permit = permits.acquire_owned().await;
                                (id, bridge.call(method, args, cancel).await)
                            });
                        }
                        ChildFrame::Result { ok: true, value, .. } => {
                            if bytes > l.max_result_bytes + RESULT_FRAME_OVERHEAD {
                                return Err(SandboxError::new("output-too-large", format!(
                                    "the return value is about {bytes} bytes of JSON; the limit is {}", l.max_result_bytes)));
                            }
                            return Ok(value);
                        }
                        ChildFrame::Result { ok: false, error, .. } => {
                            let e = error.unwrap_or(protocol::GuestError { code: "code-error".into(), message: "error".into(), line: None });
                            let code = match e.code.as_str() {
                                "output-too-large" => "output-too-large",
                                _ => "code-error",
                            };
                            let message = match e.line {
                                Some(line) => format!("{} (line {line})", e.message),
                                None => e.message,
                            };
                            return Err(SandboxError::new(code, message));
                        }
                    }
                }
            }
        }
    }

    /// Why the child stopped talking: its exit status and the end of its stderr. Whether it
    /// ran out of memory is read from how it died (V8 aborts when the heap cap is reached),
    /// never from what it wrote: guest-controlled text cannot choose the error.
    async fn exited(&self, child: &mut Child) -> SandboxError {
        use std::os::unix::process::ExitStatusExt;
        let status = tokio::time::timeout(Duration::from_secs(2), child.process.reap()).await;
        // The group is gone, so its stderr closes: the tail is whole once the reader ends.
        let tail = child.stderr.finished(Duration::from_millis(200)).await;
        let (how, signal) = match status {
            Ok(Ok(s)) => match (s.code(), s.signal()) {
                (Some(c), _) => (format!("exit code {c}"), None),
                (None, Some(sig)) => (format!("signal {sig}"), Some(sig)),
                _ => ("an unknown status".into(), None),
            },
            _ => ("no exit status".into(), None),
        };
        let cap = self.policy.node.max_old_space_mib;
        if signal == Some(libc::SIGABRT) && cap > 0 {
            return SandboxError::new(
                "out-of-memory",
                format!(
                    "tool_search_code ran out of memory: the child aborted (signal {}), as V8 does at the heap cap of {cap} MiB",
                    libc::SIGABRT
                ),
            );
        }
        // The end of stderr is for the host's log, not for the model: it may hold Node's
        // own backtraces and the paths of this host's files.
        if !tail.trim().is_empty() {
            tracing::warn!(
                "sandbox: the child stopped ({how}); its stderr ended with: {}",
                tail.trim()
            );
        }
        SandboxError::new("child-exited", format!("the sandbox child stopped ({how})"))
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

/// The children's working directory: one empty directory per host process,
/// `$TMPDIR/toolsearch-sandbox-PID-host` (0700), shared by every sandbox of that process. It
/// cannot outlive its host for long: it is removed when the process exits normally, and a
/// host that was killed leaves one that the next host to start removes (a directory whose
/// process is gone, and only if empty).
fn empty_dir() -> Result<PathBuf, String> {
    static DIR: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let tmp = std::env::temp_dir();
        remove_stale_workdirs(&tmp);
        let dir = tmp.join(format!("toolsearch-sandbox-{}-host", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        extern "C" fn remove_at_exit() {
            if let Some(Ok(dir)) = DIR.get() {
                let _ = std::fs::remove_dir(dir);
            }
        }
        // SAFETY: registers a plain function with no captured state; failure only means
        // the directory is left for the next host's clean-up.
        unsafe {
            libc::atexit(remove_at_exit);
        }
        Ok(dir)
    })
    .clone()
}

fn remove_stale_workdirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolsearch-sandbox-"))
        else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let gone = pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists());
        if gone {
            // remove_dir: only an empty directory goes, never what someone put there.
            let _ = std::fs::remove_dir(e.path());
        }
    }
}
