//! Late placement while the fleet is saturated. A streamed request that no replica is
//! predicted to serve within its SLO, while one would with a stream fewer, is not sent at
//! once to the busy replica the policy picked: it waits at the gateway, up to its hedge
//! delay, for an answered response to end on one of its replicas (a freed process,
//! [`crate::gateway::pick::freed`]) and goes to the first freed one it now fits on.
//!
//! Sent at once, it would sit on a busy API process of the replica first picked and be
//! served when that process frees, while a process of another replica may free first; a
//! hedge or rescue then sends a copy there and leaves the first copy to be preprocessed
//! for nothing. Held, it takes the first process that frees anywhere in its pool and leaves
//! no copy behind. A request that would not fit even on a replica a stream lighter (a prompt
//! whose prefill alone is past the objective) is sent at once: no freed process helps it.
//! At the bound it goes where it was first placed.

use std::sync::Arc;

use tokio::time::Instant;

use super::rescue;
use crate::gateway::pick::predict::headroom::fits_with;
use crate::gateway::pick::{InFlightGuard, Replica, RequestShape};

/// What a hold came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Not held: the replica first picked fits, or no freed process would make one fit.
    No,
    /// Placed on a process that freed while it waited.
    Freed,
    /// Sent where it was first placed, at the bound.
    TimedOut,
}

impl Held {
    /// The label of `laneway_saturation_holds_total` (none when not held).
    pub fn label(self) -> Option<&'static str> {
        match self {
            Self::No => None,
            Self::Freed => Some("freed"),
            Self::TimedOut => Some("timed_out"),
        }
    }
}

