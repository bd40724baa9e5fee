//! Admission: a request takes a place under the global in-flight limit and a replica under
//! its own limit before it is forwarded. When every candidate is saturated it waits in a
//! bounded queue up to a deadline, then gets 429 with `Retry-After`. Memory stays bounded
//! whatever the offered load: at most `max_in_flight` admitted plus `queue_size` waiting;
//! anything past that is refused at once. The debug entry does not pass here.

mod held;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;

pub use held::HeldBody;

use crate::gateway::config::reliability::AdmissionConfig;
use crate::gateway::error::GatewayError;
use crate::gateway::health::ReliabilityMetrics;
use crate::gateway::pick::{InFlightGuard, Replica};

/// The global limit and the wait queue, shared by every request (and kept across reloads).
pub struct Admission {
    limits: ArcSwap<AdmissionConfig>,
    in_flight: AtomicU64,
    waiting: AtomicUsize,
    /// Highest queue length seen, for tests and the bounded-memory claim.
    waiting_peak: AtomicUsize,
    room: Notify,
    metrics: Arc<ReliabilityMetrics>,
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
            waiting: AtomicUsize::new(0),
            waiting_peak: AtomicUsize::new(0),
            room: Notify::new(),
            metrics,
        }
    }

    /// New limits (a reload); admitted requests keep their places.
    pub fn configure(&self, limits: AdmissionConfig) {
        self.limits.store(Arc::new(limits));
        self.room.notify_waiters();
    }

    pub fn limits(&self) -> Arc<AdmissionConfig> {
        self.limits.load_full()
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Acquire)
    }

    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    pub fn waiting_peak(&self) -> usize {
        self.waiting_peak.load(Ordering::Acquire)
    }

    /// Admits a request and places it on the replica `pick` chooses among those with fewer
    /// than the given number in flight (counted there), waiting for room if need be.
    pub async fn admit(
        self: &Arc<Self>,
        pick: &(dyn Fn(u64) -> Option<Arc<Replica>> + Sync),
        prompt_tokens: u64,
    ) -> Result<(InFlightGuard, AdmissionPermit), GatewayError> {
        if let Some(admitted) = self.try_admit(pick, prompt_tokens)? {
            return Ok(admitted);
        }
        let limits = self.limits();
        let retry_after = retry_after(limits.queue_timeout);
        let queued = self.waiting.fetch_add(1, Ordering::AcqRel) + 1;
        let _place = QueuePlace(self);
        if queued > limits.queue_size {
            self.metrics.admission_rejected.with_label_values(&["queue_full"]).inc();
            return Err(GatewayError::Overloaded { retry_after_secs: retry_after });
        }
        self.waiting_peak.fetch_max(queued, Ordering::AcqRel);
        self.metrics.admission_queue_length.set(queued as i64);
        let deadline = tokio::time::Instant::now() + limits.queue_timeout;
        loop {
            // Registered before the check, so a place freed in between is not missed.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if let Some(admitted) = self.try_admit(pick, prompt_tokens)? {
                return Ok(admitted);
            }
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                self.metrics.admission_rejected.with_label_values(&["queue_timeout"]).inc();
                return Err(GatewayError::Overloaded { retry_after_secs: retry_after });
            }
        }
    }

    fn try_admit(
        self: &Arc<Self>,
        pick: &(dyn Fn(u64) -> Option<Arc<Replica>> + Sync),
        prompt_tokens: u64,
    ) -> Result<Option<(InFlightGuard, AdmissionPermit)>, GatewayError> {
        let limits = self.limits();
        let taken = self.in_flight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limits.max_in_flight).then_some(n + 1)
        });
        if taken.is_err() {
            return Ok(None);
        }
        let per_replica = limits.max_in_flight_per_replica;
        // A few tries: another request may fill the picked replica between pick and count.
        for _ in 0..4 {
            let Some(replica) = pick(per_replica) else { break };
            if let Some(guard) = InFlightGuard::try_acquire(replica, prompt_tokens, per_replica) {
                self.metrics.admission_in_flight.set(self.in_flight() as i64);
                return Ok(Some((guard, AdmissionPermit { admission: self.clone() })));
            }
        }
        // Given back without waking anyone: waking the other waiters to fail the same way
        // would spin.
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        // None could take it even without limits (none configured, or all drained): waiting
        // cannot help.
        if pick(u64::MAX).is_none() { Err(GatewayError::NoReplica) } else { Ok(None) }
    }

    /// Wakes the waiters: a replica's place was freed (its own limit) or the set changed.
    pub fn notify_room(&self) {
        self.room.notify_waiters();
    }
}

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        let admission = &self.admission;
        let left = admission.in_flight.fetch_sub(1, Ordering::AcqRel) - 1;
        admission.metrics.admission_in_flight.set(left as i64);
        admission.room.notify_waiters();
    }
}

/// Keeps the queue length right however the wait ends (admitted, refused, client gone).
struct QueuePlace<'a>(&'a Admission);

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        let left = self.0.waiting.fetch_sub(1, Ordering::AcqRel) - 1;
        self.0.metrics.admission_queue_length.set(left as i64);
    }
}

/// Whole seconds a client should wait before trying again: the queue's deadline, at least 1.
fn retry_after(queue_timeout: Duration) -> u64 {
    queue_timeout.as_secs_f64().ceil().max(1.0) as u64
}

#[cfg(test)]
mod tests;
