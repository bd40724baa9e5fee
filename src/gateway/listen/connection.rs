//! One downstream connection's life, HTTP/1 and HTTP/2 alike: a new connection must bring
//! its first request within `timeouts.client_header_ms`; an HTTP/1 request head, once
//! started, must complete within it too (slowloris); a connection with no request open is
//! closed after `timeouts.client_idle_ms` (HTTP/2: GOAWAY first). On shutdown the
//! connection finishes its open requests and closes. Requests are counted open from the
//! moment hyper hands them over until their response body ends or is dropped.
//!
//! The deadlines are checked by one timer per connection that wakes a few times per
//! timeout period, not re-armed per request: a request costs two atomic updates and a
//! read of the coarse clock ([`clock::coarse_now`]: its tick of a few milliseconds is
//! nothing against timeouts of seconds), and an expiry happens within half a period of its
//! deadline.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};

use crate::gateway::clock;

/// The client-side timeouts of one connection, read from the live config when it opens.
#[derive(Debug, Clone, Copy)]
pub struct ClientTimeouts {
    pub header: Duration,
    pub idle: Duration,
}

/// What the connection's requests and reads tell its timer. Times are nanoseconds since
/// `opened` on the coarse clock; 0 means "not set".
#[derive(Debug)]
pub struct Activity {
    opened: Duration,
    open_requests: AtomicU32,
    requests_served: AtomicU64,
    idle_since: AtomicU64,
    /// When the first byte of a request head arrived while no request was open (HTTP/1).
    head_started: AtomicU64,
    /// The client spoke the HTTP/2 preface: reads while idle are frames (pings, window
    /// updates), not the start of a request.
    http2: AtomicBool,
    first_read_seen: AtomicBool,
}

/// Why the timer ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No first request within the header timeout.
    NoRequest,
    /// An HTTP/1 request head that did not complete within the header timeout.
    SlowHead,
    /// No request open for the idle timeout.
    Idle,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            opened: clock::coarse_now(),
            open_requests: AtomicU32::new(0),
            requests_served: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(0),
            http2: AtomicBool::new(false),
            first_read_seen: AtomicBool::new(false),
        })
    }

    fn nanos_since_open(&self) -> u64 {
        // At least 1, so that a time taken at the very opening is not read as "not set".
        (clock::coarse_now().saturating_sub(self.opened).as_nanos() as u64).max(1)
    }

    /// A request was handed over; the returned guard closes it when dropped.
    pub fn begin(self: &Arc<Self>) -> OpenRequest {
        self.open_requests.fetch_add(1, Ordering::AcqRel);
        self.requests_served.fetch_add(1, Ordering::Relaxed);
        self.head_started.store(0, Ordering::Relaxed);
        OpenRequest { activity: self.clone() }
    }

    fn note_read(&self, bytes: &[u8]) {
        // A plain load on every read after the first; the swap only once.
        if !self.first_read_seen.load(Ordering::Relaxed)
            && !self.first_read_seen.swap(true, Ordering::Relaxed)
            && bytes.starts_with(b"PRI * HTTP/2.0")
        {
            self.http2.store(true, Ordering::Relaxed);
        }
        if self.open_requests.load(Ordering::Acquire) == 0
            && !self.http2.load(Ordering::Relaxed)
            && self.head_started.load(Ordering::Relaxed) == 0
        {
            self.head_started.store(self.nanos_since_open(), Ordering::Relaxed);
        }
    }

    /// Whether a deadline has passed at `now` (nanoseconds since opening).
    fn expired(&self, timeouts: ClientTimeouts, now: u64) -> Option<Expiry> {
        if self.open_requests.load(Ordering::Acquire) > 0 {
            return None;
        }
        let past =
            |since: u64, limit: Duration| now.saturating_sub(since) >= limit.as_nanos() as u64;
        if self.requests_served.load(Ordering::Relaxed) == 0 {
            return past(0, timeouts.header).then_some(Expiry::NoRequest);
        }
        let head_started = self.head_started.load(Ordering::Relaxed);
        if head_started != 0 && past(head_started, timeouts.header) {
            return Some(Expiry::SlowHead);
        }
        past(self.idle_since.load(Ordering::Relaxed), timeouts.idle).then_some(Expiry::Idle)
    }

    /// Resolves when a deadline passes (checked a few times per period, see the module doc).
    pub async fn expiry(&self, timeouts: ClientTimeouts) -> Expiry {
        let tick = (timeouts.header.min(timeouts.idle) / 4).max(Duration::from_millis(5));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Some(expiry) = self.expired(timeouts, self.nanos_since_open()) {
                return expiry;
            }
        }
    }
}

