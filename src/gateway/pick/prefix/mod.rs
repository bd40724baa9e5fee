//! `prefix_aware`: places a request where its prompt's prefix is expected to be in the KV
//! cache, unless load makes a miss elsewhere faster; keeps sessions on one replica with
//! bounded-load rendezvous hashing and a memory of where each was last placed
//! ([`sessions`]); and corrects its index from the cached tokens that
//! replicas report. The request path: [`PromptKey`] (rendered prompt -> block hashes and
//! session) -> [`policy::PrefixAware`] (the pick) -> [`PrefixRouter::place`] (index
//! updated, prediction kept) -> [`PrefixFeedback`] (the replica's report, at the end).

pub mod affinity;
pub mod cache_granularity;
pub mod conversation;
pub mod cost;
pub mod engine_held;
pub mod engine_tokens;
pub mod feedback;
pub mod hot_copies;
pub mod index;
pub mod measured;
pub mod model_tokenizer;
pub mod placement_store;
pub mod placement_trace;
pub mod policy;
pub mod reuse;
pub mod segment_cache;
pub mod sessions;
pub mod ttft;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::HeaderMap;
use prometheus::{Gauge, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::replica::Replica;
use crate::gateway::config::PrefixConfig;
use crate::openai::{InferenceRequest, PromptInput};
use crate::prompt_tokens::{block_hashes, mix};

pub use engine_tokens::EngineTokens;
pub use feedback::{Prediction, PrefixFeedback};
pub use hot_copies::HotPrefixes;
pub use index::BlockIndex;
pub use placement_store::{FIRST_CHECKPOINT, PlacementStore, SharedPlacement, checkpoints};
pub use reuse::RecentReuse;
pub use sessions::SessionMemory;
pub use ttft::{QueueTtft, TtftEstimate};

/// What prefix-aware placement needs from a request: its rendered prompt as chained block
/// hashes (tokenized as the replicas tokenize, chat roles and order included) and its
/// session, if it names one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptKey {
    /// One hash per full block of the prompt.
    pub hashes: Vec<u64>,
    /// The same blocks as the engines' KV events name them; empty unless events are
    /// followed ([`EngineTokens::engine_hashes`]).
    pub engine_hashes: Vec<u64>,
    /// Blocks a replica can serve from cache: vLLM always computes a prompt's last token,
    /// so at most `(prompt_tokens - 1) / block_size`.
    pub max_hit_blocks: usize,
    pub prompt_tokens: u64,
    pub block_size: u64,
    /// A hash of the session header's value, else of OpenAI's `user` field.
    pub session: Option<u64>,
    /// Without a session, a chat prompt's opening ([`conversation::opening_hash`]): the
    /// same in every turn of a conversation.
    pub conversation: Option<u64>,
    /// A chat prompt with no assistant message: a conversation's first turn, with nothing
    /// of its own cached anywhere yet, so placing it by load alone costs no hit.
    pub opens_conversation: bool,
    /// A chat prompt's message count (`None` for a completion prompt): as many as the
    /// session's last placed prompt is that turn again, two more its next turn
    /// ([`SessionMemory`]).
    pub messages: Option<u64>,
}

impl PromptKey {
    pub fn new(
        request: &InferenceRequest,
        headers: &HeaderMap,
        config: &PrefixConfig,
        engine: &EngineTokens,
    ) -> Self {
        let tokens = engine.token_ids(request);
        let block_size = config.block_size;
        let hashes = block_hashes(&tokens.ids, block_size as usize);
        let engine_hashes = engine.engine_hashes(&tokens);
        let prompt_tokens = tokens.ids.len() as u64;
        let max_hit_blocks = (prompt_tokens.saturating_sub(1) / block_size) as usize;
        let header = headers.get(&config.session_header).map(|value| value.as_bytes());
        let session = header
            .filter(|value| !value.is_empty())
            .or(request.user.as_deref().map(str::as_bytes).filter(|user| !user.is_empty()))
            .map(hash_bytes);
        let chat = match &request.prompt {
            PromptInput::Messages(messages) => Some(messages),
            PromptInput::Text(_) | PromptInput::TokenIds(_) => None,
        };
        let opens_conversation =
            chat.is_some_and(|messages| messages.iter().all(|m| m.role != "assistant"));
        let messages = chat.map(|messages| messages.len() as u64);
        let conversation = match session {
            Some(_) => None,
            None => chat.and_then(|messages| conversation::opening_hash(messages)),
        };
        Self {
            hashes,
            engine_hashes,
            max_hit_blocks,
            prompt_tokens,
            block_size,
            session,
            conversation,
            opens_conversation,
            messages,
        }
    }

