//! The seeds' topologies end to end.
//!
//! Cross-node replicas in the simulator (PP2/TP8 and TP16 over TCP or eRDMA): each built-in
//! profile lands within 15% of the published cell it is fitted to, and the field's
//! orderings come out of the engine, all on simulated time. The engine runs on tokio's paused clock: simulated time only advances when every task
//! waits, so closed-loop clients answer a finished request at the very instant it finished
//! and the figures are exact and repeatable whatever the machine's load.

use std::sync::Arc;

use crate::support::gateway::*;
use laneway::gateway::config::Placement;
use laneway::sim::Profile;
use laneway::sim::clock::SimClock;
use laneway::sim::engine::{Engine, EngineLoad, EngineRequest, TokenBatch};
use laneway::sim::fault::FaultSwitch;
use laneway::sim::metrics::SimMetrics;
use laneway::sim::step_jitter::StepJitter;
use tokio::sync::{mpsc, oneshot, watch};

/// One finished request: TTFT (with the API's fixed share) and TPOT, in seconds.
#[derive(Debug, Clone, Copy)]
struct Sample {
    ttft: f64,
    tpot: f64,
}

/// Median TTFT and mean TPOT of a run, in milliseconds.
fn summary(samples: &[Sample]) -> (f64, f64) {
    let mut ttfts: Vec<f64> = samples.iter().map(|s| s.ttft).collect();
    ttfts.sort_by(f64::total_cmp);
    let tpot = samples.iter().map(|s| s.tpot).sum::<f64>() / samples.len() as f64;
    (ttfts[ttfts.len() / 2] * 1e3, tpot * 1e3)
}

/// `clients` closed-loop clients, each sending `rounds` requests of `prompt`/`output`
/// tokens one after the other. Client `k` starts when client 0's first request has
/// `k * output / clients` tokens, so the clients are spread over an output as in a steady
/// run (started together, identical requests would stay in lockstep for ever).
async fn closed_loop(
    profile_name: &str,
    clients: usize,
    rounds: usize,
    prompt: u64,
    output: u64,
) -> Vec<Sample> {
    let profile = Profile::built_in(profile_name).unwrap();
    let api_us = profile.api.request_overhead_us
        + profile.api.tokenize_us_per_token * prompt as f64
        + profile.api.per_chunk_us;
    let clock = SimClock::new(1.0);
    let (inbox, receiver) = mpsc::unbounded_channel();
    let (_stop, stop_watch) = watch::channel(false);
    let faults = FaultSwitch::default();
    let engine = Engine {
        profile: profile.engine.clone(),
        clock: clock.clone(),
        inbox: receiver,
        faults: faults.subscribe(),
        metrics: Arc::new(SimMetrics::new("m").unwrap()),
        load: Arc::new(EngineLoad::default()),
        stop: stop_watch,
        kv_events: None,
        jitter: StepJitter::new(profile.engine.step_jitter, 0),
    };
    tokio::spawn(engine.run());

    let (samples_tx, mut samples_rx) = mpsc::unbounded_channel();
    let mut starts = Vec::new();
    let mut start_signals = Vec::new();
    for _ in 1..clients {
        let (tx, rx) = oneshot::channel::<()>();
        starts.push(tx);
        start_signals.push(rx);
    }
    for start in start_signals {
        let (inbox, clock, samples) = (inbox.clone(), clock.clone(), samples_tx.clone());
        tokio::spawn(async move {
            start.await.unwrap();
            for _ in 0..rounds {
                let sample = one_request(&inbox, &clock, prompt, output, api_us, |_| {}).await;
                samples.send(sample).unwrap();
            }
        });
    }
    // Client 0 starts the others as its first request's output passes each mark.
    let mut starts = starts.into_iter().enumerate().peekable();
    for round in 0..rounds {
        let sample = one_request(&inbox, &clock, prompt, output, api_us, |generated| {
            while round == 0
                && starts
                    .peek()
                    .is_some_and(|(k, _)| generated >= (*k as u64 + 1) * output / clients as u64)
            {
                let (_, start) = starts.next().unwrap();
                start.send(()).unwrap();
            }
        })
        .await;
        samples_tx.send(sample).unwrap();
    }
    drop(samples_tx);
    let mut samples = Vec::new();
    while let Some(sample) = samples_rx.recv().await {
        samples.push(sample);
    }
    assert_eq!(samples.len(), clients * rounds);
    samples
}

