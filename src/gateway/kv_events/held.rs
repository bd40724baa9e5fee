//! The blocks one replica's engine holds, as its KV-cache events say, and whether that
//! account can be trusted. Events come in sequence; a batch that skips numbers means some
//! stores or evictions were missed, and a sequence that starts again means the engine
//! restarted with an empty cache. Missed events make the account wrong in both directions
//! (blocks it lists may be gone, blocks it lacks may be there), so the replica's cache is
//! then *unknown*: placement falls back to the approximate index for it until the gap is
//! filled from the replay socket or the engine starts over. An account that would grow past
//! its bound is dropped the same way, so memory stays bounded whatever a replica sends.
//!
//! The first stored blocks of a plain-text prompt (no parent, no extra keys) are hashed
//! again here with [`BlockHasher`]: a replica that hashes differently (another
//! `--prefix-caching-hash-algo`, a `PYTHONHASHSEED`) could never match a request, and is
//! refused with [`Verdict::HashMismatch`] rather than trusted.

use std::collections::HashSet;

use crate::kv_events::block_hash::BlockHasher;
use crate::kv_events::wire::{Batch, Event};

/// What the account of one replica's cache is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every event since the engine started (or since a complete replay) was applied.
    Known,
    /// Events were missed, or none has come yet: the approximate index decides.
    Unknown,
    /// The replica's hashes are not the ones this gateway computes for the same tokens.
    HashMismatch,
    /// The replica's blocks hold another number of tokens than `prefix.block_size`.
    BlockSizeMismatch,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Known => "known",
            Self::Unknown => "unknown",
            Self::HashMismatch => "hash_mismatch",
            Self::BlockSizeMismatch => "block_size_mismatch",
        }
    }

    /// Whether the replica's events can never match this gateway's hashes (until the
    /// replica restarts with other flags).
    pub fn refused(self) -> bool {
        matches!(self, Self::HashMismatch | Self::BlockSizeMismatch)
    }
}

/// What applying a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The next batch in sequence.
    InOrder,
    /// Batches from `from` on were missed (this one, numbered `to`, included): replay them
    /// from `from`, or the cache stays unknown. Said again of every batch until a replay
    /// has filled the gap or been given up.
    Gap { from: u64, to: u64 },
    /// The sequence started again at 0: a new engine, an empty cache.
    Restarted,
    /// A batch already applied: ignored.
    Stale,
}

/// One replica's cache, as its events tell it.
#[derive(Debug)]
pub struct HeldBlocks {
    blocks: HashSet<u64>,
    /// The sequence number after the newest batch seen (`None`: no batch yet).
    next: Option<u64>,
    /// The first batch missed, while a replay from it is awaited: the blocks are those of
    /// the batches before it, kept for the replay to continue from.
    awaiting: Option<u64>,
    verdict: Verdict,
    max_blocks: usize,
    /// Tokens per block the request hashes are cut into (`prefix.block_size`).
    block_size: u64,
}

impl HeldBlocks {
    /// An account that holds at most `max_blocks` blocks of `block_size` tokens.
    pub fn new(max_blocks: usize, block_size: u64) -> Self {
        Self {
            blocks: HashSet::new(),
            next: None,
            awaiting: None,
            verdict: Verdict::Unknown,
            max_blocks,
            block_size,
        }
    }

    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The sequence number after the newest batch seen (`None`: none yet).
    pub fn next_seq(&self) -> Option<u64> {
        self.next
    }

    /// Leading blocks of `hashes` (a prompt's chain) the account lists: exactly what the
    /// replica holds while the verdict is [`Verdict::Known`], at least part of it while
    /// [`Verdict::Unknown`] (blocks stored since events were missed are held unless evicted
    /// since, and those before may be gone), nothing when refused.
    pub fn leading(&self, hashes: &[u64]) -> usize {
        if self.verdict.refused() {
            return 0;
        }
        hashes.iter().take_while(|hash| self.blocks.contains(hash)).count()
    }

    /// Applies a live batch.
    pub fn apply(&mut self, batch: &Batch, hasher: &BlockHasher) -> Applied {
        let seq = batch.seq;
        if seq == 0 {
            // Only an engine that has just started numbers a batch 0: its cache was empty,
            // and its hashes are checked anew (it may have restarted with other flags).
            let first = self.next.is_none();
            self.verdict = Verdict::Known;
            self.forget(Verdict::Known);
            self.awaiting = None;
            self.next = Some(1);
            self.apply_events(&batch.events, hasher);
            return if first { Applied::InOrder } else { Applied::Restarted };
        }
        let next = self.next.unwrap_or(0);
        if seq < next {
            return Applied::Stale;
        }
        self.next = Some(seq + 1);
        if let Some(from) = self.awaiting {
            // The replay this batch will be part of has not come, or stopped short.
            return Applied::Gap { from, to: seq };
        }
        if seq > next {
            // Missed stores or evictions: the blocks are wrong both ways until replayed.
            self.awaiting = Some(next);
            self.unknown();
            return Applied::Gap { from: next, to: seq };
        }
        self.apply_events(&batch.events, hasher);
        Applied::InOrder
    }

    /// Applies batches replayed from `from`, the first one missed: if they run without a
    /// hole from there to the newest batch seen, the cache is known again.
    pub fn apply_replay(&mut self, batches: &[Batch], from: u64, hasher: &BlockHasher) {
        let contiguous = batches.first().is_some_and(|first| first.seq == from)
            && batches.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1);
        if self.awaiting != Some(from) || !contiguous {
            return;
        }
        for batch in batches {
            self.apply_events(&batch.events, hasher);
        }
        let after = batches.last().map_or(from, |last| last.seq + 1);
        let next = self.next.unwrap_or(0).max(after);
        self.next = Some(next);
        if after < next {
            self.awaiting = Some(after);
        } else {
            self.awaiting = None;
            if self.verdict == Verdict::Unknown {
                self.verdict = Verdict::Known;
            }
        }
    }

    /// A replay that will not come (the replica lost the batches, or did not answer): the
    /// account starts over, unknown, from the next batch.
    pub fn give_up_replay(&mut self) {
        self.awaiting = None;
        self.forget(Verdict::Unknown);
    }

    fn unknown(&mut self) {
        if self.verdict == Verdict::Known {
            self.verdict = Verdict::Unknown;
        }
    }

    /// Forgets every block; `verdict` says whether the emptiness is known.
    /// A mismatch stays: the replica's hashes will not change without a restart, and the
    /// gateway's operator must act on it.
    fn forget(&mut self, verdict: Verdict) {
        self.blocks.clear();
        self.blocks.shrink_to(1024);
        if !self.verdict.refused() {
            self.verdict = verdict;
        }
    }

    fn apply_events(&mut self, events: &[Event], hasher: &BlockHasher) {
        for event in events {
            match event {
                Event::Stored { hashes, parent, token_ids, block_size, keyed } => {
                    if u64::from(*block_size) != self.block_size {
                        self.forget(Verdict::BlockSizeMismatch);
                    } else if parent.is_none() && !keyed {
                        let expected = hasher.event_hashes(token_ids, *block_size as usize);
                        if expected.len() == hashes.len() && expected != *hashes {
                            self.forget(Verdict::HashMismatch);
                        }
                    }
                    if !self.verdict.refused() {
                        self.blocks.extend(hashes.iter().copied());
                    }
                }
                Event::Removed { hashes } => {
                    for hash in hashes {
                        self.blocks.remove(hash);
                    }
                }
                Event::AllCleared => self.blocks.clear(),
            }
        }
        if self.blocks.len() > self.max_blocks {
            self.forget(Verdict::Unknown);
        }
    }
}
