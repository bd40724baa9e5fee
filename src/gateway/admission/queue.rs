//! The admission wait queue: first come, first served. A newcomer joins behind every
//! earlier waiter; a freed place wakes the waiter at the front only, which either takes it
//! or, when the place is of no use to it (another pool's replica), hands the wake-up to
//! the waiter behind it. No stampede of every waiter on every release, and no request
//! overtaken by a later one that wanted the same room.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct WaitQueue {
    // Held for a few instructions, never across an await.
    waiters: Mutex<VecDeque<Arc<Waiter>>>,
    /// The queue's length, written under the lock: every request asks whether anyone waits
    /// (and every release whether to wake anyone), and the answer is almost always "no".
    length: AtomicUsize,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    wake: Notify,
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

    /// Joins at the back unless `capacity` waiters are already queued.
    pub fn join(&self, capacity: usize) -> Option<Ticket<'_>> {
        let mut waiters = self.waiters.lock();
        if waiters.len() >= capacity {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let waiter = Arc::new(Waiter { id, wake: Notify::new() });
        waiters.push_back(waiter.clone());
        self.length.store(waiters.len(), Ordering::SeqCst);
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
        if let Some(front) = self.waiters.lock().front() {
            front.wake.notify_one();
        }
    }

    fn wake_behind(&self, id: u64) {
        let waiters = self.waiters.lock();
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
        self.queue.waiters.lock().front().is_some_and(|front| front.id == self.waiter.id)
    }

    /// Hands a wake-up this waiter could not use to the waiter behind it.
    pub fn pass_on(&self) {
        self.queue.wake_behind(self.waiter.id);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut waiters = self.queue.waiters.lock();
        if let Some(at) = waiters.iter().position(|waiter| waiter.id == self.waiter.id) {
            waiters.remove(at);
        }
        self.queue.length.store(waiters.len(), Ordering::SeqCst);
        // A wake-up this waiter received but did not use (it left: admitted, timed out or
        // gone) belongs to the next one; a spurious wake-up only costs it one check.
        if let Some(front) = waiters.front() {
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
}
