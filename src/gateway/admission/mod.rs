//! Admission: a request takes a place under the global in-flight limit and a replica under
//! its own limit (when one is configured) before it is forwarded. When every candidate is
//! saturated it waits in a bounded first-come-first-served queue ([`queue`]) up to a
//! deadline, then gets 429 with a `Retry-After` from the observed drain rate. Memory stays
//! bounded whatever the offered load: at most `max_in_flight` admitted plus `queue_size`
//! waiting; anything past that is refused at once. The debug entry has its own per-replica
//! limit and does not wait here.

mod drain_rate;
pub mod fair_order;
mod held;
mod queue;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use arc_swap::ArcSwap;

use crate::gateway::config::Flow;
use drain_rate::DrainRate;
pub use held::HeldBody;
use queue::WaitQueue;

use crate::gateway::config::reliability::AdmissionConfig;
use crate::gateway::error::GatewayError;
use crate::gateway::health::ReliabilityMetrics;
use crate::gateway::pick::{InFlightGuard, Replica};

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
        self.admit_as(pick, prompt_tokens, &Flow::default()).await
    }

    /// [`Self::admit`] for a request of `flow`: when it waits, it waits in `flow`'s fair
    /// place and may be shed for a higher band.
    pub async fn admit_as(
        self: &Arc<Self>,
        pick: &(dyn Fn(u64) -> Option<Arc<Replica>> + Sync),
        prompt_tokens: u64,
        flow: &Flow,
    ) -> Result<(InFlightGuard, AdmissionPermit), GatewayError> {
        if self.queue.is_empty()
            && let Try::Admitted(guard, permit) = self.try_admit(pick, prompt_tokens)?
        {
            return Ok((guard, permit));
        }
        let limits = self.limits();
        let _length = QueueLengthGauge(self);
        let Some(ticket) = self.queue.join_as(limits.queue_size, flow) else {
            self.metrics.admission_rejected.with_label_values(&["queue_full"]).inc();
            return Err(self.overloaded(&limits));
        };
        let queued = self.queue.len();
        self.waiting_peak.fetch_max(queued, Ordering::AcqRel);
        self.metrics.admission_queue_length.set(queued as i64);
        let deadline = tokio::time::Instant::now() + limits.queue_timeout;
        // At the front, a place freed before this request joined would wake nobody: try once.
        let mut woken = ticket.is_front();
        loop {
            if ticket.was_shed() {
                self.metrics.admission_rejected.with_label_values(&["shed"]).inc();
                return Err(self.overloaded(&limits));
            }
            if woken {
                match self.try_admit(pick, prompt_tokens)? {
                    Try::Admitted(guard, permit) => return Ok((guard, permit)),
                    Try::Full => {}
                    Try::NoRoomHere => ticket.pass_on(),
                }
            }
            if tokio::time::timeout_at(deadline, ticket.woken()).await.is_err() {
                self.metrics.admission_rejected.with_label_values(&["queue_timeout"]).inc();
                return Err(self.overloaded(&limits));
            }
            woken = true;
        }
    }

    fn try_admit(
        self: &Arc<Self>,
        pick: &(dyn Fn(u64) -> Option<Arc<Replica>> + Sync),
        prompt_tokens: u64,
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
        // A few tries: another request may fill the picked replica between pick and count.
        for _ in 0..4 {
            let Some(replica) = pick(per_replica) else { break };
            if let Some(guard) = InFlightGuard::try_acquire(replica, prompt_tokens, per_replica) {
                self.metrics.admission_in_flight.set(self.in_flight() as i64);
                return Ok(Try::Admitted(guard, AdmissionPermit { admission: self.clone() }));
            }
        }
        // Given back without waking anyone: the front waiter would fail the same way.
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        // None could take it even without limits (none configured, or all drained): waiting
        // cannot help.
        if pick(u64::MAX).is_none() { Err(GatewayError::NoReplica) } else { Ok(Try::NoRoomHere) }
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

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        let admission = &self.admission;
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
