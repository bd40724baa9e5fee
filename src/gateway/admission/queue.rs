//! The admission wait queue, in fair order ([`super::fair_order`]): higher priority bands
//! first, then weighted fair turns between tenants; one flow alone is first come, first
//! served. A freed place wakes the waiter at the front only, which either takes it or,
//! when the place is of no use to it (another pool's replica), hands the wake-up to the
//! waiter behind it. No stampede of every waiter on every release. A full queue sheds its
//! last waiter for a newcomer that ranks before it (a higher band, or a lighter tenant of
//! the same band), so that a heavy tenant's backlog, not a light tenant, takes the 429s.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::fair_order::{FairClock, Rank};
use crate::gateway::config::Flow;

#[derive(Debug, Default)]
pub struct WaitQueue {
    // Held for a few instructions, never across an await.
    waiters: Mutex<Waiting>,
    /// The queue's length, written under the lock: every request asks whether anyone waits
    /// (and every release whether to wake anyone), and the answer is almost always "no".
    length: AtomicUsize,
    next_id: AtomicU64,
}

/// The waiters in service order, and the virtual clock that orders them.
#[derive(Debug, Default)]
struct Waiting {
    order: VecDeque<Arc<Waiter>>,
    clock: FairClock,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    rank: Rank,
    wake: Notify,
    /// Pushed out of a full queue by a newcomer of a higher band.
    shed: AtomicBool,
}

/// A place in the queue; dropping it leaves the queue.
#[derive(Debug)]
pub struct Ticket<'a> {
    queue: &'a WaitQueue,
    waiter: Arc<Waiter>,
}

impl WaitQueue {
    pub fn len(&self) -> usize {
        self.length.load(Ordering::SeqCst)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Joins at the back of one flow (first come, first served) unless `capacity`
    /// waiters are already queued.
    #[cfg(test)]
    pub fn join(&self, capacity: usize) -> Option<Ticket<'_>> {
        self.join_as(capacity, &Flow::default())
    }

    /// Joins in `flow`'s fair place. A full queue refuses the newcomer, unless the newcomer
    /// ranks before its last waiter (a higher band, or an earlier fair turn in the same
    /// band): that one is shed (woken to give up) instead.
    pub fn join_as(&self, capacity: usize, flow: &Flow) -> Option<Ticket<'_>> {
        let mut waiting = self.waiters.lock();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if waiting.order.len() >= capacity {
            let last = waiting.order.back()?;
            if capacity == 0 || !waiting.clock.peek(flow, id).before(&last.rank) {
                return None;
            }
            let shed = waiting.order.pop_back().expect("checked above");
            shed.shed.store(true, Ordering::SeqCst);
            shed.wake.notify_one();
        }
        let rank = waiting.clock.rank(flow, id);
        let waiter =
            Arc::new(Waiter { id, rank, wake: Notify::new(), shed: AtomicBool::new(false) });
        let at = waiting.order.iter().position(|other| rank.before(&other.rank));
        let end = waiting.order.len();
        waiting.order.insert(at.unwrap_or(end), waiter.clone());
        self.length.store(waiting.order.len(), Ordering::SeqCst);
        Some(Ticket { queue: self, waiter })
    }

    /// Wakes the waiter at the front (a place was freed or the replica set changed).
    /// A waiter that joins just after this found the queue empty tries once on joining, so
    /// the lock-free early return loses no wake-up: the length and the admission count are
    /// both read and written sequentially consistent, so either the release sees the
    /// joiner or the joiner's try sees the freed place.
    pub fn wake_front(&self) {
        if self.is_empty() {
            return;
        }
        if let Some(front) = self.waiters.lock().order.front() {
            front.wake.notify_one();
        }
    }

    fn wake_behind(&self, id: u64) {
        let waiters = &self.waiters.lock().order;
        if let Some(at) = waiters.iter().position(|waiter| waiter.id == id)
            && let Some(next) = waiters.get(at + 1)
        {
            next.wake.notify_one();
        }
    }
}

impl Ticket<'_> {
    /// Resolves when this waiter is woken; a wake-up that came before the call is kept.
    pub async fn woken(&self) {
        self.waiter.wake.notified().await;
    }

    /// Whether this waiter is at the front of the queue.
    pub fn is_front(&self) -> bool {
        let waiting = self.queue.waiters.lock();
        waiting.order.front().is_some_and(|front| front.id == self.waiter.id)
    }

    /// Whether a newcomer of a higher band pushed this waiter out of the queue.
    pub fn was_shed(&self) -> bool {
        self.waiter.shed.load(Ordering::SeqCst)
    }

    /// Hands a wake-up this waiter could not use to the waiter behind it.
    pub fn pass_on(&self) {
        self.queue.wake_behind(self.waiter.id);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut waiting = self.queue.waiters.lock();
        let at = waiting.order.iter().position(|waiter| waiter.id == self.waiter.id);
        if let Some(at) = at {
            waiting.order.remove(at);
        }
        let empty = waiting.order.is_empty();
        // Virtual time follows the turns served, from the front; a waiter shed from the back
        // (or timed out behind others) moves it not, or the next light newcomer would rank
        // behind the heavy backlog that was just cut.
        if at == Some(0) || empty {
            waiting.clock.left(&self.waiter.rank, empty);
        }
        self.queue.length.store(waiting.order.len(), Ordering::SeqCst);
        // A wake-up this waiter received but did not use (it left: admitted, timed out or
        // gone) belongs to the next one; a spurious wake-up only costs it one check.
        if let Some(front) = waiting.order.front() {
            front.wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_are_woken_one_at_a_time_in_arrival_order() {
        let queue = WaitQueue::default();
        let first = queue.join(8).unwrap();
        let second = queue.join(8).unwrap();
        assert!(first.is_front() && !second.is_front());
        queue.wake_front();
        first.woken().await;
        // The second was not woken by the first's wake-up.
        let second_woken = tokio::time::timeout(std::time::Duration::ZERO, second.woken());
        assert!(second_woken.await.is_err());
        first.pass_on();
        second.woken().await;
        drop(first);
        assert!(second.is_front());
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn a_full_queue_refuses_newcomers() {
        let queue = WaitQueue::default();
        let _held = queue.join(1).unwrap();
        assert!(queue.join(1).is_none());
        assert!(queue.join(0).is_none());
    }

    #[test]
    fn a_full_queue_sheds_a_heavy_tenants_last_waiter_for_a_light_newcomer() {
        let queue = WaitQueue::default();
        let flow = |key: &str| Flow { key: Arc::from(key), weight: 1, band: 4 };
        let mut heavy: Vec<_> = (0..4).map(|_| queue.join_as(4, &flow("heavy")).unwrap()).collect();
        // The heavy tenant's own newcomer ranks last: refused.
        assert!(queue.join_as(4, &flow("heavy")).is_none());
        // A light tenant's first request ranks second: the heavy tenant's last one goes.
        let light = queue.join_as(4, &flow("light")).expect("ranks before the last waiter");
        assert!(heavy[3].was_shed() && !heavy[2].was_shed());
        assert_eq!(queue.len(), 4);
        // The shed waiter's leaving serves no turn: the light tenant's next request still
        // ranks third, before the heavy tenant's third, which goes in turn.
        drop(heavy.pop());
        let _light_again = queue.join_as(4, &flow("light")).expect("still before the last");
        assert!(heavy[2].was_shed() && !heavy[1].was_shed());
        drop(heavy);
        assert!(light.is_front());
    }
}
