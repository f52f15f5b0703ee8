//! The provider's answers being read or held at once, over every turn of a gateway, and how
//! they share that room.
//!
//! Each answer's bytes take their place as they arrive ([`AnswerBytes::take`]) and keep it
//! until what was made of them is sent ([`crate::agent::Held`]). When the pool is full the
//! answer that needs room does not fail at once, which let one client whose provider
//! answered 30 MB (and who read nothing back) have an honest client refused on 12 of 13
//! tries (front round 8):
//!
//! - it takes the room of the **largest answer still arriving**, when that one holds more
//!   than the asker and more than [`KEPT_SHARE`] of the pool: that answer ends at once with
//!   a 503 and lets its places go. A small answer is never ended for a big one, and an
//!   answer within its share (a long streamed answer is a megabyte) is never ended at all.
//! - then it **waits in line** ([`ANSWER_WAIT`] at most, first come first served: places
//!   let go go to those waiting before anyone else) for places to be let go, which answers
//!   already read do once their client has them, or their connection is dropped for
//!   reading too slowly ([`crate::host::serve::MIN_READ_RATE`], `[server] write_timeout_s`).
//! - past that wait, a 503 with `Retry-After`.
//!
//! No answer waits for another that waits for it: whoever asks for room while a bigger
//! answer arrives ends that one, so the answers arriving cannot all wait on each other; the
//! biggest may wait, and is ended by the next smaller one that asks.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_util::sync::CancellationToken;

use crate::agent::{Held, join_places};

/// The answers read or held at once, in bytes. An answer may be 32 MiB and becomes a few
/// copies of itself (text, parsed, the client's response): 100 clients asking for a turn
/// whose provider answered 30 MB, and reading nothing, held 3.5 GB, and 96 model lists of
/// 32 MB 5.66 GB (front round 7).
pub const ANSWER_BYTES_IN_FLIGHT: usize = 256 * 1024 * 1024;

/// The longest an answer waits in line for room before it is a 503: as long as a client
/// that reads nothing may hold a response (`[server] write_timeout_s`'s default).
pub const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// An answer holding at most this part of the pool (4 MiB of 256) is never ended to make
/// room for another: 64 of them fill the pool, far more than honest turns read at once.
pub const KEPT_SHARE: usize = 64;

/// The places (KiB) of every answer of one provider client.
pub struct AnswerPool {
    places: Arc<Semaphore>,
    kib: usize,
    wait: Duration,
    /// The answers still arriving, by number.
    arriving: parking_lot::Mutex<HashMap<u64, Arc<Arriving>>>,
    next: AtomicU64,
}

/// An answer still arriving: what it holds and how to end it.
struct Arriving {
    kib: AtomicUsize,
    ended: CancellationToken,
}

impl AnswerPool {
    pub fn new(bytes: usize, wait: Duration) -> Arc<Self> {
        let kib = (bytes / 1024).max(1);
        Arc::new(AnswerPool {
            places: Arc::new(Semaphore::new(kib)),
            kib,
            wait,
            arriving: parking_lot::Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        })
    }

    /// A new answer, holding nothing yet.
    pub fn answer(self: &Arc<Self>) -> AnswerBytes {
        self.answer_from(Held::default())
    }

    /// A new answer that takes its first places from `seed`, its turn's from earlier
    /// rounds (those of this pool no one else holds; the others are kept as they are).
    pub fn answer_from(self: &Arc<Self>, seed: Held) -> AnswerBytes {
        let (owned, kept) = seed.into_owned();
        let mut held: Option<OwnedSemaphorePermit> = None;
        let mut others = kept;
        for p in owned {
            if !Arc::ptr_eq(p.semaphore(), &self.places) {
                others.add(Held::new(p));
                continue;
            }
            join_places(&mut held, p);
        }
        let kib = held.as_ref().map_or(0, |p| p.num_permits());
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let me = Arc::new(Arriving {
            kib: AtomicUsize::new(kib),
            ended: CancellationToken::new(),
        });
        self.arriving.lock().insert(number, Arc::clone(&me));
        AnswerBytes {
            pool: Arc::clone(self),
            number,
            me,
            // The seed stands for bytes already counted: this answer's own start at 0 and
            // take new places only past it.
            bytes: 0,
            held,
            others,
        }
    }

    /// Ends the largest answer arriving (the newest of equals) if it is larger than the
    /// asker (or as large and newer) and holds at least its share: [`KEPT_SHARE`] of the
    /// pool, or less when more answers arrive than that many shares hold, so a pool full of
    /// answers arriving always has one to end (equal answers of 4 MiB each filled it, and
    /// none was larger than another); true when one was ended.
    fn make_room(&self, asker: u64, asker_kib: usize) -> bool {
        let arriving = self.arriving.lock();
        let share = (self.kib / KEPT_SHARE).min(self.kib / arriving.len().max(1));
        let largest = arriving
            .iter()
            .filter(|(n, a)| **n != asker && !a.ended.is_cancelled())
            .map(|(n, a)| (a.kib.load(Ordering::Relaxed), *n, a))
            .max_by_key(|(kib, n, _)| (*kib, *n));
        match largest {
            Some((kib, n, a)) if (kib, n) > (asker_kib, asker) && kib >= share.max(1) => {
                a.ended.cancel();
                true
            }
            _ => false,
        }
    }

