//! `least_queue`: power-of-two choices on a queue-depth score.
//!
//! # The score (lower is better)
//! ```text
//! score = max(in_flight, running + waiting)    requests on the replica
//!       + waiting                              a queued request costs TTFT: count it twice
//!       + in_flight_prompt_tokens / 8192       prefill work still owed, in batch-size units
//!       + 4 * kv_cache_usage                   a nearly full cache will start queueing
//!       + 100 * failures                       a replica refusing connections or scrapes is avoided
//! ```
//! `in_flight` and `in_flight_prompt_tokens` are the gateway's own counts (always current);
//! `running`, `waiting` and `kv_cache_usage` come from the replica's `/metrics` and are
//! dropped (taken as zero) once the last scrape is older than `stale_after_intervals`
//! scrape intervals, so a replica that stops answering scrapes is judged by the gateway's
//! own counts alone. `failures` counts refused connections and failed scrapes since the
//! last success of either, so a dead replica is avoided before requests find out. The `max` avoids counting this gateway's requests twice while still
//! seeing load that other clients put on the replica.

use std::sync::Arc;

use super::draw::Draws;
use super::policy::{PickContext, Policy, candidate_count, nth_candidate};
use super::replica::Replica;

/// Prompt tokens that weigh as much as one request in the score.
pub const TOKENS_PER_REQUEST_UNIT: f64 = 8192.0;
/// Weight of a full KV cache.
pub const KV_CACHE_WEIGHT: f64 = 4.0;
/// Weight of each recent failure.
pub const FAILURE_WEIGHT: f64 = 100.0;

#[derive(Debug)]
pub struct LeastQueue {
    draws: Draws,
}

impl LeastQueue {
    /// Picks drawn from `seed` (the gateway seeds it at random; tests replay a seed).
    pub fn new(seed: u64) -> Self {
        Self { draws: Draws::new(seed) }
    }
}

/// The documented score of one replica.
pub fn score(replica: &Replica, context: &PickContext) -> f64 {
    let load = &replica.load;
    let in_flight = load.in_flight() as f64;
    let tokens = load.in_flight_prompt_tokens() as f64;
    let failures = load.failures() as f64;
    let own = tokens / TOKENS_PER_REQUEST_UNIT + FAILURE_WEIGHT * failures;
    match load.fresh_report(context.epoch, context.now, context.fresh_for) {
        Some(report) => {
            let waiting = report.waiting as f64;
            let on_replica = in_flight.max(report.running as f64 + waiting);
            on_replica + waiting + KV_CACHE_WEIGHT * report.kv_cache_usage + own
        }
        None => in_flight + own,
    }
}

impl Policy for LeastQueue {
    fn name(&self) -> &'static str {
        "least_queue"
    }

    fn pick(&self, replicas: &[Arc<Replica>], context: &PickContext) -> Option<usize> {
        let count = candidate_count(replicas, context);
        match count {
            0 => None,
            1 => Some(nth_candidate(0, context)),
            _ => {
                let (first, second) = self.draws.two_of(count);
                let (a, b) = (nth_candidate(first, context), nth_candidate(second, context));
                Some(if score(&replicas[b], context) < score(&replicas[a], context) {
                    b
                } else {
                    a
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::pick::replica::ReportedLoad;
    use crate::gateway::pick::test_fleet::replicas;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    fn context(epoch: Instant) -> PickContext {
        PickContext {
            epoch,
            now: epoch + Duration::from_millis(100),
            fresh_for: Duration::from_secs(1),
            exclude: None,
        }
    }

    #[test]
    fn two_replicas_always_go_to_the_emptier() {
        let set = replicas(2);
        set[0].load.in_flight.store(3, Ordering::Relaxed);
        let context = context(Instant::now());
        let policy = LeastQueue::new(3);
        for _ in 0..100 {
            assert_eq!(policy.pick(&set, &context), Some(1));
        }
    }

    #[test]
    fn fresh_reports_count_and_stale_ones_do_not() {
        let set = replicas(1);
        let epoch = Instant::now();
        let report = ReportedLoad { waiting: 5, running: 2, kv_cache_usage: 0.5 };
        set[0].load.record_scrape(report, epoch, epoch);
        set[0].load.in_flight.store(1, Ordering::Relaxed);
        let fresh = context(epoch);
        // max(1, 2 + 5) + 5 + 4 * 0.5
        assert_eq!(score(&set[0], &fresh), 14.0);
        let stale = PickContext { now: epoch + Duration::from_secs(5), ..fresh };
        assert_eq!(score(&set[0], &stale), 1.0);
    }

    #[test]
    fn exclusion_is_respected_and_picks_spread_over_idle_replicas() {
        let set = replicas(4);
        let context = PickContext { exclude: Some(2), ..context(Instant::now()) };
        let mut hits = [0u32; 4];
        let policy = LeastQueue::new(3);
        for _ in 0..400 {
            hits[policy.pick(&set, &context).unwrap()] += 1;
        }
        assert_eq!(hits[2], 0);
        assert!(hits.iter().enumerate().all(|(i, &h)| i == 2 || h > 0), "{hits:?}");
    }
}
