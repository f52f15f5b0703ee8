//! The host's child processes: each the leader of its own process group, dying with the
//! host, its group killed before it is reaped, and the end of its stderr kept.
//!
//! Command tools and hooks (`executors::command`), the sandbox's Node children and stdio
//! MCP servers all start children this way. A child leads a group so that whatever it
//! starts (a shell's children, `npx`'s node) is killed with it; it gets the parent-death
//! signal so that a host killed outright still takes it along. The group is named by the
//! leader's pid, and that number stays the child's only while the leader is unreaped (at
//! worst a zombie): a [`Leader`] therefore signals its [`Group`] only before the reap and
//! forgets the number in the same step that reaps, so a late signal cannot reach a
//! process that was given the number since.
//!
//! This module calls nothing else in the crate. It never decides when a child must die:
//! its callers do (a deadline, a stop, a run that ended).

pub mod program;

use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

/// The `prctl` option [`die_with_parent`] sets, for the sandbox's seccomp rule that keeps a
/// child from undoing it.
pub(crate) const DEATH_SIGNAL_OPTION: libc::c_int = libc::PR_SET_PDEATHSIG;

/// This process's id, for [`die_with_parent`] (taken before a fork).
pub(crate) fn this_process() -> libc::pid_t {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// Asks the kernel to SIGKILL the calling process when the thread that forked it exits,
/// and fails if `parent` (the forking process, named before the fork) is already gone: a
/// parent that exited between the fork and this call never sends the signal, and the child
/// lived on (front round 34 F1). Raw system calls only, so it is safe between fork and
/// exec (in `pre_exec`).
pub(crate) fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl with integer arguments changes only this process's own setting.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Held shared from before a group's leader is forked until its group is listed in
/// [`LED`], and taken for good by [`kill_every_group`]: a signal that stopped a one-shot
/// command while it started a child killed every group listed and exited, and the group
/// being started, not listed yet, lived on (front round 34 F1: 8 of 300 runs signalled in
/// their first 12 ms).
static STARTING: parking_lot::RwLock<()> = parking_lot::RwLock::new(());

/// Held by whoever forks a group leader, until the [`Leader`] is made.
pub(crate) fn starting() -> parking_lot::RwLockReadGuard<'static, ()> {
    STARTING.read()
}

/// A child's process group, named by its leader's pid while the leader is unreaped.
/// Clones share the name, so another task can signal the group (a host stopping its
/// servers); once the [`Leader`] is reaped, every clone is a no-op.
#[derive(Clone, Debug, Default)]
pub(crate) struct Group(Arc<Mutex<Option<i32>>>);

/// Every group this process has led, as long as something holds its name: killed as the
/// process exits ([`GroupsDieWithHost`]). A group's leader dies with the host by the
/// parent-death signal, but what the leader started does not: a one-shot command's MCP
/// server hub, dropped on whichever thread let it go last (or held by a task of a runtime
/// that is never shut down), was not always dropped before the process exited, and a
/// stubborn member of the server's group outlived 12 of 20 `toolsearch catalog` runs.
static LED: Mutex<Vec<std::sync::Weak<Mutex<Option<i32>>>>> = Mutex::new(Vec::new());

impl Group {
    fn of(child: &tokio::process::Child) -> Self {
        let id = Arc::new(Mutex::new(child.id().and_then(|p| i32::try_from(p).ok())));
        let mut led = LED.lock();
        // Names no one holds any more are dropped as the list doubles, so it stays about
        // as long as the groups alive.
        if led.len() >= 64 && led.len().is_power_of_two() {
            led.retain(|g| g.strong_count() > 0);
        }
        led.push(Arc::downgrade(&id));
        Group(id)
    }

    /// The group id, while the leader is unreaped.
    pub(crate) fn id(&self) -> Option<i32> {
        *self.0.lock()
    }

    /// Sends `signal` to every process of the group, if its leader is not reaped yet.
    pub(crate) fn signal(&self, signal: Signal) {
        // The lock is held across the kill: the reap cannot come in between.
        if let Some(id) = *self.0.lock() {
            // The group may be gone already; that is the common case.
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(id), signal);
        }
    }

    pub(crate) fn kill(&self) {
        self.signal(Signal::SIGKILL);
    }

    /// Never signals the group again (it is dead, or about to be reaped by a task that
    /// owns the leader alone).
    fn forget(&self) {
        *self.0.lock() = None;
    }
}

/// Kills, when dropped, every process group this process still leads: held by `main` for
/// the whole process, so that returning from it (or unwinding out of it) leaves no group
/// behind, whatever still holds a leader (see [`LED`]).
#[must_use = "the groups are killed when this is dropped"]
pub struct GroupsDieWithHost;

impl Drop for GroupsDieWithHost {
    fn drop(&mut self) {
        kill_every_group();
    }
}

/// Kills every process group this process still leads (it is about to exit): once every
/// start under way has its group listed, and no group starts after (the process exits).
pub fn kill_every_group() {
    std::mem::forget(STARTING.write());
    let led: Vec<_> = LED.lock().drain(..).collect();
    kill_every(led);
}

