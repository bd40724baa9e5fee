//! Copies of hot prefixes, made in the background ([`HotPrefixes`]): a prompt prefix that
//! keeps hitting where it is cached is computed once more, by a one-token request of the
//! gateway's own, on a replica that holds less of it and is less busy, so that its next
//! requests have a second place to hit.
//!
//! A prefix cached on one replica only sends every request that reuses it there, and each
//! one that arrives while another is being prefilled on that replica waits for it: on two
//! real replicas and eight shared 3,000-token contexts at 4 requests a second, such hits
//! were 12-18% of all and took 63-74 ms (p50) against 42-48 alone, and they made the TTFT
//! p90. A second copy computed by a client's request costs that client a miss; computed in
//! the background it costs no client one, and the placement rule (a hit never costs more
//! than a miss elsewhere, holders of one prompt told apart by load) then sends each hit to
//! whichever holder is less busy. At 12 requests a second, 600 of them, hits spread so
//! took the TTFT p90 from 89 to 74 ms (`benches/results/2026-12-08-hot-copies-busy`).
//!
//! A copy is made only where it is cheap and wanted: the prefix hit at least
//! `prefix.hot_copy_min_tokens` on its replica and did so `prefix.hot_copy_hits` times since
//! its last copy (a conversation's turns each hit a longer prefix than the last, so they
//! never add up); the hit waits behind other requests on its replica and the target, in
//! rotation and owing no prefill, has fewer in flight (hits that come one at a time need no
//! second place: made for them, copies cost a 4 requests/s workload 10 ms of TTFT p90);
//! its cache has room (no eviction learned, or the copy fits in half its learned
//! capacity); most recent prompts were cached where they went (a workload that reuses
//! prefixes, not one whose caches are thrashing); and one copy at a time per prefix.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::index::{BlockIndex, Held};
use crate::gateway::pick::replica::Replica;

/// A prefix not hit for this long starts counting its hits again.
const COOLS_AFTER: Duration = Duration::from_secs(60);

/// Prefixes followed at most; past it, those cooled are forgotten (all of them if none).
const MAX_FOLLOWED: usize = 4096;

/// From this share of recent prompts expected cached where they went, the traffic reuses
/// prefixes enough for copies to pay ([`super::RecentReuse`]).
const REUSED_FROM: f64 = 0.5;

/// How a prefix's reuse is counted.
#[derive(Debug, Clone, Copy)]
struct Heat {
    /// Hits since its last copy (or since it was first hit).
    hits: u32,
    last_hit: Instant,
    /// A copy of it is being made.
    copying: bool,
}

/// The hot prefixes this gateway follows, by the hash of their last block.
#[derive(Debug, Default)]
pub struct HotPrefixes {
    heat: DashMap<u64, Heat>,
}

/// What one copy computes, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    /// The replica that computes it: an index into the candidates given.
    pub target: usize,
    /// The hash of the prefix's last block, which names it here.
    pub prefix: u64,
}

/// What a copy asks of the traffic and of its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRule {
    /// Hits since the last copy (0: no copies).
    pub hits: u32,
    /// Blocks a hit must cover to count, and a target must lack.
    pub min_blocks: usize,
}

impl HotPrefixes {
    /// A request was placed where `hit_blocks` of its prompt (`hashes`) were cached;
    /// `candidates` are the replicas it could have gone to, `held` reads what each holds of
    /// it (only once the prefix is due a copy: the index's lookup stays off the path of the
    /// other hits), `chosen` the one it went to. A copy to make, if this hit makes the
    /// prefix due one and a candidate can take it now; the prefix is then marked as being
    /// copied until [`Self::copied`].
    #[allow(clippy::too_many_arguments)]
    pub fn after_hit(
        &self,
        rule: CopyRule,
        hashes: &[u64],
        hit_blocks: usize,
        candidates: &[Arc<Replica>],
        held: impl FnOnce() -> Vec<Held>,
        chosen: usize,
        index: &BlockIndex,
        reuse: f64,
        now: Instant,
    ) -> Option<CopyPlan> {
        if rule.hits == 0 || hit_blocks < rule.min_blocks.max(1) || hit_blocks > hashes.len() {
            return None;
        }
        let prefix = hashes[hit_blocks - 1];
        if !self.due(prefix, rule.hits, now) {
            return None;
        }
        if reuse < REUSED_FROM {
            return None;
        }
        let held = held();
        let target = copy_target(candidates, &held, chosen, hit_blocks, rule.min_blocks, index)?;
        let mut heat = self.heat.get_mut(&prefix)?;
        heat.hits = 0;
        heat.copying = true;
        Some(CopyPlan { target: target.0, prefix })
    }

