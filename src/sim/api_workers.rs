//! API-server processes (vLLM's `--api-server-count`), modelled as one CPU each that
//! streams output and preprocesses new requests from one event loop.
//!
//! # This is a model
//! Each worker has two kinds of work:
//! - **Output work** (`per_chunk_us` per SSE event, `response_us` per complete body) has
//!   priority and runs in arrival order on an output timeline: a "busy until" point in
//!   simulated time. Work charged to it starts at `max(ready, busy_until)` and moves
//!   `busy_until` to its end; one compare-and-swap loop on an atomic, no lock.
//! - **Preprocessing** (`request_overhead_us + tokenize_us_per_token x prompt_tokens`) only
//!   gets the time the output timeline leaves idle, in arrival order ([`PreprocessQueue`]).
//!
//! A worker is idle when it has neither output work nor preprocessing queued; the accept
//! choice ([`super::accept`]) reads that.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::clock::{SimClock, SimTime};
use super::preprocess::{OutputReading, PreprocessQueue};

#[derive(Debug, Default)]
struct Worker {
    /// Simulated nanoseconds at which the queued output work ends.
    output_busy_until: AtomicU64,
    /// All output work ever charged, in simulated nanoseconds.
    output_charged: AtomicU64,
    preprocessing: PreprocessQueue,
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

    /// Charges `cost_us` of output work to `worker`, starting no earlier than `ready`;
    /// returns when the work ends.
    pub fn charge_output(&self, worker: usize, ready: SimTime, cost_us: f64) -> SimTime {
        let state = &self.workers[worker];
        state.output_charged.fetch_add(SimTime(0).plus_us(cost_us).0, Ordering::AcqRel);
        let busy_until = &state.output_busy_until;
        let mut current = busy_until.load(Ordering::Acquire);
        loop {
            let end = SimTime(current.max(ready.0)).plus_us(cost_us);
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

    /// Preprocesses a request that arrived at `arrival` on `worker` (`cost_us` of CPU work,
    /// with the time output work leaves free) and waits until it is done; returns when it
    /// ended. The queue is looked after by a task of its own: a request whose client leaves
    /// is preprocessed all the same (the event loop notices the disconnect only later), and
    /// its worker must still come free when that work ends, not when the next request
    /// happens to look at the queue.
    pub async fn preprocess(
        self: &Arc<Self>,
        worker: usize,
        clock: &SimClock,
        arrival: SimTime,
        cost_us: f64,
    ) -> SimTime {
        let (workers, task_clock) = (self.clone(), clock.clone());
        let preprocessing = tokio::spawn(async move {
            let state = &workers.workers[worker];
            let output = || OutputReading {
                charged_ns: state.output_charged.load(Ordering::Acquire),
                busy_until: state.output_busy_until.load(Ordering::Acquire),
            };
            state.preprocessing.run(&task_clock, arrival, cost_us, output).await
        });
        preprocessing.await.unwrap_or_else(|_| clock.now())
    }

    /// No output work or preprocessing queued on `worker` at `now`: it waits in its event
    /// loop (in `epoll_wait`, where a new connection can wake it).
    pub fn is_idle(&self, worker: usize, now: SimTime) -> bool {
        let state = &self.workers[worker];
        state.output_busy_until.load(Ordering::Acquire) <= now.0
            && state.preprocessing.pending() == 0
    }

    /// Requests queued for preprocessing on `worker`.
    pub fn preprocessing_pending(&self, worker: usize) -> u64 {
        self.workers[worker].preprocessing.pending()
    }

    /// When `worker`'s queued output work ends.
    pub fn output_busy_until(&self, worker: usize) -> SimTime {
        SimTime(self.workers[worker].output_busy_until.load(Ordering::Acquire))
    }

    pub fn count_connection(&self, worker: usize) {
        self.workers[worker].connections.fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn output_work_on_one_worker_queues() {
        let workers = ApiWorkers::new(2);
        let first = workers.charge_output(0, SimTime(0), 10.0);
        let second = workers.charge_output(0, SimTime(0), 10.0);
        let other = workers.charge_output(1, SimTime(0), 10.0);
        assert_eq!((first, second, other), (SimTime(10_000), SimTime(20_000), SimTime(10_000)));
        // Work that becomes possible later starts later.
        assert_eq!(workers.charge_output(1, SimTime(50_000), 1.0), SimTime(51_000));
        assert!(!workers.is_idle(0, SimTime(15_000)));
        assert!(workers.is_idle(0, SimTime(20_000)));
    }

    #[tokio::test]
    async fn preprocessing_waits_for_output_work() {
        // A fast clock: the 1 s of simulated work below takes 1 ms of wall time.
        let clock = SimClock::new(1000.0);
        let workers = Arc::new(ApiWorkers::new(1));
        let output_end = workers.charge_output(0, clock.now(), 500_000.0);
        let done = workers.preprocess(0, &clock, clock.now(), 500_000.0).await;
        // The request could only use the CPU once the half second of output was sent.
        assert!(done >= output_end.plus_us(500_000.0), "{done:?} vs {output_end:?}");
        assert_eq!(workers.preprocessing_pending(0), 0);
        assert!(workers.is_idle(0, done));
    }

    #[tokio::test]
    async fn a_request_whose_client_left_frees_its_worker_once_preprocessed() {
        // 200 ms of simulated work, 20 ms of wall time.
        let clock = SimClock::new(10.0);
        let workers = Arc::new(ApiWorkers::new(1));
        let start = clock.now();
        let left = workers.preprocess(0, &clock, start, 200_000.0);
        // The client leaves long before its request is preprocessed.
        assert!(tokio::time::timeout(Duration::from_micros(1), left).await.is_err());
        assert_eq!(workers.preprocessing_pending(0), 1);
        // Nobody else looks at the queue, yet the work ends in its time and the worker is
        // free again (looked at in steps of 20 ms of simulated time, for at most 2 s).
        let mut freed_at = None;
        for step in 1..=100 {
            let at = start.plus_us(20_000.0 * step as f64);
            clock.sleep_until(at).await;
            if workers.preprocessing_pending(0) == 0 {
                freed_at = Some(at);
                break;
            }
        }
        let freed_at = freed_at.expect("the worker never came free");
        assert!(freed_at >= start.plus_us(200_000.0), "{freed_at:?}");
        assert!(workers.is_idle(0, freed_at));
    }
}
