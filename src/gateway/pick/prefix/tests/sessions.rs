//! Sessions on seeded input: rendezvous homes and bounded load, a conversation that leaves
//! an overloaded or far slower home or stays where its history is, and conversations
//! opened at once.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::HeaderMap;
use prometheus::Registry;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::super::affinity::session_places;
use super::super::policy::PrefixAware;
use super::super::{EngineTokens, PrefixRouter, PromptKey, PromptPick, hash_bytes};
use super::LOOSE;
use crate::gateway::config::{EntrySlo, PrefixConfig};
use crate::gateway::pick::Replica;
use crate::gateway::pick::policy::{Policy, RequestShape};
use crate::gateway::pick::predict::{EngineEntry, LatencyProbe};
use crate::gateway::pick::test_fleet::{context, replicas, teach, teach_engine};
use crate::openai::InferenceRequest;
use crate::openai::request::Endpoint;
use crate::tokens::synthetic_text;

/// Where bounded load alone sends `session` (factor 1.25).
fn bounded(
    set: &[Arc<crate::gateway::pick::Replica>],
    candidates: &[usize],
    session: u64,
) -> usize {
    session_places(set, candidates, session, LOOSE).unwrap().bounded
}

#[test]
fn when_a_replica_leaves_only_its_sessions_move() {
    let set = replicas(5);
    let all: Vec<usize> = (0..5).collect();
    let sessions: Vec<u64> = (0..2000u64).map(|s| hash_bytes(format!("s{s}").as_bytes())).collect();
    let before: Vec<usize> = sessions.iter().map(|&s| bounded(&set, &all, s)).collect();
    let mut per_replica = [0; 5];
    for &r in &before {
        per_replica[r] += 1;
    }
    assert!(per_replica.iter().all(|&n| (300..500).contains(&n)), "{per_replica:?}");
    let without_2: Vec<usize> = vec![0, 1, 3, 4];
    let mut moved = 0;
    for (session, &was) in sessions.iter().zip(&before) {
        let now = bounded(&set, &without_2, *session);
        if was == 2 {
            moved += 1;
            assert_ne!(now, 2);
        } else {
            assert_eq!(now, was, "a session of a staying replica moved");
        }
    }
    assert_eq!(moved, per_replica[2]);
}

#[test]
fn an_overloaded_session_replica_sheds_new_requests_until_it_recovers() {
    let set = replicas(4);
    let all: Vec<usize> = (0..4).collect();
    let session = hash_bytes(b"conversation-7");
    let home = bounded(&set, &all, session);
    // 20 in flight on the home replica, none elsewhere: bound 1.25 * 20 / 4 + 1 = 7.25.
    set[home].load.in_flight.store(20, Ordering::Relaxed);
    let away = bounded(&set, &all, session);
    assert_ne!(away, home);
    set[home].load.in_flight.store(1, Ordering::Relaxed);
    assert_eq!(bounded(&set, &all, session), home);
}

/// Two replicas taught 100 us a token, judged by `prefix_latency` for requests of one size.
struct MeasuredPair {
    set: Vec<Arc<crate::gateway::pick::Replica>>,
    router: Arc<PrefixRouter>,
    config: PrefixConfig,
    request: RequestShape,
}

impl MeasuredPair {
    fn new(prompt_tokens: u64) -> Self {
        let set = replicas(2);
        teach(&set[0], 100.0, 5.0);
        teach(&set[1], 100.0, 5.0);
        let config = PrefixConfig::default();
        let router = Arc::new(PrefixRouter::new(&config, &Registry::new()));
        let request = RequestShape { prompt_tokens, slo: EntrySlo::default() };
        Self { set, router, config, request }
    }

    /// Where a gateway whose memory is `router` places `key`.
    fn pick(&self, router: &PrefixRouter, key: &PromptKey) -> usize {
        let prompt = PromptPick { key, router, config: &self.config };
        PrefixAware::measured(5).pick_prompt(&self.set, &context(), &prompt, &self.request).unwrap()
    }
}

/// Turn `turn` (from 0) of a conversation: a shared system message of `shared` tokens, the
/// earlier questions and answers (16 tokens each) and a new question.
fn chat_turn(shared: u64, turn: u64, headers: &HeaderMap) -> PromptKey {
    let text = |seed: u64| synthetic_text(16, &mut StdRng::seed_from_u64(2000 + seed));
    let system = synthetic_text(shared, &mut StdRng::seed_from_u64(1));
    let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
    for earlier in 0..turn {
        messages.push(serde_json::json!({"role": "user", "content": text(2 * earlier)}));
        messages.push(serde_json::json!({"role": "assistant", "content": text(2 * earlier + 1)}));
    }
    messages.push(serde_json::json!({"role": "user", "content": text(2 * turn)}));
    let body = serde_json::json!({ "messages": messages });
    let request = InferenceRequest::parse(Endpoint::Chat, body.to_string().as_bytes()).unwrap();
    PromptKey::new(&request, headers, &PrefixConfig::default(), &EngineTokens::default())
}

