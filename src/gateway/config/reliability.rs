//! The reliability settings (health checks, passive ejection, retries, timeouts, admission,
//! protocol limits): their TOML sections, their defaults and their validation, kept apart
//! from the rest of the config so that each concern reads in one place.

use std::time::Duration;

use serde::Deserialize;

use super::issues::Issues;

/// `[health]`: active checks and passive ejection.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    pub interval_ms: Option<i64>,
    pub timeout_ms: Option<i64>,
    pub unhealthy_threshold: Option<i64>,
    pub healthy_threshold: Option<i64>,
    pub consecutive_failures: Option<i64>,
    pub base_ejection_ms: Option<i64>,
    pub max_ejection_ms: Option<i64>,
    pub max_ejected_percent: Option<i64>,
}

/// `[retry]`: the retry budget.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    pub budget_percent: Option<i64>,
    pub min_per_second: Option<i64>,
    pub max_attempts: Option<i64>,
}

/// `[timeouts]`: every wait that a misbehaving peer could make endless.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    pub client_header_ms: Option<i64>,
    pub client_idle_ms: Option<i64>,
    pub client_body_ms: Option<i64>,
    pub first_byte_ms: Option<i64>,
    pub idle_ms: Option<i64>,
    pub total_ms: Option<i64>,
}

/// `[admission]`: in-flight limits and the wait queue.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmission {
    pub max_in_flight: Option<i64>,
    pub max_in_flight_per_replica: Option<i64>,
    pub max_unanswered_per_replica: Option<i64>,
    pub queue_size: Option<i64>,
    pub queue_timeout_ms: Option<i64>,
    pub fair_window_ms: Option<i64>,
    pub tenant_burst: Option<i64>,
}

/// `[limits]`: what one client may send.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_header_bytes: Option<i64>,
    pub max_headers: Option<i64>,
    pub h2_max_concurrent_streams: Option<i64>,
    /// Tenants' shared counters (`redis://...`), read by `quota_store`.
    pub store: Option<String>,
    pub store_key_prefix: Option<String>,
    pub store_timeout_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// Active `GET /health` every this long.
    pub interval: Duration,
    pub timeout: Duration,
    /// Failed checks in a row that take a replica out of rotation.
    pub unhealthy_threshold: u32,
    /// Passed checks in a row that bring it back.
    pub healthy_threshold: u32,
    /// Observed failures in a row (connect errors, resets, 5xx) that eject a replica.
    pub consecutive_failures: u32,
    /// First ejection; each repeat doubles it, up to `max_ejection`.
    pub base_ejection: Duration,
    pub max_ejection: Duration,
    /// At most this share of the replicas is ejected at once, in percent.
    pub max_ejected_percent: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// Retries may add this share of requests, in percent ...
    pub budget_percent: u32,
    /// ... plus this many per second.
    pub min_per_second: u32,
    /// Attempts per request, the first included.
    pub max_attempts: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TimeoutConfig {
    /// A client must send its request headers within this once it started sending them, and
    /// a new connection its first request (slowloris).
    pub client_header: Duration,
    /// A client connection with no request open is closed after this (HTTP/2: GOAWAY). Long
    /// enough that a pooled client reusing a connection rarely races the close; HTTP/1
    /// responses announce it (`Keep-Alive: timeout=N`) for clients that read the hint.
    pub client_idle: Duration,
    /// A request body must arrive whole within this after its head (slowly dribbled bodies).
    pub client_body: Duration,
    /// Request sent to response headers; for a non-streaming request that is its whole
    /// generation, hence the generous default.
    pub first_byte: Duration,
    /// Longest gap between two body chunks of a response.
    pub idle: Duration,
    /// Request received to the end of its response.
    pub total: Duration,
}

/// `max_in_flight_per_replica` when none is configured.
pub const NO_REPLICA_LIMIT: u64 = u64::MAX;