/// Sends one request now and waits for its last token; `progress` sees the tokens so far.
async fn one_request(
    inbox: &mpsc::UnboundedSender<EngineRequest>,
    clock: &SimClock,
    prompt: u64,
    output: u64,
    api_us: f64,
    mut progress: impl FnMut(u64),
) -> Sample {
    let (tokens, mut batches) = mpsc::channel::<TokenBatch>(output as usize + 1);
    let ready_at = clock.now();
    inbox
        .send(EngineRequest {
            prompt_tokens: prompt,
            max_tokens: output,
            block_hashes: Vec::new(),
            kv_event_blocks: None,
            ready_at,
            tokens,
        })
        .unwrap();
    let (mut first, mut generated) = (None, 0);
    loop {
        let batch = batches.recv().await.expect("the engine finishes every request");
        first.get_or_insert(batch.at);
        generated += batch.count;
        progress(generated);
        if batch.finished {
            let first = first.unwrap();
            assert_eq!(generated, output);
            return Sample {
                ttft: api_us / 1e6 + first.seconds_since(ready_at),
                tpot: batch.at.seconds_since(first) / (output - 1) as f64,
            };
        }
    }
}

fn assert_within_15_percent(what: &str, measured: f64, cell: f64) {
    let error = (measured - cell).abs() / cell;
    eprintln!("{what}: simulated {measured:.3}, cell {cell:.3} ({:+.1}%)", error * 100.0);
    assert!(error <= 0.15, "{what}: simulated {measured:.1}, cell {cell:.1}");
}

#[tokio::test(start_paused = true)]
async fn qwen3_32b_over_tcp_the_pipeline_beats_tp16() {
    // qwen3-32B, c3, 3K in / 1K out over TCP: TPOT 32.6 ms (PP2+TP8) vs 54.3 ms (TP16), TTFT
    // nearly 2x.
    let (pp_ttft, pp_tpot) = summary(&closed_loop("qwen3-32b-pp2tp8-tcp", 3, 3, 3000, 1000).await);
    let (tp_ttft, tp_tpot) = summary(&closed_loop("qwen3-32b-tp16-tcp", 3, 3, 3000, 1000).await);
    assert_within_15_percent("qwen PP2+TP8 TPOT ms", pp_tpot, 32.6);
    assert_within_15_percent("qwen TP16 TPOT ms", tp_tpot, 54.3);
    assert_within_15_percent("qwen TP16/PP2+TP8 TTFT ratio", tp_ttft / pp_ttft, 2.0);
    assert!(pp_tpot < tp_tpot, "TCP: PP2+TP8 TPOT {pp_tpot} < TP16's {tp_tpot}");
}

#[tokio::test(start_paused = true)]
async fn dsv4_pro_tp16_erdma_cuts_tpot_and_ttft() {
    // DeepSeek V4 Pro, vLLM, c1, 3K / 1K: TPOT 95.1 -> 52.9 ms, TTFT -15%.
    let (tcp_ttft, tcp_tpot) = summary(&closed_loop("dsv4-pro-tp16-tcp", 1, 2, 3000, 1000).await);
    let (rdma_ttft, rdma_tpot) =
        summary(&closed_loop("dsv4-pro-tp16-erdma", 1, 2, 3000, 1000).await);
    assert_within_15_percent("dsv4 TP16 tcp TPOT ms", tcp_tpot, 95.1);
    assert_within_15_percent("dsv4 TP16 erdma TPOT ms", rdma_tpot, 52.9);
    assert_within_15_percent("dsv4 erdma/tcp TTFT", rdma_ttft / tcp_ttft, 0.85);
}

#[tokio::test(start_paused = true)]
async fn glm52_over_erdma_tp16_decodes_faster_and_the_pipeline_prefills_faster() {
    // GLM-5.2-FP8, SGLang, c3, 8K in / 2K out, eRDMA: TPOT ~22 ms (TP16) vs ~188 ms
    // (PP2+TP8); TTFT 4.4 s (TP16) vs 1.4 s (PP2+TP8).
    let (pp_ttft, pp_tpot) = summary(&closed_loop("glm52-pp2tp8-erdma", 3, 2, 8000, 2000).await);
    let (tp_ttft, tp_tpot) = summary(&closed_loop("glm52-tp16-erdma", 3, 2, 8000, 2000).await);
    assert_within_15_percent("glm PP2+TP8 TPOT ms", pp_tpot, 188.0);
    assert_within_15_percent("glm TP16 TPOT ms", tp_tpot, 22.0);
    assert_within_15_percent("glm PP2+TP8 TTFT ms", pp_ttft, 1400.0);
    assert_within_15_percent("glm TP16 TTFT ms", tp_ttft, 4400.0);
    assert!(tp_tpot < pp_tpot, "eRDMA: TP16 TPOT {tp_tpot} < PP2+TP8's {pp_tpot}");
    assert!(pp_ttft < tp_ttft, "eRDMA at 8K: PP2+TP8 TTFT {pp_ttft} < TP16's {tp_ttft}");
}

#[tokio::test(start_paused = true)]
async fn deepseek_v4_flash_pipeline_matches_its_50000_token_cell() {
    // 50000/1000/c1: TPM ~3% above TP4x4's, whose request takes 27.1 s (h20-tp4): ~26.3 s.
    let samples = closed_loop("h20-pp2tp8", 1, 1, 50000, 1000).await;
    let e2e = samples[0].ttft + samples[0].tpot * 999.0;
    assert_within_15_percent("h20-pp2tp8 50000/1000 E2E s", e2e, 26.3);
}

