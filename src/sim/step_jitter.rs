//! A step's duration drawn around its modelled cost (`engine.step_jitter`): real engines'
//! steps vary from one to the next, and two replicas fed alike drift apart instead of
//! finishing their requests in lockstep.

use std::hash::Hasher;

use fnv::FnvHasher;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, LogNormal};

/// Multiplies each step's modelled cost by a log-normal factor of mean 1 and the profile's
/// coefficient of variation; exactly 1 when that is 0 (every built-in profile but the real
/// engine's), so fitted step times and the tests that check them stay exact.
#[derive(Debug)]
pub struct StepJitter {
    draws: Option<(LogNormal<f64>, StdRng)>,
}

impl StepJitter {
    /// Draws with coefficient of variation `cv` (0: none) from `seed`. `cv` is validated
    /// with the profile (finite, 0 to 1).
    pub fn new(cv: f64, seed: u64) -> Self {
        let distribution = (cv > 0.0).then(|| LogNormal::from_mean_cv(1.0, cv).ok()).flatten();
        Self { draws: distribution.map(|d| (d, StdRng::seed_from_u64(seed))) }
    }

    /// The next step's factor.
    pub fn factor(&mut self) -> f64 {
        match &mut self.draws {
            Some((distribution, rng)) => distribution.sample(rng),
            None => 1.0,
        }
    }
}

/// The seed of one replica's draws: its `--seed` and its id, so that replicas started with
/// the same seed draw apart.
pub fn replica_seed(seed: u64, id: &str) -> u64 {
    crate::prompt_tokens::mix(seed ^ id_hash(id))
}

/// A replica id's FNV-1a hash (also what makes its response ids unique: `chunks`).
pub fn id_hash(id: &str) -> u64 {
    let mut hasher = FnvHasher::default();
    hasher.write(id.as_bytes());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(cv: f64, seed: u64, count: usize) -> Vec<f64> {
        let mut jitter = StepJitter::new(cv, seed);
        (0..count).map(|_| jitter.factor()).collect()
    }

    #[test]
    fn without_jitter_every_step_takes_its_modelled_time() {
        assert!(draws(0.0, 7, 100).iter().all(|&factor| factor == 1.0));
    }

    #[test]
    fn factors_average_one_with_the_configured_spread() {
        let factors = draws(0.25, 7, 20_000);
        let mean = factors.iter().sum::<f64>() / factors.len() as f64;
        let variance =
            factors.iter().map(|f| (f - mean).powi(2)).sum::<f64>() / factors.len() as f64;
        let cv = variance.sqrt() / mean;
        assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
        assert!((cv - 0.25).abs() < 0.02, "cv {cv}");
        assert!(factors.iter().all(|&f| f > 0.0));
    }

    #[test]
    fn a_seed_replays_and_replicas_of_one_seed_draw_apart() {
        assert_eq!(draws(0.25, 7, 50), draws(0.25, 7, 50));
        let (first, second) = (replica_seed(0, "real-sim-0"), replica_seed(0, "real-sim-1"));
        assert_ne!(first, second);
        assert_ne!(draws(0.25, first, 50), draws(0.25, second, 50));
    }
}
