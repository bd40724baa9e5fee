//! A per-minute budget as a token bucket: it holds at most a minute's allowance and refills
//! continuously, so a tenant may burst up to its limit and then goes at the limit's rate.
//! Times are passed in, so the arithmetic is tested without clocks.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Bucket {
    capacity: f64,
    per_second: f64,
    level: f64,
    updated: Instant,
}

impl Bucket {
    /// A full bucket for `per_minute`.
    pub fn new(per_minute: u64, now: Instant) -> Self {
        let capacity = per_minute as f64;
        Self { capacity, per_second: capacity / 60.0, level: capacity, updated: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * self.per_second).min(self.capacity);
        self.updated = now;
    }

    /// What a request needing `amount` may take: never more than the whole bucket, so a
    /// request larger than a minute's budget waits for a full bucket instead of forever.
    fn need(&self, amount: u64) -> f64 {
        (amount as f64).min(self.capacity)
    }

    /// How long until `amount` is available (zero: now).
    pub fn wait_for(&mut self, amount: u64, now: Instant) -> Duration {
        self.refill(now);
        let missing = self.need(amount) - self.level;
        if missing <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(missing / self.per_second)
        }
    }

    /// Takes `amount`; call after [`Self::wait_for`] returned zero.
    pub fn take(&mut self, amount: u64, now: Instant) {
        self.refill(now);
        self.level -= self.need(amount);
    }

    /// Takes `amount` whatever the level (down to one bucket of debt): the shared store
    /// admitted the request, and this bucket only follows.
    pub fn charge(&mut self, amount: u64, now: Instant) {
        let need = self.need(amount) as i64;
        self.settle(need, now);
    }

    /// Corrects an earlier take by `delta` (positive: more was used than taken). The level
    /// may go below zero, a debt the next requests wait out, but never below one bucket.
    pub fn settle(&mut self, delta: i64, now: Instant) {
        self.refill(now);
        self.level = (self.level - delta as f64).clamp(-self.capacity, self.capacity);
    }

    pub fn limit(&self) -> u64 {
        self.capacity as u64
    }

    /// Whole units left now.
    pub fn remaining(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.level.max(0.0).floor() as u64
    }

    /// How long until the bucket is full again.
    pub fn until_full(&mut self, now: Instant) -> Duration {
        self.refill(now);
        Duration::from_secs_f64(((self.capacity - self.level) / self.per_second).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_to_the_limit_then_refills_at_the_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(60, start);
        for _ in 0..60 {
            assert_eq!(bucket.wait_for(1, start), Duration::ZERO);
            bucket.take(1, start);
        }
        assert_eq!(bucket.remaining(start), 0);
        assert_eq!(bucket.wait_for(1, start), Duration::from_secs(1));
        assert_eq!(bucket.until_full(start), Duration::from_secs(60));
        let later = start + Duration::from_secs(10);
        assert_eq!(bucket.remaining(later), 10);
    }

    #[test]
    fn settling_charges_what_was_used_and_huge_requests_wait_for_a_full_bucket() {
        let start = Instant::now();
        let mut bucket = Bucket::new(600, start);
        bucket.take(100, start);
        // 100 reserved, 400 used: 300 more.
        bucket.settle(300, start);
        assert_eq!(bucket.remaining(start), 200);
        bucket.settle(10_000, start);
        assert_eq!(bucket.remaining(start), 0);
        // Clamped at one bucket of debt: a full minute refills it to zero, two to full.
        assert_eq!(bucket.until_full(start), Duration::from_secs(120));
        let mut fresh = Bucket::new(600, start);
        assert_eq!(fresh.wait_for(5_000, start), Duration::ZERO);
    }
}
