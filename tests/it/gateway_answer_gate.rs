//! `admission.max_unanswered_per_replica`: streamed requests wait at the gateway while their
//! replica has that many it has not answered (no response headers yet), and go as it
//! answers; requests that are not streamed never wait there.

use std::sync::Arc;

use crate::support::gateway::{
    admin_json, loopback_config, replica, sample, start_gateway, wait_until,
};
use crate::support::holding::{next_arrival, send_chat, start_holding_stub};

#[tokio::test]
async fn streamed_requests_past_the_unanswered_limit_wait_and_go_as_the_replica_answers() {
    let (addr, mut arrivals) = start_holding_stub().await;
    let mut config = loopback_config(vec![replica("stub", addr)]);
    config.reliability.admission.max_unanswered_per_replica = 2;
    // Requests are held for as long as the test needs: no hedge may add arrivals.
    config.short.slo.hedge_percent = 0;
    let gateway = Arc::new(start_gateway(config).await);
    let send = |stream: bool| send_chat(&gateway, stream);
    let streamed: Vec<_> = (0..5).map(|_| send(true)).collect();
    let mut answers = vec![next_arrival(&mut arrivals).await, next_arrival(&mut arrivals).await];
    let waiting = |gateway: &laneway::gateway::GatewayHandle| {
        sample(&gateway.metrics_text(), "laneway_answer_gate_waiting").unwrap_or(-1.0)
    };
    wait_until("three streamed requests to wait at the gateway", || waiting(&gateway) == 3.0).await;
    // Three wait, two are unanswered: none is on its way to the replica.
    assert!(arrivals.try_recv().is_err(), "a third request reached the replica");
    let replicas = admin_json(&gateway, "/admin/replicas").await;
    assert_eq!(replicas["replicas"][0]["unanswered"], 2, "{replicas:#}");
    // A request that is not streamed is answered with its whole body: it never waits.
    let whole = send(false);
    next_arrival(&mut arrivals).await.send(()).unwrap();
    assert_eq!(whole.await.unwrap(), 200);
    assert_eq!(waiting(&gateway), 3.0);
    // Each answer lets exactly one waiting request go.
    for still_waiting in [2.0, 1.0, 0.0] {
        answers.remove(0).send(()).unwrap();
        answers.push(next_arrival(&mut arrivals).await);
        wait_until("one fewer to wait", || waiting(&gateway) == still_waiting).await;
    }
    for answer in answers {
        answer.send(()).unwrap();
    }
    for client in streamed {
        assert_eq!(client.await.unwrap(), 200);
    }
    let held = sample(&gateway.metrics_text(), "laneway_answer_gate_held_total");
    assert_eq!(held, Some(3.0));
}
