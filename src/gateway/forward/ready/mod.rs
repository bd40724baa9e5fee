//! `force_close`'s ready connections: per replica, a few connections opened ahead of the
//! requests that will use them, so that a request finds its connect (TLS handshake
//! included) and the replica's accept already done. Each still carries one request and
//! closes after it, as every `force_close` connection does. One is opened to replace each
//! one taken, so connects follow the request rate instead of coming in bursts (a burst
//! lands on one API-server process); and one left unused for [`READY_MAX_IDLE`] is closed,
//! so that the process that accepted it was free a moment ago, not long ago.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use http::{Request, Response};
use parking_lot::Mutex;
use tokio::time::Instant;

use super::force_close::{self, Upstream};
use super::upstream_body::UpstreamBody;
use super::upstream_error;
use super::wire::{self, After, Socket, still_open};
use crate::gateway::body::ProxyBody;
use crate::gateway::error::GatewayError;
use crate::gateway::pick::Replica;
use crate::gateway::tls::upstream::UpstreamTls;

/// How long a ready connection may wait for a request before it is closed unused.
pub const READY_MAX_IDLE: Duration = Duration::from_secs(1);

/// What became of the requests and of the connections opened for them.
#[derive(Debug, Default)]
pub struct ReadyCounts {
    /// Requests sent on a ready connection.
    pub used: AtomicU64,
    /// Requests that found none ready and connected themselves.
    pub missed: AtomicU64,
    /// Ready connections closed unused: idle too long, or closed by the replica.
    pub discarded: AtomicU64,
}

/// One replica's ready connections, oldest first.
#[derive(Default)]
struct Stock {
    ready: Mutex<VecDeque<ReadySocket>>,
    /// Connects under way for this stock.
    opening: AtomicUsize,
}

struct ReadySocket {
    opened_at: Instant,
    socket: Socket,
}

impl Stock {
    /// The oldest ready connection still fit to use; those idle too long or closed by the
    /// replica are dropped on the way (and counted).
    fn take(&self, now: Instant, counts: &ReadyCounts) -> Option<Socket> {
        let mut ready = self.ready.lock();
        while let Some(mut entry) = ready.pop_front() {
            if now.duration_since(entry.opened_at) < READY_MAX_IDLE && still_open(&mut entry.socket)
            {
                return Some(entry.socket);
            }
            counts.discarded.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// Closes every connection idle too long; returns how many.
    fn expire(&self, now: Instant) -> u64 {
        let mut ready = self.ready.lock();
        let before = ready.len();
        ready.retain(|entry| now.duration_since(entry.opened_at) < READY_MAX_IDLE);
        (before - ready.len()) as u64
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
    connect_timeout: Duration,
    tls: Arc<UpstreamTls>,
    stocks: Arc<DashMap<String, Arc<Stock>>>,
    /// Set once the task that closes idle connections runs (started by the first request,
    /// inside the runtime).
    sweeping: std::sync::Once,
    pub counts: Arc<ReadyCounts>,
}

impl ReadyConnections {
    /// Keeps `per_replica` connections ready to each replica requests go to (at least one).
    pub fn new(per_replica: usize, connect_timeout: Duration, tls: Arc<UpstreamTls>) -> Self {
        Self {
            per_replica: per_replica.max(1),
            connect_timeout,
            tls,
            stocks: Arc::default(),
            sweeping: std::sync::Once::new(),
            counts: Arc::default(),
        }
    }

    fn stock(&self, replica: &str) -> Arc<Stock> {
        if let Some(stock) = self.stocks.get(replica) {
            return stock.clone();
        }
        self.stocks.entry(replica.to_string()).or_default().clone()
    }

    /// Sends `request` (origin-form target) on a ready connection to `replica`, or on one of
    /// its own if none is ready, and opens a replacement in the background.
    pub async fn send(
        &self,
        replica: &Arc<Replica>,
        request: Request<ProxyBody>,
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        self.sweeping.call_once(|| {
            tokio::spawn(sweep(Arc::downgrade(&self.stocks), self.counts.clone()));
        });
        let stock = self.stock(&replica.name);
        let ready = stock.take(Instant::now(), &self.counts);
        self.refill(&stock, replica);
        let upstream = Upstream::of(replica, &self.tls);
        let socket = match ready {
            Some(socket) => {
                self.counts.used.fetch_add(1, Ordering::Relaxed);
                socket
            }
            None => {
                self.counts.missed.fetch_add(1, Ordering::Relaxed);
                // Boxed: rare once the stock is warm, and its state would otherwise enlarge
                // every request's future.
                Box::pin(force_close::open(upstream, self.connect_timeout)).await?
            }
        };
        let response = wire::exchange(socket, request, After::Close)
            .await
            .map_err(|error| upstream_error::from_wire(upstream.name, error))?;
        Ok(response.map(UpstreamBody::Wire))
    }

    /// Opens connections in the background until the stock, with those being opened,
    /// holds `per_replica`. A failed connect is dropped: requests connect on their own path
    /// then, and their failures reach passive health.
    fn refill(&self, stock: &Arc<Stock>, replica: &Arc<Replica>) {
        loop {
            let opening = stock.opening.load(Ordering::Acquire);
            if stock.ready.lock().len() + opening >= self.per_replica {
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
                    guard.0.ready.lock().push_back(entry);
                }
                drop(guard);
            });
        }
    }
}

/// Closes idle connections every [`READY_MAX_IDLE`] until the connector is gone, so that a
/// replica no request goes to any more holds none open.
async fn sweep(stocks: Weak<DashMap<String, Arc<Stock>>>, counts: Arc<ReadyCounts>) {
    let mut ticks = tokio::time::interval(READY_MAX_IDLE);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(stocks) = stocks.upgrade() else { return };
        let now = Instant::now();
        let expired: u64 = stocks.iter().map(|stock| stock.expire(now)).sum();
        counts.discarded.fetch_add(expired, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