/// Kills each group still named: a reaped leader's name is `None` (its group is gone, and
/// its number may be another process's now).
fn kill_every(led: Vec<std::sync::Weak<Mutex<Option<i32>>>>) {
    for id in led.iter().filter_map(std::sync::Weak::upgrade) {
        Group(id).kill();
    }
}

/// Makes the C allocator give large blocks (256 KiB and up) their own mappings, returned
/// to the system when freed. glibc raises that threshold to 32 MiB after the first large
/// free, and then keeps freed megabytes in its arenas for good: a gateway whose requests
/// and answers are megabytes kept the peak of them all resident (500 unread 4 MB
/// responses left 840 MB after they were gone). Call first thing in `main`.
pub fn map_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; a fixed threshold is always valid.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
}

/// A child that leads its own process group; dropping it kills the group.
pub(crate) struct Leader {
    child: tokio::process::Child,
    group: Group,
}

impl Leader {
    /// The leader's process id, until it is reaped (tests read its `/proc` entry).
    #[cfg(test)]
    pub(crate) fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Spawns `cmd` as the leader of a new process group that gets SIGKILL when the host
    /// dies.
    pub(crate) fn spawn(cmd: &mut Command) -> io::Result<Self> {
        cmd.process_group(0).kill_on_drop(true);
        let parent = this_process();
        // SAFETY: `die_with_parent` makes raw system calls only.
        unsafe {
            cmd.pre_exec(move || die_with_parent(parent));
        }
        let _starting = starting();
        Ok(Self::adopt(cmd.spawn()?))
    }

    /// A child its caller spawned as a group leader itself (the sandbox's barriers call
    /// `setsid` and [`die_with_parent`] in their own order).
    pub(crate) fn adopt(child: tokio::process::Child) -> Self {
        let group = Group::of(&child);
        Leader { child, group }
    }

    pub(crate) fn group(&self) -> &Group {
        &self.group
    }

    /// Keeps the end of the child's stderr from now on; see [`StderrTail`].
    pub(crate) fn keep_stderr_tail(&mut self, keep: usize) -> StderrTail {
        keep_tail(self.child.stderr.take(), keep)
    }

    /// The child's pipes (those not taken yet), for the caller to own.
    pub(crate) fn take_stdio(
        &mut self,
    ) -> (Option<ChildStdin>, Option<ChildStdout>, Option<ChildStderr>) {
        (
            self.child.stdin.take(),
            self.child.stdout.take(),
            self.child.stderr.take(),
        )
    }

    /// Waits until the leader has exited, leaving it unreaped (`WNOWAIT`): its group id
    /// stays reserved, so the group can still be killed safely.
    pub(crate) async fn exited(&self) {
        let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        let _ = tokio::task::spawn_blocking(move || {
            use nix::sys::wait::{Id, WaitPidFlag, waitid};
            loop {
                match waitid(
                    Id::Pid(nix::unistd::Pid::from_raw(pid)),
                    WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
                ) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    _ => return,
                }
            }
        })
        .await;
    }

    /// Whether the leader is still running; if it has exited, it is reaped now and its
    /// group never signalled again.
    pub(crate) fn running(&mut self) -> bool {
        let mut id = self.group.0.lock();
        match self.child.try_wait() {
            Ok(None) => true,
            _ => {
                *id = None;
                false
            }
        }
    }

    /// Reaps the leader once it has exited. The reap and forgetting the group id happen
    /// under the group's lock, so a signal from a clone comes before both or after both.
    pub(crate) async fn reap(&mut self) -> io::Result<ExitStatus> {
        self.exited().await;
        {
            let mut id = self.group.0.lock();
            if let Some(status) = self.child.try_wait()? {
                *id = None;
                return Ok(status);
            }
        }
        // `exited` could not wait (waitid failed): the ordinary wait, the id forgotten
        // after it.
        let status = self.child.wait().await;
        self.group.forget();
        status
    }

    /// Kills the group, then reaps the leader.
    pub(crate) async fn kill_and_reap(&mut self) -> io::Result<ExitStatus> {
        self.group.kill();
        self.reap().await
    }

    /// Kills the group now and leaves the reaping to a task, so the caller does not wait
    /// for the exit to be noticed. Until the reap the leader is a zombie holding its pid,
    /// and nothing signals the group again (the task owns the leader).
    pub(crate) fn kill_now_reap_later(mut self) {
        self.group.kill();
        self.group.forget();
        tokio::spawn(async move {
            let _ = self.child.wait().await;
        });
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        // Not reaped yet (reaping forgets the id): the group id is still this child's.
        self.group.kill();
    }
}

/// The end of a child's stderr, kept as it arrives by a task of its own.
pub(crate) struct StderrTail {
    text: Arc<Mutex<String>>,
    keep: usize,
    reader: Option<tokio::task::JoinHandle<()>>,
}

