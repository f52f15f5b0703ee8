//! Spare children for long-lived hosts (the gateway, `mcp serve`): children spawned and
//! brought to `ready` before they are needed, so a run pays only for send-run-receive. Each
//! spare is used for exactly one run and then killed, like any child: isolation is
//! unchanged. A spare that dies while idle is replaced; spares die with the pool (kill on
//! drop) and with the host (parent-death signal).
//!
//! How many: `[sandbox] spares` are kept ready at all times. Under a burst (a take less
//! than [`BURST_WINDOW`] after the previous one) the target grows by one per take, up to
//! `[sandbox] max_spares`, and falls back to `spares` after [`SHRINK_AFTER`] without a
//! take, the extra children killed: memory is bounded by `max_spares` idle children
//! (about 10 MiB of private memory each). Refills start [`PARALLEL_STARTS`] children at once, one per core
//! here: a start is CPU-bound, so more at once would only slow each.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::task::JoinSet;

use super::{Child, Sandbox, SandboxError};

/// How often idle spares are checked for having died.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Takes closer together than this are a burst.
pub const BURST_WINDOW: Duration = Duration::from_secs(1);

/// A pool grown by a burst shrinks back after this long without a take: bursts come in
/// series (an agent's turn is several runs a few seconds apart), and the next one should
/// find the pool still grown.
pub const SHRINK_AFTER: Duration = Duration::from_secs(120);

/// Children started at once by a refill.
pub const PARALLEL_STARTS: usize = 2;

/// Spares kept ready (`min`) and the most a burst may grow the pool to (`max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    pub min: usize,
    pub max: usize,
}

impl Sizing {
    /// The config's `[sandbox] spares` and `max_spares`.
    pub fn of(config: &crate::config::SandboxConfig) -> Self {
        Sizing {
            min: config.spares,
            max: config.max_spares.max(config.spares),
        }
    }
}

struct State {
    ready: VecDeque<Child>,
    starting: usize,
    target: usize,
    last_take: Option<Instant>,
    /// Starts that failed in a row, and when the last one did: a host whose starts fail (a
    /// Node that went away, a full process table) backs off ([`backoff`]) instead of
    /// starting a child every loop, and a taker waiting for a start that failed starts its
    /// own.
    failures: u32,
    failed_at: Option<Instant>,
}

impl State {
    /// How long refills must still wait after failed starts.
    fn backing_off(&self) -> Duration {
        match self.failed_at {
            Some(at) if self.failures > 0 => {
                (at + backoff(self.failures)).saturating_duration_since(Instant::now())
            }
            _ => Duration::ZERO,
        }
    }
}

/// The wait before refilling after `failures` failed starts in a row: 100 ms, doubling,
/// at most 30 s.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64 << failures.saturating_sub(1).min(9)).min(Duration::from_secs(30))
}

pub struct SparePool {
    sandbox: Arc<Sandbox>,
    state: Mutex<State>,
    sizing: Sizing,
    timeout: Duration,
    /// Wakes the keeper: a take, a stop.
    wake: tokio::sync::Notify,
    /// Wakes takers waiting for a spare that is starting.
    arrived: tokio::sync::Notify,
    stop: tokio_util::sync::CancellationToken,
}

