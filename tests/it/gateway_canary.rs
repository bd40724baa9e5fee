//! Canary variants on live traffic: requests are split by weight and stay on one variant per
//! user, weights change under load without a failed request (what the report concludes
//! from latencies is a wall-clock comparison: `tests/load/canary_pools.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::support::canary::*;
use crate::support::gateway::*;
use futures_util::StreamExt;
use laneway::canary::{VariantTable, WeightedVariant};
use laneway::gateway::{GatewayConfig, Strategy};

/// Two variants on every replica: `fc` (force_close) and `ka` (keep_alive).
fn two_variants(config: GatewayConfig, fc: u32, ka: u32) -> GatewayConfig {
    let mut config = config;
    config.canary.sticky_header = Some(USER_HEADER.parse().unwrap());
    config.short.variants = vec![
        variant("fc", Strategy::ForceClose, None, fc),
        variant("ka", Strategy::KeepAlive, None, ka),
    ];
    config
}

#[tokio::test]
async fn weights_are_honoured_and_each_variant_uses_its_strategy() {
    const USERS: usize = 240;
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(two_variants(config_for(&sims), 3, 1)).await;
    let client = reqwest::Client::new();
    let results: Vec<(usize, (u16, String, String))> = futures_util::stream::iter(0..USERS)
        .map(|user| {
            let (client, gateway) = (&client, &gateway);
            async move { (user, send_as(client, gateway, &format!("user-{user}"), false).await) }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    // The gateway's choice is the documented one, so it can be predicted exactly ...
    let table = VariantTable::new(vec![
        WeightedVariant { name: "fc".into(), weight: 3 },
        WeightedVariant { name: "ka".into(), weight: 1 },
    ])
    .unwrap();
    let mut on_ka = 0;
    for (user, (status, variant, strategy)) in &results {
        assert_eq!(*status, 200);
        let expected = ["fc", "ka"][table.assign(format!("user-{user}").as_bytes())];
        assert_eq!(variant, expected, "user-{user}");
        assert_eq!(strategy, if variant == "fc" { "force_close" } else { "keep_alive" });
        on_ka += usize::from(variant == "ka");
    }
    // ... and honours the weights: 60 expected on `ka`, binomial sd 6.7; allow 3.5 sd.
    assert!((37..=83).contains(&on_ka), "{on_ka} of {USERS} on ka");
    let metrics = gateway.metrics_text();
    let requests_on = |variant: &str| {
        metrics
            .lines()
            .filter(|line| line.starts_with("laneway_requests_total{"))
            .filter(|line| line.contains(&format!("variant=\"{variant}\"")))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as usize
    };
    assert_eq!((requests_on("fc"), requests_on("ka")), (USERS - on_ka, on_ka));
    // The report counts the same requests, none of them failed.
    let report = report_once_recorded(&gateway, USERS as u64).await;
    let variants = &report["entries"][0]["variants"];
    assert_eq!(variants[0]["since_start"]["requests"], (USERS - on_ka) as u64);
    assert_eq!(variants[1]["since_start"]["requests"], on_ka as u64);
    assert_eq!(variants[0]["since_start"]["failures"], 0, "{report:#}");
    assert_eq!(variants[1]["since_start"]["failures"], 0, "{report:#}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn one_user_stays_on_one_variant() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(two_variants(config_for(&sims), 1, 1)).await;
    let client = reqwest::Client::new();
    let mut seen = std::collections::HashSet::new();
    for user in 0..12 {
        let name = format!("user-{user}");
        let (_, first, _) = send_as(&client, &gateway, &name, false).await;
        for _ in 0..3 {
            assert_eq!(send_as(&client, &gateway, &name, false).await.1, first, "{name}");
        }
        seen.insert(first);
    }
    assert_eq!(seen.len(), 2, "12 users all landed on one variant of two: {seen:?}");
    gateway.shutdown().await;
}

#[tokio::test]
async fn weights_change_at_runtime_without_failing_a_request() {
    const REQUESTS: usize = 60;
    // Requests from this one on are held until the weights have changed, so that the change
    // lands while traffic flows however fast the first ones are answered.
    const HELD_FROM: usize = 20;
    let sims = start_sims(2, 2).await;
    let mut config = two_variants(config_for(&sims), 1, 0);
    config.admin.token = Some("test-admin-token".into());
    let gateway = Arc::new(start_gateway(config).await);
    let client = reqwest::Client::new();
    let switched = Arc::new(AtomicBool::new(false));
    let (switch, switch_seen) = tokio::sync::watch::channel(false);
    let answered = Arc::new(AtomicUsize::new(0));
    let traffic = {
        let (client, gateway, switched) = (client.clone(), gateway.clone(), switched.clone());
        let answered = answered.clone();
        tokio::spawn(async move {
            futures_util::stream::iter(0..REQUESTS)
                .map(|n| {
                    let (client, gateway, switched) = (&client, &gateway, &switched);
                    let (answered, mut switch_seen) = (&answered, switch_seen.clone());
                    async move {
                        if n >= HELD_FROM {
                            switch_seen.wait_for(|switched| *switched).await.unwrap();
                        }
                        let after_switch = switched.load(Ordering::SeqCst);
                        let result = send_as(client, gateway, &format!("user-{n}"), true).await;
                        answered.fetch_add(1, Ordering::SeqCst);
                        (after_switch, result)
                    }
                })
                .buffer_unordered(4)
                .collect::<Vec<_>>()
                .await
        })
    };
    // Held requests cannot be answered before the switch: the traffic is still flowing.
    wait_until("a first answer", || answered.load(Ordering::SeqCst) > 0).await;
    let response = client
        .put(admin_url(&gateway, "/admin/variants/short"))
        .bearer_auth("test-admin-token")
        .json(&serde_json::json!({"weights": {"fc": 0, "ka": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    switched.store(true, Ordering::SeqCst);
    switch.send(true).unwrap();
    let results = traffic.await.unwrap();
    assert_eq!(results.len(), REQUESTS);
    assert!(results.iter().all(|(_, (status, _, _))| *status == 200), "a request failed");
    let before: Vec<&str> =
        results.iter().filter(|(after, _)| !after).map(|(_, r)| r.1.as_str()).collect();
    let after: Vec<&str> =
        results.iter().filter(|(after, _)| *after).map(|(_, r)| r.1.as_str()).collect();
    assert!(before.contains(&"fc"), "traffic before the switch went to fc");
    assert!(!after.is_empty() && after.iter().all(|v| *v == "ka"), "{after:?}");
    let variants = admin_json(&gateway, "/admin/variants").await;
    assert_eq!(variants["entries"][0]["variants"][1]["weight"], 1);
    assert_eq!(variants["entries"][0]["variants"][0]["weight"], 0);
    Arc::into_inner(gateway).unwrap().shutdown().await;
}

#[tokio::test]
async fn a_pool_without_available_replicas_falls_back_to_the_first_variant() {
    let sims = start_sims(2, 1).await;
    let mut config = config_for(&sims);
    config.admin.token = Some("test-admin-token".into());
    config.pools = vec![pool("main", &["sim-0"]), pool("trial", &["sim-1"])];
    config.short.variants = vec![
        variant("main", Strategy::ForceClose, Some("main"), 0),
        variant("trial", Strategy::KeepAlive, Some("trial"), 1),
    ];
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let (_, variant, _) = send_as(&client, &gateway, "u", false).await;
    assert_eq!(variant, "trial");
    let response = client
        .post(admin_url(&gateway, "/admin/replicas/sim-1/drain"))
        .bearer_auth("test-admin-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    for _ in 0..3 {
        let (status, variant, strategy) = send_as(&client, &gateway, "u", false).await;
        assert_eq!((status, variant.as_str(), strategy.as_str()), (200, "main", "force_close"));
    }
    let fallbacks = "laneway_canary_fallbacks_total{entry=\"short\",variant=\"trial\"}";
    assert_eq!(sample(&gateway.metrics_text(), fallbacks), Some(3.0));
    let variants = admin_json(&gateway, "/admin/variants").await;
    assert_eq!(variants["entries"][0]["variants"][1]["fallbacks"], 3);
    gateway.shutdown().await;
}

#[test]
fn the_example_canary_config_is_valid() {
    let text = std::fs::read_to_string("config/canary-tp8x2.toml").unwrap();
    // The token comes from the environment in the example; tests do not touch theirs.
    let text = text.replace("token_env = \"LANEWAY_ADMIN_TOKEN\"", "token = \"example-token\"");
    let config = GatewayConfig::from_toml(&text).unwrap();
    let names: Vec<&str> = config.short.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["force_close", "keep_alive"]);
    assert_eq!(config.short.variants[1].strategy, Strategy::KeepAlive);
    assert_eq!(config.pool("tp8x2").unwrap().replicas, ["sim-0", "sim-1"]);
}

#[tokio::test]
async fn bench_headers_pin_a_benchmark_to_one_variant() {
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(two_variants(config_for(&sims), 1, 1)).await;
    let requests_on = |metrics: &str, variant: &str| {
        metrics
            .lines()
            .filter(|line| line.starts_with("laneway_requests_total{"))
            .filter(|line| line.contains(&format!("variant=\"{variant}\"")))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let mut args = laneway::bench::BenchArgs {
        target: vec![url(&gateway, "")],
        workload: "100/4/c4".into(),
        requests: Some(24),
        quiet: true,
        ..Default::default()
    };
    // Pinned: every request carries one user's id, so all land on that user's variant.
    args.request.header = vec![format!("{USER_HEADER}:alice")];
    let outcome = laneway::bench::measure(&args).await.unwrap();
    assert_eq!(outcome.targets[0].summary.successes, 24);
    let metrics = gateway.metrics_text();
    let pinned = (requests_on(&metrics, "fc"), requests_on(&metrics, "ka"));
    assert!(pinned == (24, 0) || pinned == (0, 24), "{pinned:?}");
    // Mixed: without the header the bench's requests spread by weight.
    args.request.header.clear();
    laneway::bench::measure(&args).await.unwrap();
    let metrics = gateway.metrics_text();
    let mixed = (requests_on(&metrics, "fc") - pinned.0, requests_on(&metrics, "ka") - pinned.1);
    assert!(mixed.0 > 0 && mixed.1 > 0 && mixed.0 + mixed.1 == 24, "{mixed:?}");
    gateway.shutdown().await;
}
