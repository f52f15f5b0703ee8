//! Stopping what QA started the way an operator does — SIGTERM, then a wait — and
//! checking that nothing it started outlives it: its descendants are listed from `/proc`
//! (with their start times, so a reused pid is not taken for one of them) before the
//! signal, and must be gone after it.

use std::process::Child;
use std::time::{Duration, Instant};

/// How long a stopped gateway or mock may take to exit, and its processes to go.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A child process: stopped with SIGTERM and waited for by [`Guard::stop`], killed (and
/// reaped) when dropped without it.
pub(super) struct Guard(pub(super) Child);

impl Guard {
    /// SIGTERM, then a wait for the exit; then a check that nothing the process started is
    /// still running. What went wrong, if anything.
    pub(super) fn stop(mut self, what: &str) -> Option<String> {
        let pid = self.0.id();
        let family = descendants(pid);
        if let Err(e) = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        ) {
            return Some(format!("{what}: SIGTERM failed: {e}"));
        }
        let started = Instant::now();
        loop {
            match self.0.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if started.elapsed() < STOP_GRACE => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    return Some(format!(
                        "{what} did not exit within {} s of SIGTERM",
                        STOP_GRACE.as_secs()
                    ));
                }
            }
        }
        // Its children may take a moment to die after it; then they must be gone.
        while started.elapsed() < STOP_GRACE {
            if family.iter().all(|p| !p.alive()) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let left: Vec<String> = family
            .iter()
            .filter(|p| p.alive())
            .map(|p| format!("{} ({})", p.pid, p.name))
            .collect();
        Some(format!(
            "{what} left processes running after SIGTERM: {}",
            left.join(", ")
        ))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process as `/proc` shows it, with its start time so a reused pid is not taken for
/// it.
struct Proc {
    pid: u32,
    name: String,
    start: u64,
}

impl Proc {
    fn read(pid: u32) -> Option<(Proc, u32, char)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        let close = stat.rfind(')')?;
        let name = stat.get(stat.find('(')? + 1..close)?.to_string();
        let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
        let state = fields.first()?.chars().next()?;
        let ppid = fields.get(1)?.parse().ok()?;
        let start = fields.get(19)?.parse().ok()?;
        Some((Proc { pid, name, start }, ppid, state))
    }

    /// Still running: the same process (same start time), not a zombie.
    fn alive(&self) -> bool {
        Proc::read(self.pid)
            .is_some_and(|(p, _, state)| p.start == self.start && state != 'Z' && state != 'X')
    }
}

/// Every live process below `root` (children, theirs, ...).
fn descendants(root: u32) -> Vec<Proc> {
    let all: Vec<(Proc, u32, char)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(Proc::read)
                .collect()
        })
        .unwrap_or_default();
    let mut family = vec![root];
    let mut out = Vec::new();
    let mut i = 0;
    while i < family.len() {
        let parent = family[i];
        for (p, ppid, state) in &all {
            if *ppid == parent && *state != 'Z' && !family.contains(&p.pid) {
                family.push(p.pid);
                out.push(Proc {
                    pid: p.pid,
                    name: p.name.clone(),
                    start: p.start,
                });
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_process_that_leaves_a_child_behind_is_named() {
        // `sh` dies of SIGTERM while its `sleep` lives on: a child left behind.
        let child = Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let started = Instant::now();
        while descendants(pid).is_empty() && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let left = descendants(pid);
        assert_eq!(left.len(), 1, "the sleep under sh");
        let problem = Guard(child).stop("the shell").unwrap_or_default();
        for p in &left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        assert!(problem.contains("left processes running"), "{problem}");
        assert!(problem.contains("sleep"), "{problem}");

        let clean = Command::new("sleep").arg("30").spawn().unwrap();
        assert_eq!(Guard(clean).stop("a sleep"), None);
    }
}
