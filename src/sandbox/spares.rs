//! Spare children for long-lived hosts (the library, the gateway): `sandbox.spares` children
//! are spawned and brought to `ready` before they are needed, so a run pays only for
//! send-run-receive. Each spare is used for exactly one run and then killed, like any
//! child: isolation is unchanged. A spare that dies while idle is replaced; spares die with
//! the pool (kill on drop) and with the host (parent-death signal).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Child, Sandbox, SandboxError};

/// How often idle spares are checked for having died.
const CHECK_EVERY: Duration = Duration::from_millis(500);

pub struct SparePool {
    sandbox: Arc<Sandbox>,
    ready: Arc<Mutex<VecDeque<Child>>>,
    target: usize,
    timeout: Duration,
    refill: Arc<tokio::sync::Notify>,
    stop: tokio_util::sync::CancellationToken,
}

impl SparePool {
    /// Starts keeping `target` spares ready. `timeout` is the run deadline the spares are
    /// prepared for (their CPU rlimit).
    pub fn start(sandbox: Arc<Sandbox>, target: usize, timeout: Duration) -> Arc<Self> {
        let pool = Arc::new(SparePool {
            sandbox,
            ready: Arc::new(Mutex::new(VecDeque::new())),
            target,
            timeout,
            refill: Arc::new(tokio::sync::Notify::new()),
            stop: tokio_util::sync::CancellationToken::new(),
        });
        let keeper = Arc::downgrade(&pool);
        let stop = pool.stop.clone();
        tokio::spawn(async move {
            loop {
                let Some(pool) = keeper.upgrade() else { return };
                pool.prune_dead();
                while pool.len() < pool.target && !stop.is_cancelled() {
                    match pool.sandbox.spawn(pool.timeout).await {
                        Ok(child) => {
                            if let Ok(mut r) = pool.ready.lock() {
                                r.push_back(child);
                            }
                        }
                        Err(e) => {
                            tracing::warn!("sandbox: cannot start a spare child: {e}");
                            break;
                        }
                    }
                }
                let refill = Arc::clone(&pool.refill);
                drop(pool);
                let notified = refill.notified();
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = notified => {}
                    _ = tokio::time::sleep(CHECK_EVERY) => {}
                }
            }
        });
        pool
    }

    /// Ready spares now.
    pub fn len(&self) -> usize {
        self.ready.lock().map(|r| r.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn prune_dead(&self) {
        if let Ok(mut r) = self.ready.lock() {
            r.retain_mut(|c| c.alive());
        }
    }

    /// A ready child: a live spare if there is one, else a fresh spawn.
    pub async fn take(&self) -> Result<Child, SandboxError> {
        let spare = {
            let mut r = self
                .ready
                .lock()
                .map_err(|_| SandboxError::new("unavailable", "spare pool lock poisoned"))?;
            let mut found = None;
            while let Some(mut c) = r.pop_front() {
                if c.alive() {
                    found = Some(c);
                    break;
                }
            }
            found
        };
        self.refill.notify_one();
        match spare {
            Some(c) => Ok(c),
            None => self.sandbox.spawn(self.timeout).await,
        }
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// Stops refilling and kills the ready spares (the pool also does this when dropped).
    pub fn stop(&self) {
        self.stop.cancel();
        if let Ok(mut r) = self.ready.lock() {
            r.clear();
        }
    }
}

impl Drop for SparePool {
    fn drop(&mut self) {
        self.stop.cancel();
        // Dropping the children kills their process groups.
        if let Ok(mut r) = self.ready.lock() {
            r.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::SandboxPolicy;

    /// Generous bounds: spawns are slow on a loaded machine, and this test must not be.
    async fn wait_for(pool: &SparePool, n: usize) {
        for _ in 0..1200 {
            if pool.len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the pool never reached {n} spares");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spares_are_replaced_when_taken_or_dead_and_die_with_the_pool() {
        let sandbox =
            Arc::new(Sandbox::new(None, SandboxPolicy::default_policy().unwrap(), false).unwrap());
        let pool = SparePool::start(sandbox.clone(), 1, Duration::from_secs(5));
        wait_for(&pool, 1).await;
        let first = pool
            .ready
            .lock()
            .unwrap()
            .front()
            .and_then(|c| c.pgid)
            .unwrap();
        nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(first),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let mut replaced = None;
        for _ in 0..1200 {
            tokio::time::sleep(Duration::from_millis(25)).await;
            let now = pool.ready.lock().unwrap().front().and_then(|c| c.pgid);
            if now.is_some() && now != Some(first) {
                replaced = now;
                break;
            }
        }
        let second = replaced.expect("the dead spare was replaced");
        let child = pool.take().await.unwrap();
        assert_eq!(child.pgid, Some(second));
        drop(child);
        wait_for(&pool, 1).await;
        let third = pool
            .ready
            .lock()
            .unwrap()
            .front()
            .and_then(|c| c.pgid)
            .unwrap();
        assert_ne!(third, second, "a taken spare is never handed out again");
        drop(pool);
        // Dropping the pool killed its spare.
        let mut gone = false;
        for _ in 0..1500 {
            let status =
                std::fs::read_to_string(format!("/proc/{third}/status")).unwrap_or_default();
            if status.is_empty()
                || status
                    .lines()
                    .any(|l| l.starts_with("State:") && l.contains('Z'))
            {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone, "spare {third} outlived its pool");
    }
}