/// Fault units and N-1 at SLO in a running gateway: a replica spanning nodes b and c is
/// lost with either; the report and the gauges compare what survives each unit with the
/// measured demand; a replica with no configured capacity gets a learned one from traffic.
#[tokio::test]
async fn the_gateway_judges_n_minus_one_per_fault_unit() {
    let sims = start_sims(3, 1).await;
    let placed = |name: &str, index: usize, nodes: &[&str], rps: Option<f64>| {
        let mut replica = replica(name, sims[index].addr());
        replica.node = nodes[0].to_string();
        replica.placement = Placement {
            other_nodes: nodes[1..].iter().map(|n| n.to_string()).collect(),
            rack: Some("r1".into()),
            capacity_rps: rps,
        };
        replica
    };
    let replicas = vec![
        placed("tp8-a", 0, &["a"], Some(7.0)),
        placed("tp8-b", 1, &["b"], Some(7.0)),
        placed("pp2", 2, &["b", "c"], None),
    ];
    let mut config = loopback_config(replicas);
    config.capacity.window = std::time::Duration::from_millis(100);
    // Spread by load: every request sends the same prompt, which affinity would keep on one.
    config.policy = laneway::gateway::config::PolicyKind::PredictedLatency;
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let report = || async {
        let text = client.get(admin_url(&gateway, "/admin/capacity")).send().await.unwrap();
        text.json::<serde_json::Value>().await.unwrap()
    };
    let unit = |report: &serde_json::Value, unit: &str| {
        report["what_if"].as_array().unwrap().iter().find(|w| w["unit"] == unit).cloned().unwrap()
    };
    // Before any traffic: b takes tp8-b and the spanning pp2; only tp8-a is left.
    let first = report().await;
    assert_eq!(unit(&first, "node/b")["lost"], serde_json::json!(["tp8-b", "pp2"]));
    assert_eq!(unit(&first, "node/b")["surviving"], serde_json::json!(["tp8-a"]));
    assert_eq!(unit(&first, "node/c")["lost"], serde_json::json!(["pp2"]));
    assert_eq!(unit(&first, "rack/r1")["surviving"], serde_json::json!([]));
    // pp2's capacity is unknown: what survives a or c cannot be judged yet.
    assert!(unit(&first, "node/a")["headroom_rps"].is_null());
    // Traffic: every replica serves requests, pp2's capacity is learned.
    let mut learned = None;
    for _ in 0..200 {
        for _ in 0..3 {
            let response = post_chat(&client, &gateway, &chat_body(20, 4, false)).await;
            assert_eq!(response.status(), 200);
        }
        let now = report().await;
        let pp2 = now["replicas"].as_array().unwrap().iter().find(|r| r["name"] == "pp2").cloned();
        if let Some(pp2) = pp2.filter(|r| r["source"] == "learned") {
            learned = Some((pp2["capacity_rps"].as_f64().unwrap(), now));
            break;
        }
    }
    let (pp2_rps, now) = learned.expect("pp2's capacity learned within 200 rounds");
    assert!(pp2_rps > 0.0);
    let demand = now["demand_rps"].as_f64().unwrap();
    let margin = now["margin"].as_f64().unwrap();
    assert_eq!(margin, 0.10);
    for (name, surviving) in [("node/a", 7.0 + pp2_rps), ("node/b", 7.0), ("node/c", 14.0)] {
        let headroom = unit(&now, name)["headroom_rps"].as_f64().unwrap();
        let expected = surviving - demand * (1.0 + margin);
        assert!((headroom - expected).abs() < 1e-9, "{name}: {headroom} vs {expected}");
    }
    // The gauges carry the same judgement, and the worst unit is named.
    let text = gateway.metrics_text();
    assert!(sample(&text, "laneway_n_minus_one_headroom_rps{unit=\"node/b\"}").is_some(), "{text}");
    assert!(sample(&text, "laneway_n_minus_one_worst_headroom_rps{unit=").is_some(), "{text}");
    assert!(
        sample(&text, "laneway_replica_capacity_rps{replica=\"tp8-a\",source=\"configured\"}")
            .is_some()
    );
}

#[test]
fn the_topology_canary_config_loads_with_its_spanning_replicas() {
    let config =
        laneway::gateway::GatewayConfig::load(std::path::Path::new("config/topology-canary.toml"))
            .unwrap();
    let nodes = |name: &str| {
        let replica = config.replicas.iter().find(|r| r.name == name).unwrap();
        replica.nodes().map(str::to_string).collect::<Vec<_>>()
    };
    assert_eq!(nodes("tp8-a"), ["h20-1"]);
    assert_eq!(nodes("pp2tp8"), ["h20-3", "h20-4"]);
    assert_eq!(nodes("tp16-erdma"), ["h20-5", "h20-6"]);
    assert_eq!(config.pools.len(), 3);
    assert_eq!(config.capacity.margin, 0.20);
}
