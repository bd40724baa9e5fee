//! Hedged sends: a streamed request its replica has not answered after `slo.hedge_percent`
//! of its TTFT objective is sent once more, and the first answer wins; a request that is
//! not streamed is never hedged; a prefix-aware hedge goes where the first send went when
//! that is where the conversation lives, its backlog full or not; a send that fails counts
//! against its replica's health whichever send answered; a stream still unanswered after
//! its hedge is sent once more when another stream ends (a freed API process).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use laneway::gateway::config::PolicyKind;

use crate::support::gateway::{loopback_config, replica, sample, start_gateway, with_policy};
use crate::support::holding::{
    Reply, fail, next_arrival, send_chat, send_chat_with, start_holding_stub, start_scripted_stub,
};

/// Two holding replicas whose arrivals reach the test through one channel, and a gateway
/// hedging after 10% of a 1 s TTFT objective.
async fn two_holding_replicas()
-> (Arc<laneway::gateway::GatewayHandle>, mpsc::UnboundedReceiver<oneshot::Sender<()>>) {
    let (merged, arrivals) = mpsc::unbounded_channel();
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        let (addr, mut own) = start_holding_stub().await;
        let merged = merged.clone();
        tokio::spawn(async move {
            while let Some(answer) = own.recv().await {
                let _ = merged.send(answer);
            }
        });
        replicas.push(replica(name, addr));
    }
    let mut config = loopback_config(replicas);
    config.short.slo.hedge_percent = 10;
    (Arc::new(start_gateway(config).await), arrivals)
}

fn hedges(gateway: &laneway::gateway::GatewayHandle, outcome: &str) -> f64 {
    let prefix = format!("laneway_hedges_total{{outcome=\"{outcome}\"}}");
    sample(&gateway.metrics_text(), &prefix).unwrap_or(0.0)
}

#[tokio::test]
async fn an_unanswered_stream_is_sent_again_and_the_second_answer_wins() {
    let (gateway, mut arrivals) = two_holding_replicas().await;
    let client = send_chat(&gateway, true);
    let first = next_arrival(&mut arrivals).await;
    // Never answered: 100 ms on, the hedge reaches a replica, and its answer is the one the
    // client gets.
    let second = next_arrival(&mut arrivals).await;
    second.send(()).unwrap();
    assert_eq!(client.await.unwrap(), 200);
    assert_eq!((hedges(&gateway, "sent"), hedges(&gateway, "won")), (1.0, 1.0));
    // One request, two sends, no third.
    drop(first);
    assert!(arrivals.try_recv().is_err(), "a third send");
}

#[tokio::test]
async fn a_request_that_is_not_streamed_is_not_hedged() {
    let (gateway, mut arrivals) = two_holding_replicas().await;
    // Sent first, held past its hedge point until a streamed request sent after it has
    // been hedged: it would have been hedged before that one.
    let whole = send_chat(&gateway, false);
    let whole_arrival = next_arrival(&mut arrivals).await;
    let streamed = send_chat(&gateway, true);
    let streamed_first = next_arrival(&mut arrivals).await;
    let streamed_hedge = next_arrival(&mut arrivals).await;
    assert_eq!(hedges(&gateway, "sent"), 1.0);
    // The streamed one first: the other's end, while it waited, would rescue it.
    streamed_hedge.send(()).unwrap();
    assert_eq!(streamed.await.unwrap(), 200);
    whole_arrival.send(()).unwrap();
    assert_eq!(whole.await.unwrap(), 200);
    drop(streamed_first);
    assert_eq!(hedges(&gateway, "sent"), 1.0);
}

#[tokio::test]
async fn a_stream_still_unanswered_after_its_hedge_is_rescued_when_another_stream_ends() {
    let (addr, mut arrivals) = start_holding_stub().await;
    // Rescues are `predicted_latency`'s: placement that follows the prompt keeps its pick.
    let replicas = vec![replica("a", addr)];
    let mut config = with_policy(loopback_config(replicas), PolicyKind::PredictedLatency);
    // Hedged only when a request asks for a tighter TTFT: the stream that ends is not.
    config.short.slo.ttft = std::time::Duration::from_secs(600);
    config.short.slo.hedge_percent = 10;
    let gateway = Arc::new(start_gateway(config).await);
    // Hedged 500 ms on; rescued until 4.5 s on.
    let tight = ("x-laneway-slo-ttft-ms", "5000");
    let stuck = send_chat_with(&gateway, true, 10, &[tight]);
    let first = next_arrival(&mut arrivals).await;
    let hedge = next_arrival(&mut arrivals).await;
    assert_eq!(hedges(&gateway, "rescue"), 0.0);
    // Another stream is answered and ends: the process that served it is free, and the
    // stuck request is sent once more, there.
    let other = send_chat(&gateway, true);
    next_arrival(&mut arrivals).await.send(()).unwrap();
    assert_eq!(other.await.unwrap(), 200);
    let rescue = next_arrival(&mut arrivals).await;
    rescue.send(()).unwrap();
    assert_eq!(stuck.await.unwrap(), 200);
    let outcomes = ["sent", "rescue", "won"].map(|outcome| hedges(&gateway, outcome));
    assert_eq!(outcomes, [2.0, 1.0, 1.0]);
    drop((first, hedge));
    assert!(arrivals.try_recv().is_err(), "a fourth send");
}

