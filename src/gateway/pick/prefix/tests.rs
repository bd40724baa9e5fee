//! Counts on seeded input: the index's memory bound and eviction order, the hot-spot guard
//! and self-correction; where sessions go (rendezvous stability, bounded load) in
//! [`sessions`].

mod engine_readings;
mod sessions;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::HeaderMap;
use prometheus::Registry;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::affinity::{LoadBound, session_places};
use super::index::BlockIndex;
use super::policy::PrefixAware;
use super::{EngineTokens, PrefixRouter, PromptKey, PromptPick, hash_bytes};
use crate::gateway::config::PrefixConfig;
use crate::gateway::pick::policy::{Policy, RequestShape};
use crate::gateway::pick::test_fleet::{context, replicas};
use crate::openai::InferenceRequest;
use crate::openai::request::Endpoint;
use crate::tokens::synthetic_text;

/// A chat prompt: a shared system message of `shared` tokens (from `group`'s seed) and a
/// question of `own` tokens (from `seed`).
fn key(group: u64, shared: u64, seed: u64, own: u64, headers: &HeaderMap) -> PromptKey {
    let system = synthetic_text(shared, &mut StdRng::seed_from_u64(group));
    let question = synthetic_text(own, &mut StdRng::seed_from_u64(1000 + seed));
    let body = serde_json::json!({"messages": [
        {"role": "system", "content": system}, {"role": "user", "content": question}
    ]});
    let request = InferenceRequest::parse(Endpoint::Chat, body.to_string().as_bytes()).unwrap();
    PromptKey::new(&request, headers, &PrefixConfig::default(), &EngineTokens::default())
}

#[test]
fn matches_are_per_replica_and_stop_at_the_first_missing_block() {
    let index = BlockIndex::new(1 << 20);
    index.insert("a", &[1, 2, 3, 4]);
    index.insert("b", &[1, 2, 9]);
    assert_eq!(index.matched(&["a", "b", "c"], &[1, 2, 3, 4, 5]), vec![4, 2, 0]);
    let placed = index.insert("b", &[1, 2, 3]);
    assert_eq!(placed.matched, 2);
    assert_eq!(index.forget_replica("a"), 4);
    assert_eq!(index.matched(&["a", "b"], &[1, 2, 3]), vec![0, 3]);
}

#[test]
fn the_longest_match_anywhere_is_the_best_single_replicas() {
    let index = BlockIndex::new(1 << 20);
    assert_eq!(index.longest_anywhere(&[1, 2, 3]), 0, "an empty index");
    index.insert("a", &[1, 2]);
    index.insert("b", &[1, 9, 3]);
    // Block 3 is on b, but b does not hold block 2: a's two leading blocks are the longest.
    assert_eq!(index.longest_anywhere(&[1, 2, 3]), 2);
    assert_eq!(index.longest_anywhere(&[1, 9, 3, 4]), 3);
    assert_eq!(index.longest_anywhere(&[7]), 0);
}

/// The default bound of a conversation's later turns.
const LOOSE: LoadBound = LoadBound::Loose { factor: 1.25 };

/// Places `count` requests of one prompt through the policy and the router; returns the
/// count per replica. `complete` releases each request's prefill before the next arrives;
/// otherwise every request stays queued (in flight, its prefill owed).
fn place_hot_prompt(count: usize, complete: bool) -> Vec<usize> {
    let set = replicas(4);
    let router = Arc::new(PrefixRouter::new(&PrefixConfig::default(), &Registry::new()));
    let config = PrefixConfig::default();
    let mut per_replica = vec![0; 4];
    let mut held = Vec::new();
    for n in 0..count {
        let key = key(1, 2000, n as u64 % 3, 16, &HeaderMap::new());
        let prompt = PromptPick { key: &key, router: &router, config: &config };
        let chosen = PrefixAware::new(5)
            .pick_prompt(&set, &context(), &prompt, &RequestShape::default())
            .unwrap();
        per_replica[chosen] += 1;
        let mut feedback = router.place(&set[chosen], &key);
        if complete {
            feedback.prefill_done();
        } else {
            set[chosen].load.in_flight.fetch_add(1, Ordering::Relaxed);
            held.push(feedback);
        }
    }
    per_replica
}

#[test]
fn a_shared_prefix_stays_on_its_replica_while_the_hit_is_worth_it() {
    let per_replica = place_hot_prompt(100, true);
    assert_eq!(per_replica.iter().max(), Some(&100), "{per_replica:?}");
}