/// One open request on a connection.
#[derive(Debug)]
pub struct OpenRequest {
    activity: Arc<Activity>,
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        let activity = &self.activity;
        activity.idle_since.store(activity.nanos_since_open(), Ordering::Relaxed);
        activity.open_requests.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A client stream whose reads are shown to the connection's [`Activity`].
pub struct WatchedIo<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> WatchedIo<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.note_read(&buf.filled()[before..]);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Counts a listener's open connections so that a drain waits for the last one, signalled
/// rather than polled.
#[derive(Debug, Default)]
pub struct ConnectionTracker {
    open: AtomicUsize,
    all_closed: Notify,
}

/// One open connection; dropping it may wake the drain.
#[derive(Debug)]
pub struct TrackedConnection {
    tracker: Arc<ConnectionTracker>,
}

impl ConnectionTracker {
    pub fn track(self: &Arc<Self>) -> TrackedConnection {
        self.open.fetch_add(1, Ordering::AcqRel);
        TrackedConnection { tracker: self.clone() }
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Resolves once no connection is open.
    pub async fn all_closed(&self) {
        loop {
            let closed = self.all_closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            if self.open() == 0 {
                return;
            }
            closed.await;
        }
    }
}

impl Drop for TrackedConnection {
    fn drop(&mut self) {
        if self.tracker.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.tracker.all_closed.notify_waiters();
        }
    }
}

/// The ways a connection's driver can be told to stop.
pub struct Stops {
    pub shutdown: watch::Receiver<bool>,
    pub timeouts: ClientTimeouts,
}

/// Drives `connection` until it ends: on shutdown or an expired client deadline it is asked
/// to finish with `close` (HTTP/1 closes once idle, HTTP/2 sends GOAWAY); a connection that
/// expired is dropped if it has not closed within one header timeout after that.
pub async fn drive<C, E>(
    mut connection: Pin<&mut C>,
    close: impl Fn(Pin<&mut C>),
    activity: &Activity,
    mut stops: Stops,
) where
    C: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "downstream connection ended with an error");
            }
        }
        _ = async { stops.shutdown.wait_for(|stop| *stop).await.map(|_| ()) } => {
            close(connection.as_mut());
            let _ = connection.await;
        }
        expiry = activity.expiry(stops.timeouts) => {
            tracing::debug!(?expiry, "closing a client connection");
            close(connection.as_mut());
            let _ = tokio::time::timeout(stops.timeouts.header, connection).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUTS: ClientTimeouts =
        ClientTimeouts { header: Duration::from_secs(10), idle: Duration::from_secs(75) };
    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_new_connection_must_bring_a_request_within_the_header_timeout() {
        let activity = Activity::new();
        assert_eq!(activity.expired(TIMEOUTS, 9 * SECOND), None);
        assert_eq!(activity.expired(TIMEOUTS, 10 * SECOND), Some(Expiry::NoRequest));
        let open = activity.begin();
        assert_eq!(activity.expired(TIMEOUTS, 100 * SECOND), None, "a request is open");
        drop(open);
    }

    #[test]
    fn an_idle_connection_lasts_the_idle_timeout_not_the_header_timeout() {
        let activity = Activity::new();
        drop(activity.begin());
        let idle_since = activity.idle_since.load(Ordering::Relaxed);
        assert_eq!(activity.expired(TIMEOUTS, idle_since + 30 * SECOND), None);
        assert_eq!(activity.expired(TIMEOUTS, idle_since + 75 * SECOND), Some(Expiry::Idle));
    }

    #[test]
    fn a_started_http1_head_must_complete_within_the_header_timeout() {
        let activity = Activity::new();
        activity.note_read(b"POST / HTTP/1.1\r\n");
        drop(activity.begin());
        activity.note_read(b"POST /v1/chat");
        let started = activity.head_started.load(Ordering::Relaxed);
        assert_ne!(started, 0);
        assert_eq!(activity.expired(TIMEOUTS, started + 10 * SECOND), Some(Expiry::SlowHead));
        // The head completed: the request is open, then the connection idles again.
        drop(activity.begin());
        assert_eq!(activity.head_started.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn http2_frames_while_idle_do_not_start_the_header_timer() {
        let activity = Activity::new();
        activity.note_read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        drop(activity.begin());
        activity.note_read(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00ping");
        assert_eq!(activity.head_started.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn the_drain_is_woken_by_the_last_connection() {
        let tracker = Arc::new(ConnectionTracker::default());
        let first = tracker.track();
        let second = tracker.track();
        let drained = tokio::spawn({
            let tracker = tracker.clone();
            async move { tracker.all_closed().await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!drained.is_finished());
        drop(second);
        drained.await.unwrap();
        assert_eq!(tracker.open(), 0);
    }
}
