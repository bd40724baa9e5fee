//! Admission: a request takes a place under the global in-flight limit and a replica under
//! its own limit (when one is configured) before it is forwarded. When every candidate is
//! saturated it waits in a bounded first-come-first-served queue ([`queue`]) up to a
//! deadline, then gets 429 with a `Retry-After` from the observed drain rate. Memory stays
//! bounded whatever the offered load: at most `max_in_flight` admitted plus `queue_size`
//! waiting; anything past that is refused at once. Between tenants, the queue is served in
//! fair order, and a tenant under its fair share, or a request of a higher band than one
//! present, may burst a little past a full replica's limit ([`shares`]). The debug entry
//! has its own per-replica limit and does not wait here.

mod drain_rate;
pub mod fair_order;
mod held;
mod queue;
mod shares;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;

use crate::gateway::clock;
use crate::gateway::config::Flow;
use drain_rate::DrainRate;
pub use held::HeldBody;
use queue::WaitQueue;
use shares::{FlowKey, FlowShares};

use crate::gateway::config::reliability::AdmissionConfig;
use crate::gateway::config::reliability::NO_REPLICA_LIMIT;
use crate::gateway::error::GatewayError;
use crate::gateway::health::ReliabilityMetrics;
use crate::gateway::pick::{InFlightGuard, Replica};

/// Where a request may go: the replica to place it on, among those with fewer than `limit`
/// in flight, and which replicas those are.
pub trait Placement: Sync {
    fn pick(&self, limit: u64) -> Option<Arc<Replica>>;

    /// Which replicas the request may use, as a number: requests of equal scopes compete
    /// for the same places (0: every replica).
    fn scope(&self) -> u64 {
        0
    }
}

impl<F: Fn(u64) -> Option<Arc<Replica>> + Sync> Placement for F {
    fn pick(&self, limit: u64) -> Option<Arc<Replica>> {
        self(limit)
    }
}

/// The global limit and the wait queue, shared by every request (and kept across reloads).
pub struct Admission {
    limits: ArcSwap<AdmissionConfig>,
    in_flight: AtomicU64,
    queue: WaitQueue,
    /// Highest queue length seen, for tests and the bounded-memory claim.
    waiting_peak: AtomicUsize,
    /// Places freed per second, for `Retry-After`.
    drained: DrainRate,
    /// Signalled when the last admitted request ends (shutdown waits on it).
    idle: tokio::sync::Notify,
    /// Each flow's recent admissions and presence, for bursts (tenants under their share,
    /// bands above one present).
    shares: FlowShares,
    /// The wait histogram of requests without a tenant, looked up once.
    untenanted_wait: prometheus::Histogram,
    metrics: Arc<ReliabilityMetrics>,
}

/// What one try at a place found.
enum Try {
    Admitted(InFlightGuard, AdmissionPermit),
    /// The global limit is reached: nobody behind could take a place either.
    Full,
    /// No replica this request may use has room; one of another pool might.
    NoRoomHere,
}

/// One admitted request's place; dropping it frees the place and wakes the waiters.
#[derive(Debug)]
pub struct AdmissionPermit {
    admission: Arc<Admission>,
    flow: FlowKey,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission").field("in_flight", &self.in_flight()).finish()
    }
}

impl Admission {
    pub fn new(limits: AdmissionConfig, metrics: Arc<ReliabilityMetrics>) -> Self {
        Self {
            limits: ArcSwap::from_pointee(limits),
            in_flight: AtomicU64::new(0),
            queue: WaitQueue::default(),
            waiting_peak: AtomicUsize::new(0),
            drained: DrainRate::default(),
            idle: tokio::sync::Notify::new(),
            shares: FlowShares::default(),
            untenanted_wait: metrics.admission_wait.with_label_values(&[""]),
            metrics,
        }
    }

    /// New limits (a reload); admitted requests keep their places.
    pub fn configure(&self, limits: AdmissionConfig) {
        self.limits.store(Arc::new(limits));
        self.queue.wake_front();
    }

