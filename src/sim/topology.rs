//! Replicas that span two nodes: what a step costs when one engine runs over a cross-node
//! link, either as tensor parallelism across the nodes (TP16: every layer's collectives
//! cross the link) or as a pipeline (PP2/TP8: each node runs half the layers, microbatches
//! flow through the stages, activations cross once per stage boundary).
//!
//! # The link (`tcp` or `erdma`)
//! One exchange across the link costs `latency + bytes / bandwidth`. A decode step moves one
//! token per sequence, so its exchanges are latency-bound; a prefill step moves thousands of
//! tokens, so its exchanges are volume-bound. The two links' figures are shared by every
//! profile ([`Link::latency_us`], [`Link::bytes_per_us`]), so a profile over `tcp` and the
//! same profile over `erdma` differ by the link alone.
//!
//! # Tensor parallel across nodes (`pipeline_stages = 1`)
//! ```text
//! step = compute + exchanges_per_step * (latency + tokens * bytes_per_token / bandwidth)
//! ```
//! where `compute` is the single-node formula (see [`super::engine`]) with the profile's
//! compute figures (those of the model on all the GPUs of both nodes) and `tokens` are the
//! step's prefill tokens plus one per decoding sequence.
//!
//! # Pipeline (`pipeline_stages = S`)
//! The compute figures are those of the whole model on one node; a stage runs `1/S` of it.
//! The step's sequences are dealt round-robin into `m = min(microbatches, sequences)`
//! microbatches. Microbatch `j` goes through every stage and back to the first one (`S`
//! handoffs, each costing `latency + stage_handoff`, the `S - 1` forward ones also carrying
//! its tokens' activations), while each stage works on one microbatch at a time:
//! ```text
//! cycle_j     = compute_j + S * (latency + stage_handoff) + (S - 1) * tokens_j * bytes / bandwidth
//! occupancy_j = compute_j / S
//! step        = max( max_j cycle_j, sum_j occupancy_j )
//! ```
//! With one microbatch every stage idles `(S - 1) / S` of the step (the bubble); with `S` or
//! more, the stages overlap and the step approaches the busiest stage's share of the work.
//! Every sequence gets its token at the end of the step, as on one node.

use serde::{Deserialize, Serialize};

/// The cross-node network between the nodes a replica spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Link {
    /// Plain TCP between the nodes (NCCL's socket transport).
    Tcp,
    /// Elastic RDMA.
    Erdma,
}

impl Link {
    /// Fixed cost of one exchange: a collective or a stage handoff, small payload. TCP's
    /// 280 us and eRDMA's 40 us are what the DeepSeek V4 Pro cell's TPOT drop (95.1 -> 52.9 ms
    /// over 176 exchanges a step) and the Qwen3-32B TP16 TPOT (54.3 ms) need together.
    pub fn latency_us(self) -> f64 {
        match self {
            Link::Tcp => 280.0,
            Link::Erdma => 40.0,
        }
    }

    /// Payload bandwidth, bytes per microsecond: about 25 Gbit/s of TCP goodput and
    /// 100 Gbit/s for eRDMA.
    pub fn bytes_per_us(self) -> f64 {
        match self {
            Link::Tcp => 3000.0,
            Link::Erdma => 12000.0,
        }
    }

    fn exchange_us(self, tokens: f64, bytes_per_token: f64) -> f64 {
        self.latency_us() + tokens * bytes_per_token / self.bytes_per_us()
    }
}

/// How a replica spans nodes (`[engine.cross_node]` in a profile).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrossNodeProfile {
    pub link: Link,
    /// 1: tensor parallel across the nodes; 2 or more: a pipeline of that many stages.
    pub pipeline_stages: u64,
    /// Microbatches a pipeline splits a step's sequences into (ignored without a pipeline).
    #[serde(default = "one")]
    pub microbatches: u64,
    /// Exchanges across the link per step under tensor parallelism (its collectives, a few
    /// per layer); ignored by a pipeline, which exchanges once per stage boundary.
    #[serde(default)]
    pub exchanges_per_step: u64,
    /// Bytes one token carries across the link per exchange (its activations).
    pub bytes_per_token: f64,
    /// A pipeline runtime's own fixed cost per stage handoff, beyond the link's latency.
    #[serde(default)]
    pub stage_handoff_us: f64,
}

fn one() -> u64 {
    1
}

