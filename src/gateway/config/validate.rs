//! Turns a config file into a [`GatewayConfig`]: read over `default.toml`, then every
//! section validated once, each bad field reported to [`Issues`] with its path.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::ApiKeys;
use super::DiscoveryConfig;
use super::Strategy;
use super::canary;
use super::capacity;
use super::issues::{ConfigError, ConfigIssue, Issues};
use super::models;
use super::quota_store;
use super::raw::{RawConfig, RawEntries, RawEntry, RawReplica};
use super::reliability::{self, Ranges, RawReliability, ReliabilityConfig};
use super::tenants;
use super::{DebugAccess, EntryConfig, GatewayConfig, PolicyKind, ReplicaConfig};
use crate::gateway::tls::TlsConfig;
use crate::gateway::tls::upstream::UpstreamTlsConfig;

/// Parses a config file over the embedded defaults (`default.toml`: what a file leaves out
/// is read from there, table by table) and validates the result once.
pub(super) fn parse_and_validate(text: &str) -> Result<GatewayConfig, ConfigError> {
    let syntax = |error: toml::de::Error| ConfigError {
        issues: vec![ConfigIssue {
            path: error_path(text, &error),
            message: error.message().to_string(),
        }],
    };
    // Checked as written first, so that a schema error names its line in the file.
    toml::from_str::<RawConfig>(text).map_err(syntax)?;
    let mut merged: toml::Table = toml::from_str(super::DEFAULT_TOML).expect("valid defaults");
    overlay(&mut merged, toml::from_str(text).map_err(syntax)?);
    let raw = RawConfig::deserialize(merged).map_err(syntax)?;
    validated(raw)
}

fn validated(raw: RawConfig) -> Result<GatewayConfig, ConfigError> {
    let mut issues = Issues::default();
    let config = build(raw, &mut issues);
    issues.into_result(config)
}

/// Writes `file` over `defaults`: tables are merged key by key, anything else replaced.
fn overlay(defaults: &mut toml::Table, file: toml::Table) {
    for (key, value) in file {
        match (defaults.get_mut(&key), value) {
            (Some(toml::Value::Table(default)), toml::Value::Table(table)) => {
                overlay(default, table)
            }
            (_, value) => {
                defaults.insert(key, value);
            }
        }
    }
}

/// Where a TOML syntax or schema error is: its line, as toml's errors carry a span only.
fn error_path(text: &str, error: &toml::de::Error) -> String {
    match error.span() {
        Some(span) => format!("line {}", text[..span.start].matches('\n').count() + 1),
        None => "config".into(),
    }
}