/// The next request to reach either of two scripted replicas: which one, and its go-ahead.
async fn next_arrival_at<T>(
    a: &mut mpsc::UnboundedReceiver<oneshot::Sender<T>>,
    b: &mut mpsc::UnboundedReceiver<oneshot::Sender<T>>,
) -> (&'static str, oneshot::Sender<T>) {
    tokio::select! {
        answer = next_arrival(a) => ("a", answer),
        answer = next_arrival(b) => ("b", answer),
    }
}

/// A conversation long enough that its cached prompt outweighs one request queued ahead.
const PROMPT_TOKENS: u64 = 1500;

#[tokio::test]
async fn a_hedge_of_a_conversation_goes_to_its_replica_on_a_fresh_connection() {
    let (a_addr, mut a) = start_holding_stub().await;
    let (b_addr, mut b) = start_holding_stub().await;
    let replicas = vec![replica("a", a_addr), replica("b", b_addr)];
    let mut config = with_policy(loopback_config(replicas), PolicyKind::PrefixAware);
    // Hedged only when a request asks for a tight TTFT: the first turn never is.
    config.short.slo.ttft = std::time::Duration::from_secs(600);
    config.short.slo.hedge_percent = 10;
    // One unanswered stream per replica: the turn's first send fills its replica's backlog,
    // and the hedge still goes there (a hedge neither waits at the gate nor goes elsewhere).
    config.reliability.admission.max_unanswered_per_replica = 1;
    let gateway = Arc::new(start_gateway(config).await);
    let session = ("x-session-id", "conversation-1");
    let first_turn = send_chat_with(&gateway, true, PROMPT_TOKENS, &[session]);
    let (home, answer) = next_arrival_at(&mut a, &mut b).await;
    answer.send(()).unwrap();
    assert_eq!(first_turn.await.unwrap(), 200);
    // The conversation again, with a 1 s TTFT objective: unanswered 100 ms on, its second
    // send goes where the conversation is placed (and cached), not to the idle replica a
    // load-only pick would choose.
    let tight = ("x-laneway-slo-ttft-ms", "1000");
    let turn = send_chat_with(&gateway, true, PROMPT_TOKENS, &[session, tight]);
    let (placed, first) = next_arrival_at(&mut a, &mut b).await;
    assert_eq!(placed, home, "the conversation left its replica");
    let (hedged_at, second) = next_arrival_at(&mut a, &mut b).await;
    assert_eq!(hedged_at, home, "the hedge left the conversation's replica");
    second.send(()).unwrap();
    assert_eq!(turn.await.unwrap(), 200);
    assert_eq!((hedges(&gateway, "sent"), hedges(&gateway, "won")), (1.0, 1.0));
    drop(first);
}

/// Two scripted replicas behind a least-queue gateway that hedges after 100 ms and ejects a
/// replica at its first failure (one of the two may be out).
async fn two_scripted_replicas()
-> (Arc<laneway::gateway::GatewayHandle>, [mpsc::UnboundedReceiver<oneshot::Sender<Reply>>; 2]) {
    let (a_addr, a) = start_scripted_stub().await;
    let (b_addr, b) = start_scripted_stub().await;
    let replicas = vec![replica("a", a_addr), replica("b", b_addr)];
    let mut config = with_policy(loopback_config(replicas), PolicyKind::LeastQueue);
    config.short.slo.hedge_percent = 10;
    config.reliability.health.consecutive_failures = 1;
    config.reliability.health.max_ejected_percent = 50;
    (Arc::new(start_gateway(config).await), [a, b])
}

fn ejections(gateway: &laneway::gateway::GatewayHandle, replica: &str) -> f64 {
    let prefix =
        format!("laneway_replica_ejections_total{{reason=\"reset\",replica=\"{replica}\"}}");
    sample(&gateway.metrics_text(), &prefix).unwrap_or(0.0)
}

/// Which of a hedged request's two sends fails (after the hedge started); the other answers.
#[derive(Clone, Copy, PartialEq)]
enum Failing {
    First,
    Hedge,
}

/// One streamed request, hedged between two scripted replicas, whose `failing` send fails
/// and whose other send answers: the client gets the answer, and the failed send's replica,
/// only it, is ejected (health ejects at one failure).
async fn one_send_fails(failing: Failing) {
    let (gateway, [mut a, mut b]) = two_scripted_replicas().await;
    let client = send_chat(&gateway, true);
    let (first_at, first) = next_arrival_at(&mut a, &mut b).await;
    let (hedged_at, hedge) = next_arrival_at(&mut a, &mut b).await;
    assert_ne!(first_at, hedged_at, "least queue sends the hedge to the idle replica");
    let ((failed_at, failed), (answered_at, answered)) = match failing {
        Failing::First => ((first_at, first), (hedged_at, hedge)),
        Failing::Hedge => ((hedged_at, hedge), (first_at, first)),
    };
    fail(failed).await;
    answered.send(Reply::Answer).unwrap();
    assert_eq!(client.await.unwrap(), 200);
    let won = if failing == Failing::First { 1.0 } else { 0.0 };
    assert_eq!((hedges(&gateway, "sent"), hedges(&gateway, "won")), (1.0, won));
    assert_eq!((ejections(&gateway, failed_at), ejections(&gateway, answered_at)), (1.0, 0.0));
}

#[tokio::test]
async fn a_hedge_that_fails_counts_against_its_replica_while_the_first_send_answers() {
    one_send_fails(Failing::Hedge).await;
}

#[tokio::test]
async fn a_first_send_that_fails_counts_against_its_replica_while_the_hedge_answers() {
    one_send_fails(Failing::First).await;
}
