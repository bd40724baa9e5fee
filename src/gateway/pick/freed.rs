//! API processes a replica has just freed: each answered response of this gateway that
//! ends leaves the process that served it with one stream fewer, often with none, and the
//! next fresh connection to the replica is likely to be accepted there. While requests stuck
//! unanswered elsewhere watch the replica (`listen::rescue`), each such end is a ticket one
//! of them may claim to be sent there; with no watcher it costs one atomic load.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct FreedProcesses {
    /// Requests waiting for a ticket on this replica.
    watchers: AtomicUsize,
    /// Ends seen while watched and not claimed yet.
    tickets: AtomicU64,
    /// Woken at each new ticket.
    notify: Notify,
}

impl FreedProcesses {
    /// An answered response on this replica ended.
    pub fn release(&self) {
        if self.watchers.load(Ordering::Acquire) > 0 {
            self.tickets.fetch_add(1, Ordering::AcqRel);
            self.notify.notify_waiters();
        }
    }

    /// One more request waits for a ticket here.
    pub fn watch(&self) {
        self.watchers.fetch_add(1, Ordering::AcqRel);
    }

    /// A request stopped waiting; when the last one does, tickets left unclaimed are
    /// dropped: the processes they stood for have taken other requests since.
    pub fn unwatch(&self) {
        if self.watchers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.tickets.store(0, Ordering::Release);
        }
    }

    /// Whether a ticket is left to take.
    pub fn has_tickets(&self) -> bool {
        self.tickets.load(Ordering::Acquire) > 0
    }

    /// Takes a ticket if one is left (each is taken once).
    pub fn try_claim(&self) -> bool {
        let take = |tickets: u64| tickets.checked_sub(1);
        self.tickets.fetch_update(Ordering::AcqRel, Ordering::Acquire, take).is_ok()
    }

    /// Resolves at the next ticket (enable it before [`Self::try_claim`], so that a ticket
    /// released in between is not missed).
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_count_only_while_someone_watches_and_each_is_claimed_once() {
        let freed = FreedProcesses::default();
        freed.release();
        assert!(!freed.try_claim(), "an end nobody waited for is no ticket");
        freed.watch();
        freed.release();
        freed.release();
        assert!(freed.try_claim());
        assert!(freed.try_claim());
        assert!(!freed.try_claim());
    }

    #[test]
    fn unclaimed_tickets_go_when_the_last_watcher_leaves() {
        let freed = FreedProcesses::default();
        freed.watch();
        freed.watch();
        freed.release();
        freed.unwatch();
        assert!(freed.try_claim(), "one watcher is left: the ticket stands");
        freed.release();
        freed.unwatch();
        freed.watch();
        assert!(!freed.try_claim(), "a ticket from before is stale");
    }

    #[tokio::test]
    async fn a_watcher_is_woken_by_a_release_after_it_enabled_its_wait() {
        let freed = FreedProcesses::default();
        freed.watch();
        let mut notified = std::pin::pin!(freed.notified());
        notified.as_mut().enable();
        assert!(!freed.try_claim());
        freed.release();
        notified.await;
        assert!(freed.try_claim());
    }
}
