//! The approximate block index: which replica is expected to hold which KV block, learned
//! from where this gateway sent each prompt. Memory-bounded: every (block, replica) entry
//! has a last-use tick, and past the budget the least recently used entry of the whole
//! index goes first.
//!
//! # Why one lock
//! A lookup or an insert touches a prompt's blocks for every candidate replica: a few
//! hundred map probes, microseconds, never across an await. One `parking_lot` mutex keeps
//! the LRU order exact without the cost of a concurrent map per probe.
//!
//! # Blocks still being computed
//! An entry made by a placement whose prefill has not finished is marked computing (the
//! top bit of its tick); the placement's first token clears the mark ([`BlockIndex::computed`]).
//! A copy still being computed is worth waiting for, since recomputing it elsewhere only
//! duplicates work in flight; a computed one is worth copying when its replica is busy. A
//! miss on a block still computing is no eviction ([`super::feedback`]).
//!
//! # What a replica can hold
//! When a replica reports a miss on a block the index expected it to hold (and no
//! placement was still computing it), its cache was full and evicted that block, least
//! recently used first: what the index still holds for it, the blocks newer than the
//! evicted one, is then an estimate of what its cache holds ([`BlockIndex::evicted_before`]).
//! Averaged over such reports, it is the replica's learned capacity ([`Fill`], exported as
//! `laneway_prefix_cache_blocks`): a replica whose resident blocks reach it is evicting.
//!
//! # Order within a prompt
//! A prompt's blocks are stamped tail first, so its head is the most recently used: when
//! the budget bites, a prompt loses its tail before its head, as a replica's cache frees
//! blocks (vLLM releases them last to first) and as a prefix is only useful from the start.

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicUsize, Ordering};

use fnv::FnvHashMap;
use parking_lot::Mutex;

/// An upper estimate of the memory one entry costs: its slot in the hash map (24 bytes
/// and a control byte, at the map's lowest load factor after it grows) plus its element
/// in the replica's order map (16 bytes and the B-tree node's share).
pub const ENTRY_BYTES: usize = 64;

/// A replica's number inside the index (names are kept once, not per entry).
type Slot = u16;

/// The mark of an entry whose placing request has not finished its prefill.
const COMPUTING: u64 = 1 << 63;

fn tick_of(value: u64) -> u64 {
    value & !COMPUTING
}

/// What one replica is expected to hold of a prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Leading blocks.
    pub blocks: usize,
    /// The last of them is still being computed by the request that placed it.
    pub computing: bool,
}

/// What the index held for a prompt on one replica just before it was placed there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placed {
    /// Leading blocks the index already had for this replica.
    pub matched: usize,
    /// Their last-use ticks before this placement, in prompt order, each with its
    /// computing mark ([`Previous`]).
    pub previous: Vec<Previous>,
}

/// One block the index held before a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Previous {
    pub tick: u64,
    /// The request that placed it had not finished its prefill.
    pub computing: bool,
}

/// How full one replica's cache is expected to be, once an eviction taught its capacity.
/// (Charging a placement for the blocks it would evict from a full cache was measured and
/// not kept: `benches/results/2026-12-03-prefix-eviction/`.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fill {
    /// Blocks the index holds for the replica.
    pub resident: usize,
    /// Blocks its cache is learned to hold.
    pub capacity: f64,
}

/// Weight of the latest estimate in a replica's learned capacity.
const CAPACITY_WEIGHT: f64 = 0.25;

/// The index, all replicas together.
#[derive(Debug)]
pub struct BlockIndex {
    inner: Mutex<Inner>,
    capacity_entries: AtomicUsize,
}

#[derive(Debug, Default)]
struct Inner {
    /// (block hash, replica) -> last-use tick.
    entries: FnvHashMap<(u64, Slot), u64>,
    /// Per replica: tick -> block hash, oldest first.
    orders: Vec<BTreeMap<u64, u64>>,
    /// Per replica: the blocks its cache is learned to hold (none before an eviction).
    capacities: Vec<Option<f64>>,
    slots: FnvHashMap<String, Slot>,
    tick: u64,
}

impl BlockIndex {
    /// An index that may use `capacity_bytes` (at least one entry).
    pub fn new(capacity_bytes: u64) -> Self {
        let index = Self { inner: Mutex::new(Inner::default()), capacity_entries: 0.into() };
        index.set_capacity_bytes(capacity_bytes);
        index
    }

    /// A new budget (a reload); applied at the next insert.
    pub fn set_capacity_bytes(&self, bytes: u64) {
        let entries = (bytes / ENTRY_BYTES as u64).max(1) as usize;
        self.capacity_entries.store(entries, Ordering::Relaxed);
    }