    pub fn limits(&self) -> Arc<AdmissionConfig> {
        self.limits.load_full()
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Resolves when no admitted request is left: at once if none is, else at the next
    /// time the count reaches zero (a caller re-checks whatever else it waits for).
    pub async fn idle(&self) {
        let idle = self.idle.notified();
        if self.in_flight() == 0 {
            return;
        }
        idle.await;
    }

    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    pub fn waiting_peak(&self) -> usize {
        self.waiting_peak.load(Ordering::Acquire)
    }

    /// Admits a request and places it on the replica `pick` chooses among those with fewer
    /// than the given number in flight (counted there), waiting for room if need be. A
    /// request that finds others waiting queues behind them, even if a place is free.
    pub async fn admit(
        self: &Arc<Self>,
        pick: &(dyn Fn(u64) -> Option<Arc<Replica>> + Sync),
        prompt_tokens: u64,
    ) -> Result<(InFlightGuard, AdmissionPermit), GatewayError> {
        self.admit_as(&pick, prompt_tokens, &Flow::default()).await
    }

    /// [`Self::admit`] for a request of `flow`: when it waits, it waits in `flow`'s fair
    /// place and may be shed for a higher band; when its tenant is under its fair share of
    /// `placement`'s scope, or a lower band is present there, it may take a place past a
    /// full replica's limit.
    pub async fn admit_as(
        self: &Arc<Self>,
        placement: &dyn Placement,
        prompt_tokens: u64,
        flow: &Flow,
    ) -> Result<(InFlightGuard, AdmissionPermit), GatewayError> {
        let limits = self.limits();
        let window = fair_window(&limits);
        // The scope hashes the request's replicas, and the shares read the clock: only worth
        // it once shares are counted.
        let counting = self.shares.counting(flow);
        let scope = if counting { placement.scope() } else { 0 };
        let now = if counting { clock::now_micros() } else { 0 };
        let key = self.shares.arrived(scope, flow, now, window);
        let mut arrival = Arrival { shares: &self.shares, flow: &key, admitted: false };
        let admitted = self.wait_for_place(placement, prompt_tokens, flow, &key, &limits).await;
        if let Ok((_, _, queued_at)) = &admitted {
            // A request admitted at once waited for nothing, and read no clock for it.
            let waited = queued_at.map_or(0.0, |queued_at| queued_at.elapsed().as_secs_f64());
            if flow.key.is_empty() {
                self.untenanted_wait.observe(waited);
            } else {
                self.metrics.admission_wait.with_label_values(&[&*flow.key]).observe(waited);
            }
            // From here the permit says when the request leaves.
            arrival.admitted = true;
        }
        admitted.map(|(guard, permit, _)| (guard, permit))
    }

    async fn wait_for_place(
        self: &Arc<Self>,
        placement: &dyn Placement,
        prompt_tokens: u64,
        flow: &Flow,
        key: &FlowKey,
        limits: &AdmissionConfig,
    ) -> Result<(InFlightGuard, AdmissionPermit, Option<Instant>), GatewayError> {
        if self.queue.is_empty()
            && let Try::Admitted(guard, permit) = self.try_admit(placement, prompt_tokens, key)?
        {
            return Ok((guard, permit, None));
        }
        let queued_at = Instant::now();
        let _length = QueueLengthGauge(self);
        let Some(ticket) = self.queue.join_as(limits.queue_size, flow) else {
            self.metrics.admission_rejected.with_label_values(&["queue_full"]).inc();
            return Err(self.overloaded(limits));
        };
        let queued = self.queue.len();
        self.waiting_peak.fetch_max(queued, Ordering::AcqRel);
        self.metrics.admission_queue_length.set(queued as i64);
        let deadline = tokio::time::Instant::now() + limits.queue_timeout;
        // At the front, a place freed before this request joined would wake nobody: try once.
        // So does a request that may burst past the replicas' limit (a tenant under its
        // share, or a band above one present).
        let may_burst = || self.shares.may_burst(key, clock::now_micros(), fair_window(limits));
        let mut woken = ticket.is_front() || (limits.tenant_burst > 0 && may_burst());
        loop {
            if ticket.was_shed() {
                self.metrics.admission_rejected.with_label_values(&["shed"]).inc();
                return Err(self.overloaded(limits));
            }
            if woken {
                match self.try_admit(placement, prompt_tokens, key)? {
                    Try::Admitted(guard, permit) => return Ok((guard, permit, Some(queued_at))),
                    Try::Full => {}
                    Try::NoRoomHere => ticket.pass_on(),
                }
            }
            if tokio::time::timeout_at(deadline, ticket.woken()).await.is_err() {
                self.metrics.admission_rejected.with_label_values(&["queue_timeout"]).inc();
                return Err(self.overloaded(limits));
            }
            woken = true;
        }
    }

    fn try_admit(
        self: &Arc<Self>,
        placement: &dyn Placement,
        prompt_tokens: u64,
        key: &FlowKey,
    ) -> Result<Try, GatewayError> {
        let limits = self.limits();
        // Sequentially consistent with the queue's length: see `WaitQueue::wake_front`.
        let taken = self.in_flight.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < limits.max_in_flight).then_some(n + 1)
        });
        if taken.is_err() {
            return Ok(Try::Full);
        }
        let per_replica = limits.max_in_flight_per_replica;
        // The shares read the clock only once they are counted.
        let now = if self.shares.counts(key) { clock::now_micros() } else { 0 };
        let window = fair_window(&limits);
        let mut placed = self.place(placement, prompt_tokens, per_replica, 4);
        if placed.is_none()
            && limits.tenant_burst > 0
            && per_replica != NO_REPLICA_LIMIT
            && self.shares.may_burst(key, now, window)
        {
            let limit = per_replica.saturating_add(limits.tenant_burst);
            placed = self.place(placement, prompt_tokens, limit, 2);
            if placed.is_some() {
                self.metrics.admission_bursts.inc();
            }
        }
        if let Some(guard) = placed {
            self.metrics.admission_in_flight.set(self.in_flight() as i64);
            self.shares.admitted(key, now, window);
            let permit = AdmissionPermit { admission: self.clone(), flow: key.clone() };
            return Ok(Try::Admitted(guard, permit));
        }
        // Given back without waking anyone: the front waiter would fail the same way.
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        // None could take it even without limits (none configured, or all drained): waiting
        // cannot help.
        if placement.pick(u64::MAX).is_none() {
            Err(GatewayError::NoReplica)
        } else {
            Ok(Try::NoRoomHere)
        }
    }

    /// A replica's place under `limit`, in a few `tries`: another request may fill the
    /// picked replica between the pick and the count.
    fn place(
        &self,
        placement: &dyn Placement,
        prompt_tokens: u64,
        limit: u64,
        tries: usize,
    ) -> Option<InFlightGuard> {
        for _ in 0..tries {
            let replica = placement.pick(limit)?;
            if let Some(guard) = InFlightGuard::try_acquire(replica, prompt_tokens, limit) {
                return Some(guard);
            }
        }
        None
    }

    /// Wakes the front waiter: a replica's place was freed (its own limit) or the set
    /// changed.
    pub fn notify_room(&self) {
        self.queue.wake_front();
    }

    /// The 429 for a request that found no room: come back when the queue ahead of it
    /// should have drained, at the rate places were freed lately.
    fn overloaded(&self, limits: &AdmissionConfig) -> GatewayError {
        let ahead = self.queue.len() as u64 + 1;
        let retry_after_secs = self.drained.retry_after(ahead, limits.queue_timeout);
        GatewayError::Overloaded { retry_after_secs }
    }
}

