//! Hedged sends. A streamed request is answered (its response head sent) once an API
//! process of its replica has preprocessed it; a process busy streaming other requests'
//! tokens preprocesses it at a fraction of its speed, and the request then misses its first
//! token by far while another process, on that replica or another, sits idle. So a
//! streamed request not answered within `hedge_after` is sent once more, on a new
//! connection to the replica the policy picks then, and the first answer wins; the other
//! send is dropped, its connection closed, which aborts it on its replica. Nothing has gone
//! to the client before an answer, so the loser leaves no trace but the work its replica
//! did. Hedges come out of the retry budget: when most requests are slow, extra sends
//! would only add load.

use std::future::Future;
use std::time::Duration;

use crate::gateway::error::GatewayError;

/// Which send answered (`R`: the response), and the other's error if it failed: a send
/// that failed is the failing replica's to answer for (passive health), even when the
/// other send answered; a send dropped because the other answered first is not.
pub enum Hedged<R, S> {
    /// The first send's result (an error only if the hedge failed too or never started),
    /// and the hedge (what it was started with) if it failed.
    First(Result<R, GatewayError>, Option<(S, GatewayError)>),
    /// The hedge answered first: its response, what it was started with, and the first
    /// send's error if that failed before.
    Second(R, S, Option<GatewayError>),
}

/// Runs `first`; if it has not finished within `after`, `start_second` may start another
/// send (returning what it placed and the send), and the first answer of the two wins. An
/// error of one waits for the other.
pub async fn send<R, S, F2>(
    first: impl Future<Output = Result<R, GatewayError>>,
    after: Duration,
    start_second: impl FnOnce() -> Option<(S, F2)>,
) -> Hedged<R, S>
where
    F2: Future<Output = Result<R, GatewayError>>,
{
    let mut first = std::pin::pin!(first);
    tokio::select! {
        sent = &mut first => return Hedged::First(sent, None),
        () = tokio::time::sleep(after) => {}
    }
    let Some((started, second)) = start_second() else {
        return Hedged::First(first.await, None);
    };
    let mut second = std::pin::pin!(second);
    tokio::select! {
        sent = &mut first => match sent {
            Ok(response) => Hedged::First(Ok(response), None),
            Err(first_error) => match second.await {
                Ok(response) => Hedged::Second(response, started, Some(first_error)),
                Err(error) => Hedged::First(Err(first_error), Some((started, error))),
            },
        },
        sent = &mut second => match sent {
            Ok(response) => Hedged::Second(response, started, None),
            Err(error) => Hedged::First(first.await, Some((started, error))),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    type Sent = Result<u16, GatewayError>;

    /// A send answered with `status` after `delay` (tokio's paused clock: no wall time).
    async fn answer(delay: u64, status: u16) -> Sent {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        Ok(status)
    }

    async fn refuse(delay: u64) -> Sent {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        Err(GatewayError::NoReplica)
    }

    fn status(hedged: &Hedged<u16, &'static str>) -> (Option<&'static str>, Option<u16>) {
        match hedged {
            Hedged::First(Ok(status), _) => (None, Some(*status)),
            Hedged::First(Err(_), _) => (None, None),
            Hedged::Second(status, started, _) => (Some(*started), Some(*status)),
        }
    }

    /// Which send failed without answering: `first`, the hedge's name, or both.
    fn failed(hedged: &Hedged<u16, &'static str>) -> Vec<&'static str> {
        match hedged {
            Hedged::First(sent, hedge) => {
                let first = sent.is_err().then_some("first");
                first.into_iter().chain(hedge.as_ref().map(|(started, _)| *started)).collect()
            }
            Hedged::Second(_, _, first) => first.iter().map(|_| "first").collect(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_starts_no_hedge() {
        let started = Cell::new(false);
        let start = || {
            started.set(true);
            Some(("hedge", answer(1, 201)))
        };
        let hedged = send(answer(50, 200), Duration::from_millis(100), start).await;
        assert_eq!(status(&hedged), (None, Some(200)));
        assert!(!started.get());
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_loses_to_the_hedge() {
        let start = || Some(("hedge", answer(50, 201)));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start).await;
        assert_eq!(status(&hedged), (Some("hedge"), Some(201)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_answer_still_wins_after_the_hedge_started() {
        let start = || Some(("hedge", answer(500, 201)));
        let hedged = send(answer(200, 200), Duration::from_millis(100), start).await;
        assert_eq!(status(&hedged), (None, Some(200)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_send_waits_for_the_other() {
        let start = || Some(("hedge", refuse(10)));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start).await;
        assert_eq!(status(&hedged), (None, Some(200)));
        let start = || Some(("hedge", answer(500, 201)));
        let hedged = send(refuse(200), Duration::from_millis(100), start).await;
        assert_eq!(status(&hedged), (Some("hedge"), Some(201)));
        let start = || Some(("hedge", refuse(10)));
        let hedged = send(refuse(200), Duration::from_millis(100), start).await;
        assert_eq!(status(&hedged), (None, None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_send_is_reported_whichever_answered() {
        // The hedge fails, the first answers.
        let start = || Some(("hedge", refuse(10)));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start).await;
        assert_eq!(failed(&hedged), ["hedge"]);
        // The first fails after the hedge started, the hedge answers.
        let start = || Some(("hedge", answer(500, 201)));
        let hedged = send(refuse(200), Duration::from_millis(100), start).await;
        assert_eq!(failed(&hedged), ["first"]);
        // Both fail.
        let start = || Some(("hedge", refuse(10)));
        let hedged = send(refuse(200), Duration::from_millis(100), start).await;
        assert_eq!(failed(&hedged), ["first", "hedge"]);
        // A send dropped because the other answered first did not fail.
        let start = || Some(("hedge", answer(50, 201)));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start).await;
        assert!(failed(&hedged).is_empty());
        let start = || Some(("hedge", answer(500, 201)));
        let hedged = send(answer(200, 200), Duration::from_millis(100), start).await;
        assert!(failed(&hedged).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_hedge_the_first_send_is_awaited() {
        let start = || None::<(&'static str, std::future::Ready<Sent>)>;
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start).await;
        assert_eq!(status(&hedged), (None, Some(200)));
    }
}
