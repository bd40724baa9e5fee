//! `[kv_events]`: following the replicas' KV-cache events (vLLM's `--kv-events-config`), so
//! that prefix placement knows which blocks each engine holds instead of guessing: where
//! each replica publishes (asked of its `/kv_event_sources`, or written per replica), and
//! the seed its block hashes start from.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::issues::Issues;

/// `[kv_events]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKvEvents {
    pub discover: Option<bool>,
    pub hash_seed: Option<String>,
    pub max_blocks_per_replica: Option<i64>,
    pub approximate_tokens: Option<bool>,
    #[serde(default)]
    pub sources: Vec<RawEventSource>,
}

/// `[[kv_events.sources]]`: one replica's publisher, for replicas whose API server does not
/// list it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEventSource {
    pub replica: Option<String>,
    pub events: Option<String>,
    pub replay: Option<String>,
}

/// Where a replica publishes its events, and where it replays them (ZeroMQ endpoints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSource {
    pub events: String,
    pub replay: Option<String>,
}

/// The validated `[kv_events]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEventsConfig {
    /// Ask every replica's `GET /kv_event_sources` where it publishes.
    pub discover: bool,
    /// Publishers written per replica name; they take precedence over discovery.
    pub sources: BTreeMap<String, EventSource>,
    /// The replicas' `PYTHONHASHSEED`, or vLLM's own seed when they run without one: the
    /// parent of every prompt's first block hash.
    pub hash_seed: String,
    /// Blocks kept per replica; an account that would grow past it is dropped and the
    /// replica's cache counts as unknown.
    pub max_blocks_per_replica: usize,
    /// The engines tokenize as laneway's approximation does (`laneway sim`): their events
    /// are used for the prompts of models without a tokenizer in `prefix.tokenizers`.
    /// Otherwise such prompts cannot be hashed as the engines hash them, and the index
    /// places them.
    pub approximate_tokens: bool,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            discover: false,
            sources: BTreeMap::new(),
            hash_seed: crate::kv_events::block_hash::DEFAULT_SEED.to_string(),
            max_blocks_per_replica: 1 << 20,
            approximate_tokens: false,
        }
    }
}

impl KvEventsConfig {
    /// Whether any replica's events are followed.
    pub fn enabled(&self) -> bool {
        self.discover || !self.sources.is_empty()
    }
}

pub(super) fn kv_events(
    raw: &RawKvEvents,
    replica_names: &[&str],
    issues: &mut Issues,
) -> KvEventsConfig {
    let default = KvEventsConfig::default();
    let mut sources = BTreeMap::new();
    for (i, source) in raw.sources.iter().enumerate() {
        let path = |field: &str| format!("kv_events.sources[{i}].{field}");
        let Some(replica) = source.replica.as_deref() else {
            issues.add(path("replica"), "required: the name of a [[replicas]] entry");
            continue;
        };
        if !replica_names.contains(&replica) {
            issues.add(path("replica"), format!("no [[replicas]] entry is named `{replica}`"));
            continue;
        }
        let Some(events) = source.events.as_deref() else {
            issues.add(path("events"), "required: the replica's publisher, tcp://host:port");
            continue;
        };
        let mut endpoint = |field: &str, value: &str| {
            let valid = zeromq_endpoint(value);
            if !valid {
                issues.add(
                    path(field),
                    format!("`{value}` is not a tcp://host:port or ipc:// endpoint"),
                );
            }
            valid
        };
        let events_valid = endpoint("events", events);
        let replay_valid = source.replay.as_deref().is_none_or(|replay| endpoint("replay", replay));
        if !(events_valid && replay_valid) {
            continue;
        }
        let replay = source.replay.clone();
        if sources
            .insert(replica.to_string(), EventSource { events: events.into(), replay })
            .is_some()
        {
            issues.add(path("replica"), format!("`{replica}` has a source already"));
        }
    }
    let hash_seed = match &raw.hash_seed {
        Some(seed) if seed.is_empty() => {
            issues.add("kv_events.hash_seed", "empty: leave it out for vLLM's own seed");
            default.hash_seed.clone()
        }
        Some(seed) => seed.clone(),
        None => default.hash_seed.clone(),
    };
    KvEventsConfig {
        approximate_tokens: raw.approximate_tokens.unwrap_or(default.approximate_tokens),
        discover: raw.discover.unwrap_or(default.discover),
        sources,
        hash_seed,
        max_blocks_per_replica: issues.positive(
            "kv_events.max_blocks_per_replica",
            raw.max_blocks_per_replica,
            default.max_blocks_per_replica as u64,
            1 << 28,
        ) as usize,
    }
}

/// `tcp://host:port` (a host name, an address or `*`) or `ipc://path`.
fn zeromq_endpoint(value: &str) -> bool {
    if let Some(path) = value.strip_prefix("ipc://") {
        return !path.is_empty();
    }
    value.strip_prefix("tcp://").and_then(|rest| rest.rsplit_once(':')).is_some_and(
        |(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0),
    )
}

#[cfg(test)]
mod tests {
    use super::super::GatewayConfig;

    const REPLICAS: &str = "[[replicas]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\n";

    #[test]
    fn off_by_default_and_sources_by_replica_name() {
        let config = GatewayConfig::from_toml(REPLICAS).unwrap();
        assert!(!config.kv_events.enabled());
        assert_eq!(config.kv_events.hash_seed, "vllm-none-hash");
        let text = format!(
            "{REPLICAS}[kv_events]\nhash_seed = \"0\"\n[[kv_events.sources]]\nreplica = \"a\"\n\
             events = \"tcp://127.0.0.1:5557\"\nreplay = \"tcp://127.0.0.1:5558\"\n"
        );
        let config = GatewayConfig::from_toml(&text).unwrap();
        assert!(config.kv_events.enabled());
        assert_eq!(config.kv_events.hash_seed, "0");
        let source = &config.kv_events.sources["a"];
        assert_eq!(source.events, "tcp://127.0.0.1:5557");
        assert_eq!(source.replay.as_deref(), Some("tcp://127.0.0.1:5558"));
    }

    #[test]
    fn every_bad_field_by_path() {
        let text = format!(
            "{REPLICAS}[kv_events]\nhash_seed = \"\"\nmax_blocks_per_replica = 0\n\
             [[kv_events.sources]]\nreplica = \"nobody\"\nevents = \"tcp://h:1\"\n\
             [[kv_events.sources]]\nreplica = \"a\"\nevents = \"http://h:1\"\nreplay = \"tcp://h\"\n\
             [[kv_events.sources]]\nevents = \"tcp://h:1\"\n"
        );
        let error = GatewayConfig::from_toml(&text).unwrap_err();
        let paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "kv_events.sources[0].replica",
                "kv_events.sources[1].events",
                "kv_events.sources[1].replay",
                "kv_events.sources[2].replica",
                "kv_events.hash_seed",
                "kv_events.max_blocks_per_replica",
            ]
        );
    }
}
