//! `spread`: a fixed set of N connections per replica, used in turn, so that requests land
//! on up to N API-server processes without a handshake each. A connection still streaming
//! a response is skipped, never queued behind. When all N are busy the request takes a
//! spare: up to `SPARES_PER_CONNECTION * N` further connections, opened by such bursts and
//! kept for the next one (a connect and a close per request were a quarter of the
//! gateway's CPU at 64 connections over 2 x 16 kept ones). Only when every spare is busy
//! too does a request get a one-off connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use http::{Request, Response};
use hyper::client::conn::http1::SendRequest;
use tokio::sync::Mutex;

use super::force_close::{self, Upstream};
use super::upstream_body::UpstreamBody;
use super::upstream_error;
use crate::gateway::body::ProxyBody;
use crate::gateway::error::GatewayError;

/// Spare connections a replica may keep per rotated connection.
const SPARES_PER_CONNECTION: usize = 3;

/// One replica's connections.
struct SpreadPool {
    // A tokio mutex per slot, only ever `try_lock`ed or held across its own reconnect: a
    // busy slot is skipped, never waited for. The first `rotated` slots are used in turn,
    // the spares after them in order.
    slots: Vec<Mutex<Option<SendRequest<ProxyBody>>>>,
    rotated: usize,
    next: AtomicUsize,
}

impl SpreadPool {
    /// Slot indices in the order a request tries them: the rotated ones from the next in
    /// turn, then the spares.
    fn try_order(&self) -> impl Iterator<Item = usize> + use<> {
        let (rotated, total) = (self.rotated, self.slots.len());
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..rotated).map(move |turn| (start + turn) % rotated).chain(rotated..total)
    }
}

/// The spread connections of one entry, per replica.
pub struct Spread {
    pools: DashMap<String, Arc<SpreadPool>>,
    connections: usize,
    connect_timeout: Duration,
    /// Requests that found every slot, spares included, busy and used a one-off connection.
    pub overflow_requests: AtomicU64,
}

impl Spread {
    pub fn new(connections: usize, connect_timeout: Duration) -> Self {
        Self {
            pools: DashMap::new(),
            connections: connections.max(1),
            connect_timeout,
            overflow_requests: AtomicU64::new(0),
        }
    }

    fn pool(&self, replica: &str) -> Arc<SpreadPool> {
        if let Some(pool) = self.pools.get(replica) {
            return pool.clone();
        }
        self.pools
            .entry(replica.to_string())
            .or_insert_with(|| {
                let total = self.connections * (1 + SPARES_PER_CONNECTION);
                Arc::new(SpreadPool {
                    slots: (0..total).map(|_| Mutex::new(None)).collect(),
                    rotated: self.connections,
                    next: AtomicUsize::new(0),
                })
            })
            .clone()
    }

    /// Sends `request` (origin-form target) on the next free connection to the replica.
    pub async fn send(
        &self,
        upstream: Upstream<'_>,
        request: Request<ProxyBody>,
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        let replica = upstream.name;
        let pool = self.pool(replica);
        for index in pool.try_order() {
            let Ok(mut slot) = pool.slots[index].try_lock() else {
                continue;
            };
            let sender = match slot.as_mut() {
                Some(sender) if sender.is_ready() => sender,
                Some(sender) if !sender.is_closed() => continue,
                // Boxed, as is the one-off below: opening a connection is rare here, and
                // its state would otherwise enlarge every request's future.
                _ => slot
                    .insert(Box::pin(force_close::connect(upstream, self.connect_timeout)).await?),
            };
            // The response future does not borrow the connection: release the slot now.
            let response = sender.send_request(request);
            drop(slot);
            let response = response.await;
            return response
                .map(|response| response.map(UpstreamBody::from))
                .map_err(|error| upstream_error::from_hyper(replica, error));
        }
        self.overflow_requests.fetch_add(1, Ordering::Relaxed);
        Box::pin(force_close::send(upstream, self.connect_timeout, request)).await
    }
}
