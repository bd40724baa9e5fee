//! Assigning a request to a canary variant: weighted, and deterministic from a sticky key
//! (a user or session id header, else the request id) so one user stays on one variant and
//! every gateway instance makes the same choice without talking to the others.

use std::hash::Hasher;

/// A variant's share of an entry's traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedVariant {
    pub name: String,
    pub weight: u32,
}

/// Why a weight table cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AssignError {
    #[error("no variants")]
    Empty,
    #[error("every weight is zero")]
    AllZero,
    #[error("variant name `{0}` appears twice")]
    Duplicate(String),
}

/// The variants of one entry with their cumulative weights, ready for assignment.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantTable {
    variants: Vec<WeightedVariant>,
    cumulative: Vec<u64>,
}

impl VariantTable {
    pub fn new(variants: Vec<WeightedVariant>) -> Result<Self, AssignError> {
        if variants.is_empty() {
            return Err(AssignError::Empty);
        }
        for (index, variant) in variants.iter().enumerate() {
            if variants[..index].iter().any(|other| other.name == variant.name) {
                return Err(AssignError::Duplicate(variant.name.clone()));
            }
        }
        let mut total = 0u64;
        let cumulative: Vec<u64> = variants
            .iter()
            .map(|variant| {
                total += u64::from(variant.weight);
                total
            })
            .collect();
        if total == 0 {
            return Err(AssignError::AllZero);
        }
        Ok(Self { variants, cumulative })
    }

    pub fn variants(&self) -> &[WeightedVariant] {
        &self.variants
    }

    /// The index of the variant a request with this sticky key belongs to.
    pub fn assign(&self, sticky_key: &[u8]) -> usize {
        let total = *self.cumulative.last().expect("validated non-empty");
        let point = stable_hash(sticky_key) % total;
        self.cumulative.partition_point(|&bound| bound <= point)
    }
}

/// FNV-1a: a fixed, documented hash, so that the assignment is the same on every instance,
/// build and Rust version (std's `DefaultHasher` promises none of that).
fn stable_hash(key: &[u8]) -> u64 {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(key);
    // FNV's low bits mix poorly for short keys; a final avalanche spreads them.
    let mut hash = hasher.finish();
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(weights: &[(&str, u32)]) -> VariantTable {
        VariantTable::new(
            weights
                .iter()
                .map(|(name, weight)| WeightedVariant { name: name.to_string(), weight: *weight })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn weights_are_honoured_within_tolerance() {
        let table = table(&[("a", 70), ("b", 20), ("c", 10)]);
        let mut counts = [0u32; 3];
        let draws = 100_000;
        for id in 0..draws {
            counts[table.assign(format!("request-{id}").as_bytes())] += 1;
        }
        // Binomial standard deviation at n=100k is under 150; allow about four of them.
        for (count, expected) in counts.iter().zip([70_000, 20_000, 10_000]) {
            assert!(count.abs_diff(expected) < 600, "{counts:?}");
        }
    }

    #[test]
    fn the_same_key_always_gets_the_same_variant() {
        let table = table(&[("a", 1), ("b", 1)]);
        for user in 0..100 {
            let key = format!("user-{user}");
            let first = table.assign(key.as_bytes());
            assert!((0..10).all(|_| table.assign(key.as_bytes()) == first));
        }
    }

    #[test]
    fn zero_weight_variants_get_nothing() {
        let table = table(&[("a", 0), ("b", 5), ("c", 0)]);
        assert!((0..1000).all(|id| table.assign(format!("{id}").as_bytes()) == 1));
    }

    #[test]
    fn bad_tables_are_rejected() {
        assert_eq!(VariantTable::new(vec![]), Err(AssignError::Empty));
        let zero = vec![WeightedVariant { name: "a".into(), weight: 0 }];
        assert_eq!(VariantTable::new(zero), Err(AssignError::AllZero));
        let twice = vec![
            WeightedVariant { name: "a".into(), weight: 1 },
            WeightedVariant { name: "a".into(), weight: 1 },
        ];
        assert_eq!(VariantTable::new(twice), Err(AssignError::Duplicate("a".into())));
    }
}