fn build(raw: RawConfig, issues: &mut Issues) -> GatewayConfig {
    let name = raw.policy.as_deref().unwrap_or("prefix_latency");
    let policy = PolicyKind::parse(name).unwrap_or_else(|| {
        issues.add(
            "policy",
            format!("unknown policy `{name}` (expected prefix_latency, prefix_aware, predicted_latency, least_queue or round_robin)"),
        );
        PolicyKind::LeastQueue
    });
    if let Some(tokenizer) = &raw.classifier.tokenizer {
        issues.add(
            "classifier.tokenizer",
            format!(
                "`{tokenizer}`: exact tokenizer counts are not built into this release; \
                 remove the field to use the estimator"
            ),
        );
    }
    let replicas = replicas(&raw.replicas, issues);
    let pools = canary::pools(&raw.pools, &replicas, issues);
    let models = models::models(&raw.models, &raw.replicas, &raw.pools, &pools, issues);
    if raw.header_timeout_ms.is_some() {
        // One wait for the response headers, not two: the reliability section owns it.
        issues.add("header_timeout_ms", "replaced by `timeouts.first_byte_ms`");
    }
    let names: Vec<&str> = replicas.iter().map(|r| r.name.as_str()).collect();
    let kv_events = super::kv_events::kv_events(&raw.kv_events, &names, issues);
    let config = GatewayConfig {
        listen: issues.addr("listen", raw.listen.as_deref(), "127.0.0.1:8080"),
        admin_listen: issues.addr("admin_listen", raw.admin_listen.as_deref(), "127.0.0.1:9090"),
        policy,
        short_threshold_tokens: issues.positive(
            "classifier.short_threshold_tokens",
            raw.classifier.short_threshold_tokens,
            2048,
            10_000_000,
        ),
        scrape_interval: Duration::from_millis(issues.positive(
            "scrape.interval_ms",
            raw.scrape.interval_ms,
            250,
            3_600_000,
        )),
        stale_after_intervals: issues.positive(
            "scrape.stale_after_intervals",
            raw.scrape.stale_after_intervals,
            4,
            1000,
        ) as u32,
        body_limit_bytes: issues.positive(
            "body_limit_bytes",
            raw.body_limit_bytes,
            16 << 20,
            1 << 32,
        ) as usize,
        drain_deadline: Duration::from_millis(issues.positive(
            "drain_deadline_ms",
            raw.drain_deadline_ms,
            30_000,
            3_600_000,
        )),
        connect_timeout: Duration::from_millis(issues.positive(
            "connect_timeout_ms",
            raw.connect_timeout_ms,
            2000,
            600_000,
        )),
        access_log: raw.access_log.unwrap_or(false),
        short: entry("entries.short", &raw.entries.short, Strategy::ForceClose, &pools, issues),
        long: entry("entries.long", &raw.entries.long, Strategy::ForceClose, &pools, issues),
        debug: entry("entries.debug", &raw.entries.debug, Strategy::KeepAlive, &pools, issues),
        debug_access: debug_access(&raw.entries, issues),
        replicas,
        pools,
        canary: canary::canary(&raw.canary, issues),
        admin: canary::admin(&raw.admin, issues),
        tls: raw.tls.as_ref().and_then(|tls| {
            TlsConfig::from_raw(tls).map_err(|(path, message)| issues.add(path, message)).ok()
        }),
        auth: raw.auth.as_ref().and_then(|auth| ApiKeys::from_raw(auth, issues)),
        tenants: tenants::tenants(&raw.tenants, issues),
        quota_store: quota_store::quota_store(&raw.limits, issues),
        upstream_tls: raw.upstream_tls.as_ref().map_or_else(UpstreamTlsConfig::default, |raw| {
            UpstreamTlsConfig::from_raw(raw).unwrap_or_else(|found| {
                for (path, message) in found {
                    issues.add(path, message);
                }
                UpstreamTlsConfig::default()
            })
        }),
        discovery: DiscoveryConfig::from_raw(&raw.discovery, issues).unwrap_or_default(),
        reliability: reliability_section(&raw, issues),
        prefix: super::prefix::prefix(&raw.prefix, issues),
        kv_events,
        capacity: capacity::capacity(&raw.capacity, issues),
        models,
        routes: super::routes::routes(&raw.routes, issues),
    };
    if !raw.entries.debug.variants.is_empty() {
        issues
            .add("entries.debug.variants", "the debug entry reaches a named replica: no variants");
    }
    check_distinct_listeners(&config, issues);
    with_tenant_keys(config)
}

/// A tenant's keys are API keys: `[[tenants]]` alone turns authentication on.
fn with_tenant_keys(mut config: GatewayConfig) -> GatewayConfig {
    let keys = config.tenants.iter().flat_map(|t| t.keys.iter().map(String::as_str));
    if config.tenants.is_empty() {
        return config;
    }
    config.auth = Some(match config.auth.take() {
        Some(auth) => auth.with_more_keys(keys),
        None => ApiKeys::new(keys, false),
    });
    config
}

fn reliability_section(raw: &RawConfig, issues: &mut Issues) -> ReliabilityConfig {
    let sections = RawReliability {
        health: &raw.health,
        retry: &raw.retry,
        timeouts: &raw.timeouts,
        admission: &raw.admission,
        limits: &raw.limits,
    };
    reliability::build(sections, &mut Ranges { issues })
}

fn debug_access(raw: &RawEntries, issues: &mut Issues) -> DebugAccess {
    for (path, other) in [("entries.short", &raw.short), ("entries.long", &raw.long)] {
        if other.smart_listener.is_some() {
            issues.add(format!("{path}.smart_listener"), "only [entries.debug] takes this");
        }
        if other.max_in_flight_per_replica.is_some() {
            let field = format!("{path}.max_in_flight_per_replica");
            issues.add(field, "only [entries.debug] takes this (see [admission] for inference)");
        }
    }
    let debug = &raw.debug;
    DebugAccess {
        on_smart_listener: debug.smart_listener.unwrap_or(false),
        max_in_flight_per_replica: issues.positive(
            "entries.debug.max_in_flight_per_replica",
            debug.max_in_flight_per_replica,
            4,
            1 << 20,
        ),
    }
}

