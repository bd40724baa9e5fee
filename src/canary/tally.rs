//! What the canary report needs to know about a set of finished requests: counts, tokens,
//! latency histograms (for percentiles) and bounded reservoirs (for significance tests).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::reservoir::Reservoir;

/// Samples kept per tally for the significance tests.
pub const RESERVOIR_CAPACITY: usize = 512;

/// One finished request, as the gateway observed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Shared names: an outcome is made for every finished request.
    pub entry: Arc<str>,
    pub variant: Arc<str>,
    /// The response completed without an error status or a broken stream.
    pub ok: bool,
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    pub e2e: Duration,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// When the request ended: the series' windows are read against it, so that the
    /// recorder task reads no clock per request.
    pub finished_at: Instant,
}

/// The service-level objectives a request must all meet to count towards goodput.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Slo {
    pub fn is_met_by(&self, outcome: &Outcome) -> bool {
        let within = |limit: Option<f64>, value: Option<Duration>| match (limit, value) {
            (None, _) => true,
            (Some(limit), Some(value)) => value.as_secs_f64() * 1000.0 <= limit,
            (Some(_), None) => false,
        };
        outcome.ok
            && within(self.ttft_ms, outcome.ttft)
            && within(self.tpot_ms, outcome.tpot)
            && within(self.e2e_ms, Some(outcome.e2e))
    }
}

/// Counts, token sums, histograms and reservoirs of a set of requests.
#[derive(Debug, Clone)]
pub struct Tally {
    pub requests: u64,
    pub failures: u64,
    pub good: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Latencies in microseconds.
    pub e2e_us: Histogram<u64>,
    pub ttft_us: Histogram<u64>,
    pub tpot_us: Histogram<u64>,
    /// Latencies in seconds.
    pub ttft_samples: Reservoir,
    pub tpot_samples: Reservoir,
}

impl Tally {
    pub fn new(seed: u64) -> Self {
        let histogram = || Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
        Self {
            requests: 0,
            failures: 0,
            good: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            e2e_us: histogram(),
            ttft_us: histogram(),
            tpot_us: histogram(),
            ttft_samples: Reservoir::new(RESERVOIR_CAPACITY, seed),
            tpot_samples: Reservoir::new(RESERVOIR_CAPACITY, seed.wrapping_add(1)),
        }
    }

    pub fn record(&mut self, outcome: &Outcome, slo: &Slo) {
        self.requests += 1;
        self.prompt_tokens += outcome.prompt_tokens;
        self.completion_tokens += outcome.completion_tokens;
        if !outcome.ok {
            self.failures += 1;
            return;
        }
        if slo.is_met_by(outcome) {
            self.good += 1;
        }
        self.e2e_us.saturating_record(micros(outcome.e2e));
        if let Some(ttft) = outcome.ttft {
            self.ttft_us.saturating_record(micros(ttft));
            self.ttft_samples.offer(ttft.as_secs_f64());
        }
        if let Some(tpot) = outcome.tpot {
            self.tpot_us.saturating_record(micros(tpot));
            self.tpot_samples.offer(tpot.as_secs_f64());
        }
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ok: bool, ttft_ms: u64, e2e_ms: u64) -> Outcome {
        Outcome {
            entry: "short".into(),
            variant: "a".into(),
            ok,
            ttft: Some(Duration::from_millis(ttft_ms)),
            tpot: Some(Duration::from_millis(15)),
            e2e: Duration::from_millis(e2e_ms),
            prompt_tokens: 1000,
            completion_tokens: 300,
            finished_at: std::time::Instant::now(),
        }
    }

    #[test]
    fn failures_are_counted_but_not_timed_and_never_good() {
        let slo = Slo { ttft_ms: Some(1000.0), ..Slo::default() };
        let mut tally = Tally::new(0);
        tally.record(&outcome(true, 200, 5000), &slo);
        tally.record(&outcome(true, 2000, 5000), &slo);
        tally.record(&outcome(false, 10, 50), &slo);
        assert_eq!((tally.requests, tally.failures, tally.good), (3, 1, 1));
        assert_eq!(tally.ttft_us.len(), 2);
        assert_eq!(tally.prompt_tokens, 3000);
    }

    #[test]
    fn every_slo_must_hold() {
        let slo = Slo { ttft_ms: Some(1000.0), tpot_ms: Some(10.0), e2e_ms: None };
        assert!(!slo.is_met_by(&outcome(true, 200, 5000)), "TPOT of 15 ms breaks 10 ms");
        assert!(Slo::default().is_met_by(&outcome(true, 200, 5000)));
    }
}
