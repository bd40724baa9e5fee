//! Sessions' placements shared between gateways through the store of `[limits] store`
//! (`prefix.share_sessions`): every gateway writes where it placed a session's turn, and a
//! gateway that does not remember a session reads where its last turn went. Without it a
//! session that left its home (a busy home, a first turn held to an even share) is sent
//! home by the next gateway, to a miss.
//!
//! One key per session, `{key_prefix}:session:{session hash}`, holding the placed prompt's
//! message count, its full blocks and the replica's name, kept for [`SESSION_LIFETIME`]. A
//! write goes in the background; a read waits at most the store's timeout, and after a
//! failure the store is left alone for [`PAUSE_AFTER_FAILURE`], so that a dead store costs
//! requests no timeouts. Either way the request is placed as if no gateway remembered it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus::{IntCounterVec, Opts, Registry};
use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::gateway::config::QuotaStoreConfig;

/// A session's placement is kept this long after its last turn.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(3600);
/// After a read or write failed, reads wait this long before trying the store again.
pub const PAUSE_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// A background write gives up after this long.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Where one gateway placed a session's turn, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedPlacement {
    /// The placed prompt's chat message count (`None`: not a chat).
    pub messages: Option<u64>,
    /// Full KV blocks of the placed prompt: the replica holds them once it answered.
    pub blocks: u64,
    /// The replica's name in the gateways' config.
    pub replica: String,
}

impl SharedPlacement {
    /// `messages blocks replica`, `-` for no message count.
    pub fn encode(&self) -> String {
        let messages = self.messages.map_or_else(|| "-".to_string(), |m| m.to_string());
        format!("{messages} {} {}", self.blocks, self.replica)
    }

    /// The inverse of [`Self::encode`]; `None` for anything else.
    pub fn decode(value: &str) -> Option<Self> {
        let mut parts = value.splitn(3, ' ');
        let messages = match parts.next()? {
            "-" => None,
            count => Some(count.parse().ok()?),
        };
        let blocks = parts.next()?.parse().ok()?;
        let replica = parts.next().filter(|name| !name.is_empty())?.to_string();
        Some(Self { messages, blocks, replica })
    }
}

/// The store connection and its counters; clones share both.
#[derive(Clone)]
pub struct SharedSessions {
    inner: Arc<Inner>,
}

struct Inner {
    connection: ConnectionManager,
    key_prefix: String,
    timeout: Duration,
    epoch: Instant,
    /// Milliseconds since `epoch` before which reads skip the store.
    paused_until_ms: AtomicU64,
    /// `laneway_prefix_session_store_total{op, outcome}`.
    calls: IntCounterVec,
}

impl SharedSessions {
    /// A store whose connection is made on first use; its counters go to `registry`.
    pub fn open(config: &QuotaStoreConfig, registry: &Registry) -> Result<Self, redis::RedisError> {
        let client = redis::Client::open(config.url.as_str())?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(WRITE_TIMEOUT))
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_lazy_with_config(client, manager_config)?;
        let calls = IntCounterVec::new(
            Opts::new(
                "laneway_prefix_session_store_total",
                "Session placements read from and written to the shared store, by outcome",
            ),
            &["op", "outcome"],
        )
        .expect("valid metric");
        registry.register(Box::new(calls.clone())).expect("unique metric name");
        Ok(Self {
            inner: Arc::new(Inner {
                connection,
                key_prefix: config.key_prefix.clone(),
                timeout: config.timeout,
                epoch: Instant::now(),
                paused_until_ms: AtomicU64::new(0),
                calls,
            }),
        })
    }

    fn key(&self, session: u64) -> String {
        format!("{}:session:{session:016x}", self.inner.key_prefix)
    }

    /// Where `session`'s last turn was placed by any gateway; `None` when no gateway wrote
    /// it, the store did not answer within its timeout, or it is paused after a failure.
    pub async fn recall(&self, session: u64) -> Option<SharedPlacement> {
        let inner = &self.inner;
        if inner.millis() < inner.paused_until_ms.load(Ordering::Relaxed) {
            inner.count("recall", "skipped");
            return None;
        }
        let mut connection = inner.connection.clone();
        let key = self.key(session);
        let read = tokio::time::timeout(inner.timeout, connection.get::<_, Option<String>>(key));
        match read.await {
            Ok(Ok(Some(value))) => {
                let placement = SharedPlacement::decode(&value);
                inner.count("recall", if placement.is_some() { "found" } else { "unreadable" });
                placement
            }
            Ok(Ok(None)) => {
                inner.count("recall", "absent");
                None
            }
            Ok(Err(_)) | Err(_) => {
                inner.failed("recall");
                None
            }
        }
    }

    /// Writes where `session`'s turn went, in the background.
    pub fn remember(&self, session: u64, placement: &SharedPlacement) {
        let inner = self.inner.clone();
        let key = self.key(session);
        let value = placement.encode();
        tokio::spawn(async move {
            let mut connection = inner.connection.clone();
            let lifetime = SESSION_LIFETIME.as_secs();
            let write = connection.set_ex::<_, _, ()>(key, value, lifetime);
            match tokio::time::timeout(WRITE_TIMEOUT, write).await {
                Ok(Ok(())) => inner.count("remember", "stored"),
                Ok(Err(_)) | Err(_) => inner.failed("remember"),
            }
        });
    }
}

impl Inner {
    fn millis(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn count(&self, op: &str, outcome: &str) {
        self.calls.with_label_values(&[op, outcome]).inc();
    }

    fn failed(&self, op: &str) {
        let until = self.millis() + PAUSE_AFTER_FAILURE.as_millis() as u64;
        self.paused_until_ms.fetch_max(until, Ordering::Relaxed);
        self.count(op, "failed");
    }
}

#[cfg(test)]
mod tests {
    use super::SharedPlacement;

    #[test]
    fn a_placement_reads_back_as_written_and_nothing_else_reads() {
        let chat = SharedPlacement { messages: Some(5), blocks: 312, replica: "tp4 0".into() };
        let plain = SharedPlacement { messages: None, blocks: 0, replica: "r".into() };
        assert_eq!(chat.encode(), "5 312 tp4 0");
        assert_eq!(SharedPlacement::decode(&chat.encode()), Some(chat));
        assert_eq!(SharedPlacement::decode(&plain.encode()), Some(plain));
        for bad in ["", "5", "5 3", "5 3 ", "x 3 r", "5 -1 r", "- x r"] {
            assert_eq!(SharedPlacement::decode(bad), None, "{bad:?}");
        }
    }
}