    /// Places free now, in KiB (for tests and the bench).
    pub fn free_kib(&self) -> usize {
        self.places.available_permits()
    }
}

/// Why an answer's bytes found no room: each reaches the client as a 503 with a retry.
#[derive(Debug, Clone, PartialEq)]
pub enum NoRoom {
    /// It waited [`ANSWER_WAIT`] in line.
    Waited,
    /// It was the largest arriving when a smaller one needed room.
    Ended,
}

impl NoRoom {
    pub fn message(&self) -> String {
        match self {
            NoRoom::Waited => format!(
                "the provider's answers in flight take {} MiB, the most this gateway holds at once, and no room was let go within {} s; retry shortly",
                ANSWER_BYTES_IN_FLIGHT >> 20,
                ANSWER_WAIT.as_secs()
            ),
            NoRoom::Ended => format!(
                "the provider's answers in flight take {} MiB, the most this gateway holds at once, and this one was the largest still arriving; retry shortly",
                ANSWER_BYTES_IN_FLIGHT >> 20
            ),
        }
    }
}

/// One answer's places in its [`AnswerPool`], taken as its bytes arrive.
pub struct AnswerBytes {
    pool: Arc<AnswerPool>,
    number: u64,
    me: Arc<Arriving>,
    bytes: usize,
    held: Option<OwnedSemaphorePermit>,
    /// Places of the seed this pool cannot merge (shared, or another pool's): kept, and
    /// handed on with the rest.
    others: Held,
}

impl AnswerBytes {
    /// Cancelled when this answer is ended to make room: a read waiting for the provider's
    /// next bytes stops at once, not when they come.
    pub fn ended(&self) -> CancellationToken {
        self.me.ended.clone()
    }

    /// `n` more bytes; waits in line for room when there is none (see the module).
    pub async fn take(&mut self, n: usize) -> Result<(), NoRoom> {
        if self.me.ended.is_cancelled() {
            return Err(NoRoom::Ended);
        }
        self.bytes += n;
        let want = self.bytes.div_ceil(1024);
        let have = self.held.as_ref().map_or(0, |p| p.num_permits());
        if want <= have {
            return Ok(());
        }
        let need = u32::try_from(want - have).unwrap_or(u32::MAX);
        let more = match Arc::clone(&self.pool.places).try_acquire_many_owned(need) {
            Ok(p) => p,
            Err(TryAcquireError::NoPermits) => {
                self.pool.make_room(self.number, have);
                let places = Arc::clone(&self.pool.places);
                tokio::select! {
                    got = tokio::time::timeout(self.pool.wait, places.acquire_many_owned(need)) => match got {
                        Ok(Ok(p)) => p,
                        _ => return Err(NoRoom::Waited),
                    },
                    _ = self.me.ended.cancelled() => return Err(NoRoom::Ended),
                }
            }
            Err(TryAcquireError::Closed) => return Err(NoRoom::Waited),
        };
        join_places(&mut self.held, more);
        self.me.kib.store(want, Ordering::Relaxed);
        Ok(())
    }

    /// The places taken, to be held until what was made of the answer is sent; the answer
    /// is no longer arriving, so no other can end it.
    pub fn into_held(mut self) -> Held {
        let mut held = std::mem::take(&mut self.others);
        if let Some(p) = self.held.take() {
            held.add(Held::new(p));
        }
        held
    }
}