fn entry(
    path: &str,
    raw: &RawEntry,
    default: Strategy,
    pools: &[canary::PoolConfig],
    issues: &mut Issues,
) -> EntryConfig {
    let strategy = match raw.strategy.as_deref().map(str::parse::<Strategy>) {
        None => default,
        Some(Ok(strategy)) => strategy,
        Some(Err(message)) => {
            issues.add(format!("{path}.strategy"), message);
            default
        }
    };
    let listen = raw
        .listen
        .as_deref()
        .map(|text| issues.addr(&format!("{path}.listen"), Some(text), "127.0.0.1:0"));
    let spread_connections =
        issues.positive(&format!("{path}.spread_connections"), raw.spread_connections, 8, 1024)
            as usize;
    let ready_connections =
        issues.number(&format!("{path}.ready_connections"), raw.ready_connections, 0, 0, 64)
            as usize;
    let ready_max_idle = Duration::from_millis(issues.positive(
        &format!("{path}.ready_max_idle_ms"),
        raw.ready_max_idle_ms,
        10,
        60_000,
    ));
    let variants =
        canary::variants(&format!("{path}.variants"), &raw.variants, strategy, pools, issues);
    let slo = super::slo::entry_slo(&format!("{path}.slo"), &raw.slo, issues);
    EntryConfig {
        strategy,
        listen,
        spread_connections,
        ready_connections,
        ready_max_idle,
        slo,
        variants,
    }
}

fn replicas(raw: &[RawReplica], issues: &mut Issues) -> Vec<ReplicaConfig> {
    let mut names = HashSet::new();
    let mut replicas = Vec::with_capacity(raw.len());
    for (index, replica) in raw.iter().enumerate() {
        let path = format!("replicas[{index}]");
        let name = match replica.name.as_deref() {
            None | Some("") => {
                issues.add(format!("{path}.name"), "is required");
                format!("replica-{index}")
            }
            Some(name) if name.contains('/') || name.contains(char::is_whitespace) => {
                issues.add(format!("{path}.name"), format!("`{name}` must not hold '/' or spaces"));
                name.to_string()
            }
            Some(name) => name.to_string(),
        };
        if !names.insert(name.clone()) {
            issues.add(format!("{path}.name"), format!("`{name}` is used twice"));
        }
        let (authority, tls) = match replica.url.as_deref() {
            None => {
                issues.add(format!("{path}.url"), "is required");
                (String::new(), false)
            }
            Some(url) => parse_url(url).unwrap_or_else(|message| {
                issues.add(format!("{path}.url"), message);
                (String::new(), false)
            }),
        };
        let (node, placement) = capacity::placement(replica, &path, &name, issues);
        replicas.push(ReplicaConfig { name, authority, node, tls, placement });
    }
    replicas
}

/// `http(s)://host[:port][/]` to `host:port` and whether it is TLS (`https`); the port
/// defaults to the scheme's.
fn parse_url(url: &str) -> Result<(String, bool), String> {
    let uri: http::Uri = url.parse().map_err(|_| format!("`{url}` is not a URL"))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(format!("`{url}`: a replica URL starts with http:// or https://")),
    };
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!("`{url}`: give the replica's root, without a path"));
    }
    let host = uri.host().ok_or_else(|| format!("`{url}` has no host"))?;
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let authority = format!("{host}:{port}");
    if tls && crate::gateway::tls::upstream::server_name(&authority).is_none() {
        return Err(format!("`{url}`: `{host}` is not a valid TLS server name"));
    }
    Ok((authority, tls))
}

