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
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use crate::gateway::error::GatewayError;

/// Which send answered (`R`: the response; `S`: what a later send was started with), and
/// the later sends that failed: a send that failed is the failing replica's to answer for
/// (passive health), even when another send answered; a send dropped because another
/// answered first is not.
pub enum Hedged<R, S> {
    /// The first send's result (an error only if no later send answered).
    First(Result<R, GatewayError>, Vec<(S, GatewayError)>),
    /// A later send answered first: its response, what it was started with, the first
    /// send's error if that failed before, and the other later sends that failed.
    Later(R, S, Option<GatewayError>, Vec<(S, GatewayError)>),
}

/// Runs `first`; if it has not finished within `after`, `start_second` may start another
/// send (returning what it placed and the send), and `rescue` may start one more while
/// the first is still unanswered ([`super::rescue`]); the first answer wins. An error of
/// one send waits for the others.
pub async fn send<R, S, F2>(
    first: impl Future<Output = Result<R, GatewayError>>,
    after: Duration,
    start_second: impl FnOnce() -> Option<(S, F2)>,
    rescue: impl Future<Output = Option<(S, F2)>>,
) -> Hedged<R, S>
where
    F2: Future<Output = Result<R, GatewayError>>,
{
    let mut first = std::pin::pin!(first);
    tokio::select! {
        sent = &mut first => return Hedged::First(sent, Vec::new()),
        () = tokio::time::sleep(after) => {}
    }
    let mut later: Vec<(S, Pin<Box<F2>>)> =
        start_second().into_iter().map(|(started, send)| (started, Box::pin(send))).collect();
    let mut rescue = std::pin::pin!(rescue);
    let (mut rescue_pending, mut first_failed) = (true, None);
    let mut failed = Vec::new();
    std::future::poll_fn(|cx| {
        if first_failed.is_none() {
            match first.as_mut().poll(cx) {
                Poll::Ready(Ok(response)) => {
                    return Poll::Ready(Hedged::First(Ok(response), std::mem::take(&mut failed)));
                }
                Poll::Ready(Err(error)) => first_failed = Some(error),
                Poll::Pending => {}
            }
        }
        // A rescue is for a first send still waiting: once it failed, the retry decides.
        rescue_pending &= first_failed.is_none();
        if rescue_pending && let Poll::Ready(started) = rescue.as_mut().poll(cx) {
            rescue_pending = false;
            later.extend(started.map(|(started, send)| (started, Box::pin(send))));
        }
        let mut index = 0;
        while index < later.len() {
            match later[index].1.as_mut().poll(cx) {
                Poll::Ready(Ok(response)) => {
                    let (started, _) = later.swap_remove(index);
                    let others = std::mem::take(&mut failed);
                    return Poll::Ready(Hedged::Later(
                        response,
                        started,
                        first_failed.take(),
                        others,
                    ));
                }
                Poll::Ready(Err(error)) => failed.push((later.swap_remove(index).0, error)),
                Poll::Pending => index += 1,
            }
        }
        match first_failed.take() {
            Some(error) if later.is_empty() => {
                Poll::Ready(Hedged::First(Err(error), std::mem::take(&mut failed)))
            }
            kept => {
                first_failed = kept;
                Poll::Pending
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::future::pending;

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
            Hedged::Later(status, started, _, _) => (Some(*started), Some(*status)),
        }
    }

    /// Which sends failed without answering: `first`, the later sends' names.
    fn failed(hedged: &Hedged<u16, &'static str>) -> Vec<&'static str> {
        let (first, later) = match hedged {
            Hedged::First(sent, later) => (sent.is_err(), later),
            Hedged::Later(_, _, first, later) => (first.is_some(), later),
        };
        let first = first.then_some("first");
        first.into_iter().chain(later.iter().map(|(started, _)| *started)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_starts_no_hedge() {
        let started = Cell::new(false);
        let start = || {
            started.set(true);
            Some(("hedge", answer(1, 201)))
        };
        let hedged = send(answer(50, 200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(status(&hedged), (None, Some(200)));
        assert!(!started.get());
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_loses_to_the_hedge() {
        let start = || Some(("hedge", answer(50, 201)));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(status(&hedged), (Some("hedge"), Some(201)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_answer_still_wins_after_the_hedge_started() {
        let start = || Some(("hedge", answer(500, 201)));
        let hedged = send(answer(200, 200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(status(&hedged), (None, Some(200)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_send_waits_for_the_other() {
        let start = || Some(("hedge", refuse(10)));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(status(&hedged), (None, Some(200)));
        let start = || Some(("hedge", answer(500, 201)));
        let hedged = send(refuse(200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(status(&hedged), (Some("hedge"), Some(201)));
        let start = || Some(("hedge", refuse(10)));
        let hedged = send(refuse(200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(status(&hedged), (None, None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_send_is_reported_whichever_answered() {
        // The hedge fails, the first answers.
        let start = || Some(("hedge", refuse(10)));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(failed(&hedged), ["hedge"]);
        // The first fails after the hedge started, the hedge answers.
        let start = || Some(("hedge", answer(500, 201)));
        let hedged = send(refuse(200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(failed(&hedged), ["first"]);
        // Both fail.
        let start = || Some(("hedge", refuse(10)));
        let hedged = send(refuse(200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(failed(&hedged), ["first", "hedge"]);
        // A send dropped because the other answered first did not fail.
        let start = || Some(("hedge", answer(50, 201)));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start, pending()).await;
        assert!(failed(&hedged).is_empty());
        let start = || Some(("hedge", answer(500, 201)));
        let hedged = send(answer(200, 200), Duration::from_millis(100), start, pending()).await;
        assert!(failed(&hedged).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_hedge_the_first_send_is_awaited() {
        let start = || None::<(&'static str, std::future::Ready<Sent>)>;
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start, pending()).await;
        assert_eq!(status(&hedged), (None, Some(200)));
    }

    /// `value` after `delay`: a rescue whose process is freed that long after the hedge point.
    async fn after<T>(delay: u64, value: T) -> T {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        value
    }

    #[tokio::test(start_paused = true)]
    async fn a_rescue_answering_first_wins_over_both_earlier_sends() {
        let start = || Some(("hedge", answer(1000, 201)));
        let hedged = send(
            answer(1000, 200),
            Duration::from_millis(100),
            start,
            after(50, Some(("rescue", answer(20, 202)))),
        )
        .await;
        assert_eq!(status(&hedged), (Some("rescue"), Some(202)));
    }

    #[tokio::test(start_paused = true)]
    async fn no_rescue_before_the_hedge_point_nor_after_the_first_answer() {
        let started = Cell::new(false);
        let rescued = async {
            started.set(true);
            Some(("rescue", answer(1, 202)))
        };
        let hedged = send(answer(50, 200), Duration::from_millis(100), || None, rescued).await;
        assert_eq!(status(&hedged), (None, Some(200)));
        assert!(!started.get(), "answered before the hedge point: nothing else is polled");
        let hedged = send(
            answer(150, 200),
            Duration::from_millis(100),
            || None,
            after(100, Some(("rescue", answer(1, 202)))),
        )
        .await;
        assert_eq!(status(&hedged), (None, Some(200)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_send_that_failed_waits_for_no_rescue() {
        let hedged = send(
            refuse(150),
            Duration::from_millis(100),
            || None,
            after(500, Some(("rescue", answer(1, 202)))),
        )
        .await;
        assert_eq!(status(&hedged), (None, None));
        assert_eq!(failed(&hedged), ["first"]);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_later_sends_are_all_reported() {
        let start = || Some(("hedge", refuse(10)));
        let rescued = after(50, Some(("rescue", refuse(10))));
        let hedged = send(answer(1000, 200), Duration::from_millis(100), start, rescued).await;
        assert_eq!(status(&hedged), (None, Some(200)));
        assert_eq!(failed(&hedged), ["hedge", "rescue"]);
    }
}