#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionConfig {
    /// Admitted inference requests at once: bounds the gateway's own memory.
    pub max_in_flight: u64,
    /// [`NO_REPLICA_LIMIT`] unless configured; when configured, also the capacity of one
    /// replica in the N-1 headroom.
    pub max_in_flight_per_replica: u64,
    /// Streamed requests a replica may have been sent and not answered yet (no response
    /// headers); more wait at the gateway ([`crate::gateway::pick::answer_gate`]).
    pub max_unanswered_per_replica: u64,
    /// Requests that may wait for room; more get 429 at once.
    pub queue_size: usize,
    /// Longest wait for room, then 429.
    pub queue_timeout: Duration,
    /// How long a tenant counts as active after its last request; the time constant of its
    /// recent admissions, which say whether it is under its fair share.
    pub fair_window: Duration,
    /// Places past `max_in_flight_per_replica` a tenant under its fair share, or a request
    /// of a higher band than one present, may take on a full replica (0: none).
    pub tenant_burst: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LimitsConfig {
    /// HTTP/1 read buffer, which bounds the request head (431 past it).
    pub max_header_bytes: usize,
    /// HTTP/1 header count (431 past it).
    pub max_headers: usize,
    pub h2_max_concurrent_streams: u32,
}

/// Every reliability setting, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ReliabilityConfig {
    pub health: HealthConfig,
    pub retry: RetryConfig,
    pub timeouts: TimeoutConfig,
    pub admission: AdmissionConfig,
    pub limits: LimitsConfig,
}

/// The raw sections as they came from the file.
pub struct RawReliability<'a> {
    pub health: &'a RawHealth,
    pub retry: &'a RawRetry,
    pub timeouts: &'a RawTimeouts,
    pub admission: &'a RawAdmission,
    pub limits: &'a RawLimits,
}

/// Checks numbers against their ranges, reporting to `issues` by path.
pub struct Ranges<'a> {
    pub issues: &'a mut Issues,
}

impl Ranges<'_> {
    fn number(&mut self, path: &str, value: Option<i64>, default: u64, min: u64, max: u64) -> u64 {
        self.issues.number(path, value, default, min, max)
    }

    fn millis(&mut self, path: &str, value: Option<i64>, default: u64) -> Duration {
        Duration::from_millis(self.number(path, value, default, 1, 86_400_000))
    }
}

/// Validates the sections, reporting every bad field.
pub fn build(raw: RawReliability<'_>, ranges: &mut Ranges<'_>) -> ReliabilityConfig {
    let h = raw.health;
    let health = HealthConfig {
        interval: ranges.millis("health.interval_ms", h.interval_ms, 2000),
        timeout: ranges.millis("health.timeout_ms", h.timeout_ms, 1000),
        unhealthy_threshold: ranges.number(
            "health.unhealthy_threshold",
            h.unhealthy_threshold,
            2,
            1,
            100,
        ) as u32,
        healthy_threshold: ranges.number("health.healthy_threshold", h.healthy_threshold, 2, 1, 100)
            as u32,
        consecutive_failures: ranges.number(
            "health.consecutive_failures",
            h.consecutive_failures,
            5,
            1,
            1000,
        ) as u32,
        base_ejection: ranges.millis("health.base_ejection_ms", h.base_ejection_ms, 5000),
        max_ejection: ranges.millis("health.max_ejection_ms", h.max_ejection_ms, 120_000),
        max_ejected_percent: ranges.number(
            "health.max_ejected_percent",
            h.max_ejected_percent,
            50,
            0,
            100,
        ) as u32,
    };
    let r = raw.retry;
    let retry = RetryConfig {
        budget_percent: ranges.number("retry.budget_percent", r.budget_percent, 20, 0, 100) as u32,
        min_per_second: ranges.number("retry.min_per_second", r.min_per_second, 3, 0, 100_000)
            as u32,
        max_attempts: ranges.number("retry.max_attempts", r.max_attempts, 2, 1, 5) as u32,
    };
    let t = raw.timeouts;
    let timeouts = TimeoutConfig {
        client_header: ranges.millis("timeouts.client_header_ms", t.client_header_ms, 10_000),
        client_idle: ranges.millis("timeouts.client_idle_ms", t.client_idle_ms, 75_000),
        client_body: ranges.millis("timeouts.client_body_ms", t.client_body_ms, 30_000),
        first_byte: ranges.millis("timeouts.first_byte_ms", t.first_byte_ms, 300_000),
        idle: ranges.millis("timeouts.idle_ms", t.idle_ms, 60_000),
        total: ranges.millis("timeouts.total_ms", t.total_ms, 1_800_000),
    };
    let a = raw.admission;
    let admission = AdmissionConfig {
        max_in_flight: ranges.number(
            "admission.max_in_flight",
            a.max_in_flight,
            16_384,
            1,
            1 << 20,
        ),
        // No limit unless configured: a replica queues what it cannot run yet, and the
        // gateway must not refuse what the fleet would have served.
        max_in_flight_per_replica: ranges.number(
            "admission.max_in_flight_per_replica",
            a.max_in_flight_per_replica,
            NO_REPLICA_LIMIT,
            1,
            1 << 20,
        ),
        // About two per API process of a replica with four: each process has the next
        // request queued behind the one it preprocesses, and no burst lands on one of them
        // (the short-output sweep, `benches/results/2026-12-01-answer-gate/`).
        max_unanswered_per_replica: ranges.number(
            "admission.max_unanswered_per_replica",
            a.max_unanswered_per_replica,
            8,
            1,
            1 << 20,
        ),
        queue_size: ranges.number("admission.queue_size", a.queue_size, 1024, 0, 1 << 20) as usize,
        queue_timeout: ranges.millis("admission.queue_timeout_ms", a.queue_timeout_ms, 5000),
        fair_window: ranges.millis("admission.fair_window_ms", a.fair_window_ms, 10_000),
        tenant_burst: ranges.number("admission.tenant_burst", a.tenant_burst, 1, 0, 1 << 20),
    };
    let l = raw.limits;
    let limits = LimitsConfig {
        max_header_bytes: ranges.number(
            "limits.max_header_bytes",
            l.max_header_bytes,
            64 << 10,
            8192,
            16 << 20,
        ) as usize,
        max_headers: ranges.number("limits.max_headers", l.max_headers, 100, 1, 10_000) as usize,
        h2_max_concurrent_streams: ranges.number(
            "limits.h2_max_concurrent_streams",
            l.h2_max_concurrent_streams,
            256,
            1,
            1 << 20,
        ) as u32,
    };
    if health.max_ejection < health.base_ejection {
        ranges
            .issues
            .add("health.max_ejection_ms", "must not be shorter than health.base_ejection_ms");
    }
    ReliabilityConfig { health, retry, timeouts, admission, limits }
}

