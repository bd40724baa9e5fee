//! Flag validation: targets, arrivals, budgets split into interleaved rounds, SLOs.

use std::time::Duration;

use clap::Parser;
use laneway::bench::BenchArgs;
use laneway::bench::arrivals::Arrivals;
use laneway::bench::plan::{Plan, PlanError, parse_target, split_rounds};
use laneway::bench::runner::Budget;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn plan_of(line: &str) -> Result<Plan, PlanError> {
    let cli = Cli::try_parse_from(std::iter::once("bench").chain(line.split_whitespace())).unwrap();
    Plan::from_args(&cli.args)
}

#[test]
fn targets_take_an_optional_name() {
    let named = parse_target("direct=http://127.0.0.1:8000/").unwrap();
    assert_eq!((named.name.as_str(), named.url.as_str()), ("direct", "http://127.0.0.1:8000"));
    let unnamed = parse_target("http://127.0.0.1:9000").unwrap();
    assert_eq!(unnamed.name, "127.0.0.1:9000");
    let spread = parse_target("direct=http://127.0.0.1:1/, http://127.0.0.1:2").unwrap();
    assert_eq!(spread.url, "http://127.0.0.1:1,http://127.0.0.1:2");
    assert!(matches!(parse_target("x=ftp://h"), Err(PlanError::BadTarget(_))));
    assert!(matches!(parse_target("x=http://h:1,"), Err(PlanError::BadTarget(_))));
    assert!(matches!(parse_target("=http://h:1"), Err(PlanError::BadTarget(_))));
}

#[test]
fn a_business_case_runs_closed_loop_in_rounds_across_targets() {
    let plan = plan_of(
        "--target a=http://127.0.0.1:1 b=http://127.0.0.1:2 --workload 1000/300/c2 --requests 20",
    )
    .unwrap();
    assert_eq!(plan.arrivals, Arrivals::Closed { concurrency: 2 });
    assert_eq!(plan.rounds.len(), 3);
    assert_eq!(plan.planned_requests(), Some(20));
    let firsts: Vec<u64> = plan.rounds.iter().map(|(first, _)| *first).collect();
    assert_eq!(firsts, vec![0, 7, 14]);
    let few =
        plan_of("--target a=http://h:1 b=http://h:2 --workload 1000/300/c6 --requests 12").unwrap();
    assert_eq!(few.rounds.len(), 1, "rounds of 4 would never reach 6 in flight");
    let many =
        plan_of("--target a=http://h:1 b=http://h:2 --workload 1000/300/c6 --requests 30").unwrap();
    assert_eq!(many.rounds.len(), 2);
}

#[test]
fn a_rate_makes_an_open_loop_capped_by_the_spec_concurrency() {
    let plan = plan_of("--target http://127.0.0.1:1 --workload 1000/300/c6 --rate 2.5").unwrap();
    assert_eq!(plan.arrivals, Arrivals::Open { rate: 2.5, max_concurrency: Some(6) });
    assert_eq!(plan.planned_requests(), Some(75));
}

#[test]
fn tiny_without_rate_is_the_saturation_mode() {
    let plan = plan_of("--target http://127.0.0.1:1 --workload tiny --max-concurrency 8").unwrap();
    assert_eq!(plan.arrivals, Arrivals::Closed { concurrency: 8 });
    assert_eq!(plan.rounds, vec![(0, Budget::Duration(Duration::from_secs(10)))]);
}

#[test]
fn bad_flags_are_refused_with_clear_errors() {
    let refused = |line: &str| plan_of(line).expect_err(line).to_string();
    assert!(refused("--target http://h:1 --workload 1000/300").contains("--rate R"));
    assert!(refused("--target http://h:1 --workload 1000/300/c2 --rate 0").contains("--rate"));
    assert!(
        refused("--target http://h:1 --workload 1000/300/c2 --goodput ttft:abc")
            .contains("ttft:abc")
    );
    assert!(
        refused("--target http://h:1 --workload 1000/300/c2 --header nocolon")
            .contains("NAME:VALUE")
    );
    assert!(refused("--target a=http://h:1 a=http://h:2 --workload tiny").contains("twice"));
    assert!(
        refused("--target http://h:1 --workload 1000/300/c2 --requests 2000000").contains("cap")
    );
    assert!(
        refused("--target http://h:1 --workload 1000/300/c2 --requests 5 --duration 3")
            .contains("not both")
    );
    assert!(refused("--target http://h:1 --workload nonsense").contains("not a workload"));
    assert!(
        refused("--target http://h:1 --workload 1000/300/c2 --rate 1 --ramp-up 2")
            .contains("closed loop")
    );
    let ramped = plan_of("--target http://h:1 --workload 1000/300/c2 --ramp-up 2").unwrap();
    assert_eq!(ramped.ramp_up, Duration::from_secs(2));
}

#[test]
fn rounds_cover_the_budget_exactly_once() {
    for (count, rounds) in [(10, 3), (3, 5), (1, 1), (100, 7)] {
        let split = split_rounds(Budget::Requests(count), rounds);
        let mut next = 0;
        for (first, budget) in &split {
            let Budget::Requests(n) = budget else { panic!() };
            assert_eq!(*first, next);
            assert!(*n > 0);
            next += n;
        }
        assert_eq!(next, count, "{count} in {rounds}");
    }
}

#[test]
fn conversations_run_closed_loop_in_whole_conversations() {
    let plan = plan_of(
        "--target a=http://127.0.0.1:1 b=http://127.0.0.1:2 --workload mt_c2_t3_i100_o8 \
         --requests 13",
    )
    .unwrap();
    assert_eq!(plan.arrivals, Arrivals::Closed { concurrency: 2 });
    // 13 requests are 5 conversations of 3 turns, split into rounds of whole conversations.
    let total: u64 = plan
        .rounds
        .iter()
        .map(|(first, budget)| {
            assert_eq!(first % 3, 0, "{:?}", plan.rounds);
            match budget {
                Budget::Requests(count) => *count,
                Budget::Duration(_) => panic!("count-based"),
            }
        })
        .sum();
    assert_eq!(total, 15);
    let rate = plan_of("--target http://127.0.0.1:1 --workload mt_c2_t3_i100_o8 --rate 2");
    assert!(matches!(rate, Err(PlanError::ConversationsFlag("rate"))));
    let duration = plan_of("--target http://127.0.0.1:1 --workload mt_c2_t3_i100_o8 --duration 5");
    assert!(matches!(duration, Err(PlanError::ConversationsFlag("duration"))));
    let sp = plan_of("--target http://127.0.0.1:1 --workload sp_g2_p100_q10_o4_c3_r9").unwrap();
    assert_eq!(sp.arrivals, Arrivals::Closed { concurrency: 3 });
    assert_eq!(sp.planned_requests(), Some(9));
}
