//! `force_close`'s ready connections: per replica, a few connections opened ahead of the
//! requests that will use them, so that a request finds its connect (TLS handshake
//! included) and the replica's accept already done. Each still carries one request and
//! closes after it, as every `force_close` connection does.
//!
//! A connection belongs to the API-server process that accepted it, and that process was
//! chosen when it was accepted: free then, perhaps busy now. A fresh connect at request time
//! is what spreads requests over free processes, so ready connections must be young. They
//! are kept only while a replica's requests come closer together than `max_idle` (a
//! flood of small requests, where the connect is a large share of each request's time),
//! one is opened to replace each one taken (connects follow the request rate, never a
//! burst that one process would accept together), and one left unused for `max_idle` is
//! closed. Slower traffic connects at request time exactly as without them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use http::Response;
use parking_lot::Mutex;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tokio::time::Instant;

use super::force_close::{self, Upstream};
use super::upstream_body::UpstreamBody;
use super::wire::{Outgoing, Socket, still_open};
use crate::gateway::error::GatewayError;
use crate::gateway::pick::Replica;
use crate::gateway::tls::upstream::UpstreamTls;

/// How often connections left unused are closed, so that a replica no request goes to
/// any more holds none open.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What became of the requests and of the connections opened for them
/// (`laneway_ready_connections_total{outcome}`, every `force_close` entry together).
#[derive(Clone)]
pub struct ReadyCounts {
    /// Requests sent on a ready connection.
    pub used: IntCounter,
    /// Requests that found none ready and connected themselves.
    pub missed: IntCounter,
    /// Ready connections closed unused: idle too long, or closed by the replica.
    pub discarded: IntCounter,
}

impl ReadyCounts {
    pub fn new(registry: &Registry) -> Self {
        let total = IntCounterVec::new(
            Opts::new(
                "laneway_ready_connections_total",
                "force_close requests sent on a connection opened ahead (used) or on one of their own (missed), and ready connections closed unused (discarded)",
            ),
            &["outcome"],
        )
        .expect("valid");
        registry.register(Box::new(total.clone())).expect("unique metric name");
        Self {
            used: total.with_label_values(&["used"]),
            missed: total.with_label_values(&["missed"]),
            discarded: total.with_label_values(&["discarded"]),
        }
    }
}

/// One replica's ready connections and when it last got a request.
#[derive(Default)]
struct Stock {
    state: Mutex<StockState>,
    /// Connects under way for this stock.
    opening: AtomicUsize,
}

#[derive(Default)]
struct StockState {
    /// Oldest first.
    ready: VecDeque<ReadySocket>,
    last_request: Option<Instant>,
}

struct ReadySocket {
    opened_at: Instant,
    socket: Socket,
}

/// What a request found in its replica's stock.
struct Found {
    /// The oldest ready connection still fit to use.
    socket: Option<Socket>,
    /// The request before it came less than `max_idle` earlier: connections are worth
    /// keeping ready for the next ones.
    close_together: bool,
}

impl Stock {
    /// A request at `now`: takes the oldest ready connection still fit to use (those idle
    /// `max_idle` or closed by the replica are dropped on the way, and counted), and notes
    /// the request's time.
    fn take(&self, now: Instant, max_idle: Duration, counts: &ReadyCounts) -> Found {
        let mut state = self.state.lock();
        let previous = state.last_request.replace(now);
        let close_together =
            previous.is_some_and(|previous| now.saturating_duration_since(previous) < max_idle);
        while let Some(mut entry) = state.ready.pop_front() {
            let young = now.saturating_duration_since(entry.opened_at) < max_idle;
            if young && still_open(&mut entry.socket) {
                return Found { socket: Some(entry.socket), close_together };
            }
            counts.discarded.inc();
        }
        Found { socket: None, close_together }
    }

    /// Closes every connection idle `max_idle`; returns how many.
    fn expire(&self, now: Instant, max_idle: Duration) -> u64 {
        let ready = &mut self.state.lock().ready;
        let before = ready.len();
        ready.retain(|entry| now.saturating_duration_since(entry.opened_at) < max_idle);
        (before - ready.len()) as u64
    }

