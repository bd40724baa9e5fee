//! The reliability metrics (health, ejections, retries, admission, stream failures,
//! headroom), registered in the gateway's registry next to the request metrics.

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

pub struct ReliabilityMetrics {
    /// 1 in rotation, 0 out (ejected or failing its checks).
    pub replica_healthy: IntGaugeVec,
    pub replica_ejections: IntCounterVec,
    /// Active health checks by result.
    pub health_checks: IntCounterVec,
    /// Retries sent, and retries the budget refused.
    pub retries: IntCounterVec,
    /// Hedges sent, won (answered first) and refused by the budget.
    pub hedges: IntCounterVec,
    pub admission_queue_length: IntGauge,
    pub admission_in_flight: IntGauge,
    /// 429s by reason (`queue_full`, `queue_timeout`).
    pub admission_rejected: IntCounterVec,
    /// Admissions past a full replica's limit, for tenants under their fair share.
    pub admission_bursts: IntCounter,
    /// Arrival to admission, per tenant (empty: no tenant).
    pub admission_wait: HistogramVec,
    /// Streams whose upstream failed after headers, by reason.
    pub stream_failures: IntCounterVec,
    pub n_minus_one_headroom: IntGauge,
    pub largest_fault_domain_replicas: IntGauge,
    /// Streamed requests waiting at the gateway while their replica has its unanswered
    /// maximum, and how many ever did.
    pub answer_gate_waiting: IntGauge,
    pub answer_gate_held: IntCounter,
}

fn register<M: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: M) -> M {
    // A second gateway state (after a reload) shares the first one's metrics, so a clash
    // here is a bug, not a configuration error.
    registry.register(Box::new(metric.clone())).expect("unique metric name");
    metric
}

impl ReliabilityMetrics {
    pub fn new(registry: &Registry) -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            register(registry, IntCounterVec::new(Opts::new(name, help), labels).expect("valid"))
        };
        let gauge =
            |name: &str, help: &str| register(registry, IntGauge::new(name, help).expect("valid"));
        Self {
            replica_healthy: register(
                registry,
                IntGaugeVec::new(
                    Opts::new("laneway_replica_healthy", "1 in rotation, 0 out"),
                    &["replica"],
                )
                .expect("valid"),
            ),
            replica_ejections: counter(
                "laneway_replica_ejections_total",
                "Passive ejections, by the failure that triggered them",
                &["replica", "reason"],
            ),
            health_checks: counter(
                "laneway_health_checks_total",
                "Active health checks, by result",
                &["replica", "result"],
            ),
            retries: counter(
                "laneway_retries_total",
                "Retries on another replica (sent) and those the budget refused (denied)",
                &["outcome"],
            ),
            hedges: counter(
                "laneway_hedges_total",
                "Second sends of streamed requests their replica had not answered in time: sent, won (answered first), denied (by the retry budget); rescue: those of them sent when an API process freed (an answered response ended) while the request was still unanswered",
                &["outcome"],
            ),
            admission_queue_length: gauge(
                "laneway_admission_queue_length",
                "Requests waiting for room",
            ),
            admission_in_flight: gauge(
                "laneway_admission_in_flight",
                "Admitted inference requests in flight",
            ),
            admission_rejected: counter(
                "laneway_admission_rejected_total",
                "Requests answered 429, by reason",
                &["reason"],
            ),
            admission_bursts: register(
                registry,
                IntCounter::new(
                    "laneway_admission_bursts_total",
                    "Admissions past a full replica's limit, for tenants under their fair share or bands above one present (admission.tenant_burst)",
                )
                .expect("valid"),
            ),
            admission_wait: register(
                registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "laneway_admission_wait_seconds",
                        "Time from arrival to admission (a place on a replica), per tenant",
                    )
                    .buckets(vec![
                        0.000_1, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                        10.0,
                    ]),
                    &["tenant"],
                )
                .expect("valid"),
            ),
            stream_failures: counter(
                "laneway_stream_failures_total",
                "Responses whose upstream failed after the headers went out, by reason",
                &["reason"],
            ),
            n_minus_one_headroom: gauge(
                "laneway_n_minus_one_headroom",
                "In-flight slots left if the largest node fails, minus requests in flight (N-1 at SLO: laneway_n_minus_one_headroom_rps)",
            ),
            largest_fault_domain_replicas: gauge(
                "laneway_largest_fault_domain_replicas",
                "Replicas on the node that holds the most",
            ),
            answer_gate_waiting: gauge(
                "laneway_answer_gate_waiting",
                "Streamed requests held while their replica has admission.max_unanswered_per_replica requests it has not answered",
            ),
            answer_gate_held: register(
                registry,
                IntCounter::new(
                    "laneway_answer_gate_held_total",
                    "Streamed requests that waited for their replica to answer earlier ones (admission.max_unanswered_per_replica)",
                )
                .expect("valid"),
            ),
        }
    }
}
