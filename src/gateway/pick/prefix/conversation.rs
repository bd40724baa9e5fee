//! Which conversation a prompt continues, and the replicas it may go to: a named session
//! goes to its rendezvous home ([`super::affinity`]) or where it was last placed; a chat that
//! names no session, to where its previous turn went. Most clients name no session, so a
//! conversation is also known by its opening (the messages up to its first user message,
//! the same in every turn), and a turn two messages longer than the last one placed with
//! that opening is its next turn.
//!
//! Placed like any prompt, a sessionless conversation's second turn (whose few hundred
//! cached tokens save less than a busier replica's queue) moved for load and threw its
//! history away (`benches/results/2026-12-07-sessionless-conversations`). A continued
//! conversation now stays where its history is while that replica is within the
//! sessions' load bound, and otherwise contends with the least-loaded replica, each charged
//! the history it would recompute, as a named session's turn is. A prompt sent again with
//! the same messages (a few-shot template, shared by many requests) is no next turn, and is
//! placed as any prompt: a hot template spreads by the copy rule, not by a session's. A
//! later turn whose previous turn this gateway did not place (several gateways without a
//! store: each sees some turns) goes to its opening's rendezvous replica, as a named
//! session goes home, so that the gateways agree on it from then on; placed as any prompt,
//! each gateway sent it where its own last turn went.

use std::sync::Arc;
use std::time::Instant;

use super::PromptPick;
use super::affinity::{LoadBound, SessionPlaces, session_places};
use super::index::Held;
use super::measured::{MeasuredTtft, ONE_SPEED};
use super::placement_trace;
use crate::gateway::pick::replica::Replica;
use crate::openai::request::ChatMessage;
use crate::prompt_tokens::mix;

/// How many times sooner than a conversation's home another replica must answer alone to
/// contend with it ([`faster_than_home`]): past the ratio within which speeds are one speed
/// read with noise ([`ONE_SPEED`]; learned speeds among equal replicas measured 80-100 us a
/// token on one real engine), well under a slower model's (eight times).
const FASTER_ALONE: f64 = ONE_SPEED;

/// Seeds the opening's hash apart from session ids and replica names.
const OPENING_SEED: u64 = 0x6f70_656e_696e_6700;

/// The conversation a prompt continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followed {
    /// A session named by the client (the session header or `user`), or a sessionless
    /// conversation's turn whose previous turn this gateway did not place, by its opening.
    Session(u64),
    /// A sessionless chat's next turn; its previous turn went to this candidate.
    Continued(usize),
}

/// Where a prompt may go: one replica, or several for [`super::cost::fastest`] to judge.
#[derive(Debug, PartialEq)]
pub enum Contenders {
    Alone(usize),
    Several { candidates: Vec<usize>, held: Vec<Held> },
}

/// The hash that names a sessionless chat's conversation: its messages up to and
/// including the first user message, roles and all. `None` without a user message.
pub fn opening_hash(messages: &[ChatMessage]) -> Option<u64> {
    let first_user = messages.iter().position(|m| m.role == "user")?;
    let hash = messages[..=first_user].iter().fold(OPENING_SEED, |hash, message| {
        let hash = hash_words(hash, message.role.as_bytes());
        hash_words(hash, message.text.as_bytes())
    });
    Some(hash)
}

/// `bytes` folded into `hash` eight at a time, then their length (so that no two splits of
/// the same bytes into role and text hash alike).
fn hash_words(hash: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut hash = words
        .by_ref()
        .fold(hash, |hash, word| mix(hash ^ u64::from_le_bytes(word.try_into().expect("8 bytes"))));
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    hash = mix(hash ^ u64::from_le_bytes(tail));
    mix(hash ^ bytes.len() as u64)
}

