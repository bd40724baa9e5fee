//! Automatic rollback end to end: a candidate pool with a slowed replica is judged worse
//! by the sequential test and loses its weight under live traffic, without a failed
//! request; the action is counted, listed in the report, and later traffic stays on the
//! baseline.

use crate::support::canary::USER_HEADER;
use crate::support::gateway::*;
use futures_util::StreamExt;
use laneway::gateway::{Entry, GatewayHandle, Strategy};
use laneway::sim::Fault;

async fn send(client: &reqwest::Client, gateway: &GatewayHandle, user: usize) -> (u16, String) {
    let response = client
        .post(url(gateway, "/v1/chat/completions"))
        .header(USER_HEADER, format!("user-{user}"))
        .json(&chat_body(40, 4, true))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let variant = header(&response, "x-laneway-variant");
    assert!(response.bytes().await.unwrap().ends_with(b"data: [DONE]\n\n"), "stream cut short");
    (status, variant)
}

#[tokio::test]
async fn a_slowed_candidate_pool_is_rolled_back_without_a_failed_request() {
    const BATCH: usize = 8;
    const MOST_REQUESTS: usize = 800;
    let sims = start_sims(2, 1).await;
    sims[1].set_fault(Fault::Slow { factor: 100.0 });
    let mut config = config_for(&sims);
    config.canary.sticky_header = Some(USER_HEADER.parse().unwrap());
    config.canary.automation.auto_rollback = true;
    config.pools = vec![pool("fast", &["sim-0"]), pool("slow", &["sim-1"])];
    config.short.variants = vec![
        variant("fast", Strategy::ForceClose, Some("fast"), 1),
        variant("slow", Strategy::ForceClose, Some("slow"), 1),
    ];
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let slow_weight = || gateway.state().variants.of(Entry::Short).weights()[1].weight;
    // Traffic in concurrent batches until the candidate has lost its weight (bounded).
    let mut results = Vec::new();
    while slow_weight() > 0 && results.len() < MOST_REQUESTS {
        let start = results.len();
        let batch: Vec<(u16, String)> = futures_util::stream::iter(start..start + BATCH)
            .map(|user| send(&client, &gateway, user))
            .buffer_unordered(4)
            .collect()
            .await;
        results.extend(batch);
    }
    assert_eq!(slow_weight(), 0, "no rollback after {} requests", results.len());
    assert!(results.iter().all(|(status, _)| *status == 200), "a request failed");
    let on_slow = results.iter().filter(|(_, v)| v == "slow").count();
    // The verdict needs at least 30 pairs of every guarded metric, whose tails start after
    // 20 baseline samples; a 10x slower pool is judged worse soon after.
    assert!((30..=200).contains(&on_slow), "{on_slow} requests reached the slow pool");
    let after: Vec<(u16, String)> = futures_util::stream::iter(10_000..10_000 + 40)
        .map(|user| send(&client, &gateway, user))
        .buffer_unordered(4)
        .collect()
        .await;
    assert!(after.iter().all(|(status, variant)| *status == 200 && variant == "fast"));
    let counter =
        "laneway_canary_actions_total{action=\"rollback\",entry=\"short\",variant=\"slow\"}";
    assert_eq!(sample(&gateway.metrics_text(), counter), Some(1.0));
    let report = admin_json(&gateway, "/admin/canary").await;
    let actions = report["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{report:#}");
    assert_eq!(actions[0]["action"], "rollback");
    assert_eq!(actions[0]["variant"], "slow");
    assert_eq!(actions[0]["to_weight"], 0);
    let judgement = &report["entries"][0]["variants"][1]["judgement"];
    assert_eq!(judgement["verdict"], "worse", "{report:#}");
    let text = admin_text(&gateway, "/admin/canary?format=text").await;
    assert!(text.contains("slow worse"), "{text}");
    assert!(text.contains("action: short slow rollback weight 1 -> 0"), "{text}");
    gateway.shutdown().await;
}
