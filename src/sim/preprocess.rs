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
//! waking at its projected end) first accounts the idle time since the last look: the span
//! minus the output work done in it (read from the output timeline's running total and its
//! backlog). Output queued at the last look comes first; where the idle time fell among
//! the output charged since is not known, and is taken as spread evenly. The lock is tokio's and is never held across an
//! await.

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
    /// Output work (ns) done by `advanced_to`.
    output_done_ns: u64,
    /// Where the output work queued at the last look ended: busy up to there for sure.
    output_busy_seen: u64,
    jobs: VecDeque<Job>,
}

/// A reading of the worker's output timeline.
#[derive(Debug, Clone, Copy)]
pub struct OutputReading {
    /// All output work ever charged (ns).
    pub charged_ns: u64,
    /// When the output work charged so far ends (ns).
    pub busy_until: u64,
}

impl OutputReading {
    /// Output work done by `at` (a time no earlier than the last charge).
    fn done_by(self, at: SimTime) -> u64 {
        self.charged_ns.saturating_sub(self.busy_until.saturating_sub(at.0))
    }
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
    /// until it is done; returns when it ended in simulated time. `output` reads the
    /// worker's output timeline.
    pub async fn run(
        &self,
        clock: &SimClock,
        arrival: SimTime,
        cost_us: f64,
        output: impl Fn() -> OutputReading,
    ) -> SimTime {
        let (done, mut finished) = oneshot::channel();
        let remaining_ns = SimTime(0).plus_us(cost_us).0;
        {
            let mut state = self.state.lock().await;
            // Queued as of its arrival: reading and parsing the body took wall time, not
            // simulated time.
            self.advance(&mut state, arrival, output());
            self.pending.fetch_add(1, Ordering::AcqRel);
            state.jobs.push_back(Job { remaining_ns, done });
        }
        loop {
            let projected_end = {
                let mut state = self.state.lock().await;
                let reading = output();
                self.advance(&mut state, clock.now(), reading);
                match finished.try_recv() {
                    Ok(at) => return at,
                    Err(oneshot::error::TryRecvError::Closed) => return clock.now(),
                    Err(oneshot::error::TryRecvError::Empty) => {}
                }
                projected_end(&state, reading.busy_until)
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
    fn advance(&self, state: &mut QueueState, to: SimTime, output: OutputReading) {
        if to <= state.advanced_to {
            return;
        }
        // Output work runs first: what was queued at the last look kept the worker busy from
        // then on; the rest of the output work done since fell somewhere in the rest of the
        // span, and preprocessing had what is left.
        let busy_from = state.advanced_to.0;
        let known_busy_end = state.output_busy_seen.clamp(busy_from, to.0);
        let output_done = output.done_by(to).max(state.output_done_ns);
        let other_output =
            (output_done - state.output_done_ns).saturating_sub(known_busy_end - busy_from);
        let span = to.0 - known_busy_end;
        let idle = span.saturating_sub(other_output);
        let mut used = 0;
        while let Some(head) = state.jobs.front_mut() {
            let left = idle - used;
            if head.remaining_ns > left {
                head.remaining_ns -= left;
                break;
            }
            used += head.remaining_ns;
            let job = state.jobs.pop_front().expect("front exists");
            self.pending.fetch_sub(1, Ordering::AcqRel);
            // Where in the span the idle time fell is not known: take it as spread evenly.
            let at = known_busy_end + (span as f64 * used as f64 / idle as f64) as u64;
            // The request may have gone away; its work was done all the same.
            let _ = job.done.send(SimTime(at));
        }
        state.advanced_to = to;
        state.output_done_ns = output_done;
        state.output_busy_seen = output.busy_until;
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
        // 20 us in which output work took 5 us: 15 us idle, the first request is done at
        // 10/15 of the span.
        let output = OutputReading { charged_ns: 5_000, busy_until: 5_000 };
        queue.advance(&mut state, SimTime(20_000), output);
        assert_eq!(finished[0].try_recv(), Ok(SimTime(13_333)));
        assert!(finished[1].try_recv().is_err());
        assert_eq!(projected_end(&state, 0), SimTime(25_000));
        // The next 20 us hold 15 us of output work, 5 us of it still queued at 40 us: 10 us
        // were done, 10 us idle, enough for the second request's remaining 5 us.
        let output = OutputReading { charged_ns: 20_000, busy_until: 45_000 };
        queue.advance(&mut state, SimTime(40_000), output);
        assert_eq!(finished[1].try_recv(), Ok(SimTime(30_000)));
        assert_eq!(queue.pending(), 0);
    }

    #[test]
    fn output_queued_at_the_last_look_comes_first() {
        let (queue, mut finished) = queue_with(&[10.0]);
        let mut state = queue.state.try_lock().unwrap();
        // At 0, 20 us of output work is queued; at 40 us it is done and nothing else came.
        let queued = OutputReading { charged_ns: 20_000, busy_until: 20_000 };
        queue.advance(&mut state, SimTime(0), queued);
        state.output_busy_seen = queued.busy_until;
        queue.advance(&mut state, SimTime(40_000), queued);
        assert_eq!(finished[0].try_recv(), Ok(SimTime(30_000)));
    }

    #[test]
    fn a_busy_output_timeline_starves_preprocessing() {
        let (queue, mut finished) = queue_with(&[10.0]);
        let mut state = queue.state.try_lock().unwrap();
        let output = OutputReading { charged_ns: 30_000, busy_until: 30_000 };
        queue.advance(&mut state, SimTime(30_000), output);
        assert!(finished[0].try_recv().is_err());
        assert_eq!(projected_end(&state, 30_000), SimTime(40_000));
    }
}
