//! The metrics scraper: one task per replica reads its Prometheus `/metrics` every
//! interval and stores the queue figures (vLLM's names, SGLang's, and vLLM's older KV name).
//! https replicas are scraped over the gateway's upstream TLS client. With `[kv_events]`,
//! the same task runs the replica's event subscriptions (configured, or found by asking
//! its `/kv_event_sources` until it names one), which stop with it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::task::{JoinHandle, JoinSet};

use super::predict::EngineWork;
use super::replica::{Replica, ReportedLoad};
use super::replica_fetch::{FetchError, ReplicaClient, fetch_body};
use super::served_models;
use crate::gateway::kv_events::following::Following;
use crate::gateway::kv_events::sources;
use crate::gateway::tls::upstream::UpstreamTls;

/// Largest `/metrics` body read; a replica's is a few tens of kB.
const MAX_METRICS_BYTES: usize = 8 << 20;
/// Largest `/kv_event_sources` body read: a few hundred bytes per data-parallel rank.
const MAX_SOURCES_BYTES: usize = 1 << 20;

/// Starts one scraping task per replica; abort the handles to stop them.
pub fn spawn_scrapers(
    replicas: &[Arc<Replica>],
    epoch: Instant,
    interval: Duration,
    tls: &UpstreamTls,
    following: Option<&Arc<Following>>,
) -> Vec<JoinHandle<()>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(interval.max(Duration::from_millis(100))));
    let client: ReplicaClient =
        Client::builder(TokioExecutor::new()).build(tls.pooled_connector(connector));
    replicas
        .iter()
        .map(|replica| {
            let (replica, client) = (replica.clone(), client.clone());
            let following = following.cloned();
            tokio::spawn(async move {
                // Dropped with the task: the subscriptions stop with the scraper.
                let mut subscriptions = JoinSet::new();
                if let Some(following) = &following {
                    replica.engine_cache.clear();
                    if let Some(source) = following.config.sources.get(&replica.name) {
                        subscriptions
                            .spawn(following.follow(source.clone(), &replica.engine_cache));
                    }
                }
                let mut ticks = tokio::time::interval(interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let models_every = served_models::REFRESH_EVERY.div_duration_f64(interval);
                let models_every = (models_every as u64).max(1);
                let mut tick: u64 = 0;
                loop {
                    ticks.tick().await;
                    if tick.is_multiple_of(models_every) {
                        let refresh = served_models::refresh(&client, &replica);
                        let _ = tokio::time::timeout(interval * 4, refresh).await;
                        if let Some(following) = &following
                            && following.config.discover
                            && !replica.engine_cache.is_followed()
                        {
                            let found = discover_sources(&client, &replica);
                            if let Ok(Ok(found)) = tokio::time::timeout(interval * 4, found).await {
                                for source in found {
                                    tracing::info!(replica = %replica.name, events = %source.events, "KV events: following");
                                    subscriptions
                                        .spawn(following.follow(source, &replica.engine_cache));
                                }
                            }
                        }
                    }
                    tick += 1;
                    // A slow replica must not stall the loop past a few intervals.
                    let scrape = tokio::time::timeout(interval * 4, scrape_once(&client, &replica));
                    match scrape.await {
                        Ok(Ok(scraped)) => {
                            let now = Instant::now();
                            replica.load.record_scrape(scraped.load, epoch, now);
                            if let Some(work) = scraped.work {
                                // Names the replica in `laneway::engine_speed`'s traces;
                                // enabled only where they are.
                                let name = &replica.name;
                                let span = tracing::debug_span!(
                                    target: "laneway::engine_speed",
                                    "engine_speed",
                                    replica = %name
                                );
                                let _entered = span.enter();
                                replica.latency.observe_engine_work(work, now);
                            }
                        }
                        // Refused, 5xx or too slow: the picker avoids the replica until a
                        // scrape or a request gets through again.
                        _ => replica.load.record_failure(),
                    }
                }
            })
        })
        .collect()
}

/// The publishers the replica's `/kv_event_sources` names (none: it publishes no events,
/// or is no vLLM).
async fn discover_sources(
    client: &ReplicaClient,
    replica: &Replica,
) -> Result<Vec<crate::gateway::config::EventSource>, FetchError> {
    let body = fetch_body(client, replica, "/kv_event_sources", MAX_SOURCES_BYTES).await?;
    Ok(sources::parse(&body, sources::authority_host(&replica.authority))?)
}

async fn scrape_once(client: &ReplicaClient, replica: &Replica) -> Result<Scraped, FetchError> {
    let body = fetch_body(client, replica, "/metrics", MAX_METRICS_BYTES).await?;
    Ok(parse_metrics(&String::from_utf8_lossy(&body)))
}

