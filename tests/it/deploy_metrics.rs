//! Every laneway metric the Grafana dashboard and the Prometheus alert rules query exists
//! on a running gateway's `/metrics` (so a renamed metric cannot silently blank a panel).

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::gateway::{chat_body, config_for, post_chat, start_gateway, start_sims, url};

/// `laneway_*` names in a text, with histogram suffixes kept (they are what is queried).
fn laneway_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("laneway_") {
        let tail = &rest[start..];
        let end =
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

#[tokio::test]
async fn dashboard_and_alert_metrics_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut queried = BTreeSet::new();
    for file in ["docker/grafana/dashboards/laneway.json", "docker/prometheus/alerts.yml"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let names = laneway_names(&text);
        assert!(!names.is_empty(), "{file} queries no laneway metric");
        queried.extend(names);
    }

    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::new();
    let streamed = post_chat(&client, &gateway, &chat_body(50, 4, true)).await;
    let _ = streamed.text().await.unwrap();
    // One refused request, so the error counter has a sample.
    let _ = client.post(url(&gateway, "/v1/chat/completions")).body("{").send().await.unwrap();
    crate::support::gateway::wait_until("a scrape", || {
        gateway.metrics_text().contains("laneway_replica_scrape_age_seconds{replica=\"sim-0\"} 0")
    })
    .await;
    let exported = laneway_names(&gateway.metrics_text());
    let missing: Vec<&String> = queried.difference(&exported).collect();
    assert!(missing.is_empty(), "queried but not exported: {missing:?}");
    gateway.shutdown().await;
}
