//! Hedged sends: a streamed request its replica has not answered after `slo.hedge_percent`
//! of its TTFT objective is sent once more, and the first answer wins; a request that is
//! not streamed is never hedged.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::support::gateway::{loopback_config, replica, sample, start_gateway};
use crate::support::holding::{next_arrival, send_chat, start_holding_stub};

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
    for answer in [whole_arrival, streamed_hedge] {
        answer.send(()).unwrap();
    }
    assert_eq!(whole.await.unwrap(), 200);
    assert_eq!(streamed.await.unwrap(), 200);
    drop(streamed_first);
    assert_eq!(hedges(&gateway, "sent"), 1.0);
}
