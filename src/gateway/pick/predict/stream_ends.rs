//! When the streams in flight on a replica are expected to end: each request that says how
//! many tokens it may generate holds a slot with its expected end (its predicted first
//! token plus that many tokens at the replica's predicted TPOT, then, once its first token
//! came, that many tokens from then). A replica whose API processes all stream takes a new
//! request on the first of them to come free, so past capacity the soonest end says which
//! replica will start a request first; a count of open requests does not.
//!
//! Lock-free, as placement must be: a fixed array of atomics, a slot claimed by a
//! compare-and-swap from zero (free) and given back by its holder.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Streams per replica whose expected end is kept; a request finding every slot held keeps
/// none, and the replica's soonest end is then not known.
pub const SLOTS: usize = 64;

/// One replica's expected stream ends, in [`crate::gateway::clock`] microseconds.
#[derive(Debug)]
pub struct StreamEnds {
    /// An expected end per slot; zero: free.
    slots: [AtomicU64; SLOTS],
    /// Where the next claim starts looking.
    next: AtomicUsize,
    /// Slots held.
    held: AtomicU64,
}

impl Default for StreamEnds {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            next: AtomicUsize::new(0),
            held: AtomicU64::new(0),
        }
    }
}

impl StreamEnds {
    /// Holds a slot for a stream expected to end at `end`; `None` if every slot is held.
    pub fn claim(&self, end: u64) -> Option<usize> {
        let end = end.max(1);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for step in 0..SLOTS {
            let slot = (start + step) % SLOTS;
            let claimed =
                self.slots[slot].compare_exchange(0, end, Ordering::AcqRel, Ordering::Relaxed);
            if claimed.is_ok() {
                self.held.fetch_add(1, Ordering::Relaxed);
                return Some(slot);
            }
        }
        None
    }

    /// Moves the expected end of the stream holding `slot`.
    pub fn set(&self, slot: usize, end: u64) {
        self.slots[slot].store(end.max(1), Ordering::Release);
    }

    /// Gives `slot` back.
    pub fn release(&self, slot: usize) {
        if self.slots[slot].swap(0, Ordering::AcqRel) != 0 {
            self.held.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Streams whose expected end is held.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The earliest expected end held, if any.
    pub fn soonest(&self) -> Option<u64> {
        self.slots.iter().map(|slot| slot.load(Ordering::Acquire)).filter(|&end| end != 0).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soonest_end_follows_claims_moves_and_releases() {
        let ends = StreamEnds::default();
        assert_eq!((ends.soonest(), ends.held()), (None, 0));
        let late = ends.claim(9_000).unwrap();
        let early = ends.claim(4_000).unwrap();
        assert_eq!((ends.soonest(), ends.held()), (Some(4_000), 2));
        ends.set(early, 12_000);
        assert_eq!(ends.soonest(), Some(9_000));
        ends.release(late);
        assert_eq!((ends.soonest(), ends.held()), (Some(12_000), 1));
        ends.release(early);
        ends.release(early);
        assert_eq!((ends.soonest(), ends.held()), (None, 0), "a second release counts nothing");
    }

    #[test]
    fn every_slot_held_refuses_the_next_claim_until_one_is_released() {
        let ends = StreamEnds::default();
        let slots: Vec<usize> = (0..SLOTS as u64).map(|n| ends.claim(1_000 + n).unwrap()).collect();
        let mut distinct = slots.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), SLOTS);
        assert_eq!(ends.claim(5), None);
        assert_eq!(ends.held(), SLOTS as u64);
        ends.release(slots[10]);
        let again = ends.claim(5).unwrap();
        assert_eq!(again, slots[10]);
        assert_eq!(ends.soonest(), Some(5));
    }
}
