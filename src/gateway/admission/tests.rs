use super::*;
use crate::gateway::config::{GatewayConfig, ReplicaConfig};
use crate::gateway::pick::Picker;

fn setup(max_in_flight: u64, per_replica: u64, queue_size: usize) -> (Arc<Admission>, Picker) {
    let replicas = vec![ReplicaConfig {
        name: "r0".into(),
        authority: "127.0.0.1:9".into(),
        node: "n".into(),
        tls: false,
    }];
    let config = GatewayConfig::with_replicas(replicas);
    let limits = AdmissionConfig {
        max_in_flight,
        max_in_flight_per_replica: per_replica,
        queue_size,
        queue_timeout: Duration::from_millis(50),
    };
    let metrics = Arc::new(ReliabilityMetrics::new(&prometheus::Registry::new()));
    (Arc::new(Admission::new(limits, metrics)), Picker::new(&config))
}

#[tokio::test]
async fn a_full_queue_refuses_at_once_and_a_freed_place_admits_a_waiter() {
    let (admission, picker) = setup(1, 10, 1);
    let (_, first) = admission.admit(&|limit| picker.pick_within(None, limit), 0).await.unwrap();
    let waiter = {
        let admission = admission.clone();
        let picker = Arc::new(picker);
        let waiter_picker = picker.clone();
        tokio::spawn(async move {
            admission.admit(&|limit| waiter_picker.pick_within(None, limit), 0).await.map(|_| ())
        })
    };
    tokio::task::yield_now().await;
    // Wait (bounded) for the waiter to take the only queue place.
    for _ in 0..1000 {
        if admission.waiting() == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(admission.waiting(), 1);
    drop(first);
    waiter.await.unwrap().unwrap();
    assert_eq!(admission.in_flight(), 0);
    assert_eq!(admission.waiting(), 0);
}

#[tokio::test]
async fn a_saturated_replica_makes_requests_wait_then_429() {
    let (admission, picker) = setup(100, 1, 4);
    let (_guard, _permit) =
        admission.admit(&|limit| picker.pick_within(None, limit), 0).await.unwrap();
    let error = admission.admit(&|limit| picker.pick_within(None, limit), 0).await.unwrap_err();
    assert!(matches!(error, GatewayError::Overloaded { retry_after_secs: 1 }), "{error}");
    assert_eq!(admission.waiting(), 0);
    assert_eq!(admission.in_flight(), 1);
}
