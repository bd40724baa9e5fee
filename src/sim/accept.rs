//! Which API worker accepts each connection on the shared listening socket.
//!
//! # This is a model
//! vLLM's API processes are uvicorn/asyncio servers sharing one listening socket. Two
//! mechanisms decide where a connection lands, and with keep-alive it stays there:
//! - **Who is woken**: asyncio registers the socket in each process's epoll without
//!   `EPOLLEXCLUSIVE`, so a pending connection wakes every process idle in `epoll_wait`
//!   and they race to `accept`. Model: a uniformly random idle worker (no output work or
//!   preprocessing queued) wins, drawn from a seeded generator. A worker that is busy is
//!   not waiting and does not race. If none is idle, the connection waits in the backlog
//!   for the worker that frees up first (fewest requests being preprocessed, then the
//!   earliest end of its output work).
//! - **Accept batching**: a woken asyncio process accepts in a loop until the backlog is
//!   empty (`_accept_connection` takes up to `backlog` connections per wakeup). Model: every
//!   connection that arrives within `accept_window_us` of the previous one the worker took
//!   (from when it is free to accept) joins its batch, up to `accept_batch_max`.
//!
//! So a proxy that opens several keep-alive connections at once pins them all to one
//! process, while fresh connections that arrive spread in time land on idle processes.
//!
//! Why not LIFO (the most recently idle process wins, as with `EPOLLEXCLUSIVE` or a
//! blocking `accept`): a worker streaming tokens goes idle between every two events, so it
//! is nearly always the most recently idle one; with LIFO, fresh connections would pile onto
//! the workers already streaming and force-close would queue like keep-alive, which is not
//! what the field measured (TTFT p50 246 ms force-close against 2520 ms keep-alive).
//!
//! The choice is made by the replica's accept loop, one connection at a time, so the
//! batch state needs no synchronisation.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::api_workers::ApiWorkers;
use super::clock::SimTime;
use super::profile::ApiProfile;

/// The batch a worker is accepting.
#[derive(Debug, Clone, Copy)]
struct Batch {
    worker: usize,
    /// A connection arriving up to this point joins the batch.
    open_until: SimTime,
    taken: u64,
}

/// Chooses the worker for each accepted connection (see the module docs).
#[derive(Debug)]
pub struct AcceptChoice {
    window_us: f64,
    batch_max: u64,
    batch: Option<Batch>,
    /// Decides the race between idle workers.
    rng: StdRng,
}

impl AcceptChoice {
    pub fn new(api: &ApiProfile, seed: u64) -> Self {
        Self {
            window_us: api.accept_window_us,
            batch_max: api.accept_batch_max,
            batch: None,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Picks the worker for a connection arriving at `now` and counts it there.
    pub fn choose(&mut self, workers: &ApiWorkers, now: SimTime) -> usize {
        if let Some(batch) = self.batch.as_mut()
            && now <= batch.open_until
            && batch.taken < self.batch_max
        {
            batch.taken += 1;
            batch.open_until = batch.open_until.max(now.plus_us(self.window_us));
            workers.count_connection(batch.worker);
            return batch.worker;
        }
        let idle: Vec<usize> =
            (0..workers.len()).filter(|&worker| workers.is_idle(worker, now)).collect();
        let worker = match idle.len() {
            0 => first_free(workers, now),
            count => idle[self.rng.random_range(0..count)],
        };
        // A busy worker accepts once its queued output work is out.
        let accepting_from = now.max(workers.output_busy_until(worker));
        self.batch =
            Some(Batch { worker, open_until: accepting_from.plus_us(self.window_us), taken: 1 });
        workers.count_connection(worker);
        worker
    }
}

/// The busy worker that frees up first.
fn first_free(workers: &ApiWorkers, now: SimTime) -> usize {
    (0..workers.len())
        .min_by_key(|&worker| {
            (workers.preprocessing_pending(worker), workers.output_busy_until(worker).max(now))
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Profile;

    fn choice(window_us: f64, batch_max: u64) -> AcceptChoice {
        let mut api = Profile::built_in("tiny").unwrap().api;
        api.accept_window_us = window_us;
        api.accept_batch_max = batch_max;
        AcceptChoice::new(&api, 7)
    }

    #[test]
    fn a_burst_lands_on_one_worker_up_to_the_batch_limit() {
        let workers = ApiWorkers::new(4);
        let mut choice = choice(100.0, 3);
        // Each connection within 100 us of the previous one joins the batch.
        let burst: Vec<usize> =
            [0, 90_000, 180_000].map(|at| choice.choose(&workers, SimTime(at))).into();
        assert!(burst.iter().all(|&worker| worker == burst[0]), "{burst:?}");
        // The batch is full and its worker busy with the requests: the next connection
        // wakes another worker, and one arriving right after joins that batch.
        workers.charge_output(burst[0], SimTime(180_000), 1000.0);
        let next = choice.choose(&workers, SimTime(200_000));
        assert_ne!(next, burst[0]);
        assert_eq!(choice.choose(&workers, SimTime(250_000)), next);
        let mut per_worker = workers.connections_per_worker();
        per_worker.sort_unstable();
        assert_eq!(per_worker, [0, 0, 2, 3]);
    }

    #[test]
    fn connections_apart_in_time_spread_over_idle_workers() {
        let workers = ApiWorkers::new(4);
        let mut choice = choice(100.0, 64);
        let chosen: Vec<usize> =
            (0..40u64).map(|i| choice.choose(&workers, SimTime(i * 1_000_000))).collect();
        let used = (0..4).filter(|worker| chosen.contains(worker)).count();
        assert_eq!(used, 4, "{chosen:?}");
        // A busy worker does not race for the connection.
        workers.charge_output(1, SimTime(50_000_000), 1e6);
        let later: Vec<usize> =
            (51..91u64).map(|i| choice.choose(&workers, SimTime(i * 1_000_000))).collect();
        assert!(!later.contains(&1), "{later:?}");
    }

    #[test]
    fn with_every_worker_busy_the_first_to_free_up_takes_it() {
        let workers = ApiWorkers::new(3);
        let mut choice = choice(100.0, 64);
        workers.charge_output(0, SimTime(0), 900.0);
        workers.charge_output(1, SimTime(0), 400.0);
        workers.charge_output(2, SimTime(0), 700.0);
        assert_eq!(choice.choose(&workers, SimTime(100_000)), 1);
        // Its batch stays open until 100 us after it is free to accept.
        assert_eq!(choice.choose(&workers, SimTime(450_000)), 1);
    }
}