/// The place a request of `shape` is sent with: `placed` (the policy's pick, held) when it
/// fits there, else a place on the first of `replicas` that frees a process the request
/// then fits on before `until`, else `placed`. Places beyond `limit` per replica are not
/// taken.
pub async fn until_a_process_frees(
    placed: InFlightGuard,
    replicas: Vec<Arc<Replica>>,
    shape: &RequestShape,
    until: Instant,
    limit: u64,
) -> (InFlightGuard, Held) {
    let first = placed.replica().clone();
    // Streams on a replica without this request's own place.
    let others = |replica: &Replica| {
        let own = u64::from(replica.name == first.name);
        replica.load.in_flight().saturating_sub(own)
    };
    let fits_now = |replica: &Replica| fits_with(replica, shape, others(replica) + 1);
    if fits_now(&first) {
        return (placed, Held::No);
    }
    // After a process frees on a replica it carries one stream fewer, and this one.
    let fits_once_freed =
        |replica: &Arc<Replica>| fits_with(replica, shape, others(replica).max(1));
    if !replicas.iter().any(fits_once_freed) {
        return (placed, Held::No);
    }
    let Some(freed) = rescue::process_freed(replicas, until, fits_now).await else {
        return (placed, Held::TimedOut);
    };
    if freed.name == first.name {
        return (placed, Held::Freed);
    }
    match InFlightGuard::try_acquire(freed, shape.prompt_tokens, limit) {
        Some(moved) => (moved, Held::Freed),
        None => (placed, Held::TimedOut),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::*;
    use crate::gateway::config::EntrySlo;
    use crate::gateway::pick::predict::LatencyProbe;
    use crate::gateway::pick::test_fleet::replicas;

    const PROMPT: u64 = 1000;

    fn shape(prompt_tokens: u64) -> RequestShape {
        let slo = EntrySlo {
            ttft: Duration::from_millis(500),
            tpot: Duration::from_millis(50),
            hedge_percent: 30,
        };
        RequestShape { prompt_tokens, slo }
    }

    /// Teaches `replica` that a first token takes 50 ms (plus 20 us a prompt token) on an
    /// idle replica and 2 s beside another stream: one API process, as it were.
    fn one_process(replica: &Arc<Replica>) {
        let start = std::time::Instant::now();
        for (others, busy) in [(0, 0.0), (1, 2.0)] {
            for round in 0..40u64 {
                let tokens = 500 + (round % 4) * 1000;
                replica.load.in_flight.store(others + 1, Ordering::Relaxed);
                let mut probe = LatencyProbe::begin(replica.clone(), tokens, start);
                let ttft = 0.05 + 2e-5 * tokens as f64 + busy;
                probe.first_token(start + Duration::from_secs_f64(ttft));
                probe.finished(Duration::from_millis(10));
            }
        }
        replica.load.in_flight.store(0, Ordering::Relaxed);
    }

    /// A fleet of `count` such replicas, each carrying one answered stream.
    fn busy_fleet(count: usize) -> (Vec<Arc<Replica>>, Vec<InFlightGuard>) {
        let fleet = replicas(count);
        let streams = fleet
            .iter()
            .map(|replica| {
                one_process(replica);
                let mut stream = InFlightGuard::acquire(replica.clone(), PROMPT);
                stream.mark_answered();
                stream
            })
            .collect();
        (fleet, streams)
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_fits_where_it_was_placed_is_not_held() {
        let fleet = replicas(2);
        one_process(&fleet[0]);
        one_process(&fleet[1]);
        let placed = InFlightGuard::acquire(fleet[0].clone(), PROMPT);
        let until = Instant::now() + Duration::from_secs(1);
        let (guard, held) =
            until_a_process_frees(placed, fleet.clone(), &shape(PROMPT), until, 64).await;
        assert_eq!((guard.replica().name.as_str(), held), ("r0", Held::No));
        assert_eq!(Instant::now() + Duration::from_secs(1), until, "no time passed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_saturated_request_goes_to_the_first_replica_that_frees_a_process() {
        let (fleet, mut streams) = busy_fleet(3);
        let placed = InFlightGuard::acquire(fleet[0].clone(), PROMPT);
        let until = Instant::now() + Duration::from_secs(1);
        let waiting = tokio::spawn({
            let fleet = fleet.clone();
            async move { until_a_process_frees(placed, fleet, &shape(PROMPT), until, 64).await }
        });
        tokio::task::yield_now().await;
        drop(streams.remove(2));
        let (guard, held) = waiting.await.unwrap();
        assert_eq!((guard.replica().name.as_str(), held), ("r2", Held::Freed));
        let in_flight: Vec<u64> = fleet.iter().map(|r| r.load.in_flight()).collect();
        assert_eq!(in_flight, [1, 1, 1], "the first place was given back, the new one taken");
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_process_freed_it_is_sent_where_placed_at_the_bound() {
        let (fleet, _streams) = busy_fleet(2);
        let placed = InFlightGuard::acquire(fleet[1].clone(), PROMPT);
        let started = Instant::now();
        let until = started + Duration::from_millis(150);
        let (guard, held) =
            until_a_process_frees(placed, fleet.clone(), &shape(PROMPT), until, 64).await;
        assert_eq!((guard.replica().name.as_str(), held), ("r1", Held::TimedOut));
        assert_eq!(Instant::now(), until);
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_too_long_for_any_replica_is_not_held() {
        let (fleet, _streams) = busy_fleet(2);
        // 50,000 tokens at 20 us each: a second of prefill on an idle replica.
        let placed = InFlightGuard::acquire(fleet[0].clone(), 50_000);
        let until = Instant::now() + Duration::from_secs(1);
        let (guard, held) =
            until_a_process_frees(placed, fleet.clone(), &shape(50_000), until, 64).await;
        assert_eq!((guard.replica().name.as_str(), held), ("r0", Held::No));
        assert!(Instant::now() < until);
    }

    #[tokio::test(start_paused = true)]
    async fn a_process_freed_where_the_request_would_still_wait_is_left() {
        let (fleet, mut streams) = busy_fleet(2);
        let placed = InFlightGuard::acquire(fleet[0].clone(), PROMPT);
        let until = Instant::now() + Duration::from_secs(1);
        // r1 carries a second stream, not answered yet: with one of its two ended it still
        // has one, beside which a first token takes seconds.
        let _unanswered = InFlightGuard::acquire(fleet[1].clone(), PROMPT);
        let waiting = tokio::spawn({
            let fleet = fleet.clone();
            async move { until_a_process_frees(placed, fleet, &shape(PROMPT), until, 64).await }
        });
        tokio::task::yield_now().await;
        drop(streams.remove(1));
        let (guard, held) = waiting.await.unwrap();
        assert_eq!((guard.replica().name.as_str(), held), ("r0", Held::TimedOut));
        assert_eq!(fleet[1].load.in_flight(), 1);
    }
}
