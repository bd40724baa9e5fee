//! The prefix-sharing workloads: their notation (good and bad specs), the seeded prompts
//! (how many distinct contexts, byte-equal where shared), and runs against an in-process
//! simulator whose reported cache hits follow from the prompts (counts, not timings).

use std::collections::{BTreeMap, BTreeSet};

use crate::support::sim::start;
use laneway::bench::conversation::{History, session_id};
use laneway::bench::prefix_workload::{ConversationSpec, PrefixSpec, Sharing};
use laneway::bench::workload::{Workload, WorkloadError};
use laneway::bench::{BenchArgs, measure};
use laneway::tokens::estimate_text_tokens;

/// A chat message's start marker and role: shared by two requests whose next message has
/// the same role, so a hit reaches two tokens past the shared messages.
const MESSAGE_HEAD_TOKENS: u64 = 2;
/// The simulator's block size (vLLM's default).
const BLOCK: u64 = 16;

fn prefix(spec: &str) -> PrefixSpec {
    match Workload::parse(spec).unwrap() {
        Workload::SharedPrefix(parsed) => parsed,
        other => panic!("{spec}: {other:?}"),
    }
}

#[test]
fn the_notation_parses() {
    let sp = prefix("sp_g16_p6000_q1200_o100");
    assert_eq!(sp.sharing, Sharing::Groups(16));
    assert_eq!((sp.prefix_tokens, sp.question_tokens, sp.output_tokens), (6000, 1200, 100));
    assert_eq!((sp.concurrency, sp.requests), (None, None));
    let sp = prefix("sp_g4_p100_q10_o5_c8_r64");
    assert_eq!((sp.concurrency, sp.requests), (Some(8), Some(64)));
    assert_eq!(prefix("hot_p4000_q500_o100").sharing, Sharing::Hot { percent: 50 });
    assert_eq!(prefix("hot_p4000_q500_o100_h80").sharing, Sharing::Hot { percent: 80 });
    assert_eq!(
        Workload::parse("mt_c8_t6_i500_o100").unwrap(),
        Workload::Conversations(ConversationSpec {
            conversations: 8,
            turns: 6,
            message_tokens: 500,
            output_tokens: 100
        })
    );
    assert_eq!(Workload::parse("mt_c8_t6_i500_o100").unwrap().fixed(), (Some(8), Some(48)));
}

/// Tells whether an error is the expected kind.
type IsExpected = fn(&WorkloadError) -> bool;

#[test]
fn bad_specs_name_the_bad_part() {
    let cases: &[(&str, IsExpected, &str)] = &[
        (
            "sp_g16_p6000_q1200",
            |e| matches!(e, WorkloadError::MissingField { letter: 'o', .. }),
            "`o`",
        ),
        ("sp_g16_p6000_q1200_o100_z3", |e| matches!(e, WorkloadError::UnknownField { .. }), "`z3`"),
        ("sp_g0_p6000_q1200_o100", |e| matches!(e, WorkloadError::OutOfRange { .. }), "`g0`"),
        ("hot_p4000_q500_o100_h101", |e| matches!(e, WorkloadError::OutOfRange { .. }), "`h101`"),
        ("hot_p4000_q500_o100_g3", |e| matches!(e, WorkloadError::UnknownField { .. }), "`g3`"),
        ("mt_c8_t6_ixx_o100", |e| matches!(e, WorkloadError::NotANumber { .. }), "`ixx`"),
        (
            "mt_c8_i500_o100",
            |e| matches!(e, WorkloadError::MissingField { letter: 't', .. }),
            "`t`",
        ),
    ];
    for (spec, is_expected, named) in cases {
        let error = Workload::parse(spec).unwrap_err();
        assert!(is_expected(&error), "{spec}: {error:?}");
        assert!(error.to_string().contains(named), "{spec}: {error}");
    }
}

#[test]
fn groups_share_byte_equal_contexts_and_nothing_else() {
    let spec = prefix("sp_g4_p400_q100_o5");
    let prompts: Vec<_> = (0..64).map(|index| spec.prompt(7, index)).collect();
    let mut contexts: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for prompt in &prompts {
        contexts.entry(prompt.group.unwrap()).or_default().insert(&prompt.context);
        assert_eq!(estimate_text_tokens(&prompt.context) + 4, 400);
        assert_eq!(estimate_text_tokens(&prompt.question) + 4, 100);
    }
    assert_eq!(contexts.len(), 4, "every group is drawn in 64 requests");
    assert!(contexts.values().all(|texts| texts.len() == 1), "one context per group");
    let distinct: BTreeSet<&str> = prompts.iter().map(|p| p.context.as_str()).collect();
    assert_eq!(distinct.len(), 4);
    let questions: BTreeSet<&str> = prompts.iter().map(|p| p.question.as_str()).collect();
    assert_eq!(questions.len(), 64, "questions are unique");
    assert_eq!(spec.prompt(7, 3), prompts[3], "seeded");
    assert_ne!(spec.prompt(8, 3).context, prompts[3].context, "another seed, other texts");
}

