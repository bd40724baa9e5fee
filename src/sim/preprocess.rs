//! Request preprocessing on one API worker (templating, tokenization, validation before a
//! request reaches the engine), served with the CPU time that output work leaves free.
//!
//! # This is a model
//! The worker's event loop streams tokens for every request it holds and preprocesses new
//! requests in the same loop. Output work has priority (see [`super::api_workers`]): it
//! runs first, in arrival order, on the worker's output timeline. Preprocessing only uses
//! the time that timeline leaves idle, so with output load `rho` a request's preprocessing
//! of `S` takes about `S / (1 - rho)`: TTFT inflates while TPOT barely moves.
//!
//! Requests are preprocessed one after another in arrival order: each one's templating and
//! tokenization runs as a synchronous block between two awaits of the event loop, so a
//! later request does not start before an earlier one is done. (Sharing the CPU evenly
//! among them instead keeps identical requests that arrived together in lockstep for ever:
//! they finish together, stream together and come back together, and the keep-alive
//! penalty the field measured never builds up.)
//!
//! The queue is advanced lazily: whoever looks at it (a request arriving, a waiting request
//! waking at its projected end) first accounts the idle time since the last look. The lock
//! is tokio's and is never held across an await.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Mutex, oneshot};

use super::clock::{SimClock, SimTime};

/// One worker's preprocessing queue.
#[derive(Debug, Default)]
pub struct PreprocessQueue {
    state: Mutex<QueueState>,
    /// Requests queued or being preprocessed (read without the lock by the accept choice).
    pending: AtomicU64,
}

#[derive(Debug, Default)]
struct QueueState {
    /// Simulated time up to which the idle time has been handed out.
    advanced_to: SimTime,
    jobs: VecDeque<Job>,
}

#[derive(Debug)]
struct Job {
    remaining_ns: u64,
    done: oneshot::Sender<SimTime>,
}

impl PreprocessQueue {
    /// Requests queued or being preprocessed.
    pub fn pending(&self) -> u64 {
        self.pending.load(Ordering::Acquire)
    }

    /// Queues `cost_us` of preprocessing for a request that arrived at `arrival` and waits
    /// until it is done; returns when it ended in simulated time. `output_busy_until` reads
    /// the worker's output timeline.
    pub async fn run(
        &self,
        clock: &SimClock,
        arrival: SimTime,
        cost_us: f64,
        output_busy_until: impl Fn() -> u64,
    ) -> SimTime {
        let (done, mut finished) = oneshot::channel();
        let remaining_ns = SimTime(0).plus_us(cost_us).0;
        {
            let mut state = self.state.lock().await;
            // Queued as of its arrival: reading and parsing the body took wall time, not
            // simulated time.
            self.advance(&mut state, arrival, output_busy_until());
            self.pending.fetch_add(1, Ordering::AcqRel);
            state.jobs.push_back(Job { remaining_ns, done });
        }
        loop {
            let projected_end = {
                let mut state = self.state.lock().await;
                self.advance(&mut state, clock.now(), output_busy_until());
                match finished.try_recv() {
                    Ok(at) => return at,
                    Err(oneshot::error::TryRecvError::Closed) => return clock.now(),
                    Err(oneshot::error::TryRecvError::Empty) => {}
                }
                projected_end(&state, output_busy_until())
            };
            // Woken early if another request's look finishes this one; otherwise look again
            // at the projected end (later output work may have pushed it back).
            tokio::select! {
                at = &mut finished => return at.unwrap_or_else(|_| clock.now()),
                _ = clock.sleep_until(projected_end) => {}
            }
        }
    }

    /// Hands the idle time up to `to` to the queue, in order; finished requests are told
    /// when they ended.
    fn advance(&self, state: &mut QueueState, to: SimTime, output_busy_until: u64) {
        if to <= state.advanced_to {
            return;
        }
        // Output work charged since the last look runs first: that span is not idle.
        let mut at = state.advanced_to.0.max(output_busy_until.min(to.0));
        while at < to.0 {
            let Some(head) = state.jobs.front_mut() else { break };
            let idle = to.0 - at;
            if head.remaining_ns > idle {
                head.remaining_ns -= idle;
                break;
            }
            at += head.remaining_ns;
            let job = state.jobs.pop_front().expect("front exists");
            self.pending.fetch_sub(1, Ordering::AcqRel);
            // The request may have gone away; its work was done all the same.
            let _ = job.done.send(SimTime(at));
        }
        state.advanced_to = to;
    }
}

/// When the last queued request would finish if no more output work arrived.
fn projected_end(state: &QueueState, output_busy_until: u64) -> SimTime {
    let start = state.advanced_to.0.max(output_busy_until);
    SimTime(start + state.jobs.iter().map(|job| job.remaining_ns).sum::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue_with(costs_us: &[f64]) -> (PreprocessQueue, Vec<oneshot::Receiver<SimTime>>) {
        let queue = PreprocessQueue::default();
        let mut receivers = Vec::new();
        {
            let mut state = queue.state.try_lock().unwrap();
            for &cost in costs_us {
                let (done, finished) = oneshot::channel();
                queue.pending.fetch_add(1, Ordering::AcqRel);
                state.jobs.push_back(Job { remaining_ns: SimTime(0).plus_us(cost).0, done });
                receivers.push(finished);
            }
        }
        (queue, receivers)
    }

    #[test]
    fn requests_are_preprocessed_in_order_with_idle_time() {
        let (queue, mut finished) = queue_with(&[10.0, 10.0]);
        let mut state = queue.state.try_lock().unwrap();
        // Output work holds the worker for the first 5 us: preprocessing starts after it.
        queue.advance(&mut state, SimTime(20_000), 5_000);
        assert_eq!(finished[0].try_recv(), Ok(SimTime(15_000)));
        assert!(finished[1].try_recv().is_err());
        assert_eq!(projected_end(&state, 0), SimTime(25_000));
        // Output work charged up to 30 us pushes the second request back.
        queue.advance(&mut state, SimTime(40_000), 30_000);
        assert_eq!(finished[1].try_recv(), Ok(SimTime(35_000)));
        assert_eq!(queue.pending(), 0);
    }
}
