//! One variant's history: a tally since start and a sliding window made of a ring of
//! time buckets, advanced by the caller's clock (so tests drive it with made-up instants).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::tally::{Outcome, Slo, Tally};

/// Buckets per window: the window slides in steps of window / BUCKETS.
pub const BUCKETS: u32 = 12;

#[derive(Debug)]
pub struct Series {
    window: Duration,
    seed: u64,
    first_at: Instant,
    pub since_start: Tally,
    buckets: VecDeque<(Instant, Tally)>,
}

impl Series {
    pub fn new(window: Duration, seed: u64, now: Instant) -> Self {
        Self {
            window,
            seed,
            first_at: now,
            since_start: Tally::new(seed),
            buckets: VecDeque::new(),
        }
    }

    pub fn record(&mut self, outcome: &Outcome, slo: &Slo, now: Instant) {
        self.since_start.record(outcome, slo);
        self.expire(now);
        let step = self.window / BUCKETS;
        let needs_new = match self.buckets.back() {
            Some((start, _)) => now.duration_since(*start) >= step,
            None => true,
        };
        if needs_new {
            let seed = self.seed.wrapping_add(self.buckets.len() as u64 * 2 + 2);
            self.buckets.push_back((now, Tally::new(seed)));
        }
        self.buckets.back_mut().expect("pushed above").1.record(outcome, slo);
    }

    fn expire(&mut self, now: Instant) {
        while let Some((start, _)) = self.buckets.front() {
            if now.duration_since(*start) >= self.window {
                self.buckets.pop_front();
            } else {
                break;
            }
        }
    }

    /// The buckets still inside the window at `now`.
    pub fn window_tallies(&self, now: Instant) -> impl Iterator<Item = &Tally> {
        self.buckets
            .iter()
            .filter(move |(start, _)| now.duration_since(*start) < self.window)
            .map(|(_, tally)| tally)
    }

    /// How long the window's rates are measured over: the window, or less when the series is
    /// younger than that.
    pub fn window_span(&self, now: Instant) -> Duration {
        now.duration_since(self.first_at).min(self.window)
    }

    pub fn age(&self, now: Instant) -> Duration {
        now.duration_since(self.first_at)
    }

    pub fn window(&self) -> Duration {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome() -> Outcome {
        Outcome {
            entry: "short".into(),
            variant: "a".into(),
            ok: true,
            ttft: Some(Duration::from_millis(100)),
            tpot: None,
            e2e: Duration::from_secs(1),
            prompt_tokens: 1,
            completion_tokens: 1,
            finished_at: std::time::Instant::now(),
        }
    }

    #[test]
    fn the_window_forgets_old_requests_and_since_start_does_not() {
        let start = Instant::now();
        let window = Duration::from_secs(60);
        let mut series = Series::new(window, 0, start);
        for second in 0..120 {
            series.record(&outcome(), &Slo::default(), start + Duration::from_secs(second));
        }
        let now = start + Duration::from_secs(119);
        let in_window: u64 = series.window_tallies(now).map(|tally| tally.requests).sum();
        // Buckets are 5 s wide; the window keeps whole buckets started in the last 60 s.
        assert!((55..=60).contains(&in_window), "{in_window}");
        assert_eq!(series.since_start.requests, 120);
        assert_eq!(series.window_span(now), window);
        assert!(series.window_tallies(now).count() <= BUCKETS as usize);
    }
}