#[test]
fn a_hot_prefix_spreads_over_every_replica_when_its_own_melts() {
    // Nothing finishes: each request queues its prefill. The cached replica soon costs
    // more than a miss elsewhere, so the prefix is cached everywhere and load evens out.
    let per_replica = place_hot_prompt(400, false);
    assert!(per_replica.iter().all(|&n| (80..=120).contains(&n)), "{per_replica:?}");
}

#[test]
fn a_cached_replica_loses_the_request_once_its_queue_outweighs_the_saved_prefill() {
    // The hit saves 125 blocks (2000 tokens) of prefill at 75 us: 150 ms of this request's
    // TTFT. While the cached copy is still being computed, recomputing it elsewhere costs
    // as much again per unit of weight (the default 1) for the requests queued behind the
    // duplicate; once it is computed, a copy elsewhere is weighed on TTFT alone, unless the
    // prompt is a session's conversation (moving it throws the copy away). Replica 0 also
    // has 15 requests in flight (15 ms at 1 ms each, worth 200 tokens; over the session
    // bound, so that a session's home is weighed against the other replica at all).
    for (weight, computing, session, switch_at) in [
        (0.0, true, false, 2000),
        (1.0, true, false, 4000),
        (2.5, true, false, 7000),
        (1.0, false, false, 2000),
        (1.0, false, true, 4000),
    ] {
        let set = replicas(2);
        let config = PrefixConfig { recompute_weight: weight, ..PrefixConfig::default() };
        let router = Arc::new(PrefixRouter::new(&config, &Registry::new()));
        let mut headers = HeaderMap::new();
        if session {
            // A session whose home is replica 0.
            let home = |c: u64| {
                let session = hash_bytes(format!("conversation-{c}").as_bytes());
                session_places(&set, &[0, 1], session, LOOSE).unwrap().home
            };
            let c = (0..100).find(|&c| home(c) == 0).unwrap();
            headers.insert("x-session-id", format!("conversation-{c}").parse().unwrap());
        }
        set[0].load.in_flight.store(15, Ordering::Relaxed);
        let switch_at = switch_at - 200;
        let first = key(1, 2000, 0, 16, &headers);
        let mut placing = router.place(&set[0], &first);
        if !computing {
            placing.prefill_done();
        }
        let second = key(1, 2000, 1, 16, &headers);
        let prompt = PromptPick { key: &second, router: &router, config: &config };
        let case = format!("weight {weight}, computing {computing}, session {session}");
        set[0].load.prefill_owed_tokens.store(switch_at - 100, Ordering::Relaxed);
        for seed in 0..20 {
            let chosen = PrefixAware::new(seed).pick_prompt(
                &set,
                &context(),
                &prompt,
                &RequestShape::default(),
            );
            assert_eq!(chosen, Some(0), "{case}: the hit is still worth it");
        }
        set[0].load.prefill_owed_tokens.store(switch_at + 100, Ordering::Relaxed);
        for seed in 0..20 {
            let chosen = PrefixAware::new(seed).pick_prompt(
                &set,
                &context(),
                &prompt,
                &RequestShape::default(),
            );
            assert_eq!(chosen, Some(1), "{case}: the queue outweighs the hit");
        }
    }
}

#[test]
fn the_index_marks_blocks_computing_until_their_placement_has_its_first_token() {
    let set = replicas(2);
    let router = Arc::new(PrefixRouter::new(&PrefixConfig::default(), &Registry::new()));
    let first = key(1, 320, 0, 16, &HeaderMap::new());
    let held = |k: &PromptKey| router.index.lookup(&["r0", "r1"], k.hittable());
    let mut placing = router.place(&set[0], &first);
    let computing = held(&first)[0];
    assert!(computing.computing && computing.blocks == first.max_hit_blocks);
    assert_eq!(held(&first)[1].blocks, 0);
    // A hit placed on the same blocks does not settle them: the first is still computing.
    let mut hit = router.place(&set[0], &key(1, 320, 1, 16, &HeaderMap::new()));
    assert!(held(&first)[0].computing);
    placing.prefill_done();
    assert!(!held(&first)[0].computing, "computed once the placing request has its first token");
    hit.prefill_done();
    assert!(!held(&first)[0].computing);
}

