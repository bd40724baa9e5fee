//! Late dispatch to a replica's API processes: a streamed request waits at the gateway
//! while its replica has `admission.max_unanswered_per_replica` streamed requests it has not
//! answered yet (no response headers: still waiting for an API process to accept their
//! connection, or being preprocessed). vLLM sends a stream's headers once the request is
//! preprocessed and handed to the engine, so the count is the replica's API backlog.
//!
//! Why: the API processes share one listening socket, and a process woken for a connection
//! accepts every connection waiting in the backlog (asyncio's accept loop). A burst sent at
//! once lands in batches on whichever processes wake first, and their requests are
//! preprocessed one after another there while other processes idle. Held here, requests
//! reach the replica as it answers, each one to a process that is free to take it. Requests
//! that are not streamed are never held: their headers come with the whole answer.

use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::FutureExt;
use parking_lot::Mutex;
use prometheus::{IntCounter, IntGauge};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::gateway::config::reliability::NO_REPLICA_LIMIT;

/// One replica's places for unanswered streamed requests.
#[derive(Debug)]
pub struct AnswerGate {
    /// First come, first served (tokio's semaphore is fair). It holds no place until the
    /// first streamed request sets its size to the limit.
    places: Semaphore,
    sizing: Mutex<Sizing>,
    /// The limit, while the semaphore holds exactly its places (a request then takes no
    /// lock); [`UNSETTLED`] otherwise.
    settled: AtomicU64,
}

/// The last limit set, and the places the semaphore holds in all, taken or free: the
/// limit's, or more while a lowered limit waits for taken places to come back.
#[derive(Debug, Default)]
struct Sizing {
    limit: u64,
    size: usize,
}

const UNSETTLED: u64 = u64::MAX;

impl Default for AnswerGate {
    fn default() -> Self {
        Self {
            places: Semaphore::new(0),
            sizing: Mutex::new(Sizing::default()),
            settled: AtomicU64::new(UNSETTLED),
        }
    }
}

impl AnswerGate {
    /// Waits for a place under `limit` ([`NO_REPLICA_LIMIT`]: none, no wait). The place is
    /// held until the returned permit is dropped, when the replica answered (or failed to).
    /// A changed limit (a reload) applies at once when raised, and as places come back when
    /// lowered.
    pub async fn enter(&self, limit: u64) -> Option<SemaphorePermit<'_>> {
        if limit == NO_REPLICA_LIMIT {
            return None;
        }
        if self.settled.load(Ordering::Acquire) != limit {
            self.resize(limit);
        }
        loop {
            // The semaphore is never closed.
            let place = self.places.acquire().await.ok()?;
            if self.settled.load(Ordering::Acquire) != UNSETTLED {
                return Some(place);
            }
            // A lowered limit (the last one set wins): a place that comes back while the
            // gate holds more than it is given up for good instead of taken.
            let mut gate = self.sizing.lock();
            if gate.size > places_for(gate.limit) {
                place.forget();
                gate.size -= 1;
                self.settle(&gate);
                continue;
            }
            return Some(place);
        }
    }

    fn resize(&self, limit: u64) {
        let mut gate = self.sizing.lock();
        gate.limit = limit;
        let wanted = places_for(limit);
        if gate.size < wanted {
            self.places.add_permits(wanted - gate.size);
            gate.size = wanted;
        } else if gate.size > wanted {
            gate.size -= self.places.forget_permits(gate.size - wanted);
        }
        self.settle(&gate);
    }

    /// Records whether the gate holds exactly its limit's places.
    fn settle(&self, gate: &Sizing) {
        let settled = if gate.size == places_for(gate.limit) { gate.limit } else { UNSETTLED };
        self.settled.store(settled, Ordering::Release);
    }

    /// [`Self::enter`], counting a request that has to wait in `held`, and in `waiting`
    /// while it does (also if it is dropped while waiting: its client left).
    pub async fn enter_counted(
        &self,
        limit: u64,
        waiting: &IntGauge,
        held: &IntCounter,
    ) -> Option<SemaphorePermit<'_>> {
        let mut entering = std::pin::pin!(self.enter(limit));
        if let Some(place) = entering.as_mut().now_or_never() {
            return place;
        }
        held.inc();
        waiting.inc();
        let _leaving = decrement_on_drop(waiting);
        entering.await
    }

    /// Streamed requests sent and not answered yet (while a limit is in force), for
    /// `/admin/replicas`.
    pub fn unanswered(&self) -> u64 {
        let size = self.sizing.lock().size;
        size.saturating_sub(self.places.available_permits()) as u64
    }
}