impl Drop for AnswerBytes {
    fn drop(&mut self) {
        self.pool.arriving.lock().remove(&self.number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(kib: usize, wait_ms: u64) -> Arc<AnswerPool> {
        AnswerPool::new(kib * 1024, Duration::from_millis(wait_ms))
    }

    /// A turn's next answer takes its first places from those its earlier rounds hold: 64
    /// turns whose first answers filled the pool go on to their second round.
    #[tokio::test]
    async fn a_next_round_starts_from_the_places_its_turn_holds() {
        let p = pool(64 * 4, 5_000);
        let mut firsts = Vec::new();
        for _ in 0..64 {
            let mut a = p.answer();
            a.take(4 * 1024).await.unwrap();
            firsts.push(a.into_held());
        }
        assert_eq!(p.free_kib(), 0);
        let mut seconds = Vec::new();
        for held in firsts {
            let mut a = p.answer_from(held);
            tokio::time::timeout(Duration::from_secs(1), a.take(3 * 1024))
                .await
                .expect("a next round waited with its turn's places in hand")
                .unwrap();
            seconds.push(a.into_held());
        }
        drop(seconds);
        assert_eq!(p.free_kib(), 64 * 4);
    }

    /// Equal answers arriving that fill the pool: the newest is ended for an older one.
    #[tokio::test]
    async fn equal_answers_filling_the_pool_do_not_wait_on_each_other() {
        let p = pool(64 * 4, 5_000);
        let mut all = Vec::new();
        for _ in 0..64 {
            let mut a = p.answer();
            a.take(4 * 1024).await.unwrap();
            all.push(a);
        }
        let mut first = all.remove(0);
        let newest = all.last().unwrap().ended();
        let asking = tokio::spawn(async move { first.take(1024).await });
        tokio::time::timeout(Duration::from_secs(5), newest.cancelled())
            .await
            .unwrap();
        all.pop();
        assert_eq!(asking.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn a_small_answer_ends_the_largest_arriving_and_takes_its_room() {
        let p = pool(100, 5_000);
        let mut big = p.answer();
        big.take(90 * 1024).await.unwrap();
        let mut small = p.answer();
        small.take(5 * 1024).await.unwrap();
        let ended = big.ended();
        let asking = tokio::spawn(async move {
            let r = small.take(20 * 1024).await;
            (r, small)
        });
        tokio::time::timeout(Duration::from_secs(5), ended.cancelled())
            .await
            .unwrap();
        // The ended answer's next take says so, and dropping it lets its room go.
        assert_eq!(big.take(1).await, Err(NoRoom::Ended));
        drop(big);
        let (r, small) = asking.await.unwrap();
        assert_eq!(r, Ok(()));
        assert_eq!(p.free_kib(), 100 - 25);
        drop(small);
        assert_eq!(p.free_kib(), 100);
    }

    /// A pool of 640 KiB (a kept share of 10) with `held` KiB already read and held.
    async fn with_held(held: usize) -> (Arc<AnswerPool>, Held) {
        let p = pool(640, 100);
        let mut done = p.answer();
        done.take(held * 1024).await.unwrap();
        let held = done.into_held();
        (p, held)
    }

    #[tokio::test]
    async fn an_answer_within_its_share_is_never_ended() {
        let (p, _held) = with_held(626).await;
        let mut within = p.answer();
        within.take(9 * 1024).await.unwrap();
        let mut small = p.answer();
        small.take(5 * 1024).await.unwrap();
        let mut asker = p.answer();
        assert_eq!(asker.take(6 * 1024).await, Err(NoRoom::Waited));
        assert!(!within.ended().is_cancelled());
    }

    #[tokio::test]
    async fn only_the_largest_past_its_share_is_ended() {
        let (p, _held) = with_held(600).await;
        let mut big = p.answer();
        big.take(20 * 1024).await.unwrap();
        let mut mid = p.answer();
        mid.take(15 * 1024).await.unwrap();
        let mut small = p.answer();
        small.take(5 * 1024).await.unwrap();
        let asking = small.take(1024);
        assert_eq!(asking.await, Err(NoRoom::Waited));
        assert!(big.ended().is_cancelled());
        assert!(!mid.ended().is_cancelled());
    }

    #[tokio::test]
    async fn the_largest_waits_in_line_and_gets_what_is_let_go_first() {
        let p = pool(100, 5_000);
        let done = p.answer();
        let mut done = done;
        done.take(100 * 1024).await.unwrap();
        let held = done.into_held();
        let mut waiting = p.answer();
        let first = tokio::spawn(async move {
            let r = waiting.take(10 * 1024).await;
            (r, waiting)
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A newcomer finds no room: what is let go goes to the one already waiting.
        let mut newcomer = p.answer();
        let late = tokio::spawn(async move { newcomer.take(10 * 1024).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        let (r, _waiting) = first.await.unwrap();
        assert_eq!(r, Ok(()));
        assert_eq!(late.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn a_wait_ends_with_no_room_when_nothing_is_let_go() {
        let p = pool(10, 50);
        let mut done = p.answer();
        done.take(10 * 1024).await.unwrap();
        let _held = done.into_held();
        let mut late = p.answer();
        assert_eq!(late.take(1).await, Err(NoRoom::Waited));
        assert!(NoRoom::Waited.message().contains("retry"));
    }

    #[tokio::test]
    async fn a_waiting_largest_answer_is_ended_by_a_smaller_asker() {
        let p = pool(100, 5_000);
        let mut big = p.answer();
        big.take(80 * 1024).await.unwrap();
        let mut small = p.answer();
        small.take(20 * 1024).await.unwrap();
        // The largest asks first and waits (no one larger to end)...
        let big_waits = tokio::spawn(async move { big.take(10 * 1024).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        // ...and the smaller one asking ends it, then gets its room.
        let r = tokio::time::timeout(Duration::from_secs(5), small.take(10 * 1024))
            .await
            .unwrap();
        assert_eq!(big_waits.await.unwrap(), Err(NoRoom::Ended));
        assert_eq!(r, Ok(()));
    }
}
