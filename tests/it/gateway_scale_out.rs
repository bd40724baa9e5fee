//! Scale-out: two laneway instances in front of the same simulated fleet, driven by one
//! `laneway bench` run spread over both URLs, keep the replicas balanced without talking to
//! each other: each sees the other's requests only through the replicas' scraped queue
//! figures. Reported: the spread of per-replica request counts (from the simulators'
//! counters), two instances against one. Counts, not times.
//!
//! `LANEWAY_SCALE_OUT_REQUESTS=2000 cargo test --release --test gateway_scale_out -- --nocapture`
//! runs a larger measurement.

use crate::support::gateway::{config_for, start_gateway, start_sims, with_policy};
use laneway::bench::{BenchArgs, measure};
use laneway::gateway::GatewayHandle;
use laneway::gateway::config::PolicyKind;
use laneway::sim::SimHandle;

const REPLICAS: usize = 4;
const WORKLOAD: &str = "200/16/c16";

fn requests() -> u64 {
    std::env::var("LANEWAY_SCALE_OUT_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(240)
}

/// Per-replica inference request counts since `before`.
fn counts_since(sims: &[SimHandle], before: &[u64]) -> Vec<u64> {
    sims.iter().zip(before).map(|(sim, before)| sim.stats().requests_total - before).collect()
}

fn totals(sims: &[SimHandle]) -> Vec<u64> {
    sims.iter().map(|sim| sim.stats().requests_total).collect()
}

/// (max - min) / mean of the counts.
fn spread(counts: &[u64]) -> f64 {
    let max = *counts.iter().max().unwrap() as f64;
    let min = *counts.iter().min().unwrap() as f64;
    let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
    (max - min) / mean
}

/// One bench run through `gateways` (their URLs as one target); the per-replica counts.
async fn run_through(name: &str, gateways: &[&GatewayHandle], sims: &[SimHandle]) -> Vec<u64> {
    let urls: Vec<String> = gateways.iter().map(|g| format!("http://{}", g.addr())).collect();
    let args = BenchArgs {
        target: vec![format!("{name}={}", urls.join(","))],
        workload: WORKLOAD.into(),
        requests: Some(requests()),
        quiet: true,
        seed: 7,
        ..BenchArgs::default()
    };
    let before = totals(sims);
    let outcome = measure(&args).await.unwrap();
    let summary = &outcome.targets[0].summary;
    assert_eq!(summary.failures, 0, "{name}: {:?}", summary.failures_by_kind);
    assert_eq!(summary.successes, requests());
    let counts = counts_since(sims, &before);
    assert_eq!(counts.iter().sum::<u64>(), requests(), "every request reached one replica");
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_balance_the_fleet_as_well_as_one() {
    let sims = start_sims(REPLICAS, 1).await;
    // Balance by load alone: prefix affinity would follow the workload's shared prompts.
    let by_load = || with_policy(config_for(&sims), PolicyKind::PredictedLatency);
    let first = start_gateway(by_load()).await;
    let one = run_through("one", &[&first], &sims).await;

    let second = start_gateway(by_load()).await;
    let two = run_through("two", &[&first, &second], &sims).await;
    let per_instance = |gateway: &GatewayHandle| {
        gateway
            .metrics_text()
            .lines()
            .filter(|l| {
                l.starts_with("laneway_requests_total{") && l.contains("status_class=\"2xx\"")
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum::<f64>()
    };
    let (first_total, second_total) = (per_instance(&first), per_instance(&second));

    println!("per-replica request counts, {} requests of {WORKLOAD}", requests());
    println!("one instance:  {one:?}  spread (max-min)/mean = {:.3}", spread(&one));
    println!(
        "two instances: {two:?}  spread (max-min)/mean = {:.3}  (instance shares {first_total} + {second_total}, the first also served the one-instance run)",
        spread(&two)
    );
    // Both instances carried traffic, and neither starved nor flooded a replica: with
    // requests()/4 per replica expected, every replica is within half of that.
    assert!(second_total > 0.0);
    let expected = requests() as f64 / REPLICAS as f64;
    for counts in [&one, &two] {
        for &count in counts.iter() {
            let off = (count as f64 - expected).abs();
            assert!(off <= expected / 2.0, "{counts:?} against {expected} each");
        }
    }
    first.shutdown().await;
    second.shutdown().await;
}