/// The conversation `prompt` continues among the candidates `all` (each holding
/// `held_by_all` of the prompt), if any. A sessionless one is followed to where its previous
/// turn went, and only to a replica that holds as much of the prompt as any: conversations
/// opened alike share a memory slot, and a turn whose slot names where another conversation
/// went is placed by its cache. The same messages again (a template, a retry) are placed as
/// any prompt; a later turn whose previous turn this gateway did not place goes as a
/// session named by its opening does.
pub fn followed(
    replicas: &[Arc<Replica>],
    all: &[usize],
    held_by_all: &[Held],
    prompt: &PromptPick<'_>,
) -> Option<Followed> {
    let key = prompt.key;
    if let Some(session) = key.session {
        return Some(Followed::Session(session));
    }
    let conversation = key.conversation?;
    if key.opens_conversation {
        return None;
    }
    let memory = &prompt.router.sessions;
    if let Some(name) = memory.recall_next_turn(conversation, key.messages) {
        let at = all.iter().position(|&c| replicas[c].name_hash == name)?;
        let most = held_by_all.iter().map(|h| h.blocks).max()?;
        return (held_by_all[at].blocks == most).then_some(Followed::Continued(all[at]));
    }
    if memory.recall(conversation, key.messages).is_some() {
        // The same messages again.
        return None;
    }
    // A later turn whose previous turn this gateway did not place (another gateway did, or
    // the memory was lost): its opening's rendezvous replica, as a named session's home, is
    // where every gateway sends it, so that they agree from here on.
    Some(Followed::Session(conversation))
}

/// Where a turn of the conversation `followed` may go among `all` (each holding
/// `held_by_all` of the prompt): its home (where this gateway placed its previous turn, if
/// that replica holds as much of the prompt as any, else a session's rendezvous replica),
/// the replica bounded load sends it to, where this gateway last placed the session, and a
/// replica far faster than home alone; alone when they agree.
pub fn contenders(
    replicas: &[Arc<Replica>],
    all: &[usize],
    held_by_all: &[Held],
    followed: Followed,
    prompt: &PromptPick<'_>,
    estimate: &MeasuredTtft,
    now: Instant,
) -> Option<Contenders> {
    let key = prompt.key;
    let load = if key.opens_conversation {
        LoadBound::Even
    } else {
        LoadBound::Loose { factor: prompt.config.session_load_factor }
    };
    let held_of = |i: usize| held_by_all[all.iter().position(|&a| a == i).unwrap_or_default()];
    let (places, last) = match followed {
        Followed::Session(session) => {
            let places = session_places(replicas, all, session, load)?;
            let most = held_by_all.iter().map(|h| h.blocks).max().unwrap_or_default();
            let last = prompt
                .router
                .sessions
                .recall(session, key.messages)
                .and_then(|name| all.iter().copied().find(|&c| replicas[c].name_hash == name));
            match last {
                // Where its history is: that replica, or the rendezvous order's under the
                // bound (where another gateway sends it too).
                Some(at) if held_of(at).blocks == most => {
                    (places_at(replicas, all, at, load, || places.bounded), last)
                }
                _ => (places, last),
            }
        }
        Followed::Continued(at) => {
            let least_loaded =
                || all.iter().copied().min_by_key(|&i| replicas[i].load.in_flight()).unwrap_or(at);
            (places_at(replicas, all, at, load, least_loaded), None)
        }
    };
    // Each candidate alone, as if it held what home holds: speed alone.
    let uncached_at_home =
        key.prompt_tokens.saturating_sub(held_of(places.home).blocks as u64 * key.block_size);
    let alone_us = |i: usize| estimate.alone_us(&replicas[i], uncached_at_home, now);
    let faster = faster_than_home(all, places.home, alone_us);
    let mut candidates: Vec<usize> =
        [places.home, places.bounded].into_iter().chain(last).chain(faster).collect();
    candidates.sort_unstable();
    candidates.dedup();
    if candidates.len() == 1 {
        return Some(Contenders::Alone(places.home));
    }
    if placement_trace::enabled() {
        let judged: Vec<_> = candidates.iter().map(|&i| (i, alone_us(i))).collect();
        placement_trace::emit_contenders(
            replicas,
            (places.home, places.bounded, last, faster),
            &judged,
        );
    }
    let held = candidates.iter().map(|&c| held_of(c)).collect();
    Some(Contenders::Several { candidates, held })
}

