use std::time::Duration;

use super::*;
use crate::gateway::config::Flow;
use crate::gateway::config::{GatewayConfig, ReplicaConfig};
use crate::gateway::pick::Picker;
use crate::gateway::pick::Replica;

fn setup(max_in_flight: u64, per_replica: u64, queue_size: usize) -> (Arc<Admission>, Picker) {
    let replicas = vec![ReplicaConfig {
        name: "r0".into(),
        authority: "127.0.0.1:9".into(),
        node: "n".into(),
        tls: false,
        placement: Default::default(),
    }];
    let config = GatewayConfig::with_replicas(replicas);
    let limits = AdmissionConfig {
        max_in_flight,
        max_in_flight_per_replica: per_replica,
        max_unanswered_per_replica: NO_REPLICA_LIMIT,
        queue_size,
        queue_timeout: Duration::from_millis(50),
        fair_window: Duration::from_secs(10),
        tenant_burst: 1,
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

/// Waits (bounded, yielding) until `n` requests are queued.
async fn until_waiting(admission: &Admission, n: usize) {
    for _ in 0..10_000 {
        if admission.waiting() == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{} waiting, expected {n}", admission.waiting());
}

#[tokio::test]
async fn waiters_are_admitted_in_arrival_order_and_newcomers_queue_behind_them() {
    let (admission, picker) = setup(1, 10, 8);
    let picker = Arc::new(picker);
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (_guard, holder) =
        admission.admit(&|limit| picker.pick_within(None, limit), 0).await.unwrap();
    let mut waiters = Vec::new();
    for id in 0..5 {
        let (queued, picker, order) = (admission.clone(), picker.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let admitted = queued.admit(&|limit| picker.pick_within(None, limit), 0).await;
            order.lock().push(id);
            // Hold the place across a yield, so that the next one must wait for it.
            tokio::task::yield_now().await;
            drop(admitted);
        }));
        until_waiting(&admission, id + 1).await;
    }
    // The place is freed and, before the front waiter runs, a newcomer arrives: it finds a
    // free place but queues behind the five.
    drop(holder);
    let newcomer = admission.admit(&|limit| picker.pick_within(None, limit), 0).await;
    order.lock().push(5);
    drop(newcomer);
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock(), [0, 1, 2, 3, 4, 5]);
    assert_eq!(admission.in_flight(), 0);
    assert_eq!(admission.waiting(), 0);
}

/// One place, `queue_size` waiting, waits long enough that no waiter times out in a test.
fn fair_setup(queue_size: usize) -> (Arc<Admission>, Arc<Picker>) {
    let (admission, picker) = setup(1, 10, queue_size);
    admission.configure(AdmissionConfig {
        max_in_flight: 1,
        max_in_flight_per_replica: 10,
        max_unanswered_per_replica: NO_REPLICA_LIMIT,
        queue_size,
        queue_timeout: Duration::from_secs(30),
        fair_window: Duration::from_secs(10),
        tenant_burst: 1,
    });
    (admission, Arc::new(picker))
}

fn flow(key: &str, band: u8) -> Flow {
    Flow { key: Arc::from(key), weight: 1, band }
}

/// Queues a request of `flow` that records `name` when admitted, then frees its place.
fn queue_one(
    admission: &Arc<Admission>,
    picker: &Arc<Picker>,
    flow: Flow,
    name: &'static str,
    order: &Arc<parking_lot::Mutex<Vec<&'static str>>>,
) -> tokio::task::JoinHandle<Result<(), GatewayError>> {
    let (admission, picker, order) = (admission.clone(), picker.clone(), order.clone());
    tokio::spawn(async move {
        let pick = |limit| picker.pick_within(None, limit);
        let admitted = admission.admit_as(&pick, 0, &flow).await?;
        order.lock().push(name);
        tokio::task::yield_now().await;
        drop(admitted);
        Ok(())
    })
}

#[tokio::test]
async fn a_heavy_tenant_queued_first_does_not_starve_a_light_one() {
    let (admission, picker) = fair_setup(64);
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (_guard, holder) =
        admission.admit(&|limit| picker.pick_within(None, limit), 0).await.unwrap();
    let mut waiters = Vec::new();
    for n in 0..20 {
        waiters.push(queue_one(&admission, &picker, flow("heavy", 4), "heavy", &order));
        until_waiting(&admission, n + 1).await;
    }
    for n in 0..2 {
        waiters.push(queue_one(&admission, &picker, flow("light", 4), "light", &order));
        until_waiting(&admission, 21 + n).await;
    }
    drop(holder);
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
    let order = order.lock();
    let light: Vec<usize> =
        order.iter().enumerate().filter(|(_, name)| **name == "light").map(|(i, _)| i).collect();
    // FIFO would serve the light tenant 21st and 22nd; fair order takes turns.
    assert_eq!(light, [1, 3], "{order:?}");
    assert_eq!(order.len(), 22);
}

#[tokio::test]
async fn higher_bands_go_first_and_a_full_queue_sheds_its_lowest() {
    let (admission, picker) = fair_setup(3);
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (_guard, holder) =
        admission.admit(&|limit| picker.pick_within(None, limit), 0).await.unwrap();
    let low_a = queue_one(&admission, &picker, flow("bulk", 1), "low", &order);
    until_waiting(&admission, 1).await;
    let low_b = queue_one(&admission, &picker, flow("bulk", 1), "low", &order);
    until_waiting(&admission, 2).await;
    let normal = queue_one(&admission, &picker, flow("app", 4), "normal", &order);
    until_waiting(&admission, 3).await;
    // Full: a newcomer that ranks after the last waiter (its own tenant's third request in
    // the lowest band present) is refused at once...
    let (pick, lowest) = (|limit| picker.pick_within(None, limit), flow("bulk", 1));
    let refused = admission.admit_as(&pick, 0, &lowest).await;
    assert!(matches!(refused, Err(GatewayError::Overloaded { .. })));
    // ...one of a higher band sheds the last low waiter and takes its place.
    let high = queue_one(&admission, &picker, flow("app", 8), "high", &order);
    let shed = low_b.await.unwrap();
    assert!(matches!(shed, Err(GatewayError::Overloaded { .. })), "{shed:?}");
    until_waiting(&admission, 3).await;
    drop(holder);
    for waiter in [low_a, normal, high] {
        waiter.await.unwrap().unwrap();
    }
    assert_eq!(*order.lock(), ["high", "normal", "low"]);
}

