//! A process-wide monotonic time base, so that deadlines fit in one atomic `u64`; and a
//! coarse clock for deadlines of seconds, read per request without the precise clock's cost.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Microseconds since the first call in this process, plus one (zero stays "never").
pub fn now_micros() -> u64 {
    micros_at(Instant::now())
}

/// [`now_micros`] at `instant`, an instant already read: no clock read of its own.
pub fn micros_at(instant: Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(|| instant);
    instant.saturating_duration_since(epoch).as_micros() as u64 + 1
}

/// `now_micros()` after `duration`.
pub fn micros_after(duration: Duration) -> u64 {
    now_micros().saturating_add(duration.as_micros() as u64)
}

/// The monotonic clock as of the kernel's last tick (`CLOCK_MONOTONIC_COARSE`): a few
/// milliseconds behind at most, and read without the timestamp counter, for a fraction of
/// the precise clock's cost. For deadlines counted in seconds (a connection's idle and
/// header timeouts), which are checked per request. Elsewhere than Linux, the precise clock.
#[cfg(target_os = "linux")]
pub fn coarse_now() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec to write; the clock id is a constant Linux has
    // had since 2.6.32. On the impossible failure `now` stays zero, which reads as "at
    // boot": deadlines then run from the next successful read.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// See the Linux version.
#[cfg(not(target_os = "linux"))]
pub fn coarse_now() -> Duration {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_read_before_maps_to_the_scale_now_micros_reads() {
        // The epoch is set by the first read, which may be this test's.
        let _ = now_micros();
        let before = Instant::now();
        let now = now_micros();
        let at = micros_at(before);
        assert!(at <= now, "{at} after {now}");
        assert!(micros_at(before + Duration::from_secs(1)) >= at + 1_000_000);
    }

    #[test]
    fn the_coarse_clock_never_runs_backwards_and_follows_the_precise_one() {
        let (coarse_start, precise_start) = (coarse_now(), Instant::now());
        let mut last = coarse_start;
        for _ in 0..10_000 {
            let now = coarse_now();
            assert!(now >= last);
            last = now;
        }
        // At most a tick (1-10 ms) behind the precise clock over the same span.
        let precise = precise_start.elapsed();
        assert!(last - coarse_start <= precise + Duration::from_millis(20));
    }
}
