//! The order waiters are served in: priority bands first (higher first), then weighted fair
//! order between flows (a tenant's requests are one flow) by start-time fair queueing: each
//! waiter gets a virtual finish tag `max(now, its flow's last tag) + 1 / weight`, and lower
//! tags go first. A flow that sends ten times as much gets no more turns than its weight
//! says; a single flow (every request without a tenant) is served first come, first served.

use std::collections::HashMap;
use std::sync::Arc;

use crate::gateway::config::Flow;

/// A waiter's place in the order: compare with `<` for "served earlier".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rank {
    band: u8,
    finish: f64,
    id: u64,
}

impl Rank {
    pub fn band(&self) -> u8 {
        self.band
    }

    /// Whether `self` is served before `other`.
    pub fn before(&self, other: &Rank) -> bool {
        (std::cmp::Reverse(self.band), self.finish, self.id)
            < (std::cmp::Reverse(other.band), other.finish, other.id)
    }
}

/// The virtual clock and each flow's last tag. Kept under the queue's lock.
#[derive(Debug, Default)]
pub struct FairClock {
    now: f64,
    last_finish: HashMap<Arc<str>, f64>,
}

impl FairClock {
    /// The rank a newcomer of `flow` with id `id` would get, without giving it.
    pub fn peek(&self, flow: &Flow, id: u64) -> Rank {
        let last = self.last_finish.get(&flow.key).copied().unwrap_or(0.0);
        let finish = self.now.max(last) + 1.0 / f64::from(flow.weight.max(1));
        Rank { band: flow.band, finish, id }
    }

    /// The rank of a newcomer of `flow` with id `id`.
    pub fn rank(&mut self, flow: &Flow, id: u64) -> Rank {
        let rank = self.peek(flow, id);
        self.last_finish.insert(flow.key.clone(), rank.finish);
        rank
    }

    /// A waiter left the queue: virtual time has reached its turn. An empty queue forgets
    /// every flow, so the map holds only flows that are waiting or just waited.
    pub fn left(&mut self, rank: &Rank, queue_empty: bool) {
        if queue_empty {
            self.now = 0.0;
            self.last_finish.clear();
        } else {
            self.now = self.now.max(rank.finish - f64::EPSILON);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(key: &str, weight: u32, band: u8) -> Flow {
        Flow { key: Arc::from(key), weight, band }
    }

    /// Serves `ranks` in order; returns the flow keys in service order.
    fn order(arrivals: &[(Flow, u64)]) -> Vec<String> {
        let mut clock = FairClock::default();
        let mut ranked: Vec<(Rank, String)> =
            arrivals.iter().map(|(f, id)| (clock.rank(f, *id), f.key.to_string())).collect();
        ranked.sort_by(|a, b| {
            if a.0.before(&b.0) { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater }
        });
        ranked.into_iter().map(|(_, key)| key).collect()
    }

    #[test]
    fn a_heavy_flow_does_not_starve_a_light_one() {
        // The heavy flow queues 10 before the light one's 2 arrive.
        let mut arrivals: Vec<(Flow, u64)> = (0..10).map(|i| (flow("heavy", 1, 4), i)).collect();
        arrivals.push((flow("light", 1, 4), 10));
        arrivals.push((flow("light", 1, 4), 11));
        let served = order(&arrivals);
        let light_turns: Vec<usize> =
            served.iter().enumerate().filter(|(_, k)| *k == "light").map(|(i, _)| i).collect();
        assert_eq!(light_turns, [1, 3]);
    }

    #[test]
    fn weights_share_turns_and_bands_go_first() {
        let mut arrivals: Vec<(Flow, u64)> = Vec::new();
        for i in 0..6 {
            arrivals.push((flow("a", 2, 4), 2 * i));
            arrivals.push((flow("b", 1, 4), 2 * i + 1));
        }
        arrivals.push((flow("urgent", 1, 7), 99));
        let served = order(&arrivals);
        assert_eq!(served[0], "urgent");
        let first_six = &served[1..7];
        assert_eq!(first_six.iter().filter(|k| *k == "a").count(), 4, "{served:?}");
    }

    #[test]
    fn one_flow_is_first_come_first_served() {
        let arrivals: Vec<(Flow, u64)> = (0..5).map(|i| (Flow::default(), i)).collect();
        let mut clock = FairClock::default();
        let ranks: Vec<Rank> = arrivals.iter().map(|(f, id)| clock.rank(f, *id)).collect();
        assert!(ranks.windows(2).all(|w| w[0].before(&w[1])));
    }
}