#[test]
fn placed_prompts_teach_how_much_the_traffic_reuses_its_prefixes() {
    let set = replicas(2);
    let router = Arc::new(PrefixRouter::new(&PrefixConfig::default(), &Registry::new()));
    assert!(!router.reuse.new_prompts_are_followed(), "no reuse known before any placement");
    // A 2,000-token context asked with one question after another: from its second request
    // on, each is found cached but its question.
    for seed in 0..40 {
        router.place(&set[1], &key(7, 2000, seed, 16, &HeaderMap::new()));
    }
    assert!(router.reuse.new_prompts_are_followed(), "{}", router.reuse.share());
    // A prompt shorter than a block has nothing to cache, and says nothing of reuse.
    let share = router.reuse.share();
    let short = key(99, 0, 99, 4, &HeaderMap::new());
    assert_eq!(short.max_hit_blocks, 0);
    router.place(&set[0], &short);
    assert_eq!(router.reuse.share(), share);
    // Distinct 300-token questions with no shared system message: none is found cached.
    for seed in 0..40 {
        router.place(&set[0], &key(seed, 0, seed, 300, &HeaderMap::new()));
    }
    assert!(!router.reuse.new_prompts_are_followed(), "{}", router.reuse.share());
}

#[test]
fn sessions_are_read_from_the_header_then_the_user_field() {
    let mut headers = HeaderMap::new();
    let none = key(1, 64, 0, 8, &headers);
    assert_eq!(none.session, None);
    headers.insert("x-session-id", "abc".parse().unwrap());
    assert_eq!(key(1, 64, 0, 8, &headers).session, Some(hash_bytes(b"abc")));
    let body = br#"{"messages":[{"role":"user","content":"hi"}],"user":"u1"}"#;
    let request = InferenceRequest::parse(Endpoint::Chat, body).unwrap();
    let from_user = PromptKey::new(
        &request,
        &HeaderMap::new(),
        &PrefixConfig::default(),
        &EngineTokens::default(),
    );
    assert_eq!(from_user.session, Some(hash_bytes(b"u1")));
    // 64 + 8 text tokens and 8 template tokens: 5 full blocks, the last not hittable.
    assert_eq!((none.hashes.len(), none.max_hit_blocks), (5, 4));
}

#[test]
fn a_reported_miss_drops_the_entries_older_than_the_evicted_block() {
    let set = replicas(1);
    let router = Arc::new(PrefixRouter::new(&PrefixConfig::default(), &Registry::new()));
    let headers = HeaderMap::new();
    let old = key(1, 320, 0, 16, &headers);
    let hot = key(2, 320, 0, 16, &headers);
    let recent = key(3, 320, 0, 16, &headers);
    router.place(&set[0], &old).report(0, old.prompt_tokens);
    assert_eq!(router.predicted_and_reported(), (0, 0));
    // A request of the hot prompt placed while the first one is still prefilling it: its
    // miss is no eviction, and nothing is dropped.
    let prefilling = router.place(&set[0], &hot);
    let entries = router.index.entries();
    router.place(&set[0], &hot).report(0, hot.prompt_tokens);
    assert_eq!(router.index.entries(), entries);
    drop(prefilling);
    router.place(&set[0], &hot).prefill_done();
    router.place(&set[0], &recent).prefill_done();
    let counted = hot.max_hit_blocks as u64 * 16;
    assert_eq!(router.predicted_and_reported(), (counted, 0));
    // The hot prompt again, every earlier prefill done: the index expects all its
    // hittable blocks; the replica reports it evicted them from block 5 on.
    let mut again = router.place(&set[0], &hot);
    assert_eq!(again.predicted_tokens(), counted);
    again.report(5 * 16, hot.prompt_tokens);
    assert_eq!(router.predicted_and_reported(), (2 * counted, 80));
    let matched = |k: &PromptKey| router.index.matched(&["r0"], k.hittable())[0];
    assert_eq!(matched(&old), 0, "older than the evicted block: dropped");
    assert_eq!(matched(&recent), recent.max_hit_blocks, "newer: kept");
    assert_eq!(matched(&hot), hot.max_hit_blocks, "just computed again: kept");
    // A report that matches the prediction changes nothing.
    let entries = router.index.entries();
    router.place(&set[0], &recent).report(recent.max_hit_blocks as u64 * 16, recent.prompt_tokens);
    assert_eq!(router.index.entries(), entries);
}

