//! When requests are sent: a closed loop of N clients, or an open loop with Poisson
//! arrivals at a fixed rate whose schedule never waits for the target (a concurrency cap
//! can only delay a request's send, which is recorded, never the schedule itself).

use std::time::Duration;

use rand::Rng;

/// The arrival process of a run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Arrivals {
    /// `concurrency` clients, each sending its next request when the previous one ends.
    Closed { concurrency: usize },
    /// Poisson arrivals at `rate` requests/s; at most `max_concurrency` in flight, if set.
    Open { rate: f64, max_concurrency: Option<usize> },
}

/// Seeded exponential inter-arrival gaps of a Poisson process at `rate` per second.
#[derive(Debug)]
pub struct PoissonSchedule<R> {
    rate: f64,
    rng: R,
    next: Duration,
}

impl<R: Rng> PoissonSchedule<R> {
    pub fn new(rate: f64, rng: R) -> Self {
        assert!(rate.is_finite() && rate > 0.0, "validated when the arguments were read");
        Self { rate, rng, next: Duration::ZERO }
    }
}

impl<R: Rng> Iterator for PoissonSchedule<R> {
    /// The offset from the start of the schedule at which the next request is due.
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        // Inverse-transform sampling; `1 - u` lies in (0, 1], so the log is finite.
        let uniform: f64 = self.rng.random();
        let gap = -(1.0 - uniform).ln() / self.rate;
        self.next += Duration::from_secs_f64(gap);
        Some(self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn poisson_schedule_is_seeded_and_its_mean_rate_is_close() {
        let offsets: Vec<Duration> =
            PoissonSchedule::new(200.0, StdRng::seed_from_u64(3)).take(20_000).collect();
        let again: Vec<Duration> =
            PoissonSchedule::new(200.0, StdRng::seed_from_u64(3)).take(20_000).collect();
        assert_eq!(offsets, again);
        assert!(offsets.windows(2).all(|pair| pair[0] <= pair[1]));
        let rate = offsets.len() as f64 / offsets.last().unwrap().as_secs_f64();
        assert!((rate / 200.0 - 1.0).abs() < 0.03, "rate {rate}");
    }
}
