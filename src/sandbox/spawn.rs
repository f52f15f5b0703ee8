//! Starting a child: the one command every child is spawned from (a run's, a spare's,
//! the doctor's probe, a calibration start), its channel, its working directory, and why
//! it stopped when it did. A spawned child waits for its `run` frame as a [`Child`],
//! leading its own process group ([`crate::process`]), which dies with it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::FramedRead;

use super::barriers::Prepared;
use super::protocol::{ChildFrame, Frame, FrameCodec, ProtocolError};
use super::{RUNTIME_JS, Sandbox, SandboxError, cache};
use crate::process::{Leader, StderrTail};

/// What a child starts with.
pub(super) enum Entry<'a> {
    /// A script given with `-e`, and its arguments.
    Inline(&'a str, &'a [String]),
    /// The runtime's startup snapshot, by its path and as opened for this start (the
    /// child may read that file only: [`super::barriers::Plan::prepare`]).
    Snapshot(&'a Path, &'a std::fs::File),
}

/// A spawned child, ready to take one run. Dropping it kills its group.
pub struct Child {
    pub(super) process: Leader,
    pub(super) frames: FramedRead<OwnedReadHalf, FrameCodec>,
    /// Taken by the run's outbox; a child runs once.
    pub(super) writer: Option<OwnedWriteHalf>,
    pub(super) stderr: StderrTail,
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

impl Sandbox {
    /// Spawns a child and waits for its `ready`.
    pub async fn spawn(&self, timeout: Duration) -> Result<Child, SandboxError> {
        let spawned = self.spawn_any(timeout).await;
        if let Err(e) = &spawned
            && matches!(e.code, "child-exited" | "protocol")
        {
            // The cached calibration may be what is wrong (the host changed in a way the
            // key cannot see): the next host calibrates again. Not for a start this host
            // could not make (out of descriptors: `unavailable`) or a slow one (`timeout`),
            // which say nothing of the barriers (sandbox round 29).
            self.forget_calibration(e);
        }
        spawned
    }

    /// Forgets this host's cached calibration, if it came from there: a start failed in a
    /// way one may explain, and the next host's calibration finds out.
    fn forget_calibration(&self, e: &SandboxError) {
        if self.calibrated_from_cache
            && let Some((dir, key)) = &self.calibration
        {
            tracing::warn!(
                "sandbox: a child failed under a cached calibration ({e}); forgetting it"
            );
            cache::forget(dir, "calibration", key);
        }
    }

    /// From the snapshot when there is one. A child that dies before `ready` from it is
    /// started again inline, so the run is served whatever became of the blob (removed,
    /// or damaged where its length does not show, under a running host: every run of
    /// that host failed, 7,836 failed starts in 85 s, review 26 F3).
    async fn spawn_any(&self, timeout: Duration) -> Result<Child, SandboxError> {
        let inline = || self.spawn_ready(Entry::Inline(RUNTIME_JS, &[]), timeout);
        let Some(blob) = self.snapshot() else {
            return inline().await;
        };
        let file = match super::snapshot::open(blob) {
            Ok(file) => file,
            Err(why) => {
                // What is at the path decides, not the error: gone, or not a blob any more
                // (a FIFO, a folder, a link), the host goes inline now; a blob of ours that
                // could not be opened this once (out of descriptors or memory) is left alone
                // and only this start goes inline (sandbox round 29: one host short of
                // descriptors set the shared blob aside, and every host went inline).
                let e = SandboxError::new("child-exited", why);
                let not_a_blob = std::fs::symlink_metadata(blob)
                    .map_or(true, |m| crate::cache::trusted_file(blob, &m).is_err());
                if not_a_blob {
                    self.stop_using_snapshot(blob, &e);
                } else {
                    tracing::warn!(
                        "sandbox: the startup snapshot could not be opened ({e}); this child starts inline"
                    );
                }
                return inline().await;
            }
        };
        match self
            .spawn_ready(Entry::Snapshot(blob, &file), timeout)
            .await
        {
            Ok(child) => {
                self.snapshot_failures.store(0, Ordering::Relaxed);
                Ok(child)
            }
            Err(e) if e.code == "child-exited" => {
                let started = inline().await;
                if started.is_ok() {
                    self.snapshot_refused_once(blob, &e);
                }
                started
            }
            Err(e) => Err(e),
        }
    }

    /// A snapshot start died where an inline one worked. One such death may be chance (a
    /// child killed from outside, memory pressure); two in a row, or a blob that is gone,
    /// are the blob: this host starts inline from then on, and sets the blob aside so the
    /// next host builds it again (as a calibration that finds it refused does). After
    /// one, a cached calibration is forgotten, so the next host's calibration decides.
    fn snapshot_refused_once(&self, blob: &Path, e: &SandboxError) {
        let failures = self.snapshot_failures.fetch_add(1, Ordering::Relaxed) + 1;
        let gone = !blob.exists();
        if !gone && failures < 2 {
            tracing::warn!(
                "sandbox: a child failed from the startup snapshot ({e}); started inline"
            );
            // A one-shot host never sees a second: the next host calibrates, which tries
            // the snapshot against an inline start and sets a refused blob aside.
            self.forget_calibration(e);
            return;
        }
        self.stop_using_snapshot(blob, e);
    }