    /// The hashes a cache hit can cover.
    pub fn hittable(&self) -> &[u64] {
        &self.hashes[..self.max_hit_blocks.min(self.hashes.len())]
    }

    /// The same blocks as the engines' events name them (empty without events).
    pub fn engine_hittable(&self) -> &[u64] {
        &self.engine_hashes[..self.max_hit_blocks.min(self.engine_hashes.len())]
    }
}

/// A stable 64-bit hash of some bytes (session ids, replica names: [`Replica::name_hash`]).
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0x7365_7373_696f_6e00, |hash, &byte| mix(hash ^ u64::from(byte)))
}

/// What a prompt-reading policy is given besides the replicas.
pub struct PromptPick<'a> {
    pub key: &'a PromptKey,
    pub router: &'a PrefixRouter,
    pub config: &'a PrefixConfig,
}

/// The index and the metrics of prefix-aware placement; outlives reloads.
pub struct PrefixRouter {
    pub index: BlockIndex,
    /// Where each session was last placed.
    pub sessions: SessionMemory,
    /// How much of the recent prompts was expected cached where they went.
    pub reuse: RecentReuse,
    /// Prefixes hit often enough to be copied to a second replica in the background.
    pub hot: HotPrefixes,
    /// Placements shared with other gateways, if a store is configured.
    shared: Option<Shared>,
    metrics: PrefixMetrics,
}

/// Who sends a placed request: a client, or the gateway copying a hot prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sender {
    Client,
    Gateway,
}

/// The store and what goes through it (`prefix.share_sessions`, `prefix.share_prefixes`).
struct Shared {
    store: PlacementStore,
    sessions: bool,
    prefixes: bool,
}

impl Shared {
    /// Writes that a request with `key` went to `replica`, which was expected to hold
    /// `known` of its blocks: the session's turn, and the prefixes it computes anew.
    fn remember(&self, replica: &Replica, key: &PromptKey, known: usize) {
        // A sessionless conversation's placements are written from its second turn on:
        // every single-shot chat request opens one, and few are continued.
        let continued = key.conversation.filter(|_| !key.opens_conversation);
        if let (true, Some(session)) = (self.sessions, key.session.or(continued)) {
            let blocks = key.hashes.len() as u64;
            let placement =
                SharedPlacement { messages: key.messages, blocks, replica: replica.name.clone() };
            self.store.remember_session(session, &placement);
        }
        if self.prefixes {
            let counts = checkpoints(known, key.hashes.len());
            if !counts.is_empty() {
                self.store.remember_prefix(&key.hashes, &counts, &replica.name);
            }
        }
    }
}

struct PrefixMetrics {
    /// `laneway_prefix_tokens_total{source="predicted"|"reported"}`.
    tokens: IntCounterVec,
    index_bytes: IntGauge,
    /// Entries dropped because a replica reported a miss where the index expected a hit.
    corrected: IntCounter,
    /// Per replica, the cache blocks an eviction taught it holds, and those the index
    /// holds for it now.
    cache_blocks: IntGaugeVec,
    /// [`RecentReuse::share`].
    reuse: Gauge,
    /// `laneway_prefix_copies_total{outcome}`: copies of hot prefixes ([`hot_copies`]).
    copies: IntCounterVec,
}

