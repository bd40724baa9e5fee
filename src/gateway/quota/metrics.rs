//! Usage per tenant name on `/metrics` (never the key): requests admitted and refused,
//! tokens used, requests in flight; and how the shared store (`[limits] store`) fares.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

pub struct TenantMetrics {
    requests: IntCounterVec,
    tokens: IntCounterVec,
    in_flight: IntGaugeVec,
    /// Times the shared store went from answering to not answering.
    pub(super) store_outages: IntCounter,
    /// Tenant requests decided on local counters because the shared store did not answer.
    pub(super) store_fallbacks: IntCounter,
    /// 1 while the shared store answers; 0 while it does not, and without one.
    pub(super) store_up: IntGauge,
}

impl TenantMetrics {
    pub fn new(registry: &Registry) -> Self {
        let requests = IntCounterVec::new(
            Opts::new(
                "laneway_tenant_requests_total",
                "Requests per tenant: admitted, or refused by which limit",
            ),
            &["tenant", "outcome"],
        )
        .expect("valid metric");
        let tokens = IntCounterVec::new(
            Opts::new("laneway_tenant_tokens_total", "Tokens used per tenant, from usage"),
            &["tenant", "kind"],
        )
        .expect("valid metric");
        let in_flight = IntGaugeVec::new(
            Opts::new("laneway_tenant_in_flight", "Requests in flight per tenant"),
            &["tenant"],
        )
        .expect("valid metric");
        let store_outages = IntCounter::new(
            "laneway_quota_store_outages_total",
            "Times the shared quota store stopped answering (local limits served meanwhile)",
        )
        .expect("valid metric");
        let store_fallbacks = IntCounter::new(
            "laneway_quota_store_fallbacks_total",
            "Tenant requests decided on local counters as the shared quota store did not answer",
        )
        .expect("valid metric");
        let store_up = IntGauge::new(
            "laneway_quota_store_up",
            "1 while the shared quota store answers, 0 while it does not",
        )
        .expect("valid metric");
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(tokens.clone()),
            Box::new(in_flight.clone()),
            Box::new(store_outages.clone()),
            Box::new(store_fallbacks.clone()),
            Box::new(store_up.clone()),
        ] {
            // Registered once per registry; a second gateway state reuses the first's.
            let _ = registry.register(collector);
        }
        Self { requests, tokens, in_flight, store_outages, store_fallbacks, store_up }
    }

    pub(super) fn record_admitted(&self, tenant: &str, in_flight: u64) {
        self.requests.with_label_values(&[tenant, "admitted"]).inc();
        self.set_in_flight(tenant, in_flight);
    }

    pub(super) fn record_refused(&self, tenant: &str, what: &str) {
        let outcome = match what {
            "requests" => "limited_requests",
            "tokens" => "limited_tokens",
            _ => "limited_concurrent",
        };
        self.requests.with_label_values(&[tenant, outcome]).inc();
    }

    pub(super) fn record_tokens(&self, tenant: &str, prompt: u64, completion: u64) {
        self.tokens.with_label_values(&[tenant, "prompt"]).inc_by(prompt);
        self.tokens.with_label_values(&[tenant, "completion"]).inc_by(completion);
    }

    pub(super) fn set_in_flight(&self, tenant: &str, in_flight: u64) {
        self.in_flight.with_label_values(&[tenant]).set(in_flight as i64);
    }
}
