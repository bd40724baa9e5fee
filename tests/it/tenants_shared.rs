//! Tenants' quotas shared through Redis (`[limits] store`): two gateways on one Redis
//! enforce one budget, a Redis killed mid-run fails no request (local limits take over, the
//! outage is counted), and concurrency places are released across gateways (a crashed
//! gateway's when they lapse). Each test runs its own `redis-server` on a free loopback
//! port; without the binary the tests say so and pass.

use std::time::Duration;

use crate::support::gateway::*;
use crate::support::redis::RedisServer;
use laneway::gateway::GatewayHandle;
use laneway::gateway::config::{QuotaStoreConfig, TenantConfig, TenantLimits};
use laneway::sim::SimHandle;

use super::tenants::{post_as, tenant, with_tenants};

/// A gateway in front of `sims` whose tenants share their counters through `redis`.
async fn shared_gateway(
    sims: &[SimHandle],
    tenants: Vec<TenantConfig>,
    redis: &RedisServer,
    timeout_ms: u64,
) -> GatewayHandle {
    let mut config = with_tenants(sims, tenants);
    config.quota_store = Some(QuotaStoreConfig {
        url: redis.url(),
        key_prefix: "it-quota".into(),
        timeout: Duration::from_millis(timeout_ms),
    });
    start_gateway(config).await
}

fn metric(gateway: &GatewayHandle, prefix: &str) -> f64 {
    sample(&gateway.metrics_text(), prefix).unwrap_or(0.0)
}

