//! One replica's engine cache as its KV events tell it: the sources followed (one per
//! data-parallel rank of the replica's engine) and, for a prompt's block hashes, the
//! leading run the replica holds, when its account can be trusted.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use super::held::{HeldBlocks, Verdict};
use crate::gateway::config::EventSource;

/// The sources of one replica and what each says it holds.
#[derive(Debug, Default)]
pub struct EngineCache {
    sources: Mutex<Vec<Followed>>,
}

#[derive(Debug)]
struct Followed {
    source: EventSource,
    held: Arc<Mutex<HeldBlocks>>,
}

/// What a replica's events say it holds of a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineHeld {
    pub blocks: usize,
    /// The account missed no event: `blocks` is exact. Otherwise it is a lower bound.
    pub known: bool,
}

/// One source as `/admin/replicas` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceReport {
    pub events: String,
    pub replay: Option<String>,
    /// `known`, `unknown`, `hash_mismatch` or `block_size_mismatch`.
    pub verdict: &'static str,
    pub blocks: usize,
    /// The sequence number of the next batch (`None`: none came yet).
    pub next_seq: Option<u64>,
}

impl EngineCache {
    /// Whether any source is followed (configured or discovered).
    pub fn is_followed(&self) -> bool {
        !self.sources.lock().is_empty()
    }

    /// Forgets every source (their followers were stopped).
    pub fn clear(&self) {
        self.sources.lock().clear();
    }

    /// Starts accounting for `source`; the returned account is the one its follower keeps.
    pub fn add(&self, source: EventSource, held: HeldBlocks) -> Arc<Mutex<HeldBlocks>> {
        let held = Arc::new(Mutex::new(held));
        self.sources.lock().push(Followed { source, held: held.clone() });
        held
    }

    /// Leading blocks of `hashes` the replica's engine holds, by the longest run any of its
    /// usable sources lists; `None` when none is usable (none followed, or every one
    /// refused).
    pub fn holds(&self, hashes: &[u64]) -> Option<EngineHeld> {
        let sources = self.sources.lock();
        sources
            .iter()
            .filter_map(|followed| {
                let held = followed.held.lock();
                let verdict = held.verdict();
                (!verdict.refused()).then(|| EngineHeld {
                    blocks: held.leading(hashes),
                    known: verdict == Verdict::Known,
                })
            })
            .max_by_key(|held| (held.blocks, held.known))
    }

    pub fn report(&self) -> Vec<SourceReport> {
        self.sources
            .lock()
            .iter()
            .map(|followed| {
                let held = followed.held.lock();
                SourceReport {
                    events: followed.source.events.clone(),
                    replay: followed.source.replay.clone(),
                    verdict: held.verdict().as_str(),
                    blocks: held.len(),
                    next_seq: held.next_seq(),
                }
            })
            .collect()
    }
}