/// The semaphore's places for `limit`.
fn places_for(limit: u64) -> usize {
    usize::try_from(limit).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS)
}

/// Decrements `gauge` when dropped.
fn decrement_on_drop(gauge: &IntGauge) -> impl Drop + '_ {
    struct Leaving<'a>(&'a IntGauge);
    impl Drop for Leaving<'_> {
        fn drop(&mut self) {
            self.0.dec();
        }
    }
    Leaving(gauge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_past_the_limit_waits_until_one_is_answered() {
        let gate = AnswerGate::default();
        let first = gate.enter(2).now_or_never().expect("room").expect("limited");
        let _second = gate.enter(2).now_or_never().expect("room").expect("limited");
        assert_eq!(gate.unanswered(), 2);
        let mut third = Box::pin(gate.enter(2));
        assert!((&mut third).now_or_never().is_none(), "no room: it waits");
        drop(first);
        let third = third.now_or_never().expect("answered: room");
        assert!(third.is_some());
        assert_eq!(gate.unanswered(), 2);
    }

    #[test]
    fn a_request_that_waits_is_counted_and_uncounted_when_it_leaves() {
        let gate = AnswerGate::default();
        let (waiting, held) =
            (IntGauge::new("w", "w").unwrap(), IntCounter::new("h", "h").unwrap());
        let first = gate.enter_counted(1, &waiting, &held).now_or_never().expect("room");
        assert_eq!((waiting.get(), held.get()), (0, 0), "it did not wait");
        let mut second = Box::pin(gate.enter_counted(1, &waiting, &held));
        assert!((&mut second).now_or_never().is_none());
        let mut third = Box::pin(gate.enter_counted(1, &waiting, &held));
        assert!((&mut third).now_or_never().is_none());
        assert_eq!((waiting.get(), held.get()), (2, 2));
        drop(third);
        assert_eq!(waiting.get(), 1, "a client that left no longer waits");
        drop(first);
        assert!(second.now_or_never().expect("room now").is_some());
        assert_eq!((waiting.get(), held.get()), (0, 2));
    }

    #[test]
    fn a_changed_limit_applies_raised_at_once_and_lowered_as_places_come_back() {
        let gate = AnswerGate::default();
        let first = gate.enter(1).now_or_never().expect("room");
        let mut second = Box::pin(gate.enter(1));
        assert!((&mut second).now_or_never().is_none());
        // Raised to 3: the waiter gets a place, and so does one more.
        let third = gate.enter(3).now_or_never().expect("room after raising");
        let second = second.now_or_never().expect("room after raising");
        assert_eq!(gate.unanswered(), 3);
        // Lowered to 1 with three taken: nobody enters until two are answered.
        let mut fourth = Box::pin(gate.enter(1));
        assert!((&mut fourth).now_or_never().is_none());
        drop((first, third));
        assert!((&mut fourth).now_or_never().is_none(), "two places went back to the limit");
        drop(second);
        let fourth = fourth.now_or_never().expect("one place under the new limit");
        assert!(fourth.is_some());
        assert!(gate.enter(1).now_or_never().is_none(), "the limit is one again");
    }

    #[test]
    fn without_a_limit_nothing_waits_or_counts() {
        let gate = AnswerGate::default();
        for _ in 0..100 {
            assert!(gate.enter(NO_REPLICA_LIMIT).now_or_never().expect("never waits").is_none());
        }
        assert_eq!(gate.unanswered(), 0);
    }
}