impl SparePool {
    /// Starts keeping spares ready. `timeout` is the run deadline the spares are prepared
    /// for (their CPU rlimit).
    pub fn start(sandbox: Arc<Sandbox>, sizing: Sizing, timeout: Duration) -> Arc<Self> {
        let pool = Arc::new(SparePool {
            sandbox,
            state: Mutex::new(State {
                ready: VecDeque::new(),
                starting: 0,
                target: sizing.min,
                last_take: None,
                failures: 0,
                failed_at: None,
            }),
            sizing,
            timeout,
            wake: tokio::sync::Notify::new(),
            arrived: tokio::sync::Notify::new(),
            stop: tokio_util::sync::CancellationToken::new(),
        });
        let keeper = Arc::downgrade(&pool);
        let stop = pool.stop.clone();
        tokio::spawn(async move {
            let mut starts: JoinSet<Result<Child, SandboxError>> = JoinSet::new();
            loop {
                let Some(pool) = keeper.upgrade() else { return };
                if stop.is_cancelled() {
                    return;
                }
                let check = pool.tend(&mut starts);
                let pool = Arc::downgrade(&pool);
                tokio::select! {
                    _ = stop.cancelled() => return,
                    Some(done) = starts.join_next(), if !starts.is_empty() => {
                        let Some(pool) = pool.upgrade() else { return };
                        match done {
                            Ok(Ok(child)) => pool.started(Some(child)),
                            Ok(Err(e)) => {
                                tracing::warn!("sandbox: cannot start a spare child: {e}");
                                pool.started(None);
                            }
                            Err(_) => pool.started(None),
                        }
                    }
                    _ = async {
                        match pool.upgrade() {
                            Some(p) => p.wake.notified().await,
                            None => std::future::pending().await,
                        }
                    } => {}
                    _ = tokio::time::sleep(check) => {}
                }
            }
        });
        pool
    }

    /// A start ended: a child to keep, or a failure to back off from.
    fn started(&self, child: Option<Child>) {
        let mut st = self.state.lock();
        st.starting = st.starting.saturating_sub(1);
        match child {
            Some(child) => {
                st.failures = 0;
                st.ready.push_back(child);
            }
            None => {
                st.failures = st.failures.saturating_add(1);
                st.failed_at = Some(Instant::now());
            }
        }
        drop(st);
        self.arrived.notify_waiters();
    }

    /// Prunes dead spares, shrinks after a quiet spell, and starts what the target lacks,
    /// unless failed starts put the next try later. Says when to look again.
    fn tend(&self, starts: &mut JoinSet<Result<Child, SandboxError>>) -> Duration {
        let mut st = self.state.lock();
        st.ready.retain_mut(|c| c.alive());
        let quiet = st.last_take.is_none_or(|t| t.elapsed() >= SHRINK_AFTER);
        if quiet && st.target > self.sizing.min {
            st.target = self.sizing.min;
        }
        while st.ready.len() > st.target {
            // Dropping a child kills its group.
            st.ready.pop_back();
        }
        let wait = st.backing_off();
        if !wait.is_zero() {
            return wait.min(CHECK_EVERY);
        }
        while st.ready.len() + st.starting < st.target && st.starting < PARALLEL_STARTS {
            st.starting += 1;
            let sandbox = Arc::clone(&self.sandbox);
            let timeout = self.timeout;
            starts.spawn(async move { sandbox.spawn(timeout).await });
        }
        CHECK_EVERY
    }

