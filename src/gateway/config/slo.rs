//! An entry's latency objective (`[entries.short.slo]`): the TTFT and TPOT its requests
//! should meet, and the share of the TTFT objective after which a streamed request its
//! replica has not answered is sent once more (a hedge). Predicted-latency placement aims
//! at it; a request may tighten it.

use std::time::Duration;

use serde::Deserialize;

use super::issues::Issues;

/// Default TTFT objective: the field's example SLO (TTFT <= 1 s).
pub const DEFAULT_TTFT_MS: u64 = 1000;
/// Default TPOT objective: the field's example SLO (TPOT <= 50 ms).
pub const DEFAULT_TPOT_MS: u64 = 50;
/// Largest objective accepted, in config and in headers: one hour.
pub const MAX_SLO_MS: u64 = 3_600_000;
/// Default hedge point: a streamed request still unanswered after 30% of its TTFT
/// objective is sent once more (`benches/results/2026-12-02-hedged-sends/`).
pub const DEFAULT_HEDGE_PERCENT: u64 = 30;

/// `[entries.X.slo]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEntrySlo {
    pub ttft_ms: Option<i64>,
    pub tpot_ms: Option<i64>,
    pub hedge_percent: Option<i64>,
}

/// The validated objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntrySlo {
    pub ttft: Duration,
    pub tpot: Duration,
    /// Percent of `ttft` after which an unanswered streamed request is hedged (0: never).
    pub hedge_percent: u32,
}

impl Default for EntrySlo {
    fn default() -> Self {
        Self {
            ttft: Duration::from_millis(DEFAULT_TTFT_MS),
            tpot: Duration::from_millis(DEFAULT_TPOT_MS),
            hedge_percent: DEFAULT_HEDGE_PERCENT as u32,
        }
    }
}

impl EntrySlo {
    /// The tighter of this objective and the given limits, field by field.
    pub fn tightened(self, ttft: Option<Duration>, tpot: Option<Duration>) -> Self {
        Self {
            ttft: ttft.map_or(self.ttft, |t| t.min(self.ttft)),
            tpot: tpot.map_or(self.tpot, |t| t.min(self.tpot)),
            hedge_percent: self.hedge_percent,
        }
    }

    /// How long a streamed request waits for its replica's answer before it is hedged.
    pub fn hedge_after(self) -> Option<Duration> {
        (self.hedge_percent > 0).then(|| self.ttft * self.hedge_percent / 100)
    }
}

pub(super) fn entry_slo(path: &str, raw: &RawEntrySlo, issues: &mut Issues) -> EntrySlo {
    let ms = |field: &str, value, default, issues: &mut Issues| {
        Duration::from_millis(issues.positive(
            &format!("{path}.{field}"),
            value,
            default,
            MAX_SLO_MS,
        ))
    };
    EntrySlo {
        ttft: ms("ttft_ms", raw.ttft_ms, DEFAULT_TTFT_MS, issues),
        tpot: ms("tpot_ms", raw.tpot_ms, DEFAULT_TPOT_MS, issues),
        hedge_percent: issues.number(
            &format!("{path}.hedge_percent"),
            raw.hedge_percent,
            DEFAULT_HEDGE_PERCENT,
            0,
            100,
        ) as u32,
    }
}