    fn stocked(&self) -> usize {
        self.state.lock().ready.len()
    }
}

/// Counts a connect under way until it ends, however it ends.
struct Opening(Arc<Stock>);

impl Drop for Opening {
    fn drop(&mut self) {
        self.0.opening.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The ready connections of one entry's `force_close` connector, per replica.
pub struct ReadyConnections {
    per_replica: usize,
    max_idle: Duration,
    connect_timeout: Duration,
    tls: Arc<UpstreamTls>,
    stocks: Arc<DashMap<String, Arc<Stock>>>,
    /// Set once the task that closes idle connections runs (started by the first request,
    /// inside the runtime).
    sweeping: std::sync::Once,
    pub counts: ReadyCounts,
}

impl ReadyConnections {
    /// Keeps up to `per_replica` connections ready (at least one) to each replica whose
    /// requests come less than `max_idle` apart, each used within `max_idle` or closed.
    pub fn new(
        per_replica: usize,
        max_idle: Duration,
        connect_timeout: Duration,
        tls: Arc<UpstreamTls>,
        counts: ReadyCounts,
    ) -> Self {
        Self {
            per_replica: per_replica.max(1),
            max_idle,
            connect_timeout,
            tls,
            stocks: Arc::default(),
            sweeping: std::sync::Once::new(),
            counts,
        }
    }

    fn stock(&self, replica: &str) -> Arc<Stock> {
        if let Some(stock) = self.stocks.get(replica) {
            return stock.clone();
        }
        self.stocks.entry(replica.to_string()).or_default().clone()
    }

    /// Sends `request` (origin-form target) on a ready connection to `replica`, or on one of
    /// its own if none is ready; opens a replacement in the background while the replica's
    /// requests come close together.
    pub async fn send(
        &self,
        replica: &Arc<Replica>,
        request: Outgoing<'_>,
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        self.sweeping.call_once(|| {
            let stocks = Arc::downgrade(&self.stocks);
            tokio::spawn(sweep(stocks, self.max_idle, self.counts.clone()));
        });
        let stock = self.stock(&replica.name);
        let found = stock.take(Instant::now(), self.max_idle, &self.counts);
        if found.close_together {
            self.refill(&stock, replica);
        }
        let socket = match found.socket {
            Some(socket) => {
                self.counts.used.inc();
                socket
            }
            None => {
                self.counts.missed.inc();
                // Boxed: rare once the stock is warm, and its state would otherwise enlarge
                // every request's future.
                let upstream = Upstream::of(replica, &self.tls);
                Box::pin(force_close::open(upstream, self.connect_timeout)).await?
            }
        };
        force_close::send_on(socket, &replica.name, request).await
    }

    /// Opens connections in the background until the stock, with those being opened,
    /// holds `per_replica`. A failed connect is dropped: requests connect on their own path
    /// then, and their failures reach passive health.
    fn refill(&self, stock: &Arc<Stock>, replica: &Arc<Replica>) {
        loop {
            let opening = stock.opening.load(Ordering::Acquire);
            if stock.stocked() + opening >= self.per_replica {
                return;
            }
            if stock
                .opening
                .compare_exchange(opening, opening + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            let guard = Opening(stock.clone());
            let (replica, tls, timeout) = (replica.clone(), self.tls.clone(), self.connect_timeout);
            tokio::spawn(async move {
                let opened = force_close::open(Upstream::of(&replica, &tls), timeout).await;
                if let Ok(socket) = opened {
                    let entry = ReadySocket { opened_at: Instant::now(), socket };
                    guard.0.state.lock().ready.push_back(entry);
                }
                drop(guard);
            });
        }
    }
}

/// Closes connections left unused every [`SWEEP_EVERY`] until the connector is gone.
async fn sweep(stocks: Weak<DashMap<String, Arc<Stock>>>, max_idle: Duration, counts: ReadyCounts) {
    let mut ticks = tokio::time::interval(SWEEP_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(stocks) = stocks.upgrade() else { return };
        let now = Instant::now();
        let expired: u64 = stocks.iter().map(|stock| stock.expire(now, max_idle)).sum();
        counts.discarded.inc_by(expired);
    }
}

#[cfg(test)]
mod tests;