    /// This host starts inline from now on, and sets the blob aside (if it is still
    /// there) so the next host builds it again.
    fn stop_using_snapshot(&self, blob: &Path, e: &SandboxError) {
        if self.snapshot_refused.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::warn!(
            "sandbox: node refuses the startup snapshot {} ({e}); starting inline from now on",
            blob.display()
        );
        if blob.exists() {
            super::snapshot::discard(blob);
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
            Ok(None | Some(Err(ProtocolError::Io(_)))) => Err(self.exited(&mut child, false).await),
            Ok(Some(Err(e))) => Err(SandboxError::new("protocol", e.to_string())),
            // Slow, not failed: a `timeout`, which leaves a cached calibration alone (as
            // `child-exited` it was forgotten, and the next host calibrated again under the
            // same load; review 19).
            Err(_) => Err(SandboxError::new(
                "timeout",
                format!(
                    "the child was not ready within {} ms (startup_timeout_ms)",
                    startup.as_millis()
                ),
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
        let blob = match &entry {
            Entry::Snapshot(_, file) => Some(*file),
            Entry::Inline(..) => None,
        };
        let prepared = self
            .plan
            .prepare(cpu_seconds, blob)
            .map_err(|e| SandboxError::new("unavailable", e))?;
        let (cmd, parent, child_end) = self
            .command(entry, prepared)
            .map_err(|e| SandboxError::new("unavailable", format!("socketpair: {e}")))?;
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let starting = crate::process::starting();
        let process = cmd
            .spawn()
            .map_err(|e| SandboxError::new("unavailable", format!("cannot start node: {e}")))?;
        drop(child_end);
        // The barriers made it a group leader (setsid).
        let mut process = Leader::adopt(process);
        drop(starting);
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

    /// The one command every child starts from, a calibration's too: Node with the
    /// sandbox's flags and `entry`, an empty environment, the empty working directory, no
    /// stdin or stdout, stderr piped, and `prepared` applied between fork and exec with
    /// the child's end of a new socketpair becoming its fd 3. Also gives the parent's end,
    /// and the child's, which the caller drops once the child is spawned.
    pub(super) fn command(
        &self,
        entry: Entry<'_>,
        mut prepared: Prepared,
    ) -> std::io::Result<(std::process::Command, StdUnixStream, OwnedFd)> {
        let (parent, child_end) = StdUnixStream::pair()?;
        let child_end: OwnedFd = child_end.into();
        let channel = child_end.as_raw_fd();
        let mut cmd = std::process::Command::new(&self.node.path);
        cmd.args(&self.args);
        match entry {
            Entry::Inline(script, script_args) => cmd.arg("-e").arg(script).args(script_args),
            Entry::Snapshot(blob, _) => cmd.arg("--snapshot-blob").arg(blob),
        };
        cmd.env_clear()
            .current_dir(empty_dir().map_err(std::io::Error::other)?)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: `apply` makes only raw system calls (see barriers.rs).
        unsafe {
            cmd.pre_exec(move || prepared.apply(channel));
        }
        Ok((cmd, parent, child_end))
    }

    /// Why the child stopped talking: its exit status and the end of its stderr. Whether it
    /// ran out of memory is read from how it died (V8 aborts when the heap cap is reached),
    /// never from what it wrote: guest-controlled text cannot choose the error. Only a
    /// child that was running guest code (`running`) can have: one that aborted before
    /// `ready` (Node refusing a damaged startup snapshot) was said `out-of-memory`, and its
    /// host forgot a good calibration for it (review 25 F2).
    pub(super) async fn exited(&self, child: &mut Child, running: bool) -> SandboxError {
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
        if running && signal == Some(libc::SIGABRT) && cap > 0 {
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

/// The children's working directory: one empty directory per host process,
/// `$TMPDIR/toolsearch-sandbox-PID-XXXXXXXX` (0700, a random tail: a name others can
/// predict they can create first, and a host that cannot make its directory has no code
/// mode), shared by every sandbox of that process and looked at before every spawn: one
/// that is gone (a temp cleaner, or another host in another PID namespace that took it for
/// a dead host's) is made anew, so code mode does not die with it. It cannot outlive its
/// host for long: it is removed when the process exits normally, and a host that was killed
/// leaves one that the next host to start removes (a directory whose process is gone, and
/// only if empty).
pub(super) fn empty_dir() -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    static DIR: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    let mut current = DIR.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(dir) = current.as_ref() {
        let ours = std::fs::symlink_metadata(dir).is_ok_and(|m| {
            m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o077 == 0
        });
        if ours {
            return Ok(dir.clone());
        }
        tracing::warn!(
            "sandbox: the working directory {} is gone; making another",
            dir.display()
        );
    }
    let tmp = std::env::temp_dir();
    remove_stale_workdirs(&tmp);
    let dir =
        crate::cache::private_temp_dir(&format!("toolsearch-sandbox-{}-", std::process::id()))
            .map_err(|e| {
                format!(
                    "cannot create a working directory in {}: {e}",
                    tmp.display()
                )
            })?;
    *current = Some(dir.clone());
    extern "C" fn remove_at_exit() {
        if let Ok(current) = DIR.try_lock()
            && let Some(dir) = current.as_ref()
        {
            let _ = std::fs::remove_dir(dir);
        }
    }
    // SAFETY: registers a plain function with no captured state; failure only means
    // the directory is left for the next host's clean-up.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(remove_at_exit);
    });
    Ok(dir)
}

pub(super) fn remove_stale_workdirs(tmp: &Path) {
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
