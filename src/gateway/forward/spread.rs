//! `spread`: a fixed set of N connections per replica, used in turn, so that requests land
//! on up to N API-server processes without a handshake each. A connection still streaming
//! a response is skipped, never queued behind. When all N are busy the request takes a
//! spare: up to `SPARES_PER_CONNECTION * N` further connections, opened by such bursts and
//! kept for the next one (a connect and a close per request were a quarter of the
//! gateway's CPU at 64 connections over 2 x 16 kept ones). Only when every spare is busy
//! too does a request get a one-off connection.
//!
//! Requests go through laneway's own client ([`super::wire`]): a slot lends its
//! connection to one request and gets it back when the response has ended cleanly; a
//! connection the replica closed while it idled is noticed when next lent, and replaced.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use http::Response;
use parking_lot::Mutex;

use super::force_close::{self, Upstream};
use super::upstream_body::UpstreamBody;
use super::upstream_error;
use super::wire::{self, After, Outgoing, Socket, still_open};
use crate::gateway::error::GatewayError;

/// Spare connections a replica may keep per rotated connection.
const SPARES_PER_CONNECTION: usize = 3;

/// One connection's place.
#[derive(Default)]
struct Slot {
    /// Lent to a request (its response has not ended yet), or being opened.
    lent: AtomicBool,
    /// The connection, while it idles between requests.
    idle: Mutex<Option<Socket>>,
}

/// One replica's connections.
struct SpreadPool {
    // The first `rotated` slots are used in turn, the spares after them in order.
    slots: Vec<Slot>,
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

    /// Slot `index` if no request holds it.
    fn borrow(self: &Arc<Self>, index: usize) -> Option<Lease> {
        let taken = self.slots[index].lent.swap(true, Ordering::AcqRel);
        (!taken).then(|| Lease { pool: self.clone(), index })
    }
}

/// A slot lent to one request; dropped, it is free again (empty unless given back).
struct Lease {
    pool: Arc<SpreadPool>,
    index: usize,
}

impl Lease {
    /// The slot's idle connection, unless the replica closed it (or sent something
    /// unasked) while it idled.
    fn idle_connection(&self) -> Option<Socket> {
        let mut socket = self.pool.slots[self.index].idle.lock().take()?;
        still_open(&mut socket).then_some(socket)
    }

    /// Puts `socket` back to idle in the slot and frees the slot.
    fn give_back(self, socket: Socket) {
        *self.pool.slots[self.index].idle.lock() = Some(socket);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.slots[self.index].lent.store(false, Ordering::Release);
    }
}

/// The spread connections of one entry, per replica.
pub struct Spread {
    /// By replica name (from the config: FNV, cheaper than SipHash per request).
    pools: DashMap<String, Arc<SpreadPool>, fnv::FnvBuildHasher>,
    connections: usize,
    connect_timeout: Duration,
    /// Requests that found every slot, spares included, busy and used a one-off connection.
    pub overflow_requests: AtomicU64,
}

impl Spread {
    pub fn new(connections: usize, connect_timeout: Duration) -> Self {
        Self {
            pools: DashMap::default(),
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
                    slots: (0..total).map(|_| Slot::default()).collect(),
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
        request: Outgoing<'_>,
    ) -> Result<Response<UpstreamBody>, GatewayError> {
        let pool = self.pool(upstream.name);
        let Some(lease) = pool.try_order().find_map(|index| pool.borrow(index)) else {
            self.overflow_requests.fetch_add(1, Ordering::Relaxed);
            // Boxed, as is the connect below: opening a connection is rare here, and its
            // state would otherwise enlarge every request's future.
            return Box::pin(force_close::send(upstream, self.connect_timeout, request)).await;
        };
        let socket = match lease.idle_connection() {
            Some(socket) => socket,
            None => Box::pin(force_close::open(upstream, self.connect_timeout)).await?,
        };
        let keep: wire::Keep<Socket> = Box::new(move |socket| lease.give_back(socket));
        let response = wire::exchange(socket, request, After::Keep(keep))
            .await
            .map_err(|error| upstream_error::from_wire(upstream.name, error))?;
        Ok(response.map(UpstreamBody::Wire))
    }
}