/// An engine caches whole blocks of its own (128 tokens on vLLM's CPU backend) and never
/// the prompt's last token, so a full hit reports up to a block less than the index's
/// 16-token blocks predict. That is no eviction: read as one, each hit dropped the other
/// prompts' entries on the replica, and shared prefixes were computed on every replica.
/// The engine's tokens are also not the index's: a report is read at the prompt's scale.
#[test]
fn a_hit_rounded_down_to_the_engines_block_or_counted_in_its_tokens_is_no_eviction() {
    let set = replicas(1);
    let router = Arc::new(PrefixRouter::new(&PrefixConfig::default(), &Registry::new()));
    let headers = HeaderMap::new();
    let groups: Vec<PromptKey> = (0..4).map(|g| key(10 + g, 2400, g, 100, &headers)).collect();
    for group in &groups {
        router.place(&set[0], group).report(0, group.prompt_tokens);
    }
    let engine_block = 128;
    let matched = |k: &PromptKey| router.index.matched(&["r0"], k.hittable())[0];
    let held: Vec<usize> = groups.iter().map(matched).collect();
    for (round, seed) in (100..106).enumerate() {
        for g in 0..groups.len() {
            let question = key(10 + g as u64, 2400, seed, 100, &headers);
            let mut feedback = router.place(&set[0], &question);
            let predicted = feedback.predicted_tokens();
            assert!(predicted >= 2400 - 16, "the context is expected held: {predicted}");
            let rounded = predicted / engine_block * engine_block;
            // Alternate rounds count the prompt a fifth shorter in the engine's tokens.
            let engine_scale = if round % 2 == 0 { 1.0 } else { 0.8 };
            let engine = |tokens: u64| (tokens as f64 * engine_scale) as u64;
            feedback.report(engine(rounded), engine(question.prompt_tokens));
        }
    }
    for (g, group) in groups.iter().enumerate() {
        assert!(matched(group) >= held[g], "group {g} kept");
    }
    assert_eq!(router.metrics.corrected.get(), 0);
    // A report a whole context short of it still is one.
    let question = key(10, 2400, 200, 100, &headers);
    router.place(&set[0], &question).report(engine_block, question.prompt_tokens);
    assert!(router.metrics.corrected.get() > 0);
}

#[test]
fn owed_prefill_is_released_once() {
    let set = replicas(1);
    let router = Arc::new(PrefixRouter::new(&PrefixConfig::default(), &Registry::new()));
    let prompt = key(1, 100, 0, 10, &HeaderMap::new());
    let mut feedback = router.place(&set[0], &prompt);
    assert_eq!(set[0].load.prefill_owed_tokens(), prompt.prompt_tokens);
    feedback.prefill_done();
    feedback.prefill_done();
    drop(feedback);
    assert_eq!(set[0].load.prefill_owed_tokens(), 0);
}

/// A prefix every prompt shares (here the first block of a short system message) is not
/// worth a queue: `prefix_latency` takes predictions within its tie as equal and sends the
/// request to the less loaded replica, where `prefix_aware`, exact to the microsecond,
/// follows the block. A long hit still wins under both.
#[test]
fn a_trivially_shared_block_does_not_herd_prefix_latency_but_a_long_hit_wins() {
    let set = replicas(2);
    let router = Arc::new(PrefixRouter::new(&PrefixConfig::default(), &Registry::new()));
    let config = PrefixConfig::default();
    let shared_block = key(3, 16, 1, 2000, &HeaderMap::new());
    router.place(&set[0], &shared_block).prefill_done();
    set[0].load.in_flight.store(1, Ordering::Relaxed);
    let fresh = key(3, 16, 2, 2000, &HeaderMap::new());
    assert!(router.index.lookup(&["r0", "r1"], fresh.hittable())[0].blocks >= 1);
    let pick = |policy: &PrefixAware, key: &PromptKey| {
        let prompt = PromptPick { key, router: &router, config: &config };
        policy.pick_prompt(&set, &context(), &prompt, &RequestShape::default()).unwrap()
    };
    for seed in 0..8 {
        assert_eq!(pick(&PrefixAware::measured(seed), &fresh), 1, "seed {seed}");
        assert_eq!(pick(&PrefixAware::new(seed), &fresh), 0, "seed {seed}");
    }
    // The whole 2,000-token prompt cached on the busier replica: 150 ms of prefill saved
    // against 1 ms of queue.
    assert_eq!(pick(&PrefixAware::measured(5), &shared_block), 0);
    assert_eq!(pick(&PrefixAware::new(5), &shared_block), 0);
}
