//! The in-flight guard: a request counts against its replica from the moment it is picked
//! until its response body ends or is dropped (client gone), never just until headers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::replica::Replica;

/// Holds one request's share of a replica's in-flight counters; dropping it releases them.
#[derive(Debug)]
pub struct InFlightGuard {
    replica: Arc<Replica>,
    prompt_tokens: u64,
    /// The replica answered: the end of this request frees the API process that served it.
    answered: bool,
}

impl InFlightGuard {
    pub fn acquire(replica: Arc<Replica>, prompt_tokens: u64) -> Self {
        replica.load.in_flight.fetch_add(1, Ordering::Relaxed);
        replica.load.arrivals.fetch_add(1, Ordering::Relaxed);
        replica.load.in_flight_prompt_tokens.fetch_add(prompt_tokens, Ordering::Relaxed);
        Self { replica, prompt_tokens, answered: false }
    }

    /// Acquires only while the replica has fewer than `limit` requests in flight, so that
    /// concurrent requests cannot push it past its limit between the pick and the count.
    pub fn try_acquire(replica: Arc<Replica>, prompt_tokens: u64, limit: u64) -> Option<Self> {
        let load = &replica.load;
        load.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1))
            .ok()?;
        load.arrivals.fetch_add(1, Ordering::Relaxed);
        load.in_flight_prompt_tokens.fetch_add(prompt_tokens, Ordering::Relaxed);
        Some(Self { replica, prompt_tokens, answered: false })
    }

    pub fn replica(&self) -> &Arc<Replica> {
        &self.replica
    }

    /// The replica answered this request (its response is being relayed): its end is a
    /// freed API process ([`super::freed`]). A send dropped unanswered (a hedge's loser, a
    /// failure) frees none that the gateway could count on.
    pub fn mark_answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let load = &self.replica.load;
        let before = load.in_flight.fetch_sub(1, Ordering::Relaxed);
        load.in_flight_prompt_tokens.fetch_sub(self.prompt_tokens, Ordering::Relaxed);
        if before == 1 {
            load.idle.notify_waiters();
        }
        if self.answered {
            load.freed.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::ReplicaConfig;

    #[test]
    fn counts_while_held_and_releases_on_drop() {
        let replica = Arc::new(Replica::new(&ReplicaConfig {
            name: "r".into(),
            authority: "127.0.0.1:1".into(),
            node: "n".into(),
            tls: false,
            placement: Default::default(),
        }));
        let first = InFlightGuard::acquire(replica.clone(), 100);
        let second = InFlightGuard::acquire(replica.clone(), 20);
        assert_eq!(replica.load.in_flight(), 2);
        assert_eq!(replica.load.in_flight_prompt_tokens(), 120);
        drop(first);
        assert_eq!(replica.load.in_flight(), 1);
        assert_eq!(replica.load.in_flight_prompt_tokens(), 20);
        drop(second);
        assert_eq!(replica.load.in_flight(), 0);
    }
}
