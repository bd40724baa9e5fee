//! Where each session was last placed, so that a session that left its home (the home was
//! overloaded) stays where its conversation is now cached instead of going home to a miss
//! at its next turn. The prefix index cannot say this: it cannot tell a session's own
//! conversation from a prompt that every session shares.
//!
//! A fixed table of slots indexed by the session's hash: memory stays bounded
//! (`SLOTS` x 16 bytes, allocated at the first session), and a session whose slot a later
//! one took is placed as a new one, by rendezvous. Lock-free: a torn read can only name a
//! replica another session used, which the policy then weighs like any other candidate.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sessions remembered at most (fewer when two share a slot): 1 MiB.
pub const SLOTS: usize = 1 << 16;

#[derive(Debug, Default)]
pub struct SessionMemory {
    /// Per slot: the session's hash and the hash of its replica's name.
    slots: OnceLock<Box<[[AtomicU64; 2]]>>,
}

impl SessionMemory {
    /// The replica (its name's hash) `session` was last placed on, if remembered.
    pub fn recall(&self, session: u64) -> Option<u64> {
        let [tag, replica] = &self.slots.get()?[slot(session)];
        let replica = if tag.load(Ordering::Acquire) == session {
            replica.load(Ordering::Acquire)
        } else {
            return None;
        };
        (tag.load(Ordering::Acquire) == session).then_some(replica)
    }

    /// `session` was placed on the replica whose name hashes to `replica`.
    pub fn remember(&self, session: u64, replica: u64) {
        let slots = self
            .slots
            .get_or_init(|| (0..SLOTS).map(|_| [AtomicU64::new(0), AtomicU64::new(0)]).collect());
        let [tag, held] = &slots[slot(session)];
        held.store(replica, Ordering::Release);
        tag.store(session, Ordering::Release);
    }
}

fn slot(session: u64) -> usize {
    (session as usize) & (SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_recalled_until_another_takes_its_slot() {
        let memory = SessionMemory::default();
        assert_eq!(memory.recall(42), None, "nothing allocated, nothing recalled");
        memory.remember(42, 7);
        memory.remember(43, 9);
        assert_eq!((memory.recall(42), memory.recall(43)), (Some(7), Some(9)));
        memory.remember(42, 8);
        assert_eq!(memory.recall(42), Some(8), "the last placement counts");
        // A session hashing to the same slot replaces it.
        let rival = 42 + SLOTS as u64;
        memory.remember(rival, 3);
        assert_eq!((memory.recall(42), memory.recall(rival)), (None, Some(3)));
    }
}
