//! Placements shared between gateways through the store of `[limits] store`: where each
//! session's turn went (`prefix.share_sessions`), and which replica computed which prompt
//! prefixes (`prefix.share_prefixes`). Without it each gateway learns only from its own
//! placements: a session one gateway moved off its home is sent home by the next gateway,
//! and a prefix one gateway placed is placed anew by each other gateway, to a miss.
//!
//! Keys, under the configured key prefix:
//! - `session:{session hash}`: the last placed turn's message count, its full blocks and
//!   the replica's name ([`SharedPlacement`]), kept for [`SESSION_LIFETIME`];
//! - `prefix:{chained hash of a prompt's first n blocks}`: the replica that last computed
//!   those n blocks, for n at [`checkpoints`] (4, 6, 8, 12, 16, 24, ...: a few keys per
//!   prompt, and a reader learns at least two thirds of what a replica holds), kept for
//!   [`PREFIX_LIFETIME`].
//!
//! Writes go in the background. A read waits at most the store's timeout, and after a
//! failure the store is left alone for [`PAUSE_AFTER_FAILURE`], so that a dead store costs
//! requests no timeouts. Either way the request is placed on what this gateway knows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus::{IntCounterVec, Opts, Registry};
use redis::aio::ConnectionManager;

use crate::gateway::config::QuotaStoreConfig;
use crate::gateway::store_connection;

/// A session's placement is kept this long after its last turn.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(3600);
/// A prefix's replica is kept this long after it was last computed there (a replica's
/// cache turns over sooner under load; the index corrects what it evicted).
pub const PREFIX_LIFETIME: Duration = Duration::from_secs(600);
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

/// The fewest blocks a prefix is written and read at: shorter prompts are not shared.
pub const FIRST_CHECKPOINT: usize = 4;

/// The block counts at which a prompt's prefix is written and read: 4, 6, 8, 12, 16, 24,
/// ... (powers of two and one and a half times them), those above `known` and at most
/// `blocks`.
pub fn checkpoints(known: usize, blocks: usize) -> Vec<usize> {
    let mut counts = Vec::new();
    let mut power = FIRST_CHECKPOINT;
    while power <= blocks {
        for count in [power, power + power / 2] {
            if count > known && count <= blocks {
                counts.push(count);
            }
        }
        power *= 2;
    }
    counts
}

/// The store connection and its counters; clones share both.
#[derive(Clone)]
pub struct PlacementStore {
    inner: Arc<Inner>,
}

struct Inner {
    connection: ConnectionManager,
    key_prefix: String,
    timeout: Duration,
    epoch: Instant,
    /// Milliseconds since `epoch` before which reads skip the store.
    paused_until_ms: AtomicU64,
    /// `laneway_prefix_store_total{op, outcome}`.
    calls: IntCounterVec,
}