/// The places of a conversation whose history is cached at `home` (where this gateway placed
/// its previous turn): bounded load sends it there while that replica is not overloaded, else
/// to `elsewhere`. A named session contending with its rendezvous home on every turn instead,
/// one placed away from home by its first turn's even share went home as soon as home's
/// queue looked shorter: on four real replicas, 4 of 16 conversations a round moved at their
/// second or third turn, to a miss, and piled 8 conversations on one replica.
fn places_at(
    replicas: &[Arc<Replica>],
    candidates: &[usize],
    home: usize,
    load: LoadBound,
    elsewhere: impl FnOnce() -> usize,
) -> SessionPlaces {
    let in_flight = |i: usize| replicas[i].load.in_flight();
    let total: u64 = candidates.iter().map(|&i| in_flight(i)).sum();
    let bounded =
        if load.admits(in_flight(home), total, candidates.len()) { home } else { elsewhere() };
    SessionPlaces { home, bounded }
}

/// The candidate that alone (`alone_us`: nothing else on it, each as if it held what the
/// conversation's `home` holds) answers [`FASTER_ALONE`] times sooner than home alone: the
/// fastest, if one does. It then contends with home, cache, load and all
/// ([`super::cost::fastest`]). Without it, a conversation whose home, bounded load and last
/// placement agreed stayed home however slow home was: on a real fleet whose second replica
/// prefilled eight times slower, half the conversations lived there, since bounded load
/// counts requests, not their speed. Load does not count here (bounded load and `fastest`
/// weigh it): compared loaded, replicas of equal speed took turns being faster by more than
/// the tie in a closed loop of conversations, which moved and lost 2 points of hit ratio.
fn faster_than_home(
    candidates: &[usize],
    home: usize,
    alone_us: impl Fn(usize) -> Option<f64>,
) -> Option<usize> {
    let home_us = alone_us(home)?;
    let (best_us, best) = candidates
        .iter()
        .filter_map(|&i| Some((alone_us(i)?, i)))
        .min_by(|a, b| a.0.total_cmp(&b.0))?;
    (best != home && best_us * FASTER_ALONE < home_us).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, text: &str) -> ChatMessage {
        ChatMessage { role: role.to_string(), text: text.to_string() }
    }

    #[test]
    fn a_conversation_is_named_by_its_messages_up_to_the_first_users() {
        let opening = [message("system", "be brief"), message("user", "what is a KV cache?")];
        let first_turn = opening.to_vec();
        let mut third_turn = opening.to_vec();
        third_turn.extend([message("assistant", "a store of keys"), message("user", "and?")]);
        assert_eq!(opening_hash(&first_turn), opening_hash(&third_turn));
        assert!(opening_hash(&first_turn).is_some());
        // Another first question, another system prompt, or the roles swapped: another one.
        let other_question = [message("system", "be brief"), message("user", "what is a GPU?")];
        let other_system = [message("system", "be long"), message("user", "what is a KV cache?")];
        let swapped = [message("user", "be brief"), message("system", "what is a KV cache?")];
        for other in [&other_question[..], &other_system[..], &swapped[..]] {
            assert_ne!(opening_hash(other), opening_hash(&first_turn), "{other:?}");
        }
        // The same bytes split otherwise between two messages.
        assert_ne!(
            opening_hash(&[message("system", "ab"), message("user", "c")]),
            opening_hash(&[message("system", "a"), message("user", "bc")])
        );
        assert_eq!(opening_hash(&[message("system", "only instructions")]), None);
    }
}