/// Keeps the last `keep` characters of `reader` (a child's stderr, if it has one) as they
/// arrive.
fn keep_tail<R>(reader: Option<R>, keep: usize) -> StderrTail
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let text = Arc::new(Mutex::new(String::new()));
    let kept = Arc::clone(&text);
    let reader = reader.map(|mut reader| {
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut t = kept.lock();
                t.push_str(&String::from_utf8_lossy(&buf[..n]));
                // Cut now and then, not at every chunk: a flood costs amortised linear time.
                let len = t.chars().count();
                if len > keep * 4 {
                    *t = t.chars().skip(len - keep).collect();
                }
            }
        })
    });
    StderrTail { text, keep, reader }
}

impl StderrTail {
    /// The last characters once the reader has seen the end of the pipe (the child and
    /// everything that shared its stderr are gone), or after `within`, whichever comes
    /// first: a grandchild that kept the pipe open cannot hold the caller.
    pub(crate) async fn finished(&mut self, within: Duration) -> String {
        if let Some(reader) = self.reader.as_mut()
            && tokio::time::timeout(within, reader).await.is_ok()
        {
            self.reader = None;
        }
        let t = self.text.lock();
        let len = t.chars().count();
        t.chars().skip(len.saturating_sub(self.keep)).collect()
    }
}

impl Drop for StderrTail {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Stdio;

    use super::*;

    fn shell(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Whether `pid` is gone or a zombie.
    fn dead(pid: i32) -> bool {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status.is_empty()
            || status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
    }

    /// A leader that started a `sleep` in its group, and the sleep's pid.
    async fn leader_with_a_child() -> (Leader, i32) {
        let mut leader = Leader::spawn(&mut shell("sleep 30 & echo $!; wait")).unwrap();
        let (_, stdout, _) = leader.take_stdio();
        let mut line = String::new();
        tokio::io::AsyncBufReadExt::read_line(
            &mut tokio::io::BufReader::new(stdout.unwrap()),
            &mut line,
        )
        .await
        .unwrap();
        (leader, line.trim().parse().unwrap())
    }

    #[tokio::test]
    async fn killing_the_group_kills_what_the_leader_started() {
        let (mut leader, grandchild) = leader_with_a_child().await;
        let group = leader.group().clone();
        assert!(group.id().is_some());
        let status = leader.kill_and_reap().await.unwrap();
        assert!(!status.success());
        assert_eq!(group.id(), None, "a reaped leader's group is forgotten");
        for _ in 0..200 {
            if dead(grandchild) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the leader's child {grandchild} outlived the group kill");
    }

    /// A leader nothing drops (held by a task of a runtime never shut down) still has its
    /// group killed as the host exits.
    #[tokio::test]
    async fn a_group_whose_leader_is_never_dropped_is_killed_at_exit() {
        let (leader, grandchild) = leader_with_a_child().await;
        let named = Arc::downgrade(&leader.group().0);
        assert!(
            LED.lock().iter().any(|g| g.ptr_eq(&named)),
            "every group is listed as it starts"
        );
        let pid = leader.id().unwrap();
        std::mem::forget(leader);
        kill_every(vec![named]);
        for _ in 0..200 {
            if dead(grandchild) && dead(pid as i32) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the leader or its child outlived the kill at exit");
    }

    /// A child whose parent is not the process named before the fork (it exited meanwhile)
    /// does not start.
    #[test]
    fn a_child_whose_parent_is_gone_does_not_start() {
        let gone = this_process() + 1_000_000;
        let mut cmd = std::process::Command::new("/bin/true");
        // SAFETY: `die_with_parent` makes raw system calls only.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || die_with_parent(gone));
        }
        let e = cmd.spawn().map(|mut c| c.wait()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "{e}");
        let here = this_process();
        let mut cmd = std::process::Command::new("/bin/true");
        // SAFETY: as above.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || die_with_parent(here));
        }
        assert!(cmd.status().unwrap().success());
    }

    #[tokio::test]
    async fn a_leader_that_exits_is_reaped_and_its_group_forgotten() {
        let mut leader = Leader::spawn(&mut shell("exit 3")).unwrap();
        leader.exited().await;
        assert!(leader.group().id().is_some(), "exited, not reaped yet");
        assert!(!leader.running());
        assert_eq!(leader.group().id(), None);
        assert_eq!(leader.reap().await.unwrap().code(), Some(3));
    }

    #[tokio::test]
    async fn the_tail_keeps_the_end_of_stderr() {
        let mut leader = Leader::spawn(&mut shell(
            "for i in $(seq 1 500); do echo line$i >&2; done",
        ))
        .unwrap();
        let mut tail = leader.keep_stderr_tail(8);
        leader.reap().await.unwrap();
        assert_eq!(tail.finished(Duration::from_secs(5)).await, "line500\n");
        let mut none = keep_tail(None::<ChildStderr>, 8);
        assert_eq!(none.finished(Duration::from_millis(1)).await, "");
    }
}