    /// Entries held, all replicas together.
    pub fn entries(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// The memory the entries are estimated to use, the figure the budget bounds.
    pub fn bytes(&self) -> u64 {
        (self.entries() * ENTRY_BYTES) as u64
    }

    /// For each of `replicas`, how many leading `hashes` it is expected to hold.
    #[cfg(test)]
    pub fn matched(&self, replicas: &[&str], hashes: &[u64]) -> Vec<usize> {
        self.lookup(replicas, hashes).iter().map(|held| held.blocks).collect()
    }

    /// For each of `replicas`, the leading `hashes` it is expected to hold, and whether the
    /// last of them is still being computed.
    pub fn lookup(&self, replicas: &[&str], hashes: &[u64]) -> Vec<Held> {
        let inner = self.inner.lock();
        let slots: Vec<Option<Slot>> =
            replicas.iter().map(|name| inner.slots.get(*name).copied()).collect();
        let mut held = vec![Held::default(); replicas.len()];
        let mut alive: Vec<usize> = (0..replicas.len()).filter(|&i| slots[i].is_some()).collect();
        for &hash in hashes {
            alive.retain(|&i| {
                let slot = slots[i].expect("only known slots are alive");
                let Some(&value) = inner.entries.get(&(hash, slot)) else { return false };
                held[i] = Held { blocks: held[i].blocks + 1, computing: value & COMPUTING != 0 };
                true
            });
            if alive.is_empty() {
                break;
            }
        }
        held
    }

    /// The most leading `hashes` any one replica is expected to hold.
    pub fn longest_anywhere(&self, hashes: &[u64]) -> usize {
        let inner = self.inner.lock();
        let slots = 0..inner.orders.len() as Slot;
        let held = |slot: Slot| {
            hashes.iter().take_while(|&&h| inner.entries.contains_key(&(h, slot))).count()
        };
        slots.map(held).max().unwrap_or(0)
    }

    /// Records that `replica` is computing (so will cache) every block of `hashes`; returns
    /// what it was expected to hold before. Evicts the least recently used entries beyond
    /// the budget.
    pub fn insert(&self, replica: &str, hashes: &[u64]) -> Placed {
        let capacity = self.capacity_entries.load(Ordering::Relaxed);
        let mut inner = self.inner.lock();
        let Some(slot) = inner.slot(replica) else { return Placed::default() };
        let previous: Vec<Previous> = hashes
            .iter()
            .map_while(|hash| inner.entries.get(&(*hash, slot)))
            .map(|&value| Previous { tick: tick_of(value), computing: value & COMPUTING != 0 })
            .collect();
        let Inner { entries, orders, tick, .. } = &mut *inner;
        let order = &mut orders[slot as usize];
        for &hash in hashes.iter().rev() {
            *tick += 1;
            match entries.entry((hash, slot)) {
                Entry::Occupied(mut held) => {
                    order.remove(&tick_of(*held.get()));
                    let computing = *held.get() & COMPUTING;
                    held.insert(*tick | computing);
                }
                Entry::Vacant(free) => {
                    free.insert(*tick | COMPUTING);
                }
            }
            order.insert(*tick, hash);
        }
        while inner.entries.len() > capacity && inner.evict_oldest() {}
        Placed { matched: previous.len(), previous }
    }

    /// The request that placed `hashes` on `replica` finished its prefill (or ended
    /// without a first token): those blocks count as computed. If the replica does not
    /// hold them, the next request that expected them reports so, and they are dropped.
    pub fn computed(&self, replica: &str, hashes: &[u64]) {
        let mut inner = self.inner.lock();
        let Some(&slot) = inner.slots.get(replica) else { return };
        for hash in hashes {
            if let Some(value) = inner.entries.get_mut(&(*hash, slot)) {
                *value &= !COMPUTING;
            }
        }
    }

    /// Drops `replica`'s entries last used before `tick`: its cache evicted a block of
    /// that age, and it evicts least recently used first, so the older ones are gone too.
    /// What is left is what its full cache holds: it updates the replica's learned
    /// capacity. Returns how many entries were dropped.
    pub fn evicted_before(&self, replica: &str, tick: u64) -> usize {
        let mut inner = self.inner.lock();
        let Some(&slot) = inner.slots.get(replica) else { return 0 };
        let dropped = inner.forget_older(slot, tick);
        let held = inner.orders[slot as usize].len() as f64;
        let learned = &mut inner.capacities[slot as usize];
        *learned = Some(match *learned {
            None => held,
            Some(before) => before + CAPACITY_WEIGHT * (held - before),
        });
        dropped
    }

    /// How full `replica`'s cache is expected to be (`None` until an eviction taught its
    /// capacity).
    pub fn fill(&self, replica: &str) -> Option<Fill> {
        let inner = self.inner.lock();
        let slot = *inner.slots.get(replica)? as usize;
        let capacity = inner.capacities[slot]?;
        Some(Fill { resident: inner.orders[slot].len(), capacity })
    }

    /// Drops every entry of `replica` (it left the set), and what was learned of its cache.
    pub fn forget_replica(&self, replica: &str) -> usize {
        let mut inner = self.inner.lock();
        let Some(&slot) = inner.slots.get(replica) else { return 0 };
        inner.capacities[slot as usize] = None;
        inner.forget_older(slot, u64::MAX)
    }
}

impl Inner {
    /// Drops the entries of `slot` last used before `tick`; returns how many.
    fn forget_older(&mut self, slot: Slot, tick: u64) -> usize {
        let order = &mut self.orders[slot as usize];
        let newer = order.split_off(&tick);
        let older = std::mem::replace(order, newer);
        for hash in older.values() {
            self.entries.remove(&(*hash, slot));
        }
        older.len()
    }

