//! The timers a streamed response runs under: the idle gap between two chunks, the total
//! time since the request arrived, and the gateway's shutdown after its drain deadline.
//! Whichever fires first ends the response (see [`super::ObservedBody`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::time::Sleep;

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

pub struct StreamWatchdog {
    idle: Duration,
    idle_timer: Pin<Box<Sleep>>,
    total_timer: Pin<Box<Sleep>>,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl StreamWatchdog {
    /// `abort` turning true ends the response (the drain deadline passed).
    pub fn new(
        idle: Duration,
        total: Duration,
        received_at: Instant,
        mut abort: watch::Receiver<bool>,
    ) -> Self {
        let now = tokio::time::Instant::now();
        let shutdown = async move {
            if abort.wait_for(|abort| *abort).await.is_err() {
                // The gateway is gone without aborting: nothing will ever fire.
                std::future::pending::<()>().await;
            }
        };
        Self {
            idle,
            idle_timer: Box::pin(tokio::time::sleep_until(now + idle)),
            total_timer: Box::pin(tokio::time::sleep_until(
                tokio::time::Instant::from_std(received_at) + total,
            )),
            shutdown: Box::pin(shutdown),
        }
    }

    /// A chunk arrived: the idle gap starts again.
    pub fn on_progress(&mut self) {
        let next = tokio::time::Instant::now() + self.idle;
        self.idle_timer.as_mut().reset(next);
    }

    /// Ready with the reason once a timer fired.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Expiry> {
        if self.shutdown.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Expiry::Shutdown);
        }
        if self.total_timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Expiry::Total);
        }
        if self.idle_timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Expiry::Idle);
        }
        Poll::Pending
    }
}