    /// Ready spares now.
    pub fn len(&self) -> usize {
        self.state.lock().ready.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The target the pool is keeping now (`min` at rest, up to `max` in a burst).
    pub fn target(&self) -> usize {
        self.state.lock().target
    }

    /// A ready child: a live spare if there is one; else the next one that finishes
    /// starting, if any is starting; else a fresh spawn of its own.
    pub async fn take(&self) -> Result<Child, SandboxError> {
        {
            let mut st = self.state.lock();
            let now = Instant::now();
            if st
                .last_take
                .is_some_and(|t| now.duration_since(t) < BURST_WINDOW)
            {
                st.target = (st.target + 1).min(self.sizing.max);
            }
            st.last_take = Some(now);
        }
        self.wake.notify_one();
        let waited = Instant::now();
        let startup = Duration::from_millis(self.sandbox.policy().limits.startup_timeout_ms);
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            // Registered before looking, so an arrival in between is not missed.
            arrived.as_mut().enable();
            let (starting, failed) = {
                let mut st = self.state.lock();
                while let Some(mut c) = st.ready.pop_front() {
                    if c.alive() {
                        drop(st);
                        self.wake.notify_one();
                        return Ok(c);
                    }
                }
                (st.starting, st.failed_at.is_some_and(|t| t >= waited))
            };
            // Its own start when none is coming: none starting, a start that failed while
            // it waited (the next may be backed off), a stopped pool, a wait too long.
            if starting == 0 || failed || self.stop.is_cancelled() || waited.elapsed() > startup {
                let own = self.sandbox.spawn(self.timeout).await;
                if own.is_ok() {
                    // Starts work again: refills need not wait out their back-off.
                    let mut st = self.state.lock();
                    if std::mem::take(&mut st.failures) > 0 {
                        drop(st);
                        self.wake.notify_one();
                    }
                }
                return own;
            }
            let _ = tokio::time::timeout(startup, arrived).await;
        }
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// Stops refilling and kills the ready spares (the pool also does this when dropped).
    pub fn stop(&self) {
        self.stop.cancel();
        self.state.lock().ready.clear();
        self.arrived.notify_waiters();
    }
}

impl Drop for SparePool {
    fn drop(&mut self) {
        self.stop.cancel();
        // Dropping the children kills their process groups.
        self.state.lock().ready.clear();
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

    /// The process group of the first ready spare.
    fn first_group(pool: &SparePool) -> Option<crate::process::Group> {
        let st = pool.state.lock();
        st.ready.front().map(|c| c.process.group().clone())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spares_are_replaced_when_taken_or_dead_and_die_with_the_pool() {
        let sandbox =
            Arc::new(Sandbox::new(None, SandboxPolicy::default_policy().unwrap(), false).unwrap());
        let pool = SparePool::start(
            sandbox.clone(),
            Sizing { min: 1, max: 1 },
            Duration::from_secs(5),
        );
        wait_for(&pool, 1).await;
        let group = first_group(&pool).unwrap();
        let first = group.id().unwrap();
        group.kill();
        let mut replaced = None;
        for _ in 0..1200 {
            tokio::time::sleep(Duration::from_millis(25)).await;
            let now = first_group(&pool).and_then(|g| g.id());
            if now.is_some() && now != Some(first) {
                replaced = now;
                break;
            }
        }
        let second = replaced.expect("the dead spare was replaced");
        let child = pool.take().await.unwrap();
        assert_eq!(child.process.group().id(), Some(second));
        drop(child);
        wait_for(&pool, 1).await;
        let third = first_group(&pool).and_then(|g| g.id()).unwrap();
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_grows_the_pool_up_to_its_max_and_every_take_gets_a_fresh_child() {
        let sandbox =
            Arc::new(Sandbox::new(None, SandboxPolicy::default_policy().unwrap(), false).unwrap());
        let pool = SparePool::start(
            sandbox.clone(),
            Sizing { min: 1, max: 3 },
            Duration::from_secs(5),
        );
        wait_for(&pool, 1).await;
        assert_eq!(pool.target(), 1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..6 {
            let mut child = pool.take().await.unwrap();
            assert!(child.alive());
            assert!(
                seen.insert(child.process.group().id()),
                "a child was handed out twice"
            );
        }
        assert_eq!(
            pool.target(),
            3,
            "six takes in a burst grow the target to max"
        );
        wait_for(&pool, 3).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(pool.len() <= 3, "never more than max ready: {}", pool.len());
    }

    /// Starts that fail are retried with a growing wait, not in a loop (review 26 F3: a
    /// host whose starts all failed started 7,836 children in 85 s), and a taker gets the
    /// start's own error, not the run's deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_starts_back_off_and_a_taker_gets_their_error() {
        let mut policy = SandboxPolicy::default_policy().unwrap();
        // No child is ready within 1 ms: every start fails, however fast the machine.
        policy.limits.startup_timeout_ms = 1;
        let sandbox = Arc::new(
            tokio::task::spawn_blocking(move || Sandbox::new(None, policy, false))
                .await
                .unwrap()
                .unwrap(),
        );
        let pool = SparePool::start(sandbox, Sizing { min: 1, max: 1 }, Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let failures = pool.state.lock().failures;
        // 100 + 200 + 400 + 800 ms of waits fit in 2 s: at most five starts, on any machine.
        assert!((1..=5).contains(&failures), "{failures} starts in 2 s");
        let e = pool.take().await.err().expect("no child starts in 1 ms");
        assert_eq!(e.code, "timeout");
        assert!(e.message.contains("startup_timeout_ms"), "{e}");
    }
}