impl Default for ReliabilityConfig {
    fn default() -> Self {
        // The defaults are in range: nothing is reported.
        let mut ignored = Issues::default();
        let raw = RawReliability {
            health: &RawHealth::default(),
            retry: &RawRetry::default(),
            timeouts: &RawTimeouts::default(),
            admission: &RawAdmission::default(),
            limits: &RawLimits::default(),
        };
        build(raw, &mut Ranges { issues: &mut ignored })
    }
}

#[cfg(test)]
mod tests {
    use crate::gateway::config::GatewayConfig;
    use std::time::Duration;

    #[test]
    fn sections_parse_and_every_bad_field_is_named() {
        let config = GatewayConfig::from_toml(
            "[health]\ninterval_ms = 500\n[admission]\nqueue_size = 0\n[retry]\nmax_attempts = 3\n",
        )
        .unwrap();
        let reliability = config.reliability;
        assert_eq!(reliability.health.interval, Duration::from_millis(500));
        assert_eq!(reliability.health.unhealthy_threshold, 2);
        assert_eq!(reliability.admission.queue_size, 0);
        assert_eq!(reliability.admission.tenant_burst, 1);
        assert_eq!(reliability.admission.fair_window, Duration::from_secs(10));
        assert_eq!(reliability.retry.max_attempts, 3);
        let error = GatewayConfig::from_toml(
            "[health]\ninterval_ms = 0\nbase_ejection_ms = 9000\nmax_ejection_ms = 10\n\
             [limits]\nmax_header_bytes = 100\n[retry]\nbudget_percent = 101\n\
             [admission]\ntenant_burst = -1\nfair_window_ms = 0\n",
        )
        .unwrap_err();
        let mut paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "admission.fair_window_ms",
                "admission.tenant_burst",
                "health.interval_ms",
                "health.max_ejection_ms",
                "limits.max_header_bytes",
                "retry.budget_percent"
            ]
        );
        let unknown = GatewayConfig::from_toml("[timeouts]\nheader_ms = 5\n").unwrap_err();
        assert!(unknown.issues[0].message.contains("unknown field"), "{unknown}");
    }
}
