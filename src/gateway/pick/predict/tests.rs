//! Predictions on scripted timings: the estimate learns a replica's speeds from measured
//! streams, and the policy moves requests away from a slow replica and back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{LatencyProbe, PredictedLatency};
use crate::gateway::config::EntrySlo;
use crate::gateway::pick::policy::{PickContext, Policy, RequestShape};
use crate::gateway::pick::replica::Replica;
use crate::gateway::pick::test_fleet::{context, replicas};

fn shape(prompt_tokens: u64) -> RequestShape {
    RequestShape { prompt_tokens, slo: EntrySlo::default() }
}

/// A scripted replica: TTFT = (fixed + tokens / rate) * slow, TPOT = (base + per * n) * slow.
#[derive(Clone, Copy)]
struct Speed {
    slow: f64,
}

impl Speed {
    fn ttft(self, tokens: u64) -> Duration {
        Duration::from_secs_f64((0.03 + tokens as f64 / 140_000.0) * self.slow)
    }
    fn tpot(self, in_flight: u64) -> Duration {
        Duration::from_secs_f64((0.014 + 0.0004 * in_flight as f64) * self.slow)
    }
}

/// One stream on `replica` from placement to end, timed by `speed` (no clock involved).
fn serve(replica: &Arc<Replica>, prompt: u64, speed: Speed) {
    let start = Instant::now();
    let mut placement = LatencyProbe::begin(replica.clone(), prompt, start);
    let ahead = replica.latency.pending_prefill_tokens();
    placement.first_token(start + speed.ttft(ahead));
    placement.finished(speed.tpot(replica.load.in_flight().max(1)));
}

#[test]
fn the_estimate_learns_prefill_and_decode_speed_from_scripted_streams() {
    let replica = replicas(1).remove(0);
    let mut rng = StdRng::seed_from_u64(3);
    let speed = Speed { slow: 1.0 };
    for _ in 0..60 {
        let prompt = if rng.random_bool(0.7) { 1000 } else { 9000 };
        // Scripted load: 0 to 7 other streams in flight.
        replica.load.in_flight.store(rng.random_range(1..8), Ordering::Relaxed);
        serve(&replica, prompt, speed);
    }
    replica.load.in_flight.store(0, Ordering::Relaxed);
    let predicted = replica.latency.predict(0, 9000, 4);
    let (ttft, tpot) = (speed.ttft(9000).as_secs_f64(), speed.tpot(4).as_secs_f64());
    assert!((predicted.ttft - ttft).abs() / ttft < 0.1, "{predicted:?} vs {ttft}");
    assert!((predicted.tpot - tpot).abs() / tpot < 0.1, "{predicted:?} vs {tpot}");
    // Prompt tokens still waiting for a first token push the TTFT prediction up.
    assert!(
        replica.latency.predict(20_000, 1000, 1).ttft
            > 2.0 * replica.latency.predict(0, 1000, 1).ttft
    );
    assert_eq!(replica.latency.pending_prefill_tokens(), 0);
    assert_eq!(replica.latency.samples(), (60, 60));
}

#[test]
fn pending_prefill_tokens_are_owed_from_placement_to_first_token_or_drop() {
    let replica = replicas(1).remove(0);
    let now = Instant::now();
    let mut first = LatencyProbe::begin(replica.clone(), 1000, now);
    let second = LatencyProbe::begin(replica.clone(), 9000, now);
    assert_eq!(replica.latency.pending_prefill_tokens(), 10_000);
    let error = first.first_token(now + Duration::from_millis(40)).unwrap();
    assert!(error >= 0.0);
    assert_eq!(first.first_token(now + Duration::from_millis(50)), None, "once only");
    assert_eq!(replica.latency.pending_prefill_tokens(), 9000);
    drop(second);
    drop(first);
    assert_eq!(replica.latency.pending_prefill_tokens(), 0);
}

/// Share of `picks` requests (70% 1000, 30% 9000 tokens) each of `set` serves, feeding the
/// scripted speeds back; four requests stay in flight on the replica they went to.
fn shares(
    policy: &PredictedLatency,
    set: &[Arc<Replica>],
    speeds: &[Speed],
    picks: usize,
    seed: u64,
) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut counts = vec![0; set.len()];
    let mut window: std::collections::VecDeque<usize> = Default::default();
    for _ in 0..picks {
        let prompt = if rng.random_bool(0.7) { 1000 } else { 9000 };
        let chosen = policy.pick_for(set, &context(), &shape(prompt)).unwrap();
        counts[chosen] += 1;
        set[chosen].load.in_flight.fetch_add(1, Ordering::Relaxed);
        window.push_back(chosen);
        serve(&set[chosen], prompt, speeds[chosen]);
        if window.len() > 4 {
            let done = window.pop_front().unwrap();
            set[done].load.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
    for done in window {
        set[done].load.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
    counts
}

#[test]
fn a_slow_replica_loses_share_smoothly_and_wins_it_back() {
    let set = replicas(4);
    let policy = PredictedLatency::new(11);
    let healthy = [Speed { slow: 1.0 }; 4];
    let even = shares(&policy, &set, &healthy, 400, 1);
    assert!(even.iter().all(|&n| n > 60), "healthy replicas share: {even:?}");
    let mut degraded = healthy;
    degraded[0] = Speed { slow: 3.0 };
    let slowed = shares(&policy, &set, &degraded, 400, 2);
    // Never starved (exploration keeps measuring it), yet far below a fair quarter.
    assert!(slowed[0] > 0 && slowed[0] < 40, "slowed replica's share: {slowed:?}");
    // Healed: exploration measures it again, its predictions improve, and then it wins
    // pairings again (on its way back to a fair 100 of 400).
    let _healing = shares(&policy, &set, &healthy, 400, 3);
    let recovered = shares(&policy, &set, &healthy, 400, 4);
    assert!(recovered[0] > 2 * slowed[0], "recovered {recovered:?} after {slowed:?}");
}

#[test]
fn a_seeded_policy_replays_its_picks_and_only_explores_when_asked() {
    let set = replicas(3);
    set[0].load.in_flight.store(8, Ordering::Relaxed);
    let run = |policy: &PredictedLatency| -> Vec<usize> {
        (0..200).map(|_| policy.pick_for(&set, &context(), &shape(1000)).unwrap()).collect()
    };
    let (first, again) = (run(&PredictedLatency::new(5)), run(&PredictedLatency::new(5)));
    assert_eq!(first, again);
    let pure = run(&PredictedLatency::new(5).with_explore_ratio(0.0));
    assert!(!pure.contains(&0), "the loaded replica is never predicted best");
    assert!(pure.contains(&1) && pure.contains(&2), "equal replicas share");
    let explored = first.iter().filter(|&&i| i == 0).count();
    assert!(explored > 0 && explored < 20, "{explored} exploration picks of 200");
    // A retry's exclusion holds.
    let excluded = PickContext { exclude: Some(1), ..context() };
    let policy = PredictedLatency::new(9);
    assert!((0..50).all(|_| policy.pick_for(&set, &excluded, &shape(10)) != Some(1)));
}
