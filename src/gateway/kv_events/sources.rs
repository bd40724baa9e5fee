//! Where a replica publishes, as its API server says: vLLM's `GET /kv_event_sources` maps
//! each data-parallel rank to its publisher's resolved config (`endpoint`,
//! `replay_endpoint`, per rank already). The engine binds a wildcard host (`tcp://*:5557`),
//! which a subscriber reaches at the replica's own host.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::gateway::config::EventSource;

/// Why a replica's answer gave no source.
#[derive(Debug, thiserror::Error)]
pub enum SourcesError {
    #[error("not a /kv_event_sources answer: {0}")]
    Json(#[from] serde_json::Error),
}

#[derive(Deserialize)]
struct RankPublisher {
    #[serde(default)]
    enable_kv_cache_events: bool,
    #[serde(default)]
    publisher: Option<String>,
    endpoint: Option<String>,
    #[serde(default)]
    replay_endpoint: Option<String>,
}

/// The ZeroMQ sources in a `/kv_event_sources` body, by rank, each wildcard host replaced
/// by `host` (the replica's): none when the engine publishes no events or not over ZeroMQ.
pub fn parse(body: &[u8], host: &str) -> Result<Vec<EventSource>, SourcesError> {
    let ranks: BTreeMap<String, RankPublisher> = serde_json::from_slice(body)?;
    let mut ranks: Vec<(i64, RankPublisher)> =
        ranks.into_iter().map(|(rank, p)| (rank.parse().unwrap_or(i64::MAX), p)).collect();
    ranks.sort_by_key(|(rank, _)| *rank);
    Ok(ranks
        .into_iter()
        .filter(|(_, p)| p.enable_kv_cache_events && p.publisher.as_deref() == Some("zmq"))
        .filter_map(|(_, p)| {
            let events = reachable(p.endpoint.as_deref()?, host)?;
            let replay = p.replay_endpoint.as_deref().and_then(|replay| reachable(replay, host));
            Some(EventSource { events, replay })
        })
        .collect())
}

/// A TCP endpoint with its wildcard host replaced by `host`; ipc endpoints as they are
/// (they are on the gateway's machine or nowhere); anything else (`inproc`) is unreachable.
fn reachable(endpoint: &str, host: &str) -> Option<String> {
    if endpoint.starts_with("ipc://") {
        return Some(endpoint.to_string());
    }
    let (bound, port) = endpoint.strip_prefix("tcp://")?.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|&port| port > 0)?;
    let host = match bound {
        "*" | "0.0.0.0" | "[::]" | "::" => host,
        named => named,
    };
    Some(format!("tcp://{host}:{port}"))
}

/// The host of a `host:port` authority (brackets kept for IPv6).
pub fn authority_host(authority: &str) -> &str {
    authority.rsplit_once(':').map_or(authority, |(host, _)| host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_in_order_with_the_replica_host() {
        let body = br#"{
            "1": {"enable_kv_cache_events": true, "publisher": "zmq",
                  "endpoint": "tcp://*:5558", "replay_endpoint": "tcp://*:5560", "topic": "kv"},
            "0": {"enable_kv_cache_events": true, "publisher": "zmq",
                  "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5559", "topic": "kv",
                  "buffer_steps": 10000, "hwm": 100000, "max_queue_size": 100000}
        }"#;
        let sources = parse(body, "10.0.0.7").unwrap();
        assert_eq!(
            sources,
            [
                EventSource {
                    events: "tcp://10.0.0.7:5557".into(),
                    replay: Some("tcp://10.0.0.7:5559".into())
                },
                EventSource {
                    events: "tcp://10.0.0.7:5558".into(),
                    replay: Some("tcp://10.0.0.7:5560".into())
                },
            ]
        );
    }

    #[test]
    fn none_when_off_or_unreachable() {
        assert!(parse(b"{}", "h").unwrap().is_empty());
        let off = br#"{"0": {"enable_kv_cache_events": false, "publisher": "null", "endpoint": "tcp://*:5557"}}"#;
        assert!(parse(off, "h").unwrap().is_empty());
        let inproc = br#"{"0": {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "inproc://cache"}}"#;
        assert!(parse(inproc, "h").unwrap().is_empty());
        let named = br#"{"0": {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://engine-0:5557"}}"#;
        assert_eq!(parse(named, "h").unwrap()[0].events, "tcp://engine-0:5557");
        assert!(parse(b"[]", "h").is_err());
        assert_eq!(authority_host("[::1]:8000"), "[::1]");
        assert_eq!(authority_host("replica-0:8000"), "replica-0");
    }
}