#[test]
fn a_hot_prefix_carries_its_share_and_the_rest_is_unique() {
    let spec = prefix("hot_p200_q50_o5_h50");
    let prompts: Vec<_> = (0..400).map(|index| spec.prompt(1, index)).collect();
    let hot: Vec<_> = prompts.iter().filter(|p| p.group == Some(0)).collect();
    assert!((150..250).contains(&hot.len()), "about half of 400: {}", hot.len());
    let hot_contexts: BTreeSet<&str> = hot.iter().map(|p| p.context.as_str()).collect();
    assert_eq!(hot_contexts.len(), 1);
    let all: BTreeSet<&str> = prompts.iter().map(|p| p.context.as_str()).collect();
    assert_eq!(all.len(), 400 - hot.len() + 1, "every cold request has its own context");
}

#[test]
fn a_conversation_grows_by_its_answers_and_new_messages() {
    let spec =
        ConversationSpec { conversations: 2, turns: 3, message_tokens: 100, output_tokens: 8 };
    let mut history = History::default();
    history.ask(&spec, 5, 0, 0);
    let first = history.clone();
    history.answer("the and for".into());
    history.ask(&spec, 5, 0, 1);
    assert_eq!(history.messages[..1], first.messages[..]);
    assert_eq!(history.prompt_tokens(), 100 + (3 + 4) + 100);
    let mut other = History::default();
    other.ask(&spec, 5, 1, 0);
    assert_ne!(other.messages, first.messages, "conversations differ");
    assert_eq!(session_id(5, 1), "conv-5-1");
}

async fn run(spec: &str, base: String) -> laneway::bench::BenchOutcome {
    let args = BenchArgs {
        target: vec![format!("sim={base}")],
        workload: spec.to_string(),
        quiet: true,
        seed: 3,
        ..BenchArgs::default()
    };
    measure(&args).await.unwrap()
}

#[tokio::test]
async fn conversations_hit_the_cache_on_their_history() {
    let sim = start("tiny", 1, 50.0).await;
    let outcome = run("mt_c2_t3_i100_o8", format!("http://{}", sim.addr())).await;
    let records = &outcome.targets[0].records;
    assert_eq!(records.len(), 6);
    for record in records {
        assert!(record.outcome.is_success(), "{record:?}");
        // The record names where it was served (one replica, one API process).
        assert_eq!(record.replica.as_deref(), Some("test-replica"), "{record:?}");
        assert_eq!(record.api_worker, Some(0), "{record:?}");
        let turn = record.index % 3;
        let expected = if turn == 0 {
            0
        } else {
            // The previous turn's whole prompt is cached (its answer is not: only prompt
            // blocks are), up to the last full block before the shared message head.
            let previous = &records[record.index as usize - 1];
            (previous.prompt_tokens + MESSAGE_HEAD_TOKENS) / BLOCK * BLOCK
        };
        assert_eq!(record.cached_tokens, Some(expected), "{record:?}");
    }
    let ratio = outcome.targets[0].summary.prefix_cache_hit_ratio.unwrap();
    assert!(ratio > 0.3 && ratio < 1.0, "{ratio}");
    assert!(outcome.table.contains("cache hit %"));
    sim.shutdown().await;
}

#[tokio::test]
async fn shared_prefix_groups_hit_after_their_first_request() {
    let sim = start("tiny", 1, 50.0).await;
    let outcome = run("sp_g2_p400_q100_o4_c1_r8", format!("http://{}", sim.addr())).await;
    let records = &outcome.targets[0].records;
    let spec = prefix("sp_g2_p400_q100_o4");
    let groups: BTreeSet<u64> = (0..8).map(|index| spec.prompt(3, index).group.unwrap()).collect();
    let shared = (400 + MESSAGE_HEAD_TOKENS) / BLOCK * BLOCK;
    let hits = records.iter().filter(|r| r.cached_tokens == Some(shared)).count();
    let misses = records.iter().filter(|r| r.cached_tokens == Some(0)).count();
    assert_eq!((hits, misses), (8 - groups.len(), groups.len()), "{records:?}");
    sim.shutdown().await;
}
