//! Rescues. A streamed request still unanswered at its hedge point sits, most likely, on an
//! API process busy streaming others' tokens; when the fleet has no idle process, its
//! hedge lands on another busy one. It then waits, until a send could no longer meet the
//! TTFT objective, for an answered response to end on a replica it may go to
//! ([`crate::gateway::pick::freed`]): that process is then likely idle, and the request is
//! sent once more, where the policy picks at that moment, before a new arrival takes it.
//! Without it, the process the request is stuck on would serve it late when its stream
//! ends, a process spent on a request already past its objective. Each freed process
//! rescues one request.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use tokio::sync::futures::Notified;
use tokio::time::Instant;

use crate::gateway::pick::Replica;

/// The replica on which this request claimed a freed process, among `replicas` and only
/// where `accept` says it would go; `None` at `until` (or at once if `replicas` is empty or
/// `until` has passed). A process freed where it would not go is left to other requests.
pub async fn process_freed(
    replicas: Vec<Arc<Replica>>,
    until: Instant,
    accept: impl Fn(&Replica) -> bool,
) -> Option<Arc<Replica>> {
    if replicas.is_empty() || Instant::now() >= until {
        return None;
    }
    let watching = Watching::new(replicas);
    let claimed = async {
        loop {
            let mut waits: Vec<Pin<Box<Notified<'_>>>> =
                watching.0.iter().map(|replica| Box::pin(replica.load.freed.notified())).collect();
            for wait in &mut waits {
                wait.as_mut().enable();
            }
            let claim = |replica: &&Arc<Replica>| {
                replica.load.freed.has_tickets()
                    && accept(replica)
                    && replica.load.freed.try_claim()
            };
            if let Some(replica) = watching.0.iter().find(claim) {
                return replica.clone();
            }
            any_ready(&mut waits).await;
        }
    };
    tokio::time::timeout_at(until, claimed).await.ok()
}

/// Resolves when one of `waits` does.
async fn any_ready(waits: &mut [Pin<Box<Notified<'_>>>]) {
    std::future::poll_fn(|cx| {
        let ready = waits.iter_mut().any(|wait| wait.as_mut().poll(cx).is_ready());
        if ready { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
}

/// The replicas a request watches, unwatched when it stops waiting.
struct Watching(Vec<Arc<Replica>>);

impl Watching {
    fn new(replicas: Vec<Arc<Replica>>) -> Self {
        for replica in &replicas {
            replica.load.freed.watch();
        }
        Self(replicas)
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        for replica in &self.0 {
            replica.load.freed.unwatch();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::gateway::config::ReplicaConfig;
    use crate::gateway::pick::InFlightGuard;

    fn replica(name: &str) -> Arc<Replica> {
        Arc::new(Replica::new(&ReplicaConfig {
            name: name.into(),
            authority: "127.0.0.1:1".into(),
            node: "n".into(),
            tls: false,
            placement: Default::default(),
        }))
    }

    fn answered(replica: &Arc<Replica>) -> InFlightGuard {
        let mut guard = InFlightGuard::acquire(replica.clone(), 10);
        guard.mark_answered();
        guard
    }

    #[tokio::test(start_paused = true)]
    async fn an_answered_end_on_a_watched_replica_rescues_one_waiter() {
        let (a, b) = (replica("a"), replica("b"));
        let until = Instant::now() + Duration::from_secs(1);
        let first = tokio::spawn(process_freed(vec![a.clone(), b.clone()], until, |_| true));
        let second = tokio::spawn(process_freed(vec![a.clone(), b.clone()], until, |_| true));
        tokio::task::yield_now().await;
        let stream = answered(&b);
        drop(stream);
        let claimed = [first.await.unwrap(), second.await.unwrap()];
        let claimed: Vec<_> =
            claimed.iter().flatten().map(|replica| replica.name.as_str()).collect();
        assert_eq!(claimed, ["b"]);
        assert!(!b.load.freed.try_claim(), "the ticket was taken once");
    }

    #[tokio::test(start_paused = true)]
    async fn unanswered_ends_and_other_replicas_rescue_nobody() {
        let (a, b) = (replica("a"), replica("b"));
        let until = Instant::now() + Duration::from_millis(300);
        let waiter = tokio::spawn(process_freed(vec![a.clone()], until, |_| true));
        tokio::task::yield_now().await;
        drop(InFlightGuard::acquire(a.clone(), 10));
        drop(answered(&b));
        assert!(
            waiter.await.unwrap().is_none(),
            "a hedge's loser or another pool's end is no rescue"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_wait_once_too_late_and_nothing_left_watched() {
        let a = replica("a");
        assert!(process_freed(vec![a.clone()], Instant::now(), |_| true).await.is_none());
        let later = Instant::now() + Duration::from_secs(1);
        assert!(process_freed(Vec::new(), later, |_| true).await.is_none());
        drop(answered(&a));
        a.load.freed.watch();
        assert!(!a.load.freed.try_claim(), "ends after the waiters left leave no ticket");
    }

    #[tokio::test(start_paused = true)]
    async fn a_process_freed_where_the_request_would_not_go_is_left_for_others() {
        let (a, b) = (replica("a"), replica("b"));
        let until = Instant::now() + Duration::from_secs(1);
        let only_b =
            tokio::spawn(process_freed(vec![a.clone(), b.clone()], until, |r| r.name == "b"));
        tokio::task::yield_now().await;
        a.load.freed.watch();
        drop(answered(&a));
        drop(answered(&b));
        assert_eq!(only_b.await.unwrap().map(|r| r.name.clone()).as_deref(), Some("b"));
        assert!(a.load.freed.try_claim(), "a's ticket is still there for another waiter");
    }
}