#[tokio::test]
async fn idle_resolves_when_the_last_request_and_its_replica_place_end_and_not_before() {
    let (admission, picker) = setup(10, 10, 1);
    let pick = |limit| picker.pick_within(None, limit);
    // Nothing admitted: idle at once.
    admission.idle().await;
    let (first_guard, first) = admission.admit(&pick, 0).await.unwrap();
    let (second_guard, second) = admission.admit(&pick, 0).await.unwrap();
    let replica = first_guard.replica().clone();
    let mut idle = Box::pin(admission.idle());
    let mut replica_idle = Box::pin(replica.load.idle());
    assert!(!ready(idle.as_mut()) && !ready(replica_idle.as_mut()));
    drop((first, first_guard));
    assert!(!ready(idle.as_mut()), "one request is still admitted");
    assert!(!ready(replica_idle.as_mut()), "one request is still on the replica");
    drop((second, second_guard));
    assert!(ready(idle.as_mut()) && ready(replica_idle.as_mut()));
}

/// Polls once: whether the future has resolved.
fn ready<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> bool {
    futures_util::FutureExt::now_or_never(future).is_some()
}

/// Every replica of a picker, in one scope.
struct Everywhere<'a>(&'a Picker);

impl Placement for Everywhere<'_> {
    fn pick(&self, limit: u64) -> Option<Arc<Replica>> {
        self.0.pick_within(None, limit)
    }
}

/// Four places on one replica, one burst place, waits long enough for a test.
fn burst_setup(queue_size: usize) -> (Arc<Admission>, Picker) {
    let (admission, picker) = setup(100, 4, queue_size);
    admission.configure(AdmissionConfig {
        max_in_flight: 100,
        max_in_flight_per_replica: 4,
        max_unanswered_per_replica: NO_REPLICA_LIMIT,
        queue_size,
        queue_timeout: Duration::from_secs(30),
        fair_window: Duration::from_secs(3600),
        tenant_burst: 1,
    });
    (admission, picker)
}

/// `filler` fills the one replica of `burst_setup` and queues one more; `burster` must take
/// a fifth place at once, past that waiter, and `filler` must get a place again only once
/// the replica is back under its limit (it pays the burst back).
async fn assert_bursts_and_is_paid_back(
    admission: Arc<Admission>,
    picker: Picker,
    filler: Flow,
    burster: Flow,
) {
    let picker = Arc::new(picker);
    let everywhere = Everywhere(&picker);
    let mut running = Vec::new();
    for _ in 0..4 {
        running.push(admission.admit_as(&everywhere, 0, &filler).await.unwrap());
    }
    let waiter = {
        let (admission, picker, filler) = (admission.clone(), picker.clone(), filler.clone());
        tokio::spawn(async move { admission.admit_as(&Everywhere(&picker), 0, &filler).await })
    };
    until_waiting(&admission, 1).await;
    let admitted = admission.admit_as(&everywhere, 0, &burster);
    let admitted = futures_util::FutureExt::now_or_never(admitted);
    assert!(matches!(admitted, Some(Ok(_))), "{admitted:?}");
    assert_eq!((admission.in_flight(), admission.metrics.admission_bursts.get()), (5, 1));
    // One of the filler's streams ends: the replica is back at its limit, nobody is admitted.
    running.pop();
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!((admission.in_flight(), admission.waiting()), (4, 1));
    // Another one ends: the waiter takes its place.
    running.pop();
    let _admitted = waiter.await.unwrap().unwrap();
    assert_eq!((admission.in_flight(), admission.waiting()), (4, 0));
}

#[tokio::test]
async fn a_tenant_under_its_share_bursts_past_a_full_replica_and_the_heavy_one_pays_it_back() {
    let (admission, picker) = burst_setup(16);
    let (heavy, light) = (flow("heavy", 4), flow("light", 4));
    // The light tenant came once; the heavy one fills the replica and, over its share, waits.
    drop(admission.admit_as(&Everywhere(&picker), 0, &light).await.unwrap());
    assert_bursts_and_is_paid_back(admission, picker, heavy, light).await;
}

#[tokio::test]
async fn one_flow_alone_never_bursts() {
    let (admission, picker) = burst_setup(0);
    let (everywhere, anyone) = (Everywhere(&picker), Flow::default());
    let mut running = Vec::new();
    for _ in 0..4 {
        running.push(admission.admit_as(&everywhere, 0, &anyone).await.unwrap());
    }
    let refused = admission.admit_as(&everywhere, 0, &anyone).await;
    assert!(matches!(refused, Err(GatewayError::Overloaded { .. })), "{refused:?}");
    assert_eq!(admission.metrics.admission_bursts.get(), 0);
}

#[tokio::test]
async fn a_higher_band_bursts_past_a_replica_full_of_a_lower_one_which_pays_it_back() {
    let (admission, picker) = burst_setup(16);
    // No tenants: a band 1 flood fills the replica; band 8 does not wait for its streams.
    assert_bursts_and_is_paid_back(admission, picker, flow("", 1), flow("", 8)).await;
}
