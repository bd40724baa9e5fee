//! What following a replica's events takes, shared by every replica's scraper: the
//! `[kv_events]` settings, the block size requests are hashed with and the hasher of the
//! engines' chain; [`Following::follow`] starts accounting for one source and returns the
//! subscription to run.

use std::future::Future;
use std::sync::Arc;

use super::engine_cache::EngineCache;
use super::held::HeldBlocks;
use super::subscribe;
use crate::gateway::config::{EventSource, GatewayConfig, KvEventsConfig};
use crate::kv_events::block_hash::BlockHasher;

/// The settings every replica's subscription runs with.
#[derive(Debug)]
pub struct Following {
    pub config: KvEventsConfig,
    /// `prefix.block_size`: the replicas' blocks must hold as many tokens.
    pub block_size: u64,
    pub hasher: Arc<BlockHasher>,
}

impl PartialEq for Following {
    /// The hasher follows from the seed in `config`.
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config && self.block_size == other.block_size
    }
}

impl Following {
    pub fn new(config: &KvEventsConfig, block_size: u64) -> Self {
        let hasher = Arc::new(BlockHasher::new(&config.hash_seed));
        Self { config: config.clone(), block_size, hasher }
    }

    /// The settings of `config`, if it follows any replica's events.
    pub fn of(config: &GatewayConfig) -> Option<Arc<Self>> {
        let events = &config.kv_events;
        events.enabled().then(|| Arc::new(Self::new(events, config.prefix.block_size)))
    }

    /// Adds `source` to `cache` with an empty, unknown account and returns the subscription
    /// that keeps it: it runs until dropped.
    pub fn follow(
        &self,
        source: EventSource,
        cache: &EngineCache,
    ) -> impl Future<Output = ()> + Send + 'static {
        let held = HeldBlocks::new(self.config.max_blocks_per_replica, self.block_size);
        let held = cache.add(source.clone(), held);
        subscribe::follow(source, held, self.hasher.clone())
    }
}