impl PrefixRouter {
    /// A router with an empty index, its metrics in `registry`.
    pub fn new(config: &PrefixConfig, registry: &Registry) -> Self {
        let tokens = IntCounterVec::new(
            Opts::new(
                "laneway_prefix_tokens_total",
                "Cached prompt tokens of prefix_aware requests: as the index predicted them \
                 and as the replica reported them (usage.prompt_tokens_details.cached_tokens)",
            ),
            &["source"],
        )
        .expect("valid");
        let index_bytes = IntGauge::new(
            "laneway_prefix_index_bytes",
            "Estimated memory of the prefix_aware block index",
        )
        .expect("valid");
        let corrected = IntCounter::new(
            "laneway_prefix_index_corrected_total",
            "Index entries dropped after a replica reported a miss the index predicted as a hit",
        )
        .expect("valid");
        let cache_blocks = IntGaugeVec::new(
            Opts::new(
                "laneway_prefix_cache_blocks",
                "prefix_aware's view of a replica's cache: the blocks an eviction taught it \
                 holds (learned_capacity) and those the index expects it to hold (resident)",
            ),
            &["replica", "figure"],
        )
        .expect("valid");
        let reuse = Gauge::new(
            "laneway_prefix_recent_reuse",
            "Decayed mean share of a placed prompt's tokens expected cached where it went; from \
             0.5 on, a prompt new to every replica is not sent to measure one again",
        )
        .expect("valid");
        let copies = IntCounterVec::new(
            Opts::new(
                "laneway_prefix_copies_total",
                "Hot prefixes computed once more on a less busy replica by a one-token request \
                 of the gateway's own: made, or failed (the replica refused it or did not \
                 answer)",
            ),
            &["outcome"],
        )
        .expect("valid");
        registry.register(Box::new(copies.clone())).expect("unique metric name");
        registry.register(Box::new(reuse.clone())).expect("unique metric name");
        registry.register(Box::new(tokens.clone())).expect("unique metric name");
        registry.register(Box::new(index_bytes.clone())).expect("unique metric name");
        registry.register(Box::new(corrected.clone())).expect("unique metric name");
        registry.register(Box::new(cache_blocks.clone())).expect("unique metric name");
        Self {
            index: BlockIndex::new(config.index_bytes),
            sessions: SessionMemory::default(),
            reuse: RecentReuse::default(),
            hot: HotPrefixes::default(),
            shared: None,
            metrics: PrefixMetrics { tokens, index_bytes, corrected, cache_blocks, reuse, copies },
        }
    }

    /// Shares placements with the other gateways on `store`: sessions' if `sessions`,
    /// prefixes' if `prefixes`.
    pub fn with_store(mut self, store: PlacementStore, sessions: bool, prefixes: bool) -> Self {
        self.shared = Some(Shared { store, sessions, prefixes });
        self
    }

    /// Before placing a request, learns from the store what other gateways placed that
    /// this gateway does not know: where its session's last turn went, and which replica
    /// computed the longest prefix of its prompt.
    pub async fn recall_shared(&self, key: &PromptKey) {
        let Some(shared) = &self.shared else { return };
        if shared.sessions {
            self.recall_session(&shared.store, key).await;
        }
        if shared.prefixes {
            self.recall_prefix(&shared.store, key).await;
        }
    }

    /// For a turn of a session (or a sessionless conversation) this gateway does not
    /// remember: where the session's last turn went. When this request is that turn again
    /// or the next, it becomes this gateway's own memory: the session goes where it was, and
    /// the index expects the blocks of that turn's prompt there (this prompt starts with
    /// them). A replica that evicted them reports it, and the index corrects itself.
    async fn recall_session(&self, store: &PlacementStore, key: &PromptKey) {
        let Some(session) = key.session.or(key.conversation) else { return };
        if key.opens_conversation || self.sessions.recall(session, key.messages).is_some() {
            return;
        }
        let Some(placed) = store.recall_session(session).await else { return };
        if !sessions::follows(key.messages, placed.messages) {
            return;
        }
        self.sessions.remember(session, hash_bytes(placed.replica.as_bytes()), placed.messages);
        let blocks = (placed.blocks as usize).min(key.max_hit_blocks).min(key.hashes.len());
        self.import(&placed.replica, &key.hashes[..blocks]);
    }

