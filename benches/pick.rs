//! Cost of picking a replica (and holding its in-flight guard) among 4, 64 and 1024
//! replicas, alone and with other threads picking at the same time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use laneway::gateway::GatewayConfig;
use laneway::gateway::config::{PolicyKind, ReplicaConfig};
use laneway::gateway::pick::{InFlightGuard, Picker};

const THREADS: usize = 4;

fn picker(replicas: usize, policy: PolicyKind) -> Arc<Picker> {
    let replicas = (0..replicas)
        .map(|i| ReplicaConfig {
            name: format!("r{i}"),
            authority: format!("10.0.{}.{}:8000", i / 256, i % 256),
            node: format!("n{}", i / 2),
            tls: false,
            placement: Default::default(),
        })
        .collect();
    let mut config = GatewayConfig::with_replicas(replicas);
    config.policy = policy;
    Arc::new(Picker::new(&config))
}

fn pick_and_release(picker: &Picker) {
    let replica = picker.pick(None).expect("replicas");
    drop(std::hint::black_box(InFlightGuard::acquire(replica, 1000)));
}

fn bench_pick(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick");
    for policy in [PolicyKind::LeastQueue, PolicyKind::RoundRobin] {
        for replicas in [4usize, 64, 1024] {
            let picker = picker(replicas, policy);
            let id = BenchmarkId::new(format!("{}/1_thread", policy.as_str()), replicas);
            group.bench_function(id, |b| b.iter(|| pick_and_release(&picker)));
            let id = BenchmarkId::new(format!("{}/{THREADS}_threads", policy.as_str()), replicas);
            group.bench_function(id, |b| {
                // Each of THREADS threads does `iters` picks; the time per pick is reported.
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    std::thread::scope(|scope| {
                        for _ in 0..THREADS {
                            scope.spawn(|| {
                                for _ in 0..iters {
                                    pick_and_release(&picker);
                                }
                            });
                        }
                    });
                    start.elapsed() / THREADS as u32
                })
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = bench_pick
}
criterion_main!(benches);
