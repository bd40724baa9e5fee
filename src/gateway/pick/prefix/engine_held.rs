//! What each candidate holds of a prompt when the replicas' KV events are followed: the
//! engine's own account where it is known; where events were missed, the longer of the
//! index's guess and what the events since then list (a lower bound); the guess alone
//! where the replica publishes nothing or its hashes are refused. A copy this gateway
//! placed and is still being computed is not in the events yet (the engine publishes a
//! block once computed), so where the index expects more blocks still computing, that
//! expectation stands.

use std::sync::Arc;

use super::PromptKey;
use super::index::{Held, Placed};
use crate::gateway::pick::replica::Replica;

/// `held` (the index's, per candidate) with each known engine cache in its place.
pub fn with_engine_caches(
    replicas: &[Arc<Replica>],
    candidates: &[usize],
    mut held: Vec<Held>,
    key: &PromptKey,
) -> Vec<Held> {
    if key.engine_hashes.is_empty() {
        return held;
    }
    let hittable = key.engine_hittable();
    for (guess, &i) in held.iter_mut().zip(candidates) {
        let Some(engine) = replicas[i].engine_cache.holds(hittable) else { continue };
        let guess_stands = if engine.known {
            guess.computing && guess.blocks > engine.blocks
        } else {
            guess.blocks >= engine.blocks
        };
        if !guess_stands {
            *guess = Held { blocks: engine.blocks, computing: false };
        }
    }
    held
}

/// The blocks a request placed on `replica` will find cached, for the prefill it owes
/// there: what the index had matched (`placed`), or the engine's own account where it is
/// known and no copy this gateway placed is still being computed.
pub fn cached_blocks(replica: &Replica, key: &PromptKey, placed: &Placed) -> usize {
    let index = placed.matched;
    if key.engine_hashes.is_empty() {
        return index;
    }
    let computing = placed.previous.last().is_some_and(|previous| previous.computing);
    match replica.engine_cache.holds(key.engine_hittable()) {
        Some(engine) if engine.known && !computing => engine.blocks,
        Some(engine) => engine.blocks.max(index),
        None => index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::EventSource;
    use crate::gateway::kv_events::held::HeldBlocks;
    use crate::gateway::pick::test_fleet::replicas;
    use crate::kv_events::block_hash::{BlockHasher, DEFAULT_SEED};
    use crate::kv_events::wire::{Batch, Event};

    const BLOCK: usize = 128;

    /// Makes `replica`'s engine say it holds the first `blocks` blocks of `tokens`, in the
    /// first batch it published (`seq` 0: a known account) or in a later one, the batches
    /// before it lost (an unknown one).
    fn engine_holds(replica: &Replica, tokens: &[u64], blocks: usize, seq: u64) {
        let hasher = BlockHasher::new(DEFAULT_SEED);
        let source = EventSource { events: "tcp://127.0.0.1:1".into(), replay: None };
        let held = replica.engine_cache.add(source, HeldBlocks::new(1 << 10, BLOCK as u64));
        let tokens = &tokens[..blocks * BLOCK];
        let stored = Event::Stored {
            hashes: hasher.event_hashes(tokens, BLOCK),
            parent: None,
            token_ids: tokens.to_vec(),
            block_size: BLOCK as u32,
            keyed: false,
        };
        let events = if blocks == 0 { Vec::new() } else { vec![stored] };
        let mut held = held.lock();
        if seq > 0 {
            let empty =
                Batch { seq: seq - 1, ts: 0.0, events: Vec::new(), data_parallel_rank: None };
            held.apply(&empty, &hasher);
            held.give_up_replay();
        }
        held.apply(&Batch { seq, ts: 0.0, events, data_parallel_rank: None }, &hasher);
    }

    /// A prompt of `tokens` (four blocks), three of which a hit can cover.
    fn four_blocks(tokens: &[u64]) -> PromptKey {
        PromptKey {
            hashes: vec![11, 12, 13, 14],
            engine_hashes: BlockHasher::new(DEFAULT_SEED).event_hashes(tokens, BLOCK),
            max_hit_blocks: 3,
            prompt_tokens: tokens.len() as u64,
            block_size: BLOCK as u64,
            session: None,
            conversation: None,
            opens_conversation: false,
            messages: None,
        }
    }

    #[test]
    fn known_engine_caches_replace_the_guess_but_not_a_copy_still_computing() {
        let tokens: Vec<u64> = (0..4 * BLOCK as u64).collect();
        let key = four_blocks(&tokens);
        let fleet = replicas(6);
        engine_holds(&fleet[0], &tokens, 0, 0); // evicted what the index expects there
        engine_holds(&fleet[1], &tokens, 4, 0); // computed it for a client the index never saw
        // fleet[2] publishes nothing: the index's guess stands.
        engine_holds(&fleet[3], &tokens, 1, 0); // a placement of ours is still computing more
        engine_holds(&fleet[4], &tokens, 2, 7); // events missed: at least what came since
        engine_holds(&fleet[5], &tokens, 1, 7); // ... which is less than the guess
        let guessed = vec![
            Held { blocks: 3, computing: false },
            Held { blocks: 0, computing: false },
            Held { blocks: 2, computing: false },
            Held { blocks: 3, computing: true },
            Held { blocks: 1, computing: false },
            Held { blocks: 2, computing: false },
        ];
        let all = [0, 1, 2, 3, 4, 5];
        let held = with_engine_caches(&fleet, &all, guessed.clone(), &key);
        assert_eq!(
            held,
            [
                Held { blocks: 0, computing: false },
                Held { blocks: 3, computing: false },
                guessed[2],
                guessed[3],
                Held { blocks: 2, computing: false },
                guessed[5],
            ]
        );
        // Without engine hashes (no events followed), the guess is all there is.
        let approximate = PromptKey { engine_hashes: Vec::new(), ..key };
        assert_eq!(with_engine_caches(&fleet, &all, guessed.clone(), &approximate), guessed);
    }

    #[test]
    fn a_placement_owes_the_prefill_of_what_the_engine_lacks() {
        use super::super::index::Previous;
        let tokens: Vec<u64> = (0..4 * BLOCK as u64).collect();
        let key = four_blocks(&tokens);
        let fleet = replicas(3);
        engine_holds(&fleet[0], &tokens, 4, 0);
        engine_holds(&fleet[1], &tokens, 1, 0);
        let computed = |matched: usize, computing: bool| Placed {
            matched,
            previous: vec![Previous { tick: 1, computing }; matched],
        };
        // Computed elsewhere, where the index never placed it: the engine's account.
        assert_eq!(cached_blocks(&fleet[0], &key, &computed(0, false)), 3);
        // The index's entries were evicted: the engine's account again.
        assert_eq!(cached_blocks(&fleet[1], &key, &computed(3, false)), 1);
        // A copy of ours still computing, which the events cannot show yet.
        assert_eq!(cached_blocks(&fleet[1], &key, &computed(3, true)), 3);
        // No events from the replica: the index.
        assert_eq!(cached_blocks(&fleet[2], &key, &computed(2, false)), 2);
        let approximate = PromptKey { engine_hashes: Vec::new(), ..key };
        assert_eq!(cached_blocks(&fleet[0], &approximate, &computed(0, false)), 0);
    }
}