/// One running sequence's share of a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SequenceWork {
    /// Tokens it pushes through the model this step: its prefill chunk, or 1 when decoding.
    pub tokens: u64,
    /// Its compute in this step (prefill, attention and decode terms, no fixed step cost).
    pub compute_us: f64,
}

impl CrossNodeProfile {
    /// The step's cost for these sequences (those with no work this step left out), given
    /// the fixed per-step compute `step_base_us`.
    pub fn step_us(&self, step_base_us: f64, work: &[SequenceWork]) -> f64 {
        if self.pipeline_stages <= 1 {
            let compute: f64 = work.iter().map(|w| w.compute_us).sum();
            let tokens: u64 = work.iter().map(|w| w.tokens).sum();
            let exchange = self.link.exchange_us(tokens as f64, self.bytes_per_token);
            return step_base_us + compute + self.exchanges_per_step as f64 * exchange;
        }
        let stages = self.pipeline_stages as f64;
        let microbatches = (self.microbatches as usize).clamp(1, work.len().max(1));
        let mut longest_cycle: f64 = 0.0;
        let mut occupancy = 0.0;
        for j in 0..microbatches {
            let members = work.iter().skip(j).step_by(microbatches);
            let (compute, tokens) =
                members.fold((step_base_us, 0u64), |(c, t), w| (c + w.compute_us, t + w.tokens));
            let handoffs = stages * (self.link.latency_us() + self.stage_handoff_us);
            let activations =
                (stages - 1.0) * tokens as f64 * self.bytes_per_token / self.link.bytes_per_us();
            longest_cycle = longest_cycle.max(compute + handoffs + activations);
            occupancy += compute / stages;
        }
        longest_cycle.max(occupancy)
    }

    /// Checks every field, reporting the first bad one with its path.
    pub fn validate(&self) -> Result<(), (&'static str, String, &'static str)> {
        if self.pipeline_stages == 0 {
            return Err(("engine.cross_node.pipeline_stages", "0".into(), "must be at least 1"));
        }
        if self.microbatches == 0 {
            return Err(("engine.cross_node.microbatches", "0".into(), "must be at least 1"));
        }
        for (field, value) in [
            ("engine.cross_node.bytes_per_token", self.bytes_per_token),
            ("engine.cross_node.stage_handoff_us", self.stage_handoff_us),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err((field, value.to_string(), "must be a finite number >= 0"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoding(n: usize, per_seq: f64) -> Vec<SequenceWork> {
        vec![SequenceWork { tokens: 1, compute_us: per_seq }; n]
    }

    #[test]
    fn tensor_parallel_pays_every_exchange_per_step() {
        let tp = CrossNodeProfile {
            link: Link::Tcp,
            pipeline_stages: 1,
            microbatches: 1,
            exchanges_per_step: 100,
            bytes_per_token: 3000.0,
            stage_handoff_us: 0.0,
        };
        // 2 decoding sequences: 100 * (280 + 2 * 3000 / 3000) = 28200 us of link.
        assert_eq!(tp.step_us(10_000.0, &decoding(2, 100.0)), 10_200.0 + 28_200.0);
        let erdma = CrossNodeProfile { link: Link::Erdma, ..tp };
        assert_eq!(erdma.step_us(10_000.0, &decoding(2, 100.0)), 10_200.0 + 100.0 * 40.5);
    }

    #[test]
    fn one_microbatch_leaves_the_bubble_and_more_fill_it() {
        let pp = CrossNodeProfile {
            link: Link::Erdma,
            pipeline_stages: 2,
            microbatches: 1,
            exchanges_per_step: 0,
            bytes_per_token: 0.0,
            stage_handoff_us: 0.0,
        };
        // Compute-heavy batch of 4: one microbatch runs the whole model in series.
        let work = vec![SequenceWork { tokens: 1000, compute_us: 10_000.0 }; 4];
        let serial = pp.step_us(0.0, &work);
        assert_eq!(serial, 40_000.0 + 2.0 * 40.0);
        // Two microbatches: each is half the work, and the stages overlap.
        let overlapped = CrossNodeProfile { microbatches: 2, ..pp.clone() }.step_us(0.0, &work);
        assert_eq!(overlapped, 20_000.0 + 2.0 * 40.0);
        // Never more microbatches than sequences.
        let one = &work[..1];
        let many = CrossNodeProfile { microbatches: 8, ..pp.clone() };
        assert_eq!(many.step_us(0.0, one), pp.step_us(0.0, one));
    }
}