    /// For a prompt of which no replica is expected to hold half here: the longest prefix
    /// another gateway placed, imported into the index on the replica that computed it.
    async fn recall_prefix(&self, store: &PlacementStore, key: &PromptKey) {
        let hittable = key.hittable();
        if hittable.len() < FIRST_CHECKPOINT {
            return;
        }
        let known = self.index.longest_anywhere(hittable);
        if 2 * known >= hittable.len() {
            return;
        }
        // Never empty: the largest checkpoint is over two thirds of the prompt, above
        // `known`.
        let counts = checkpoints(known, hittable.len());
        if let Some((blocks, replica)) = store.recall_prefix(hittable, &counts).await {
            self.import(&replica, &hittable[..blocks]);
        }
    }

    /// `replica` holds `hashes`, computed: another gateway placed them there.
    fn import(&self, replica: &str, hashes: &[u64]) {
        if hashes.is_empty() {
            return;
        }
        self.index.insert(replica, hashes);
        self.index.computed(replica, hashes);
        self.metrics.index_bytes.set(self.index.bytes() as i64);
    }

    /// A request with `key` was placed on `replica`: the index now expects its blocks
    /// there; the returned feedback holds the prediction until the replica reports.
    pub fn place(self: &Arc<Self>, replica: &Arc<Replica>, key: &PromptKey) -> PrefixFeedback {
        if let Some(conversation) = key.session.or(key.conversation) {
            self.sessions.remember(conversation, replica.name_hash, key.messages);
        }
        self.expect_blocks(replica, key, Sender::Client)
    }

    /// A copy of a hot prefix (the whole prompt of `key`, whose request hit it) is sent to
    /// `replica`: the index expects its blocks there, computing, and the replica owes their
    /// prefill, as for a client's request; neither the session's home nor the traffic's
    /// reuse change, and nothing is shared with other gateways (the replica's own
    /// requests tell them, or its KV events).
    pub fn place_copy(self: &Arc<Self>, replica: &Arc<Replica>, key: &PromptKey) -> PrefixFeedback {
        self.expect_blocks(replica, key, Sender::Gateway)
    }

    /// The index expects `key`'s blocks on `replica`, which owes the prefill of those it
    /// did not hold.
    fn expect_blocks(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        key: &PromptKey,
        sender: Sender,
    ) -> PrefixFeedback {
        let mut placed = self.index.insert(&replica.name, &key.hashes);
        if let (Sender::Client, Some(shared)) = (sender, &self.shared) {
            shared.remember(replica, key, placed.matched);
        }
        let created = key.hashes[placed.matched.min(key.hashes.len())..].to_vec();
        placed.matched = placed.matched.min(key.max_hit_blocks);
        placed.previous.truncate(placed.matched);
        self.metrics.index_bytes.set(self.index.bytes() as i64);
        let cached = engine_held::cached_blocks(replica, key, &placed) as u64 * key.block_size;
        if sender == Sender::Client && key.max_hit_blocks > 0 {
            self.reuse.observe(cached, key.prompt_tokens);
            self.metrics.reuse.set(self.reuse.share());
        }
        let owed = key.prompt_tokens.saturating_sub(cached);
        replica.load.prefill_owed_tokens.fetch_add(owed, Ordering::Relaxed);
        let prediction = Prediction {
            placed,
            created,
            block_size: key.block_size,
            prompt_tokens: key.prompt_tokens,
            owed,
        };
        PrefixFeedback::new(self.clone(), replica.clone(), prediction)
    }

    /// Counts a copy's `outcome` (`made`, `failed`).
    pub fn count_copy(&self, outcome: &str) {
        self.metrics.copies.with_label_values(&[outcome]).inc();
    }

    /// The predicted and reported cached tokens counted so far.
    pub fn predicted_and_reported(&self) -> (u64, u64) {
        let get = |source: &str| self.metrics.tokens.with_label_values(&[source]).get();
        (get("predicted"), get("reported"))
    }
}