#[test]
fn a_session_leaves_its_overloaded_home_only_when_a_miss_elsewhere_is_faster_then_stays() {
    let set = replicas(4);
    let router = Arc::new(PrefixRouter::new(&PrefixConfig::default(), &Registry::new()));
    let config = PrefixConfig::default();
    let mut headers = HeaderMap::new();
    headers.insert("x-session-id", "conversation-7".parse().unwrap());
    let all: Vec<usize> = (0..4).collect();
    let home = session_places(&set, &all, hash_bytes(b"conversation-7"), LOOSE).unwrap().home;
    let pick = |key: &PromptKey| {
        let prompt = PromptPick { key, router: &router, config: &config };
        PrefixAware::new(5)
            .pick_prompt(&set, &context(), &prompt, &RequestShape::default())
            .unwrap()
    };
    // First turn, nothing cached, home overloaded (20 in flight, none elsewhere): it goes
    // where bounded load sends it.
    let first_turn = chat_turn(2000, 0, &headers);
    set[home].load.in_flight.store(20, Ordering::Relaxed);
    let away = pick(&first_turn);
    assert_ne!(away, home);
    // The conversation so far (2,000 tokens) is cached at home: 150 ms of prefill saved
    // against 20 ms of queue at 1 ms a request. It stays, overloaded or not.
    router.place(&set[home], &first_turn).prefill_done();
    let next_turn = chat_turn(2000, 1, &headers);
    assert_eq!(pick(&next_turn), home);
    // 400 in flight at home: a miss elsewhere is faster than the queue, and it moves.
    set[home].load.in_flight.store(400, Ordering::Relaxed);
    let moved = pick(&next_turn);
    assert_ne!(moved, home);
    // Its turn is cached where it went: home is idle again, but the next turn follows the
    // session there (the conversation so far) rather than go home to a miss.
    router.place(&set[moved], &next_turn).prefill_done();
    set[home].load.in_flight.store(0, Ordering::Relaxed);
    let turn_after = chat_turn(2000, 2, &headers);
    assert_eq!(pick(&turn_after), moved);
    // Another session sending the same prompt is not drawn there: it goes to its own home.
    let mut other = HeaderMap::new();
    other.insert("x-session-id", "conversation-8".parse().unwrap());
    let other_home = session_places(&set, &all, hash_bytes(b"conversation-8"), LOOSE).unwrap().home;
    assert_eq!(pick(&chat_turn(2000, 2, &other)), other_home);
    // A second gateway, which placed none of this: it sends the turn after home, where the
    // first gateway's memory no longer leads the turn after that (it skipped a turn).
    let other_gateway = Arc::new(PrefixRouter::new(&config, &Registry::new()));
    let prompt = PromptPick { key: &turn_after, router: &other_gateway, config: &config };
    assert_eq!(
        PrefixAware::new(5).pick_prompt(&set, &context(), &prompt, &RequestShape::default()),
        Some(home)
    );
    other_gateway.place(&set[home], &turn_after).prefill_done();
    let fourth_turn = chat_turn(2000, 3, &headers);
    assert_eq!(pick(&fourth_turn), home, "no longer led to where the session was two turns ago");
}

