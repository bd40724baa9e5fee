//! A process-wide monotonic time base, so that deadlines fit in one atomic `u64`.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Microseconds since the first call in this process, plus one (zero stays "never").
pub fn now_micros() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    epoch.elapsed().as_micros() as u64 + 1
}

/// `now_micros()` after `duration`.
pub fn micros_after(duration: Duration) -> u64 {
    now_micros().saturating_add(duration.as_micros() as u64)
}
