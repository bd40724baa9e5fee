use std::time::{Duration, Instant};

use super::*;

fn tenants(limits: TenantLimits) -> Tenants {
    let config = TenantConfig {
        name: "team".into(),
        keys: vec!["sk-team".into()],
        limits,
        weight: 2,
        priority: 3,
        max_priority: 5,
    };
    Tenants::new(&[config], None, Arc::new(TenantMetrics::new(&prometheus::Registry::new())))
}

fn team(tenants: &Tenants) -> Arc<Tenant> {
    let mut headers = HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, "Bearer sk-team".parse().unwrap());
    tenants.of(&headers).expect("the key is the tenant's")
}

#[test]
fn requests_per_minute_admit_a_minute_then_refuse_with_headers() {
    let tenants = tenants(TenantLimits { requests_per_minute: Some(10), ..Default::default() });
    let (team, now) = (team(&tenants), Instant::now());
    let tickets: Vec<_> = (0..10).map(|_| tenants.admit_locally(&team, 5, now).unwrap()).collect();
    let last = tickets[9].headers.requests.unwrap();
    assert_eq!((last.limit, last.remaining), (10, 0));
    assert_eq!(tickets[9].headers.tokens, None);
    let refused = tenants.admit_locally(&team, 5, now).err().unwrap();
    assert_eq!((refused.what, refused.retry_after_secs), ("requests", 6));
    assert_eq!(refused.headers.requests.unwrap().reset, Duration::from_secs(60));
    let mut headers = HeaderMap::new();
    refused.headers.apply(&mut headers);
    assert_eq!(headers["x-ratelimit-limit-requests"], "10");
    assert_eq!(headers["x-ratelimit-remaining-requests"], "0");
    assert_eq!(headers["x-ratelimit-reset-requests"], "1m0s");
    assert!(headers.get("x-ratelimit-limit-tokens").is_none());
    // Six seconds later, one more.
    assert!(tenants.admit_locally(&team, 5, now + Duration::from_secs(6)).is_ok());
}

#[test]
fn tokens_are_reserved_then_settled_from_usage() {
    let tenants = tenants(TenantLimits { tokens_per_minute: Some(1000), ..Default::default() });
    let (team, now) = (team(&tenants), Instant::now());
    let ticket = tenants.admit_locally(&team, 300, now).unwrap();
    assert_eq!(ticket.headers.tokens.unwrap().remaining, 700);
    // It really used 300 prompt + 500 completion tokens.
    ticket.settle(300, 500);
    let refused = tenants.admit_locally(&team, 300, now).err().unwrap();
    assert_eq!(refused.what, "tokens");
    assert_eq!(refused.headers.tokens.unwrap().remaining, 200);
    // 100 more tokens come in 6 s.
    assert_eq!(refused.retry_after_secs, 6);
    assert!(tenants.admit_locally(&team, 200, now).is_ok());
}

#[test]
fn concurrent_requests_are_capped_until_a_ticket_drops() {
    let tenants = tenants(TenantLimits { max_concurrent: Some(2), ..Default::default() });
    let (team, now) = (team(&tenants), Instant::now());
    let first = tenants.admit_locally(&team, 1, now).unwrap();
    let _second = tenants.admit_locally(&team, 1, now).unwrap();
    let refused = tenants.admit_locally(&team, 1, now).err().unwrap();
    assert_eq!((refused.what, refused.retry_after_secs), ("concurrent requests", 1));
    drop(first);
    assert_eq!(team.in_flight(), 1);
    assert!(tenants.admit_locally(&team, 1, now).is_ok());
}

#[test]
fn other_keys_are_no_tenant() {
    let tenants = tenants(TenantLimits::default());
    let mut headers = HeaderMap::new();
    assert!(tenants.of(&headers).is_none());
    headers.insert(http::header::AUTHORIZATION, "Bearer sk-other".parse().unwrap());
    assert!(tenants.of(&headers).is_none());
    assert_eq!(headers::duration_text(Duration::from_millis(250)), "250ms");
    assert_eq!(headers::duration_text(Duration::from_millis(5200)), "6s");
}

#[test]
fn the_priority_header_is_capped_at_the_tenants_maximum() {
    let tenants = tenants(TenantLimits::default());
    let team = team(&tenants);
    assert_eq!((team.flow(None).band, team.flow(None).weight), (3, 2));
    assert_eq!(team.flow(Some(1)).band, 1);
    assert_eq!(team.flow(Some(9)).band, 5);
    assert_eq!(&*team.flow(None).key, "team");
}