#[test]
fn a_session_leaves_a_home_far_slower_than_a_replica_elsewhere_unless_its_cache_pays() {
    let mut headers = HeaderMap::new();
    headers.insert("x-session-id", "conversation-7".parse().unwrap());
    let session = hash_bytes(b"conversation-7");
    let config = PrefixConfig::default();
    let request = RequestShape { prompt_tokens: 2000, slo: EntrySlo::default() };
    // Two replicas at 100 us a token, then the same with home at 800 (as a real replica
    // eight times slower measured); each measured by this gateway's first tokens, or only
    // by its engine's counters (a fresh gateway beside replicas that have served).
    fn own_first_tokens(replica: &Replica, us_per_token: f64) {
        teach(replica, us_per_token, 5.0);
    }
    let teachers: [fn(&Replica, f64); 2] = [own_first_tokens, teach_engine];
    let cases = teachers.into_iter().flat_map(|teacher| [(teacher, 100.0), (teacher, 800.0)]);
    for (teacher, home_us_per_token) in cases {
        let set = replicas(2);
        let all = [0, 1];
        let home = session_places(&set, &all, session, LOOSE).unwrap().home;
        let elsewhere = 1 - home;
        teacher(&set[home], home_us_per_token);
        teacher(&set[elsewhere], 100.0);
        let router = Arc::new(PrefixRouter::new(&config, &Registry::new()));
        let pick = |key: &PromptKey| {
            let prompt = PromptPick { key, router: &router, config: &config };
            PrefixAware::measured(5).pick_prompt(&set, &context(), &prompt, &request).unwrap()
        };
        // A first turn of 2,000 tokens, cached nowhere: home unless home is far slower
        // (1.6 s against 0.2 s), though home, bounded load and memory all say home.
        let first_turn = chat_turn(2000, 0, &headers);
        let first = pick(&first_turn);
        let expected = if home_us_per_token > 100.0 { elsewhere } else { home };
        assert_eq!(first, expected, "{home_us_per_token} us a token at home");
        // With the conversation so far cached at home, the next turn's few new tokens cost
        // home less than a miss elsewhere: it stays home, slow or not.
        router.place(&set[home], &first_turn).prefill_done();
        let next_turn = chat_turn(2000, 1, &headers);
        assert_eq!(pick(&next_turn), home, "{home_us_per_token} us a token at home, cached");
    }
}

/// Turn `turns` of conversation `conversation`: its earlier user messages (64 tokens
/// each) and answers, then a new user message; the session id in `x-session-id`.
fn conversation_turn(conversation: u64, turns: u64) -> PromptKey {
    let mut headers = HeaderMap::new();
    headers.insert("x-session-id", format!("conversation-{conversation}").parse().unwrap());
    conversation_prompt(conversation, turns, &headers)
}

/// [`conversation_turn`] with `headers`.
fn conversation_prompt(conversation: u64, turns: u64, headers: &HeaderMap) -> PromptKey {
    let text = |n: u64| synthetic_text(64, &mut StdRng::seed_from_u64(conversation * 100 + n));
    let mut messages = Vec::new();
    for turn in 0..turns {
        messages.push(serde_json::json!({"role": "user", "content": text(2 * turn)}));
        if turn + 1 < turns {
            messages.push(serde_json::json!({"role": "assistant", "content": text(2 * turn + 1)}));
        }
    }
    let body = serde_json::json!({ "messages": messages });
    let request = InferenceRequest::parse(Endpoint::Chat, body.to_string().as_bytes()).unwrap();
    PromptKey::new(&request, headers, &PrefixConfig::default(), &EngineTokens::default())
}