/// The first 200 for `sk-single` on `gateway`, retrying 429s (a place being given back)
/// for at most about 2 s.
async fn admitted(
    client: &reqwest::Client,
    gateway: &GatewayHandle,
    body: &serde_json::Value,
) -> reqwest::Response {
    for _ in 0..200 {
        let response = post_as(client, gateway, "sk-single", body).await;
        if response.status() == 200 {
            return response;
        }
        assert_eq!(response.status(), 429);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the place never freed");
}

/// The `single` tenant's concurrency leases, as the tests' gateways name them.
const LEASES: &str = "it-quota:{single}:leases";

const FALLBACKS: &str = "laneway_quota_store_fallbacks_total";
const OUTAGES: &str = "laneway_quota_store_outages_total";
const STORE_UP: &str = "laneway_quota_store_up";

#[tokio::test]
async fn two_gateways_on_one_redis_enforce_one_budget() {
    let Some(redis) = RedisServer::start("two_gateways_on_one_redis_enforce_one_budget").await
    else {
        return;
    };
    let sims = start_sims(1, 1).await;
    let few = TenantLimits { requests_per_minute: Some(10), ..Default::default() };
    let small = TenantLimits { tokens_per_minute: Some(1000), ..Default::default() };
    let tenants = || vec![tenant("few", "sk-few", few), tenant("small", "sk-small", small)];
    // A generous timeout: this test is about sharing, not about a slow store.
    let gateways = [
        shared_gateway(&sims, tenants(), &redis, 2000).await,
        shared_gateway(&sims, tenants(), &redis, 2000).await,
    ];
    let client = reqwest::Client::new();
    // Requests per minute: 30 requests alternating between the gateways; alone, each
    // gateway would admit 10.
    let body = chat_body(20, 2, false);
    let mut statuses = [[0u32; 2]; 2];
    for index in 0..30 {
        let response = post_as(&client, &gateways[index % 2], "sk-few", &body).await;
        let status = response.status().as_u16();
        assert!(status == 200 || status == 429, "{status}");
        statuses[index % 2][usize::from(status == 429)] += 1;
        if status == 200 {
            let left: u64 = header(&response, "x-ratelimit-remaining-requests").parse().unwrap();
            assert!(left < 10);
        }
    }
    let admitted = statuses[0][0] + statuses[1][0];
    // One budget of 10, plus at most one refilled while the test ran (one per 6 s).
    assert!((10..=11).contains(&admitted), "admitted {statuses:?} (gateway, [200, 429])");
    assert!(statuses[0][0] >= 1 && statuses[1][0] >= 1, "{statuses:?}");
    // Tokens per minute: ~200 reserved, ~250 used per request; alone each would admit 4.
    let body = chat_body(200, 50, true);
    let mut admitted = 0;
    for index in 0..12 {
        let response = post_as(&client, &gateways[index % 2], "sk-small", &body).await;
        if response.status() == 200 {
            response.bytes().await.unwrap();
            admitted += 1;
        } else {
            assert_eq!(response.status(), 429);
        }
    }
    let used: f64 = gateways
        .iter()
        .map(|gateway| {
            ["prompt", "completion"]
                .iter()
                .map(|kind| {
                    let prefix =
                        format!("laneway_tenant_tokens_total{{kind=\"{kind}\",tenant=\"small\"}}");
                    metric(gateway, &prefix)
                })
                .sum::<f64>()
        })
        .sum();
    // Within one request's worth (a settlement still on its way may let one more in).
    assert!((3..=6).contains(&admitted), "{admitted} admitted");
    assert!(used <= 1000.0 + 2.0 * 270.0, "{used} tokens used");
    for gateway in &gateways {
        assert_eq!(metric(gateway, FALLBACKS), 0.0, "every request was decided by Redis");
        assert_eq!(metric(gateway, STORE_UP), 1.0);
    }
    // Keys carry the prefix and the tenant's name, never its API key; beside them, the
    // default policy shares where prompts were placed (`prefix:` and `session:` hashes).
    let keys = redis.keys().await;
    assert!(keys.iter().any(|key| key.starts_with("it-quota:{small}:")), "{keys:?}");
    for key in &keys {
        let quota = key.starts_with("it-quota:{few}:") || key.starts_with("it-quota:{small}:");
        let placement = key.starts_with("it-quota:prefix:") || key.starts_with("it-quota:session:");
        assert!(quota || placement, "{key}");
        assert!(!key.contains("sk-"), "{key}");
    }
    for gateway in gateways {
        gateway.shutdown().await;
    }
    redis.kill().await;
}

#[tokio::test]
async fn a_redis_killed_mid_run_fails_no_request_and_the_outage_is_counted() {
    let Some(redis) =
        RedisServer::start("a_redis_killed_mid_run_fails_no_request_and_the_outage_is_counted")
            .await
    else {
        return;
    };
    let port = redis.port;
    let sims = start_sims(1, 1).await;
    // Generous enough that local limits refuse nothing in this run.
    let roomy = TenantLimits {
        requests_per_minute: Some(10_000),
        tokens_per_minute: Some(10_000_000),
        max_concurrent: Some(64),
    };
    let tenants = || vec![tenant("roomy", "sk-roomy", roomy)];
    let gateways = [
        shared_gateway(&sims, tenants(), &redis, 200).await,
        shared_gateway(&sims, tenants(), &redis, 200).await,
    ];
    let client = reqwest::Client::new();
    let bodies = [chat_body(20, 4, false), chat_body(20, 4, true)];
    let send = |index: usize, stream: bool| {
        post_as(&client, &gateways[index % 2], "sk-roomy", &bodies[usize::from(stream)])
    };
    for index in 0..10 {
        let response = send(index, index % 3 == 0).await;
        assert_eq!(response.status(), 200);
        response.bytes().await.unwrap();
    }
    assert_eq!(metric(&gateways[0], FALLBACKS) + metric(&gateways[1], FALLBACKS), 0.0);
    redis.kill().await;
    for index in 0..40 {
        let response = send(index, index % 3 == 0).await;
        assert_eq!(response.status(), 200, "request {index} after the kill");
        assert_eq!(header(&response, "x-ratelimit-limit-requests"), "10000");
        response.bytes().await.unwrap();
    }
    for gateway in &gateways {
        assert_eq!(metric(gateway, OUTAGES), 1.0, "one outage, counted once");
        assert_eq!(metric(gateway, STORE_UP), 0.0);
        assert!(metric(gateway, FALLBACKS) >= 1.0);
    }
    // Back on the same port: the gateways find it again (probed once a second).
    let redis = RedisServer::start_on(port).await;
    let mut index = 0;
    for gateway in &gateways {
        for _ in 0..1000 {
            if metric(gateway, STORE_UP) == 1.0 {
                break;
            }
            let response = post_as(&client, gateway, "sk-roomy", &chat_body(20, 2, false)).await;
            assert_eq!(response.status(), 200);
            index += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(metric(gateway, STORE_UP), 1.0, "never recovered after {index} requests");
        assert_eq!(metric(gateway, OUTAGES), 1.0);
    }
    for gateway in gateways {
        gateway.shutdown().await;
    }
    redis.kill().await;
}

#[tokio::test]
async fn a_stream_ending_on_one_gateway_frees_its_place_on_the_other() {
    let Some(redis) =
        RedisServer::start("a_stream_ending_on_one_gateway_frees_its_place_on_the_other").await
    else {
        return;
    };
    let sims = start_sims(1, 1).await;
    let single = TenantLimits { max_concurrent: Some(1), ..Default::default() };
    let tenants = || vec![tenant("single", "sk-single", single)];
    let first = shared_gateway(&sims, tenants(), &redis, 2000).await;
    let second = shared_gateway(&sims, tenants(), &redis, 2000).await;
    let client = reqwest::Client::new();
    let short = chat_body(20, 2, false);
    let store = redis::Client::open(redis.url()).unwrap();
    let mut connection = store.get_multiplexed_async_connection().await.unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut connection).await.unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    let lease = |expires_ms: u64, id: &str| {
        let mut add = redis::cmd("ZADD");
        add.arg(LEASES).arg(expires_ms).arg(id);
        add
    };
    // A place a crashed gateway held, not yet lapsed, still counts...
    lease(now_ms + 60_000, "crashed-0").query_async::<i64>(&mut connection).await.unwrap();
    assert_eq!(post_as(&client, &second, "sk-single", &short).await.status(), 429);
    // ...a lapsed one does not.
    redis::cmd("DEL").arg(LEASES).query_async::<i64>(&mut connection).await.unwrap();
    lease(now_ms - 1, "crashed-1").query_async::<i64>(&mut connection).await.unwrap();
    assert_eq!(post_as(&client, &second, "sk-single", &short).await.status(), 200);
    for _ in 0..3 {
        let mut open = admitted(&client, &first, &chat_body(20, 200, true)).await;
        let refused = post_as(&client, &second, "sk-single", &short).await;
        assert_eq!(refused.status(), 429, "the other gateway sees the open stream");
        assert_eq!(header(&refused, "retry-after"), "1");
        while open.chunk().await.unwrap().is_some() {}
        // Released in the background once the stream ends: the other gateway admits soon.
        admitted(&client, &second, &short).await.bytes().await.unwrap();
    }
    let mut held = u64::MAX;
    for _ in 0..200 {
        let mut count = redis::cmd("ZCARD");
        held = count.arg(LEASES).query_async(&mut connection).await.unwrap();
        if held == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(held, 0, "every lease was given back");
    assert_eq!(metric(&first, FALLBACKS) + metric(&second, FALLBACKS), 0.0);
    first.shutdown().await;
    second.shutdown().await;
    redis.kill().await;
}
