//! A replica configured by host name: its address is looked up when first needed and kept,
//! not asked of the resolver for every fresh connection (`force_close` opens one per
//! request), and `/admin/replicas` shows what the name resolved to.

use crate::support::gateway::*;
use laneway::gateway::{Entry, Strategy};

#[tokio::test]
async fn a_replica_named_by_host_name_is_looked_up_once_not_per_request() {
    const REQUESTS: usize = 20;
    let sims = start_sims(1, 1).await;
    let mut named = replica("sim-0", sims[0].addr());
    named.authority = format!("localhost:{}", sims[0].addr().port());
    let config = with_strategy(loopback_config(vec![named]), Entry::Short, Strategy::ForceClose);
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    for _ in 0..REQUESTS {
        let response = post_chat(&client, &gateway, &chat_body(40, 4, false)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "x-laneway-strategy"), "force_close");
    }
    let replicas = admin_json(&gateway, "/admin/replicas").await;
    let sim = &replicas["replicas"][0];
    let addresses = sim["addresses"].as_array().unwrap();
    assert!(!addresses.is_empty(), "{sim}");
    let port = format!(":{}", sims[0].addr().port());
    assert!(addresses.iter().all(|a| a.as_str().unwrap().ends_with(&port)), "{sim}");
    // One lookup, and one more for each five seconds the requests took (a busy machine).
    let lookups = sim["address_lookups"].as_u64().unwrap();
    assert!((1..=4).contains(&lookups), "{REQUESTS} fresh connections, {lookups} lookups");
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_replica_at_an_ip_address_is_never_looked_up() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::new();
    let response = post_chat(&client, &gateway, &chat_body(40, 4, false)).await;
    assert_eq!(response.status(), 200);
    let replicas = admin_json(&gateway, "/admin/replicas").await;
    assert_eq!(replicas["replicas"][0]["address_lookups"], 0);
    assert_eq!(replicas["replicas"][0]["addresses"], serde_json::json!([]));
    gateway.shutdown().await;
}
