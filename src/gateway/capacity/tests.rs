//! Learned capacity on a simulated fleet, in simulated time: replicas with `slots`
//! concurrent requests of fixed service time serve Poisson arrivals whose rate changes
//! every window (a seeded draw around their capacity); the learner sees only what the
//! gateway sees (arrivals, finished and good requests, requests in flight at each window's
//! edges) and its estimate must settle on the rate the replica sustains at SLO.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};

use super::learn::{CapacityLearner, Evidence, WindowCounts};

/// One request: when it arrived and when it finished, in seconds of simulated time.
struct Served {
    arrived: f64,
    finished: f64,
    good: bool,
}

/// A replica of `slots` servers taking `service` seconds each, first come first served;
/// a request is good when it waited at most `wait_limit`.
fn serve(arrivals: &[f64], slots: usize, service: f64, wait_limit: f64) -> Vec<Served> {
    let mut free_at = vec![0.0_f64; slots];
    arrivals
        .iter()
        .map(|&arrived| {
            let (slot, &free) =
                free_at.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).expect("slots");
            let start = arrived.max(free);
            free_at[slot] = start + service;
            Served { arrived, finished: start + service, good: start - arrived <= wait_limit }
        })
        .collect()
}

/// Poisson arrivals: each window of `window` seconds at its own rate.
fn arrivals(rates: &[f64], window: f64, rng: &mut StdRng) -> Vec<f64> {
    let mut times = Vec::new();
    for (index, &rate) in rates.iter().enumerate() {
        let (start, end) = (index as f64 * window, (index + 1) as f64 * window);
        let gap = Exp::new(rate).expect("positive rate");
        let mut at = start + gap.sample(rng);
        while at < end {
            times.push(at);
            at += gap.sample(rng);
        }
    }
    times
}

/// What the gateway counts in window `index`.
fn window_counts(served: &[Served], index: usize, window: f64) -> WindowCounts {
    let (start, end) = (index as f64 * window, (index + 1) as f64 * window);
    let in_flight = |at: f64| served.iter().filter(|s| s.arrived <= at && s.finished > at).count();
    let ended: Vec<&Served> =
        served.iter().filter(|s| s.finished > start && s.finished <= end).collect();
    WindowCounts {
        seconds: window,
        arrivals: served.iter().filter(|s| s.arrived > start && s.arrived <= end).count() as u64,
        finished: ended.len() as u64,
        good: ended.iter().filter(|s| s.good).count() as u64,
        queue_start: in_flight(start) as u64,
        queue_end: in_flight(end) as u64,
    }
}

/// The highest Poisson rate (on a 0.1 req/s grid) at which the replica meets the SLO for
/// 95% of a long run: the capacity at SLO the learner should find.
fn capacity_at_slo(slots: usize, service: f64, wait_limit: f64, rng: &mut StdRng) -> f64 {
    let mut best = 0.0;
    for tenth in 1..200 {
        let rate = tenth as f64 / 10.0;
        let served = serve(&arrivals(&[rate], 4000.0, rng), slots, service, wait_limit);
        let good = served.iter().filter(|s| s.good).count();
        if good as f64 >= 0.95 * served.len() as f64 {
            best = rate;
        } else {
            break;
        }
    }
    best
}

#[test]
fn learned_capacity_converges_on_a_simulated_fleet() {
    let mut rng = StdRng::seed_from_u64(17);
    let window = 30.0;
    // Three kinds of replica: (slots, service seconds, allowed wait).
    for (slots, service, wait_limit) in [(8, 1.0, 0.5), (4, 0.5, 0.25), (16, 4.0, 1.0)] {
        let truth = capacity_at_slo(slots, service, wait_limit, &mut rng);
        let rates: Vec<f64> = (0..240).map(|_| truth * rng.random_range(0.3..1.5)).collect();
        let served = serve(&arrivals(&rates, window, &mut rng), slots, service, wait_limit);
        let mut learner = CapacityLearner::new(0.95);
        let (mut sustained, mut overloaded) = (0, 0);
        let mut estimates = Vec::new();
        for index in 0..rates.len() {
            match learner.observe(&window_counts(&served, index, window)) {
                Evidence::Sustained => sustained += 1,
                Evidence::Overloaded => overloaded += 1,
                Evidence::None => {}
            }
            estimates.extend(learner.estimate());
        }
        eprintln!(
            "slots {slots} service {service}: capacity at SLO {truth:.1} req/s, learned {:.2} \
             ({sustained} sustained, {overloaded} overloaded windows)",
            estimates.last().unwrap()
        );
        assert!(sustained >= 50 && overloaded >= 20, "{sustained} / {overloaded}");
        // Every estimate over the last 16 windows (8 minutes of simulated time) is within 15%.
        for estimate in &estimates[estimates.len() - 16..] {
            let error = (estimate - truth).abs() / truth;
            assert!(error <= 0.15, "learned {estimate:.2} req/s, capacity at SLO {truth:.1}");
        }
    }
}
