//! A replica's prefill model as picks read it, without its lock: the TTFT slope and, per
//! count of other requests in flight, the intercept and spread net of that slope. An
//! estimate publishes one per [`EngineReading`], so that a pick reads every candidate alike.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::gateway::pick::predict::concurrency::{COUNTS, TtftByConcurrency};

/// One published prefill model, as `f64` bits.
#[derive(Debug)]
pub struct PublishedPrefill {
    slope: AtomicU64,
    intercepts: [AtomicU64; COUNTS],
    spreads: [AtomicU64; COUNTS],
}

impl PublishedPrefill {
    /// `model` at its own slope.
    pub fn new(model: &TtftByConcurrency) -> Self {
        let published = Self {
            slope: AtomicU64::new(0),
            intercepts: std::array::from_fn(|_| AtomicU64::new(0)),
            spreads: std::array::from_fn(|_| AtomicU64::new(0)),
        };
        published.store(model, model.slope());
        published
    }

    /// Publishes `model` at `slope`: its intercepts and spreads net of it.
    pub fn store(&self, model: &TtftByConcurrency, slope: f64) {
        let intercepts = model.intercepts_at(slope);
        let spreads = model.spreads_at(slope);
        self.slope.store(slope.to_bits(), Ordering::Relaxed);
        store_each(&self.intercepts, &intercepts);
        store_each(&self.spreads, &spreads);
    }

    /// Publishes what `other` publishes (the same slope: no need to compute it again).
    pub fn copy_from(&self, other: &PublishedPrefill) {
        self.slope.store(other.slope.load(Ordering::Relaxed), Ordering::Relaxed);
        for (mine, theirs) in self.intercepts.iter().zip(&other.intercepts) {
            mine.store(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        for (mine, theirs) in self.spreads.iter().zip(&other.spreads) {
            mine.store(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// Seconds per prompt token.
    pub fn slope(&self) -> f64 {
        f64::from_bits(self.slope.load(Ordering::Relaxed))
    }

    /// `(intercept, spread)` with `others_slot` other requests in flight (a
    /// [`crate::gateway::pick::predict::concurrency::slot`]).
    pub fn at(&self, others_slot: usize) -> (f64, f64) {
        let read = |published: &[AtomicU64; COUNTS]| {
            f64::from_bits(published[others_slot].load(Ordering::Relaxed))
        };
        (read(&self.intercepts), read(&self.spreads))
    }

    /// Every count's intercept.
    pub fn intercepts(&self) -> Vec<f64> {
        load_each(&self.intercepts)
    }

    /// Every count's spread.
    pub fn spreads(&self) -> Vec<f64> {
        load_each(&self.spreads)
    }
}

/// Publishes one value per in-flight count.
fn store_each(published: &[AtomicU64; COUNTS], values: &[f64; COUNTS]) {
    for (published, value) in published.iter().zip(values) {
        published.store(value.to_bits(), Ordering::Relaxed);
    }
}

/// Reads what [`store_each`] published.
fn load_each(published: &[AtomicU64; COUNTS]) -> Vec<f64> {
    published.iter().map(|value| f64::from_bits(value.load(Ordering::Relaxed))).collect()
}
