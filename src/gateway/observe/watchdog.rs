//! The timers a streamed response runs under: the idle gap between two chunks, the total
//! time since the request arrived, and the gateway's shutdown after its drain deadline.
//! Whichever fires first ends the response (see [`super::ObservedBody`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// Why a response was cut short by the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    Idle,
    Total,
    Shutdown,
}

impl Expiry {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle_timeout",
            Self::Total => "total_timeout",
            Self::Shutdown => "shutdown",
        }
    }
}

/// The timers of one response, armed only if the body ever waits: a response whose body
/// is all there when the headers arrive (most non-streaming ones) costs no timer at all.
pub struct StreamWatchdog {
    idle: Duration,
    total_deadline: Instant,
    /// When the last chunk went through (or the response started).
    last_progress: Instant,
    abort: watch::Receiver<bool>,
    armed: Option<Armed>,
}

/// One timer for both deadlines, and the wait for the gateway's abort.
struct Armed {
    /// Set to the earlier deadline as known when it was set; a chunk since then does not
    /// move it (a timer reset per token costs more than the token), so it may fire early
    /// and is then moved on to the real deadline.
    timer: Pin<Box<Sleep>>,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl StreamWatchdog {
    /// A watchdog for a response whose request arrived at `received_at`, starting `now`;
    /// `abort` turning true ends the response (the drain deadline passed).
    pub fn new(
        idle: Duration,
        total: Duration,
        (received_at, now): (std::time::Instant, Instant),
        abort: watch::Receiver<bool>,
    ) -> Self {
        Self {
            idle,
            total_deadline: Instant::from_std(received_at) + total,
            last_progress: now,
            abort,
            armed: None,
        }
    }

    /// A chunk went through at `now`: the idle gap starts again. The caller's clock read,
    /// not one of its own: a stream passes here once per token event.
    pub fn on_progress(&mut self, now: Instant) {
        self.last_progress = now;
    }

    fn next_deadline(&self) -> Instant {
        (self.last_progress + self.idle).min(self.total_deadline)
    }

    /// Ready with the reason once a deadline passed or the gateway aborted.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Expiry> {
        let deadline = self.next_deadline();
        let abort = &self.abort;
        let armed = self.armed.get_or_insert_with(|| {
            let mut abort = abort.clone();
            let shutdown = async move {
                if abort.wait_for(|abort| *abort).await.is_err() {
                    // The gateway is gone without aborting: nothing will ever fire.
                    std::future::pending::<()>().await;
                }
            };
            Armed {
                timer: Box::pin(tokio::time::sleep_until(deadline)),
                shutdown: Box::pin(shutdown),
            }
        });
        if armed.shutdown.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Expiry::Shutdown);
        }
        // Bounded: each turn either returns or moves the timer to a later deadline.
        loop {
            if armed.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            if now >= self.total_deadline {
                return Poll::Ready(Expiry::Total);
            }
            let idle_deadline = self.last_progress + self.idle;
            if now >= idle_deadline {
                return Poll::Ready(Expiry::Idle);
            }
            armed.timer.as_mut().reset(idle_deadline.min(self.total_deadline));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn poll_once(watchdog: &mut StreamWatchdog) -> Poll<Expiry> {
        std::future::poll_fn(|cx| Poll::Ready(watchdog.poll_expired(cx))).await
    }

    fn watchdog(idle_ms: u64, total_ms: u64) -> (StreamWatchdog, watch::Sender<bool>) {
        let (abort, receiver) = watch::channel(false);
        let idle = Duration::from_millis(idle_ms);
        let total = Duration::from_millis(total_ms);
        let started = (std::time::Instant::now(), Instant::now());
        (StreamWatchdog::new(idle, total, started, receiver), abort)
    }

    #[tokio::test(start_paused = true)]
    async fn a_chunk_after_the_timer_is_set_moves_the_idle_deadline() {
        let (mut watchdog, _abort) = watchdog(100, 10_000);
        assert!(poll_once(&mut watchdog).await.is_pending());
        tokio::time::advance(Duration::from_millis(60)).await;
        watchdog.on_progress(Instant::now());
        // The timer set for 100 ms fires; the real deadline is now 160 ms.
        tokio::time::advance(Duration::from_millis(60)).await;
        assert!(poll_once(&mut watchdog).await.is_pending());
        tokio::time::advance(Duration::from_millis(50)).await;
        assert_eq!(poll_once(&mut watchdog).await, Poll::Ready(Expiry::Idle));
    }

    #[tokio::test(start_paused = true)]
    async fn steady_chunks_run_into_the_total_deadline() {
        let (mut watchdog, _abort) = watchdog(100, 250);
        for _ in 0..5 {
            assert!(poll_once(&mut watchdog).await.is_pending());
            tokio::time::advance(Duration::from_millis(60)).await;
            watchdog.on_progress(Instant::now());
        }
        assert_eq!(poll_once(&mut watchdog).await, Poll::Ready(Expiry::Total));
    }

    #[tokio::test(start_paused = true)]
    async fn an_abort_ends_the_response_before_any_deadline() {
        let (mut watchdog, abort) = watchdog(100, 10_000);
        assert!(poll_once(&mut watchdog).await.is_pending());
        abort.send_replace(true);
        assert_eq!(poll_once(&mut watchdog).await, Poll::Ready(Expiry::Shutdown));
    }
}