/// What one scrape read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scraped {
    pub load: ReportedLoad,
    /// vLLM's prefill counters, if it exports them ([`EngineWork`]).
    pub work: Option<EngineWork>,
}

/// Reads the queue figures from Prometheus text (waiting and running summed over every
/// label set, several engines or models; KV use the largest of them), and vLLM's prefill
/// counters, summed likewise.
pub fn parse_metrics(text: &str) -> Scraped {
    let mut reported = ReportedLoad::default();
    let mut work = EngineWork::default();
    let (mut prefills_seen, mut computed_seen) = (false, false);
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        // Label values may hold spaces: the value starts after the closing brace.
        let rest = match line[name_end..].strip_prefix('{') {
            Some(labelled) => labelled.rfind('}').map_or("", |end| &labelled[end + 1..]),
            None => &line[name_end..],
        };
        // `value [timestamp]`
        let Some(value) = rest.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        match name {
            "vllm:num_requests_waiting" | "sglang:num_queue_reqs" => {
                reported.waiting += value.max(0.0) as u64;
            }
            "vllm:num_requests_running" | "sglang:num_running_reqs" => {
                reported.running += value.max(0.0) as u64;
            }
            "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" | "sglang:token_usage" => {
                reported.kv_cache_usage = reported.kv_cache_usage.max(value.clamp(0.0, 1.0));
            }
            "vllm:request_prefill_time_seconds_sum" => work.prefill_seconds += value,
            "vllm:request_prefill_time_seconds_count" => {
                work.prefills += value;
                prefills_seen = true;
            }
            "vllm:request_prefill_kv_computed_tokens_sum" => {
                work.computed_tokens += value;
                computed_seen = true;
            }
            _ => {}
        }
    }
    Scraped { load: reported, work: (prefills_seen && computed_seen).then_some(work) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vllm_and_sglang_names() {
        let vllm = "# HELP vllm:num_requests_waiting x\n\
            vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3.0\n\
            vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 2.0\n\
            vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 7.0\n\
            vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"a b\"} 0.25 1700000000\n\
            vllm:num_requests_waiting_total 99\n";
        assert_eq!(
            parse_metrics(vllm),
            Scraped {
                load: ReportedLoad { waiting: 5, running: 7, kv_cache_usage: 0.25 },
                work: None
            }
        );
        let sglang = "sglang:num_queue_reqs{model_name=\"m\"} 4\nsglang:num_running_reqs 1\n\
            sglang:token_usage 0.5\n";
        assert_eq!(
            parse_metrics(sglang).load,
            ReportedLoad { waiting: 4, running: 1, kv_cache_usage: 0.5 }
        );
        assert_eq!(parse_metrics("vllm:gpu_cache_usage_perc 0.75\n").load.kv_cache_usage, 0.75);
    }

    #[test]
    fn reads_vllms_prefill_counters_summed_over_engines() {
        // As vLLM 0.32 exports them (labels trimmed), two engines.
        let vllm = "vllm:request_prefill_time_seconds_sum{engine=\"0\",model_name=\"tiny\"} 1.0978\n\
            vllm:request_prefill_time_seconds_count{engine=\"0\",model_name=\"tiny\"} 1.0\n\
            vllm:request_prefill_time_seconds_bucket{engine=\"0\",le=\"0.3\"} 0.0\n\
            vllm:request_prefill_time_seconds_sum{engine=\"1\",model_name=\"tiny\"} 0.028\n\
            vllm:request_prefill_time_seconds_count{engine=\"1\",model_name=\"tiny\"} 1.0\n\
            vllm:request_prefill_kv_computed_tokens_sum{engine=\"0\",model_name=\"tiny\"} 8008.0\n\
            vllm:request_prefill_kv_computed_tokens_count{engine=\"0\",model_name=\"tiny\"} 1.0\n\
            vllm:request_prefill_kv_computed_tokens_sum{engine=\"1\",model_name=\"tiny\"} 72.0\n\
            vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"tiny\"} 7936.0\n";
        let work = parse_metrics(vllm).work.unwrap();
        assert!((work.prefill_seconds - 1.1258).abs() < 1e-9, "{work:?}");
        assert_eq!((work.prefills, work.computed_tokens), (2.0, 8080.0));
        // Without the computed tokens there is nothing to fit.
        let older = "vllm:request_prefill_time_seconds_sum 1.0\n\
            vllm:request_prefill_time_seconds_count 1.0\n";
        assert_eq!(parse_metrics(older).work, None);
    }
}
