//! Where each session was last placed, so that a session that left its home (the home was
//! overloaded) stays where its conversation is now cached instead of going home to a miss
//! at its next turn; and where each sessionless conversation (named by its opening,
//! [`super::conversation`]) was, so that its next turn goes there. The prefix index cannot
//! say this: it cannot tell a session's own conversation from a prompt that every session
//! shares.
//!
//! With several gateways, each remembers only its own placements, and a turn placed by
//! another gateway went elsewhere (home, most often). So the memory is followed only for
//! the turn right after the one this gateway placed (a chat prompt with exactly two more
//! messages: the answer and the new question) or that turn again (a retry, a regenerated
//! answer). Otherwise a gateway that moved a session
//! would keep sending every other turn to where the conversation was two turns ago, while
//! the others send the rest home, and each turn would hit only part of it.
//!
//! A fixed table of slots indexed by the session's hash: memory stays bounded
//! (`SLOTS` x 24 bytes, allocated at the first session), and a session whose slot a later
//! one took is placed as a new one, by rendezvous. Lock-free: a torn read can only name a
//! replica another session used, which the policy then weighs like any other candidate.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sessions remembered at most (fewer when two share a slot): 1.5 MiB.
pub const SLOTS: usize = 1 << 16;

/// A slot's message count when the prompt was no chat (its turns cannot be counted).
const UNCOUNTED: u64 = u64::MAX;

#[derive(Debug, Default)]
pub struct SessionMemory {
    /// Per slot: the session's hash, the hash of its replica's name and the message count
    /// of the prompt placed there.
    slots: OnceLock<Box<[[AtomicU64; 3]]>>,
}

impl SessionMemory {
    /// The replica (its name's hash) `session` was last placed on, if remembered and this
    /// request (of `messages` chat messages, `None` for another prompt) is that turn again
    /// or the next.
    pub fn recall(&self, session: u64, messages: Option<u64>) -> Option<u64> {
        let (replica, placed_messages) = self.last_placed(session)?;
        follows(messages, placed_messages).then_some(replica)
    }

    /// The replica (its name's hash) `conversation` was last placed on, if remembered and a
    /// prompt of `messages` chat messages is its next turn (two more), not that turn again:
    /// a sessionless chat whose messages are sent again is a template as often as a retry.
    pub fn recall_next_turn(&self, conversation: u64, messages: Option<u64>) -> Option<u64> {
        let (replica, placed_messages) = self.last_placed(conversation)?;
        let next_turn =
            messages.zip(placed_messages).is_some_and(|(now, placed)| now == placed + 2);
        next_turn.then_some(replica)
    }

    /// The replica (its name's hash) `session` was last placed on and the message count of
    /// that prompt (`None`: no chat), if its slot still holds it.
    fn last_placed(&self, session: u64) -> Option<(u64, Option<u64>)> {
        let [tag, replica, placed_messages] = &self.slots.get()?[slot(session)];
        if tag.load(Ordering::Acquire) != session {
            return None;
        }
        let (replica, placed_messages) =
            (replica.load(Ordering::Acquire), placed_messages.load(Ordering::Acquire));
        let placed_messages = (placed_messages != UNCOUNTED).then_some(placed_messages);
        (tag.load(Ordering::Acquire) == session).then_some((replica, placed_messages))
    }

    /// `session`'s prompt of `messages` chat messages (`None`: no chat) was placed on the
    /// replica whose name hashes to `replica`.
    pub fn remember(&self, session: u64, replica: u64, messages: Option<u64>) {
        let slots = self.slots.get_or_init(|| {
            (0..SLOTS).map(|_| [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]).collect()
        });
        let [tag, held, placed_messages] = &slots[slot(session)];
        held.store(replica, Ordering::Release);
        placed_messages.store(messages.unwrap_or(UNCOUNTED), Ordering::Release);
        tag.store(session, Ordering::Release);
    }
}

/// Whether a prompt of `messages` chat messages is the turn placed with `placed` messages
/// again or the next one (two more: the answer and a new question). Prompts whose turns are
/// not counted (no chat) always follow.
pub fn follows(messages: Option<u64>, placed: Option<u64>) -> bool {
    match (messages, placed) {
        (Some(now), Some(placed)) => now == placed || now == placed + 2,
        _ => true,
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
        assert_eq!(memory.recall(42, None), None, "nothing allocated, nothing recalled");
        memory.remember(42, 7, None);
        memory.remember(43, 9, None);
        assert_eq!((memory.recall(42, None), memory.recall(43, None)), (Some(7), Some(9)));
        memory.remember(42, 8, None);
        assert_eq!(memory.recall(42, None), Some(8), "the last placement counts");
        // A session hashing to the same slot replaces it.
        let rival = 42 + SLOTS as u64;
        memory.remember(rival, 3, None);
        assert_eq!((memory.recall(42, None), memory.recall(rival, None)), (None, Some(3)));
    }

    #[test]
    fn only_the_turn_after_the_placed_one_follows_the_memory() {
        let memory = SessionMemory::default();
        memory.remember(42, 7, Some(3));
        assert_eq!(memory.recall(42, Some(5)), Some(7), "the next turn: answer and question");
        assert_eq!(memory.recall(42, Some(7)), None, "a turn placed by another gateway between");
        assert_eq!(memory.recall(42, Some(3)), Some(7), "the same turn again (a retry)");
        assert_eq!(memory.recall(42, Some(4)), None);
        assert_eq!(memory.recall(42, None), Some(7), "a prompt whose turns are not counted");
        memory.remember(42, 8, None);
        assert_eq!(memory.recall(42, Some(9)), Some(8));
    }

    #[test]
    fn a_sessionless_conversation_is_followed_only_to_its_next_turn() {
        let memory = SessionMemory::default();
        memory.remember(42, 7, Some(3));
        assert_eq!(memory.recall_next_turn(42, Some(5)), Some(7));
        assert_eq!(memory.recall_next_turn(42, Some(3)), None, "the same messages again");
        assert_eq!(memory.recall_next_turn(42, Some(7)), None);
        assert_eq!(memory.recall_next_turn(42, None), None, "no chat");
        assert_eq!(memory.recall_next_turn(43, Some(5)), None, "another conversation");
        memory.remember(42, 8, None);
        assert_eq!(
            memory.recall_next_turn(42, Some(5)),
            None,
            "a prompt whose turns are not counted"
        );
    }
}