fn check_distinct_listeners(config: &GatewayConfig, issues: &mut Issues) {
    let mut seen: Vec<(&str, SocketAddr)> = vec![("listen", config.listen)];
    let candidates = [
        ("admin_listen", Some(config.admin_listen)),
        ("entries.short.listen", config.short.listen),
        ("entries.long.listen", config.long.listen),
        ("entries.debug.listen", config.debug.listen),
    ];
    for (path, addr) in candidates {
        let Some(addr) = addr else { continue };
        if addr.port() != 0
            && let Some((other, _)) = seen.iter().find(|(_, seen_addr)| *seen_addr == addr)
        {
            issues.add(path, format!("{addr} is already used by `{other}`"));
        }
        seen.push((path, addr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults live in `default.toml`; the code's own fallbacks (for a value that is
    /// not there at all) must say the same, or reading the file would mislead.
    #[test]
    fn the_code_falls_back_to_what_default_toml_says() {
        let file = "[[replicas]]\nname = \"r0\"\nurl = \"http://127.0.0.1:8000\"\n";
        let over_defaults = parse_and_validate(file).unwrap();
        let without = validated(toml::from_str::<RawConfig>(file).unwrap()).unwrap();
        assert_eq!(format!("{over_defaults:?}"), format!("{without:?}"));
    }

    #[test]
    fn a_file_overrides_one_key_of_a_default_table_and_keeps_the_rest() {
        let file = "[[replicas]]\nname = \"r0\"\nurl = \"http://127.0.0.1:8000\"\n\
                    [entries.short.slo]\nttft_ms = 300\n";
        let config = parse_and_validate(file).unwrap();
        assert_eq!(config.short.slo.ttft, Duration::from_millis(300));
        assert_eq!(config.short.slo.tpot, Duration::from_millis(50));
        // Hedged after 30% of the objective, unless told otherwise.
        assert_eq!(config.short.slo.hedge_after(), Some(Duration::from_millis(90)));
    }

    #[test]
    fn hedges_are_turned_off_with_zero_and_a_share_past_100_is_refused() {
        let file = |percent: i64| {
            format!(
                "[[replicas]]\nname = \"r0\"\nurl = \"http://127.0.0.1:8000\"\n\
                 [entries.long.slo]\nhedge_percent = {percent}\n"
            )
        };
        let config = parse_and_validate(&file(0)).unwrap();
        assert_eq!(config.long.slo.hedge_after(), None);
        assert_eq!(config.short.slo.hedge_after(), Some(Duration::from_millis(300)));
        let refused = format!("{}", parse_and_validate(&file(101)).unwrap_err());
        assert!(refused.contains("entries.long.slo.hedge_percent"), "{refused}");
        let refused = format!("{}", parse_and_validate(&file(-1)).unwrap_err());
        assert!(refused.contains("out of range 0..=100"), "{refused}");
    }

    #[test]
    fn empty_file_gives_the_defaults() {
        let config = parse_and_validate("").unwrap();
        assert_eq!(config.short_threshold_tokens, 2048);
        assert_eq!(config.scrape_interval, Duration::from_millis(250));
        assert_eq!(config.body_limit_bytes, 16 << 20);
        assert_eq!(config.short.strategy, Strategy::ForceClose);
        assert_eq!(config.long.strategy, Strategy::ForceClose);
        assert_eq!(config.debug.strategy, Strategy::KeepAlive);
        assert_eq!(config.policy, PolicyKind::PrefixLatency);
        assert_eq!(config.short.ready_connections, 0, "connects at request time");
        assert_eq!(config.short.ready_max_idle, Duration::from_millis(10));
    }

    #[test]
    fn every_bad_field_is_named_by_its_path() {
        let text = r#"
            listen = "nowhere"
            policy = "random"
            [classifier]
            short_threshold_tokens = 0
            [entries.short]
            strategy = "sometimes"
            ready_connections = 65
            ready_max_idle_ms = 0
            [[replicas]]
            name = "a"
            url = "http://10.0.0.1:8000"
            [[replicas]]
            name = "a"
            url = "ftp://10.0.0.2:8000"
            [[replicas]]
            url = "http://10.0.0.3:8000/v1"
        "#;
        let error = parse_and_validate(text).unwrap_err();
        let mut paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "classifier.short_threshold_tokens",
                "entries.short.ready_connections",
                "entries.short.ready_max_idle_ms",
                "entries.short.strategy",
                "listen",
                "policy",
                "replicas[1].name",
                "replicas[1].url",
                "replicas[2].name",
                "replicas[2].url",
            ]
        );
        assert!(error.to_string().contains("replicas[1].url: `ftp://10.0.0.2:8000`"));
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let error =
            parse_and_validate("[entries.short]\nstrategy = \"spread\"\nfoo = 1\n").unwrap_err();
        assert!(error.issues[0].message.contains("unknown field `foo`"), "{error}");
    }

    #[test]
    fn replica_urls_become_authorities_and_nodes_default_to_names() {
        let config = parse_and_validate(
            "[[replicas]]\nname = \"r0\"\nurl = \"http://10.0.0.1\"\n\
             [[replicas]]\nname = \"r1\"\nurl = \"http://10.0.0.1:8001/\"\nnode = \"n1\"\n",
        )
        .unwrap();
        assert_eq!(config.replicas[0].authority, "10.0.0.1:80");
        assert_eq!(config.replicas[0].node, "r0");
        assert_eq!(config.replicas[1].authority, "10.0.0.1:8001");
        assert_eq!(config.replicas[1].node, "n1");
        assert!(!config.replicas[0].tls);
    }

    #[test]
    fn https_replicas_default_to_port_443() {
        let config = parse_and_validate(
            "[[replicas]]\nname = \"r0\"\nurl = \"https://replica.example\"\n\
             [[replicas]]\nname = \"r1\"\nurl = \"https://10.0.0.1:8443/\"\n",
        )
        .unwrap();
        assert_eq!(config.replicas[0].authority, "replica.example:443");
        assert!(config.replicas[0].tls);
        assert_eq!(config.replicas[1].authority, "10.0.0.1:8443");
        assert_eq!(config.replicas[1].scheme(), "https");
    }

    #[test]
    fn a_port_may_not_serve_two_listeners() {
        let error = parse_and_validate(
            "listen = \"127.0.0.1:8080\"\n[entries.long]\nlisten = \"127.0.0.1:8080\"\n",
        )
        .unwrap_err();
        assert_eq!(error.issues[0].path, "entries.long.listen");
    }
}
