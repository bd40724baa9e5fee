//! API-server processes (vLLM's `--api-server-count`), modelled as serial CPU resources
//! that share one listening socket, and the choice of process for each accepted connection.
//!
//! # This is a model
//! Each worker has a "busy until" point in simulated time. Work charged to it starts at
//! `max(earliest, busy_until)` and moves `busy_until` to its end, so requests pinned to one
//! worker queue behind each other while other workers sit idle. No lock is held: the update
//! is one compare-and-swap loop on an atomic.
//!
//! # Which worker accepts a connection
//! Processes blocked in `epoll_wait` on a shared listening socket are woken in LIFO order by
//! Linux, so the process that most recently went back to waiting takes the next connection
//! (the well-known "one worker takes most of the load" effect). The model: among idle
//! workers (no queued CPU work and no accepted connection still waiting for its first
//! request), pick the one that became idle most recently (ties: lowest index); if none is
//! idle, the one with the fewest connections still to send a request, then the one that
//! frees up first. It is deterministic (no random choice), so a few
//! keep-alive connections opened on a quiet replica land on the same worker, as in the
//! field, while a burst of fresh connections spreads over the workers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::clock::SimTime;

#[derive(Debug, Default)]
struct Worker {
    /// Simulated nanoseconds at which the queued CPU work ends.
    busy_until: AtomicU64,
    /// Accepted connections that have not sent their first request yet.
    awaiting_first_request: AtomicU64,
    connections: AtomicU64,
    requests: AtomicU64,
}

/// The API-server processes of one replica.
#[derive(Debug)]
pub struct ApiWorkers {
    workers: Vec<Worker>,
}

impl ApiWorkers {
    pub fn new(count: usize) -> Self {
        Self { workers: (0..count.max(1)).map(|_| Worker::default()).collect() }
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Picks the worker for a connection accepted at `now` (see the module docs) and counts it.
    pub fn choose_for_accept(&self, now: SimTime) -> usize {
        let idle = self
            .workers
            .iter()
            .enumerate()
            .filter(|(_, worker)| {
                worker.busy_until.load(Ordering::Acquire) <= now.0
                    && worker.awaiting_first_request.load(Ordering::Acquire) == 0
            })
            // `max_by_key` keeps the last maximum; reverse so ties go to the lowest index.
            .rev()
            .max_by_key(|(_, worker)| worker.busy_until.load(Ordering::Acquire))
            .map(|(index, _)| index);
        let chosen = idle.unwrap_or_else(|| {
            self.workers
                .iter()
                .enumerate()
                .min_by_key(|(_, worker)| {
                    (
                        worker.awaiting_first_request.load(Ordering::Acquire),
                        worker.busy_until.load(Ordering::Acquire).max(now.0),
                    )
                })
                .map(|(index, _)| index)
                .unwrap_or(0)
        });
        let worker = &self.workers[chosen];
        worker.connections.fetch_add(1, Ordering::Relaxed);
        worker.awaiting_first_request.fetch_add(1, Ordering::AcqRel);
        chosen
    }

    /// Charges `cost_us` of CPU work to `worker`, starting no earlier than `earliest`;
    /// returns when the work ends.
    pub fn charge(&self, worker: usize, earliest: SimTime, cost_us: f64) -> SimTime {
        let busy_until = &self.workers[worker].busy_until;
        let mut current = busy_until.load(Ordering::Acquire);
        loop {
            let end = SimTime(current.max(earliest.0)).plus_us(cost_us);
            match busy_until.compare_exchange_weak(
                current,
                end.0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return end,
                Err(actual) => current = actual,
            }
        }
    }

    pub fn count_request(&self, worker: usize) {
        self.workers[worker].requests.fetch_add(1, Ordering::Relaxed);
    }

    pub fn requests_per_worker(&self) -> Vec<u64> {
        self.workers.iter().map(|w| w.requests.load(Ordering::Relaxed)).collect()
    }

    pub fn connections_per_worker(&self) -> Vec<u64> {
        self.workers.iter().map(|w| w.connections.load(Ordering::Relaxed)).collect()
    }
}

/// One accepted connection's tie to its worker; clears the "awaiting first request" mark on
/// the first request or when the connection closes without one.
#[derive(Debug)]
pub struct PinnedConnection {
    workers: Arc<ApiWorkers>,
    pub worker: usize,
    first_request_seen: AtomicBool,
}

impl PinnedConnection {
    pub fn new(workers: Arc<ApiWorkers>, worker: usize) -> Self {
        Self { workers, worker, first_request_seen: AtomicBool::new(false) }
    }

    pub fn request_arrived(&self) {
        if !self.first_request_seen.swap(true, Ordering::AcqRel) {
            self.workers.workers[self.worker].awaiting_first_request.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for PinnedConnection {
    fn drop(&mut self) {
        self.request_arrived();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_on_one_worker_queues() {
        let workers = ApiWorkers::new(2);
        let first = workers.charge(0, SimTime(0), 10.0);
        let second = workers.charge(0, SimTime(0), 10.0);
        let other = workers.charge(1, SimTime(0), 10.0);
        assert_eq!((first, second, other), (SimTime(10_000), SimTime(20_000), SimTime(10_000)));
        // Work that becomes possible later starts later.
        assert_eq!(workers.charge(1, SimTime(50_000), 1.0), SimTime(51_000));
    }

    #[test]
    fn quiet_connections_pile_on_one_worker_and_a_burst_spreads() {
        let workers = Arc::new(ApiWorkers::new(4));
        // Sequential connections, each sending a request before the next connects.
        for _ in 0..3 {
            let worker = workers.choose_for_accept(SimTime(0));
            PinnedConnection::new(workers.clone(), worker).request_arrived();
            assert_eq!(worker, 0);
        }
        // A burst: each accepted connection has not sent its request when the next arrives.
        let burst: Vec<usize> = (0..6).map(|_| workers.choose_for_accept(SimTime(1))).collect();
        assert_eq!(&burst[..4], &[0, 1, 2, 3]);
        assert_eq!(workers.connections_per_worker().iter().sum::<u64>(), 9);
    }

    #[test]
    fn most_recently_idle_worker_wins() {
        let workers = ApiWorkers::new(3);
        workers.charge(1, SimTime(0), 5.0);
        workers.charge(2, SimTime(0), 2.0);
        assert_eq!(workers.choose_for_accept(SimTime(10_000)), 1);
        // Busy workers lose to idle ones.
        workers.charge(1, SimTime(10_000), 100.0);
        let workers_after = workers.choose_for_accept(SimTime(10_000));
        assert_ne!(workers_after, 1);
    }
}