impl PlacementStore {
    /// A store whose connection is made on first use; its counters go to `registry`.
    pub fn open(config: &QuotaStoreConfig, registry: &Registry) -> Result<Self, redis::RedisError> {
        let connection = store_connection::open(&config.url)?;
        let calls = IntCounterVec::new(
            Opts::new(
                "laneway_prefix_store_total",
                "Sessions' placements and prefixes read from and written to the shared store, \
                 by outcome",
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

    fn key(&self, kind: &str, hash: u64) -> String {
        format!("{}:{kind}:{hash:016x}", self.inner.key_prefix)
    }

    /// Where `session`'s last turn was placed by any gateway; `None` when no gateway wrote
    /// it, the store did not answer within its timeout, or it is paused after a failure.
    pub async fn recall_session(&self, session: u64) -> Option<SharedPlacement> {
        let keys = [self.key("session", session)];
        let value = self.read("recall_session", &keys).await?.pop().flatten();
        let placement = value.as_deref().and_then(SharedPlacement::decode);
        let outcome = match (&value, &placement) {
            (None, _) => "absent",
            (Some(_), None) => "unreadable",
            (Some(_), Some(_)) => "found",
        };
        self.inner.count("recall_session", outcome);
        placement
    }

    /// Writes where `session`'s turn went, in the background.
    pub fn remember_session(&self, session: u64, placement: &SharedPlacement) {
        let key = self.key("session", session);
        self.write("remember_session", vec![(key, placement.encode())], SESSION_LIFETIME);
    }

    /// Of the prefixes of `prompt` (its block hashes) `counts` blocks long (shortest
    /// first), the longest a gateway wrote: its block count and the replica that computed it.
    pub async fn recall_prefix(&self, prompt: &[u64], counts: &[usize]) -> Option<(usize, String)> {
        let keys = self.prefix_keys(prompt, counts);
        let values = self.read("recall_prefix", &keys).await?;
        let found = counts.iter().zip(values).rev().find_map(|(&count, value)| {
            value.filter(|name| !name.is_empty()).map(|name| (count, name))
        });
        self.inner.count("recall_prefix", if found.is_some() { "found" } else { "absent" });
        found
    }

    /// Writes, in the background, that `replica` computed the prefixes of `prompt` (its
    /// block hashes) `counts` blocks long.
    pub fn remember_prefix(&self, prompt: &[u64], counts: &[usize], replica: &str) {
        let keys = self.prefix_keys(prompt, counts);
        let pairs = keys.into_iter().map(|key| (key, replica.to_string())).collect();
        self.write("remember_prefix", pairs, PREFIX_LIFETIME);
    }

    /// The key of each prefix: the chained hash of its last block names it whole.
    fn prefix_keys(&self, prompt: &[u64], counts: &[usize]) -> Vec<String> {
        counts.iter().map(|&count| self.key("prefix", prompt[count - 1])).collect()
    }

    /// The values of `keys`, or `None` (counted under `op`) when the store is paused, fails
    /// or does not answer in time.
    async fn read(&self, op: &str, keys: &[String]) -> Option<Vec<Option<String>>> {
        let inner = &self.inner;
        if inner.millis() < inner.paused_until_ms.load(Ordering::Relaxed) {
            inner.count(op, "skipped");
            return None;
        }
        let mut connection = inner.connection.clone();
        let mut get = redis::cmd("MGET");
        get.arg(keys);
        let read = get.query_async::<Vec<Option<String>>>(&mut connection);
        match tokio::time::timeout(inner.timeout, read).await {
            Ok(Ok(values)) if values.len() == keys.len() => Some(values),
            Ok(_) | Err(_) => {
                inner.failed(op);
                None
            }
        }
    }

    /// Sets every `(key, value)` with `lifetime`, in one round trip, in the background.
    fn write(&self, op: &'static str, pairs: Vec<(String, String)>, lifetime: Duration) {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut pipe = redis::pipe();
            for (key, value) in pairs {
                pipe.set_ex(key, value, lifetime.as_secs()).ignore();
            }
            let mut connection = inner.connection.clone();
            match tokio::time::timeout(WRITE_TIMEOUT, pipe.query_async::<()>(&mut connection)).await
            {
                Ok(Ok(())) => inner.count(op, "stored"),
                Ok(Err(_)) | Err(_) => inner.failed(op),
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
    use super::{SharedPlacement, checkpoints};

    #[test]
    fn checkpoints_grow_by_halves_and_doubles_above_what_is_known() {
        assert_eq!(checkpoints(0, 3), Vec::<usize>::new());
        assert_eq!(checkpoints(0, 50), [4, 6, 8, 12, 16, 24, 32, 48]);
        assert_eq!(checkpoints(12, 250), [16, 24, 32, 48, 64, 96, 128, 192]);
        assert_eq!(checkpoints(250, 250), Vec::<usize>::new());
        // A reader learns at least two thirds of a prefix of 4 blocks or more.
        for blocks in 4..5000 {
            let largest = *checkpoints(0, blocks).last().unwrap();
            assert!(3 * largest >= 2 * blocks, "{blocks}: {largest}");
        }
    }

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
