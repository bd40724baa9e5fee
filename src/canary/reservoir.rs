//! A bounded uniform sample of a stream of values (Vitter's algorithm R), so the canary
//! report can test distributions on a fixed memory budget however long it runs.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone)]
pub struct Reservoir {
    capacity: usize,
    seen: u64,
    samples: Vec<f64>,
    rng: StdRng,
}

impl Reservoir {
    pub fn new(capacity: usize, seed: u64) -> Self {
        Self {
            capacity,
            seen: 0,
            samples: Vec::with_capacity(capacity),
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// Offers one value; it is kept with probability capacity / seen.
    pub fn offer(&mut self, value: f64) {
        self.seen += 1;
        if self.samples.len() < self.capacity {
            self.samples.push(value);
        } else {
            let slot = self.rng.random_range(0..self.seen);
            if let Some(kept) = self.samples.get_mut(slot as usize) {
                *kept = value;
            }
        }
    }

    pub fn samples(&self) -> &[f64] {
        &self.samples
    }

    /// How many values were offered in all.
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_until_full_then_stays_bounded() {
        let mut reservoir = Reservoir::new(100, 1);
        (0..50).for_each(|v| reservoir.offer(f64::from(v)));
        assert_eq!(reservoir.samples().len(), 50);
        (50..100_000).for_each(|v| reservoir.offer(f64::from(v)));
        assert_eq!(reservoir.samples().len(), 100);
        assert_eq!(reservoir.seen(), 100_000);
    }

    #[test]
    fn the_sample_is_uniform_over_the_stream() {
        let mut reservoir = Reservoir::new(2000, 7);
        (0..100_000).for_each(|v| reservoir.offer(f64::from(v)));
        let mean = reservoir.samples().iter().sum::<f64>() / 2000.0;
        // The stream's mean is 49,999.5; the sample mean's standard error is about 645.
        assert!((mean - 49_999.5).abs() < 3000.0, "mean {mean}");
        let late = reservoir.samples().iter().filter(|&&v| v >= 50_000.0).count();
        assert!((900..1100).contains(&late), "late {late}");
    }
}