    /// The replica's slot, made on first sight; `None` once every slot is taken (its
    /// prompts are then not indexed: placement falls back to load alone).
    fn slot(&mut self, replica: &str) -> Option<Slot> {
        if let Some(&slot) = self.slots.get(replica) {
            return Some(slot);
        }
        let slot = Slot::try_from(self.orders.len()).ok()?;
        self.slots.insert(replica.to_string(), slot);
        self.orders.push(BTreeMap::new());
        self.capacities.push(None);
        Some(slot)
    }

    /// Evicts the entry with the oldest tick of all replicas; false if there is none.
    fn evict_oldest(&mut self) -> bool {
        let oldest = self
            .orders
            .iter()
            .enumerate()
            .filter_map(|(slot, order)| order.first_key_value().map(|(tick, _)| (*tick, slot)))
            .min();
        let Some((_, slot)) = oldest else { return false };
        let (_, hash) = self.orders[slot].pop_first().expect("non-empty");
        self.entries.remove(&(hash, slot as Slot));
        true
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn the_index_stays_within_its_budget_and_evicts_least_recently_used_tails_first() {
        let index = BlockIndex::new(100 * ENTRY_BYTES as u64);
        let mut rng = StdRng::seed_from_u64(7);
        let prompts: Vec<Vec<u64>> =
            (0..30).map(|_| (0..10).map(|_| rng.random()).collect()).collect();
        for (i, prompt) in prompts.iter().enumerate() {
            index.insert(&format!("r{}", i % 3), prompt);
            assert!(index.entries() <= 100);
        }
        assert_eq!(index.entries(), 100);
        assert_eq!(index.bytes(), 100 * ENTRY_BYTES as u64);
        // The last ten prompts are whole; the older ones are gone.
        for (i, prompt) in prompts.iter().enumerate() {
            let held = index.matched(&[&format!("r{}", i % 3)], prompt)[0];
            assert_eq!(held, if i >= 20 { 10 } else { 0 }, "prompt {i}");
        }
        // Touching an old prompt's head keeps it; three new entries then evict the three
        // oldest, that prompt's last blocks.
        index.insert("r2", &prompts[20][..4]);
        index.insert("r0", &[1, 2, 3]);
        assert_eq!(index.matched(&["r2"], &prompts[20])[0], 7, "tail evicted before head");
        assert_eq!(index.matched(&["r0"], &prompts[21])[0], 10);
        assert_eq!(index.entries(), 100);
    }

    #[test]
    fn a_reported_eviction_teaches_the_replica_capacity() {
        let index = BlockIndex::new(1 << 20);
        // Ticks run from 1, each prompt stamped tail first: a's blocks get 1..=10, b's 11..=20.
        index.insert("r0", &(100..110).collect::<Vec<u64>>());
        index.insert("r0", &(200..210).collect::<Vec<u64>>());
        assert_eq!(index.fill("r0"), None, "nothing learned before a miss");
        // The block of tick 11 was evicted: a's ten are gone, and b's ten are what it holds.
        assert_eq!(index.evicted_before("r0", 11), 10);
        assert_eq!(index.fill("r0"), Some(Fill { resident: 10, capacity: 10.0 }));
        assert_eq!(index.fill("r1"), None, "another replica's eviction teaches nothing of it");
        // Five more, then an eviction of tick 21's block and older: five held. The capacity
        // moves a quarter of the way: 10 + (5 - 10) / 4.
        index.insert("r0", &(300..305).collect::<Vec<u64>>());
        assert_eq!(index.evicted_before("r0", 21), 10);
        assert_eq!(index.fill("r0"), Some(Fill { resident: 5, capacity: 8.75 }));
        index.forget_replica("r0");
        assert_eq!(index.fill("r0"), None, "a replica that left is learned again");
    }
}
