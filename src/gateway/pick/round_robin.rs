//! `round_robin`: each replica in turn, blind to load; the baseline `least_queue` is
//! measured against.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::policy::{PickContext, Policy, candidate_count, nth_candidate};
use super::replica::Replica;

#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }

    fn pick(&self, replicas: &[Arc<Replica>], context: &PickContext) -> Option<usize> {
        let count = candidate_count(replicas, context);
        if count == 0 {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        Some(nth_candidate(turn % count, context))
    }
}