    /// Counts a hit of `prefix`: whether it is due a copy now.
    fn due(&self, prefix: u64, hits: u32, now: Instant) -> bool {
        if self.heat.len() >= MAX_FOLLOWED && !self.heat.contains_key(&prefix) {
            self.heat.retain(|_, heat| now.saturating_duration_since(heat.last_hit) < COOLS_AFTER);
            if self.heat.len() >= MAX_FOLLOWED {
                self.heat.clear();
            }
        }
        let fresh = Heat { hits: 0, last_hit: now, copying: false };
        let mut heat = self.heat.entry(prefix).or_insert(fresh);
        if now.saturating_duration_since(heat.last_hit) >= COOLS_AFTER {
            heat.hits = 0;
        }
        heat.hits = heat.hits.saturating_add(1);
        heat.last_hit = now;
        !heat.copying && heat.hits >= hits
    }

    /// The copy of `prefix` ended (made or not): another may follow.
    pub fn copied(&self, prefix: u64) {
        if let Some(mut heat) = self.heat.get_mut(&prefix) {
            heat.copying = false;
        }
    }

    /// Prefixes followed.
    pub fn len(&self) -> usize {
        self.heat.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heat.is_empty()
    }
}

/// The candidate to compute a copy of a `hit_blocks` prefix hit on `chosen`: one in
/// rotation, owing no prefill, with fewer of this gateway's requests in flight than wait
/// beside the hit on `chosen`, lacking `min_blocks` of the prefix at least, with room in its
/// cache. Among several, the prefix's rendezvous order
/// (the same on every gateway). Returns its index and what it holds.
fn copy_target(
    candidates: &[Arc<Replica>],
    held: &[Held],
    chosen: usize,
    hit_blocks: usize,
    min_blocks: usize,
    index: &BlockIndex,
) -> Option<(usize, usize)> {
    let chosen_hash = candidates.get(chosen)?.name_hash;
    // The hit's own request is in flight on its replica: the others there are what it waits
    // behind, and a copy pays only where fewer wait.
    let others_on_chosen = candidates[chosen].load.in_flight().saturating_sub(1);
    let less_busy = |replica: &Replica| {
        replica.accepts_new_requests()
            && replica.health.in_rotation()
            && replica.load.in_flight() < others_on_chosen
            && replica.load.prefill_owed_tokens() == 0
    };
    let room = |replica: &Replica, lacking: usize| match index.fill(&replica.name) {
        None => true,
        Some(fill) => (fill.resident + lacking) as f64 <= fill.capacity / 2.0,
    };
    candidates
        .iter()
        .zip(held)
        .enumerate()
        .filter(|(i, _)| *i != chosen)
        .filter(|(_, (replica, held))| {
            let lacking = hit_blocks.saturating_sub(held.blocks);
            lacking >= min_blocks.max(1) && less_busy(replica) && room(replica, lacking)
        })
        .max_by_key(|(_, (replica, _))| crate::prompt_tokens::mix(replica.name_hash ^ chosen_hash))
        .map(|(i, (_, held))| (i, held.blocks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::pick::test_fleet::replicas;
    use std::sync::atomic::Ordering;

    const RULE: CopyRule = CopyRule { hits: 3, min_blocks: 4 };

    fn held(blocks: &[usize]) -> Vec<Held> {
        blocks.iter().map(|&blocks| Held { blocks, computing: false }).collect()
    }

    /// Two requests in flight on r0 beside the hit's own: what a hit there waits behind.
    fn two_others_beside_the_hit(fleet: &[Arc<Replica>]) {
        fleet[0].load.in_flight.store(3, Ordering::Relaxed);
    }

    /// `count` hits of an 8-block prefix held on r0 only, `seconds_apart`, each with two
    /// other requests beside it there: the plans made.
    fn hits(
        hot: &HotPrefixes,
        fleet: &[Arc<Replica>],
        count: usize,
        seconds_apart: u64,
    ) -> Vec<Option<CopyPlan>> {
        two_others_beside_the_hit(fleet);
        let index = BlockIndex::new(1 << 20);
        let hashes: Vec<u64> = (1..=10).collect();
        let start = Instant::now();
        (0..count)
            .map(|i| {
                let now = start + Duration::from_secs(seconds_apart * i as u64);
                let held = held(&[8, 0, 0][..fleet.len()]);
                hot.after_hit(RULE, &hashes, 8, fleet, || held.clone(), 0, &index, 0.9, now)
            })
            .collect()
    }

    #[test]
    fn a_prefix_is_copied_after_the_rule_s_hits_and_not_again_while_copying() {
        let (hot, fleet) = (HotPrefixes::default(), replicas(2));
        let plans = hits(&hot, &fleet, 5, 1);
        let expected = Some(CopyPlan { target: 1, prefix: 8 });
        assert_eq!(plans, [None, None, expected.clone(), None, None]);
        // The two hits during the copy count toward the next: one more makes it due.
        hot.copied(8);
        assert_eq!(hits(&hot, &fleet, 2, 1), [expected, None]);
    }

    #[test]
    fn hits_a_minute_apart_never_make_a_prefix_hot() {
        let (hot, fleet) = (HotPrefixes::default(), replicas(2));
        assert!(hits(&hot, &fleet, 6, 60).iter().all(Option::is_none));
    }

    #[test]
    fn a_replica_as_busy_as_the_hit_s_draining_or_owing_prefill_takes_no_copy() {
        let fleet = replicas(2);
        // Two requests on r1, as many as beside the hit on r0: a hit there would wait as long.
        fleet[1].load.in_flight.store(2, Ordering::Relaxed);
        assert!(hits(&HotPrefixes::default(), &fleet, 4, 1).iter().all(Option::is_none));
        // One: fewer than the hit waits behind.
        fleet[1].load.in_flight.store(1, Ordering::Relaxed);
        assert!(hits(&HotPrefixes::default(), &fleet, 4, 1).iter().any(Option::is_some));
        fleet[1].load.in_flight.store(0, Ordering::Relaxed);
        fleet[1].load.prefill_owed_tokens.store(100, Ordering::Relaxed);
        assert!(hits(&HotPrefixes::default(), &fleet, 4, 1).iter().all(Option::is_none));
        fleet[1].load.prefill_owed_tokens.store(0, Ordering::Relaxed);
        fleet[1].set_draining(true);
        assert!(hits(&HotPrefixes::default(), &fleet, 4, 1).iter().all(Option::is_none));
        fleet[1].set_draining(false);
        assert!(hits(&HotPrefixes::default(), &fleet, 4, 1).iter().any(Option::is_some));
    }

    #[test]
    fn a_hit_that_waits_behind_nothing_buys_no_copy() {
        let fleet = replicas(2);
        let (index, hashes, now) =
            (BlockIndex::new(1 << 20), (1..=10).collect::<Vec<u64>>(), Instant::now());
        let held = held(&[8, 0]);
        let hit = |hot: &HotPrefixes| {
            hot.after_hit(RULE, &hashes, 8, &fleet, || held.clone(), 0, &index, 0.9, now)
        };
        // Only the hit itself on r0, r1 idle: hits that come one at a time need no second place.
        fleet[0].load.in_flight.store(1, Ordering::Relaxed);
        let hot = HotPrefixes::default();
        assert!((0..6).all(|_| hit(&hot).is_none()));
        // One other request beside it: the idle r1 takes the copy.
        fleet[0].load.in_flight.store(2, Ordering::Relaxed);
        let hot = HotPrefixes::default();
        assert!((0..3).any(|_| hit(&hot).is_some()));
    }

    #[test]
    fn no_copy_where_the_cache_has_no_room_or_the_traffic_does_not_reuse() {
        let (hot, fleet) = (HotPrefixes::default(), replicas(2));
        two_others_beside_the_hit(&fleet);
        let hashes: Vec<u64> = (1..=10).collect();
        let now = Instant::now();
        let index = BlockIndex::new(1 << 20);
        // r1 holds 10 blocks and an eviction taught it holds no more than that: no room.
        let others: Vec<u64> = (100..110).collect();
        index.insert("r1", &others);
        index.evicted_before("r1", 0);
        let held = held(&[8, 0]);
        for _ in 0..4 {
            assert_eq!(
                hot.after_hit(RULE, &hashes, 8, &fleet, || held.clone(), 0, &index, 0.9, now),
                None
            );
        }
        let empty = BlockIndex::new(1 << 20);
        let hot = HotPrefixes::default();
        for _ in 0..4 {
            assert_eq!(
                hot.after_hit(RULE, &hashes, 8, &fleet, || held.clone(), 0, &empty, 0.3, now),
                None
            );
        }
    }

    #[test]
    fn short_hits_and_replicas_holding_most_of_the_prefix_take_no_copy() {
        let fleet = replicas(3);
        two_others_beside_the_hit(&fleet);
        let index = BlockIndex::new(1 << 20);
        let hashes: Vec<u64> = (1..=10).collect();
        let now = Instant::now();
        let hot = HotPrefixes::default();
        let short = held(&[3, 0, 0]);
        for _ in 0..4 {
            assert_eq!(
                hot.after_hit(RULE, &hashes, 3, &fleet, || short.clone(), 0, &index, 0.9, now),
                None
            );
        }
        // r1 lacks 2 blocks of 8 (under the rule's 4); r2 lacks all 8 and takes the copy.
        let most = held(&[8, 6, 0]);
        let plans: Vec<_> = (0..3)
            .map(|_| hot.after_hit(RULE, &hashes, 8, &fleet, || most.clone(), 0, &index, 0.9, now))
            .collect();
        assert_eq!(plans[2], Some(CopyPlan { target: 2, prefix: 8 }));
    }

    #[test]
    fn the_followed_prefixes_stay_bounded() {
        let (hot, fleet) = (HotPrefixes::default(), replicas(2));
        let index = BlockIndex::new(1 << 20);
        let held = held(&[8, 8]);
        let now = Instant::now();
        for prefix in 0..(MAX_FOLLOWED as u64 + 10) {
            let hashes: Vec<u64> = (0..8).map(|i| prefix * 100 + i).collect();
            hot.after_hit(RULE, &hashes, 8, &fleet, || held.clone(), 0, &index, 0.9, now);
        }
        assert!(hot.len() <= MAX_FOLLOWED, "{} followed", hot.len());
    }
}
