//! The retry budget: retries may add at most `budget_percent` of the requests plus
//! `min_per_second`, so that a failing pool sees a bounded extra load instead of every
//! request twice (the retry storm that amplifies overload). A token bucket in atomics:
//! every request deposits `budget_percent / 100` of a token, time deposits
//! `min_per_second`, a retry withdraws one.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::gateway::clock::now_micros;
use crate::gateway::config::reliability::RetryConfig;

/// Tokens are kept in millionths.
const ONE: u64 = 1_000_000;

#[derive(Debug)]
pub struct RetryBudget {
    per_request: AtomicU64,
    per_second: AtomicU64,
    /// The bucket never holds more than this, so a quiet hour does not buy a storm.
    cap: AtomicU64,
    tokens: AtomicU64,
    refilled_at: AtomicU64,
}

impl RetryBudget {
    pub fn new(config: &RetryConfig) -> Self {
        let budget = Self {
            per_request: AtomicU64::new(0),
            per_second: AtomicU64::new(0),
            cap: AtomicU64::new(0),
            tokens: AtomicU64::new(0),
            refilled_at: AtomicU64::new(now_micros()),
        };
        budget.configure(config);
        budget.tokens.store(budget.cap.load(Ordering::Relaxed), Ordering::Relaxed);
        budget
    }

    /// Takes new settings (a reload) and keeps the tokens saved so far.
    pub fn configure(&self, config: &RetryConfig) {
        self.per_request.store(u64::from(config.budget_percent) * ONE / 100, Ordering::Relaxed);
        self.per_second.store(u64::from(config.min_per_second) * ONE, Ordering::Relaxed);
        // Ten seconds of floor, or ten retries, whichever is more.
        let cap = (u64::from(config.min_per_second) * 10).max(10) * ONE;
        self.cap.store(cap, Ordering::Relaxed);
    }

    /// A request arrived: it earns its share of a retry.
    pub fn deposit(&self) {
        self.add(self.per_request.load(Ordering::Relaxed));
    }

    /// Takes one retry from the budget, if there is one.
    pub fn try_withdraw(&self) -> bool {
        self.refill();
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| tokens.checked_sub(ONE))
            .is_ok()
    }

    fn refill(&self) {
        let now = now_micros();
        let then = self.refilled_at.load(Ordering::Acquire);
        if now <= then {
            return;
        }
        // One refiller wins the interval; the others see it already credited.
        if self.refilled_at.compare_exchange(then, now, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            let per_second = self.per_second.load(Ordering::Relaxed);
            self.add((now - then).saturating_mul(per_second) / 1_000_000);
        }
    }

    fn add(&self, amount: u64) {
        let cap = self.cap.load(Ordering::Relaxed);
        let _ = self.tokens.fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
            Some(tokens.saturating_add(amount).min(cap))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_allows_a_share_of_requests_plus_the_floor() {
        let config = RetryConfig { budget_percent: 20, min_per_second: 0, max_attempts: 2 };
        let budget = RetryBudget::new(&config);
        // The bucket starts full (ten retries), then earns one per five requests.
        let start = (0..100).take_while(|_| budget.try_withdraw()).count();
        assert_eq!(start, 10);
        for _ in 0..50 {
            budget.deposit();
        }
        let earned = (0..100).take_while(|_| budget.try_withdraw()).count();
        assert_eq!(earned, 10);
        let none = RetryBudget::new(&RetryConfig { budget_percent: 0, ..config });
        while none.try_withdraw() {}
        none.deposit();
        assert!(!none.try_withdraw());
    }
}
