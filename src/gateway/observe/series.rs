//! The metric handles one response is recorded in, resolved once per label combination
//! (entry, strategy, variant, replica, status class) instead of by a label lookup per
//! metric per request: a lookup hashes every label and takes the vector's lock, and a
//! finished request touched seven of them.

use std::sync::Arc;

use dashmap::DashMap;
use prometheus::{Histogram, IntCounter};

use super::metrics::GatewayMetrics;
use crate::gateway::config::{Entry, Strategy};

/// A response's request-labelled metrics.
#[derive(Debug)]
pub struct RequestSeries {
    pub ttft: Histogram,
    pub itl: Histogram,
    pub tpot: Histogram,
    pub e2e: Histogram,
    pub requests: IntCounter,
    pub prompt_tokens: IntCounter,
    pub completion_tokens: IntCounter,
}

/// What a replica's series differ by.
#[derive(Debug)]
struct SeriesLabels {
    entry: Entry,
    strategy: Strategy,
    variant: Arc<str>,
    status_class: &'static str,
}

/// Every resolved series, by replica name then the other labels (a replica sees a handful
/// of combinations: a scan beats a second hash).
#[derive(Debug, Default)]
pub struct SeriesCache {
    by_replica: DashMap<String, Vec<(SeriesLabels, Arc<RequestSeries>)>, fnv::FnvBuildHasher>,
}

/// The labels of one response.
#[derive(Debug, Clone, Copy)]
pub struct ResponseLabels<'a> {
    pub entry: Entry,
    pub strategy: Strategy,
    pub variant: &'a Arc<str>,
    pub replica: &'a str,
    pub status_class: &'static str,
}

impl SeriesLabels {
    fn matches(&self, labels: &ResponseLabels<'_>) -> bool {
        self.entry == labels.entry
            && self.strategy == labels.strategy
            && self.status_class == labels.status_class
            && (Arc::ptr_eq(&self.variant, labels.variant) || *self.variant == **labels.variant)
    }
}

impl SeriesCache {
    /// The handles for `labels`, resolved from `metrics` the first time they are asked for.
    pub fn get(&self, metrics: &GatewayMetrics, labels: ResponseLabels<'_>) -> Arc<RequestSeries> {
        if let Some(known) = self.by_replica.get(labels.replica)
            && let Some((_, series)) = known.iter().find(|(known, _)| known.matches(&labels))
        {
            return series.clone();
        }
        let series = Arc::new(resolve(metrics, &labels));
        let mut known = self.by_replica.entry(labels.replica.to_string()).or_default();
        // Another request may have resolved it meanwhile: keep one.
        if let Some((_, existing)) = known.iter().find(|(known, _)| known.matches(&labels)) {
            return existing.clone();
        }
        let key = SeriesLabels {
            entry: labels.entry,
            strategy: labels.strategy,
            variant: labels.variant.clone(),
            status_class: labels.status_class,
        };
        known.push((key, series.clone()));
        series
    }
}

fn resolve(metrics: &GatewayMetrics, labels: &ResponseLabels<'_>) -> RequestSeries {
    let request = [
        labels.entry.as_str(),
        labels.strategy.as_str(),
        &labels.variant[..],
        labels.replica,
        labels.status_class,
    ];
    let tokens = [labels.entry.as_str(), &labels.variant[..], labels.replica];
    RequestSeries {
        ttft: metrics.ttft.with_label_values(&request),
        itl: metrics.itl.with_label_values(&request),
        tpot: metrics.tpot.with_label_values(&request),
        e2e: metrics.e2e.with_label_values(&request),
        requests: metrics.requests.with_label_values(&request),
        prompt_tokens: metrics.prompt_tokens.with_label_values(&tokens),
        completion_tokens: metrics.completion_tokens.with_label_values(&tokens),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_series_is_the_labelled_metric_and_is_resolved_once() {
        let metrics = GatewayMetrics::new();
        let cache = SeriesCache::default();
        let variant: Arc<str> = Arc::from("default");
        let same_name: Arc<str> = Arc::from("default");
        let labels = |variant, replica, status_class| ResponseLabels {
            entry: Entry::Short,
            strategy: Strategy::ForceClose,
            variant,
            replica,
            status_class,
        };
        let first = cache.get(&metrics, labels(&variant, "r0", "2xx"));
        let again = cache.get(&metrics, labels(&same_name, "r0", "2xx"));
        assert!(Arc::ptr_eq(&first, &again), "equal labels share one series");
        let other_status = cache.get(&metrics, labels(&variant, "r0", "5xx"));
        let other_replica = cache.get(&metrics, labels(&variant, "r1", "2xx"));
        assert!(!Arc::ptr_eq(&first, &other_status));
        assert!(!Arc::ptr_eq(&first, &other_replica));
        first.requests.inc();
        again.requests.inc();
        other_status.requests.inc();
        let exported = ["short", "force_close", "default", "r0", "2xx"];
        assert_eq!(metrics.requests.with_label_values(&exported).get(), 2);
        let tokens = ["short", "default", "r1"];
        other_replica.completion_tokens.inc_by(7);
        assert_eq!(metrics.completion_tokens.with_label_values(&tokens).get(), 7);
    }
}
