//! A replica's fastest recent first tokens by prompt size, among requests that found no
//! prompt ahead of them in the engine: the lower envelope of TTFT against a prompt's own
//! tokens, whose slope is the engine's prefill time per token.
//!
//! Everything else in a first token only adds to it: an API process busy streaming other
//! requests, a queue at the engine, a crowded batch. On a busy replica those delays are
//! hundreds of milliseconds and come and go with which process took the connection, so a
//! least-squares line through all first tokens learns its slope from that noise: on the
//! simulator's `h20-tp4`, whose engine takes 53 us (wall, speed 2) per prompt token, the
//! fit read 15-37 us, predicted a 9,000-token prompt within its 500 ms objective, and nine
//! such prompts in ten sent there missed it. The fastest first tokens of each size are the
//! ones where nothing was in the way, and the line through them is the engine's.
//!
//! Only requests with nothing ahead of them in the engine are kept: a prompt queued behind
//! one whose prefill is nearly done comes fast behind "its" tokens, and the fastest of
//! those bent the line as flat as the fit's. A size counts once it has `MIN_KEPT`
//! first tokens: one unlucky request (on a busy API process) would otherwise stand for
//! its size until that size is sent there again, which a slope read from it prevents.

/// Sizes told apart: powers of two of the tokens, up to 2^24.
pub const BUCKETS: usize = 25;
/// Recent first tokens kept per size; the envelope is their fastest, so a replica that
/// slows is seen as slower within this many requests of each size.
const KEPT: usize = 8;
/// First tokens a size needs before its fastest counts.
const MIN_KEPT: usize = 2;
/// Sizes the points must span, as a ratio of tokens, for a slope to be read from them.
const MIN_SPAN: f64 = 2.0;

/// The last first tokens of each prompt size, as `(tokens, ttft seconds)`.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefillEnvelope {
    buckets: [Bucket; BUCKETS],
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Bucket {
    samples: [(f64, f64); KEPT],
    len: usize,
    next: usize,
}

impl Bucket {
    fn push(&mut self, sample: (f64, f64)) {
        self.samples[self.next] = sample;
        self.next = (self.next + 1) % KEPT;
        self.len = (self.len + 1).min(KEPT);
    }

    /// The fastest kept first token, once `MIN_KEPT` are.
    fn fastest(&self) -> Option<(f64, f64)> {
        if self.len < MIN_KEPT {
            return None;
        }
        self.samples[..self.len].iter().copied().min_by(|a, b| a.1.total_cmp(&b.1))
    }
}

impl Default for PrefillEnvelope {
    fn default() -> Self {
        Self { buckets: [Bucket::default(); BUCKETS] }
    }
}

/// The size a number of tokens is kept under.
pub fn bucket(tokens: f64) -> usize {
    // Truncation is the point: the power of two at or below the count.
    let log = tokens.max(1.0).log2() as usize;
    log.min(BUCKETS - 1)
}

impl PrefillEnvelope {
    /// A first token after `ttft` seconds for a prompt of `tokens`, with no other prompt
    /// ahead of it in the engine. Non-finite or negative values are ignored.
    pub fn observe(&mut self, tokens: f64, ttft: f64) {
        if !(tokens.is_finite() && ttft.is_finite() && tokens >= 0.0 && ttft >= 0.0) {
            return;
        }
        self.buckets[bucket(tokens)].push((tokens, ttft));
    }

    /// The fastest recent first token of each size seen `MIN_KEPT` times.
    pub fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.buckets.iter().filter_map(Bucket::fastest)
    }

    /// Seconds per token of the least-squares line through [`Self::points`], once they
    /// span `MIN_SPAN` in tokens; `None` before (one size seen says nothing of the slope).
    pub fn slope(&self) -> Option<f64> {
        let (mut n, mut sx, mut sy) = (0.0, 0.0, 0.0);
        let (mut low, mut high) = (f64::INFINITY, 0.0_f64);
        for (x, y) in self.points() {
            n += 1.0;
            sx += x;
            sy += y;
            low = low.min(x);
            high = high.max(x);
        }
        if n < 2.0 || high < MIN_SPAN * low.max(1.0) {
            return None;
        }
        let (mean_x, mean_y) = (sx / n, sy / n);
        let (mut spread, mut covariance) = (0.0, 0.0);
        for (x, y) in self.points() {
            spread += (x - mean_x) * (x - mean_x);
            covariance += (x - mean_x) * (y - mean_y);
        }
        (spread > f64::EPSILON).then(|| covariance / spread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_size_says_nothing_of_the_slope() {
        let mut envelope = PrefillEnvelope::default();
        assert_eq!(envelope.slope(), None);
        for ttft in [0.2, 0.1, 0.3] {
            envelope.observe(1000.0, ttft);
        }
        // 1000 and 1500 tokens share a size; 1000 and 1900 are within the span asked.
        envelope.observe(1900.0, 0.15);
        envelope.observe(1900.0, 0.15);
        assert_eq!(envelope.slope(), None);
        // One first token of a size does not count: it may have been an unlucky one.
        envelope.observe(9000.0, 0.9);
        assert_eq!(envelope.slope(), None);
        envelope.observe(9000.0, 0.5);
        let slope = envelope.slope().unwrap();
        assert!(slope > 0.0 && slope < 0.9 / 9000.0, "{slope}");
        envelope.observe(f64::NAN, 0.1);
        envelope.observe(5000.0, f64::INFINITY);
        envelope.observe(-3.0, 0.1);
        assert_eq!(envelope.slope(), Some(slope), "invalid samples ignored");
    }

    #[test]
    fn delays_that_only_add_leave_the_engines_line() {
        // The engine: 60 ms + 53 us a token. On top, a delay of 0 to 2 s on most first
        // tokens, more often on the long prompts (a least-squares line would bend).
        let mut envelope = PrefillEnvelope::default();
        let mut state = 7u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        for n in 0..200 {
            let tokens = if n % 3 == 0 { 9000.0 } else { 1000.0 };
            let delayed = next() < if tokens > 5000.0 { 0.8 } else { 0.5 };
            let delay = if delayed { 2.0 * next() } else { 0.0 };
            envelope.observe(tokens, 0.06 + 53e-6 * tokens + delay);
        }
        let slope = envelope.slope().unwrap();
        assert!((slope - 53e-6).abs() < 1e-6, "{slope}");
    }

    #[test]
    fn a_replica_that_slows_is_seen_within_the_kept_samples() {
        let mut envelope = PrefillEnvelope::default();
        for _ in 0..KEPT {
            envelope.observe(1000.0, 0.06 + 10e-6 * 1000.0);
            envelope.observe(9000.0, 0.06 + 10e-6 * 9000.0);
        }
        assert!((envelope.slope().unwrap() - 10e-6).abs() < 1e-9);
        // Three times slower from now on: once every kept sample is a slow one.
        for _ in 0..KEPT {
            envelope.observe(1000.0, 3.0 * (0.06 + 10e-6 * 1000.0));
            envelope.observe(9000.0, 3.0 * (0.06 + 10e-6 * 9000.0));
        }
        assert!((envelope.slope().unwrap() - 30e-6).abs() < 1e-9);
    }
}