/// How long a tenant counts as active after its last request, and the time constant of its
/// recent admissions, in microseconds.
fn fair_window(limits: &AdmissionConfig) -> u64 {
    limits.fair_window.as_micros() as u64
}

/// A request between its arrival and its admission: if it never gets a place (refused, shed,
/// timed out, or its client gone), dropping this says it left.
struct Arrival<'a> {
    shares: &'a FlowShares,
    flow: &'a FlowKey,
    admitted: bool,
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        if !self.admitted {
            self.shares.left_now(self.flow);
        }
    }
}

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        let admission = &self.admission;
        admission.shares.left_now(&self.flow);
        let left = admission.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
        admission.metrics.admission_in_flight.set(left as i64);
        admission.drained.record();
        admission.queue.wake_front();
        if left == 0 {
            admission.idle.notify_waiters();
        }
    }
}

/// Keeps the queue length gauge right however the wait ends (admitted, refused, client
/// gone); declared before the ticket, so it is dropped after it and reads the length
/// without it.
struct QueueLengthGauge<'a>(&'a Admission);

impl Drop for QueueLengthGauge<'_> {
    fn drop(&mut self) {
        self.0.metrics.admission_queue_length.set(self.0.queue.len() as i64);
    }
}

#[cfg(test)]
mod tests;