#[test]
fn conversations_opened_at_once_spread_evenly_and_their_next_turns_follow() {
    let set = replicas(4);
    let all: Vec<usize> = (0..4).collect();
    let config = PrefixConfig::default();
    let router = Arc::new(PrefixRouter::new(&config, &Registry::new()));
    let pick = |key: &PromptKey| {
        let prompt = PromptPick { key, router: &router, config: &config };
        PrefixAware::new(5)
            .pick_prompt(&set, &context(), &prompt, &RequestShape::default())
            .unwrap()
    };
    // Sixteen conversations whose rendezvous home is the same replica, opened at once:
    // none has anything cached, and each first turn stays in flight.
    let home_of = |c: u64| {
        let session = hash_bytes(format!("conversation-{c}").as_bytes());
        session_places(&set, &all, session, LOOSE).unwrap().home
    };
    let conversations: Vec<u64> = (0..1000).filter(|&c| home_of(c) == 0).take(16).collect();
    assert_eq!(conversations.len(), 16);
    let mut first_turns = Vec::new();
    let mut per_replica = [0; 4];
    for &c in &conversations {
        let key = conversation_turn(c, 1);
        assert!(key.opens_conversation);
        let chosen = pick(&key);
        per_replica[chosen] += 1;
        set[chosen].load.in_flight.fetch_add(1, Ordering::Relaxed);
        first_turns.push((chosen, router.place(&set[chosen], &key)));
    }
    assert_eq!(per_replica, [4, 4, 4, 4], "an even share each, home or not");
    // The first turns end. Each second turn (the first one's messages, an answer and a new
    // question) follows its conversation to where it is cached, idle home or not.
    for (chosen, feedback) in &mut first_turns {
        feedback.prefill_done();
        set[*chosen].load.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
    for (&c, (was, _)) in conversations.iter().zip(&first_turns) {
        let key = conversation_turn(c, 2);
        assert!(!key.opens_conversation);
        assert_eq!(pick(&key), *was, "conversation {c}");
    }
    // Under the loose bound of later turns, the same sixteen would have piled up at home
    // (1.25 * mean + 1 lets a replica take six of sixteen).
    for replica in &set {
        replica.load.in_flight.store(0, Ordering::Relaxed);
    }
    let mut at_home = 0;
    for &c in &conversations {
        let session = hash_bytes(format!("conversation-{c}").as_bytes());
        let bounded = session_places(&set, &all, session, LOOSE).unwrap().bounded;
        at_home += usize::from(bounded == 0);
        set[bounded].load.in_flight.fetch_add(1, Ordering::Relaxed);
    }
    assert!(at_home > 4, "{at_home} of 16 at home under the loose bound");
}

#[test]
fn a_sessionless_conversation_stays_where_its_last_turn_went_until_that_replica_is_overloaded() {
    let pair = MeasuredPair::new(300);
    let (set, router) = (&pair.set, &pair.router);
    let pick = |key: &PromptKey| pair.pick(router, key);
    let turn = |turns: u64| conversation_prompt(7, turns, &HeaderMap::new());
    let first = pick(&turn(1));
    let elsewhere = 1 - first;
    router.place(&set[first], &turn(1)).prefill_done();
    // Its replica now owes 2,000 tokens of others' prefill (about 200 ms) and has two
    // streams, the other none: within the bound (1.25 * 1 + 1), and the second turn stays
    // with the history it cached, though the idle replica would answer a miss sooner.
    let owed = LatencyProbe::begin(set[first].clone(), 2000, &context(), EngineEntry::AtPlacement);
    set[first].load.in_flight.store(2, Ordering::Relaxed);
    let second = turn(2);
    assert!(second.session.is_none() && second.conversation == turn(1).conversation);
    assert_eq!(pick(&second), first);
    let forgotten = PromptKey { conversation: None, ..second.clone() };
    assert_eq!(pick(&forgotten), elsewhere, "placed as any prompt, it would move");
    // Six streams: overloaded (the bound is 4.75), and the miss elsewhere, its history
    // charged, is faster than the queue: it moves.
    set[first].load.in_flight.store(6, Ordering::Relaxed);
    assert_eq!(pick(&second), elsewhere);
    router.place(&set[elsewhere], &second).prefill_done();
    // Its third turn follows it there, to where its history went, though the first replica
    // is idle again.
    drop(owed);
    set[first].load.in_flight.store(0, Ordering::Relaxed);
    let third = turn(3);
    assert_eq!(pick(&third), elsewhere);
    router.place(&set[elsewhere], &third).prefill_done();
    // The same messages sent again are no next turn (a template sent by many, as often as
    // a retry): placed as any prompt, they go where the copy is cheapest.
    let _owed =
        LatencyProbe::begin(set[elsewhere].clone(), 2000, &context(), EngineEntry::AtPlacement);
    set[elsewhere].load.in_flight.store(2, Ordering::Relaxed);
    assert_eq!(pick(&third), first);
    assert_eq!(pick(&turn(4)), elsewhere, "the next turn follows");
}

#[test]
fn a_session_stays_where_its_history_is_though_its_rendezvous_home_looks_faster() {
    let pair = MeasuredPair::new(300);
    let (set, router) = (&pair.set, &pair.router);
    let pick = |key: &PromptKey| pair.pick(router, key);
    let home = session_places(set, &[0, 1], hash_bytes(b"conversation-7"), LOOSE).unwrap().home;
    let away = 1 - home;
    // Its first turn finds home at its even share (two in flight, none elsewhere) and goes
    // away, where its history is then cached.
    set[home].load.in_flight.store(2, Ordering::Relaxed);
    let first = conversation_turn(7, 1);
    assert_eq!(pick(&first), away);
    router.place(&set[away], &first).prefill_done();
    set[home].load.in_flight.store(0, Ordering::Relaxed);
    // Away now owes 2,000 tokens of others' prefill (about 200 ms) and has two streams,
    // home none: within the bound (1.25 * 1 + 1), the second turn stays with its history,
    // though its rendezvous home would answer a miss sooner.
    let owed = LatencyProbe::begin(set[away].clone(), 2000, &context(), EngineEntry::AtPlacement);
    set[away].load.in_flight.store(2, Ordering::Relaxed);
    let second = conversation_turn(7, 2);
    assert_eq!(pick(&second), away);
    let unplaced = PrefixRouter::new(&pair.config, &Registry::new());
    let from_another_gateway = pair.pick(&unplaced, &second);
    assert_eq!(from_another_gateway, home, "a gateway that placed none of it sends it home");
    // Six streams: overloaded (the bound is 4.75), and the miss at home, its history
    // charged, is faster than the queue: it goes home, and its next turn follows it there.
    set[away].load.in_flight.store(6, Ordering::Relaxed);
    assert_eq!(pick(&second), home);
    router.place(&set[home], &second).prefill_done();
    drop(owed);
    set[away].load.in_flight.store(0, Ordering::Relaxed);
    assert_eq!(pick(&conversation_turn(7, 3)), home);
}

/// A sessionless chat prompt of `messages` (role, text).
fn chat(messages: &[(&str, &str)]) -> PromptKey {
    let messages: Vec<_> = messages
        .iter()
        .map(|(role, text)| serde_json::json!({"role": role, "content": text}))
        .collect();
    let body = serde_json::json!({ "messages": messages });
    let request = InferenceRequest::parse(Endpoint::Chat, body.to_string().as_bytes()).unwrap();
    PromptKey::new(&request, &HeaderMap::new(), &PrefixConfig::default(), &EngineTokens::default())
}

#[test]
fn conversations_opened_alike_are_followed_only_to_where_their_own_history_is() {
    let pair = MeasuredPair::new(1000);
    let (set, router) = (&pair.set, &pair.router);
    let pick = |key: &PromptKey| pair.pick(router, key);
    let text = |seed: u64, tokens: u64| synthetic_text(tokens, &mut StdRng::seed_from_u64(seed));
    let (system, question) = (text(1, 300), text(2, 20));
    let (answer_a, next_a, answer_b, next_b) =
        (text(3, 200), text(4, 20), text(5, 200), text(6, 20));
    let opening = [("system", system.as_str()), ("user", question.as_str())];
    let turn_a =
        [&opening[..], &[("assistant", answer_a.as_str()), ("user", next_a.as_str())]].concat();
    let turn_b =
        [&opening[..], &[("assistant", answer_b.as_str()), ("user", next_b.as_str())]].concat();
    assert_eq!(chat(&turn_a).conversation, chat(&turn_b).conversation, "opened alike");
    // A's second turn went to r0, then B's to r1: the shared slot now names r1.
    router.place(&set[0], &chat(&turn_a)).prefill_done();
    router.place(&set[1], &chat(&turn_b)).prefill_done();
    // A's third turn is two messages longer than B's placed turn, but r1 holds only the
    // opening of it, r0 all its history: it goes by its cache, to r0.
    let (answer, next) = (text(7, 200), text(8, 20));
    let third_a =
        [&turn_a[..], &[("assistant", answer.as_str()), ("user", next.as_str())]].concat();
    assert_eq!(pick(&chat(&third_a)), 0);
    // B's third turn goes to r1, where its history is.
    let third_b =
        [&turn_b[..], &[("assistant", answer.as_str()), ("user", next.as_str())]].concat();
    assert_eq!(pick(&chat(&third_b)), 1);
}

#[test]
fn gateways_that_each_place_some_turns_agree_on_a_sessionless_conversation_from_its_second() {
    let set = replicas(4);
    let all: Vec<usize> = (0..4).collect();
    let config = PrefixConfig::default();
    let (first, second) = (
        Arc::new(PrefixRouter::new(&config, &Registry::new())),
        Arc::new(PrefixRouter::new(&config, &Registry::new())),
    );
    let pick = |router: &Arc<PrefixRouter>, key: &PromptKey| {
        let prompt = PromptPick { key, router, config: &config };
        let chosen = PrefixAware::new(5)
            .pick_prompt(&set, &context(), &prompt, &RequestShape::default())
            .unwrap();
        router.place(&set[chosen], key).prefill_done();
        chosen
    };
    // Twenty conversations, their turns sent to the two gateways by turns.
    for conversation in 0..20 {
        let turn = |turns: u64| conversation_prompt(conversation, turns, &HeaderMap::new());
        pick(&first, &turn(1));
        let second_turn = pick(&second, &turn(2));
        let opening = turn(2).conversation.unwrap();
        let home = session_places(&set, &all, opening, LOOSE).unwrap().home;
        assert_eq!(second_turn, home, "conversation {conversation}: its opening's home");
        // The first gateway placed only its first turn: its third goes there too, and so
        // does every later one, whichever gateway places it.
        assert_eq!(pick(&first, &turn(3)), home, "conversation {conversation}");
        assert_eq!(pick(&second, &turn(4)), home, "conversation {conversation}");
        assert_eq!(pick(&first, &turn(5)), home, "conversation {conversation}");
    }
}
