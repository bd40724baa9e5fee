//! Reliability under faults, against the simulator's fault switches: a replica killed,
//! hung or slowed under streaming load, a reload under load, and three times the offered
//! load the limits admit. Counts and ratios only; every wait is bounded.

use std::time::Duration;

use crate::streaming_load::{
    Load, Outcome, fast_config, in_rotation, median_decode, median_ttft, wait_all_idle,
};
use crate::support::gateway::{start_gateway, start_sims, wait_until};
use laneway::sim::Fault;

fn failed_checks(gateway: &laneway::gateway::GatewayHandle, replica: &str) -> f64 {
    let prefix = format!("laneway_health_checks_total{{replica=\"{replica}\",result=\"fail\"}}");
    crate::support::gateway::sample(&gateway.metrics_text(), &prefix).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_fails_no_request_that_had_no_byte_and_rejoins_when_healed() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(3, 1).await;
    let gateway = start_gateway(fast_config(&sims)).await;
    let load = Load::start(&gateway, 6, 400, 64);
    load.wait_for_more(30).await;

    sims[1].set_fault(Fault::Exit);
    wait_until("sim-1 out of rotation", || !in_rotation(&gateway, "sim-1")).await;
    let checks_to_detect = failed_checks(&gateway, "sim-1");
    load.wait_for_more(30).await;

    sims[1].set_fault(Fault::Healthy);
    wait_until("sim-1 back in rotation", || in_rotation(&gateway, "sim-1")).await;
    let served_before = sims[1].stats().requests_total;
    wait_until("sim-1 serving again", || sims[1].stats().requests_total > served_before + 3).await;
    let outcomes = load.finish().await;
    wait_all_idle(&gateway, &["sim-0", "sim-1", "sim-2"]).await;

    let failed_without_byte = outcomes.iter().filter(|o| o.failed_before_any_byte()).count();
    let cut_mid_stream = outcomes.iter().filter(|o| o.error_event).count();
    let all_failed_checks = failed_checks(&gateway, "sim-1");
    println!(
        "kill: {} requests, {failed_without_byte} failed before a byte, {cut_mid_stream} cut \
         mid-stream, {checks_to_detect} failed checks before removal ({all_failed_checks} in all)",
        outcomes.len()
    );
    assert_eq!(
        failed_without_byte,
        0,
        "{:?}",
        outcomes.iter().find(|o| o.failed_before_any_byte())
    );
    // Only streams open on the replica when it died may end in an error event.
    assert!(cut_mid_stream <= 6, "{cut_mid_stream} streams cut");
    assert!(outcomes.iter().all(|o| o.complete || o.error_event));
    // Out of rotation within the health interval: at most the threshold of failed checks
    // (passive ejection may take it out sooner), plus the round in flight.
    assert!(checks_to_detect <= 3.0, "{checks_to_detect} failed checks before removal");
    let text = gateway.metrics_text();
    // On failure, every series about sim-1 says why it left rotation again.
    let about_sim_1: Vec<&str> = text.lines().filter(|line| line.contains("\"sim-1\"")).collect();
    assert_eq!(
        crate::support::gateway::sample(&text, "laneway_replica_healthy{replica=\"sim-1\"}"),
        Some(1.0),
        "{about_sim_1:#?}"
    );
    assert!(text.contains("laneway_stream_failures_total") || cut_mid_stream == 0);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_and_slow_replicas_lose_their_traffic_and_others_keep_their_ttft() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(3, 1).await;
    // The default policy: every request here shares one prompt, so the slow replica holds
    // the prefix they all hit; its streams waiting far past their predictions must move
    // them before its slow first tokens have taught its model.
    let config = fast_config(&sims);
    let gateway = start_gateway(config).await;
    let baseline = Load::start(&gateway, 6, 25, 48).complete().await;
    assert!(baseline.iter().all(|o| o.complete));
    let baseline_ttft = median_ttft(&baseline);

    // Hung: the health checks time out and take it out before the measured run.
    sims[2].set_fault(Fault::Hang);
    wait_until("hung sim-2 out of rotation", || !in_rotation(&gateway, "sim-2")).await;
    let hung = Load::start(&gateway, 6, 25, 48).complete().await;
    assert!(hung.iter().all(|o| o.complete), "{:?}", hung.iter().find(|o| !o.complete));
    assert_eq!(hung.iter().filter(|o| o.replica == "sim-2").count(), 0);
    let hung_ratio = median_ttft(&hung) / baseline_ttft;

    // Slow: it still passes its checks, but least_queue sees its requests pile up.
    sims[2].set_fault(Fault::Slow { factor: 20.0 });
    wait_until("sim-2 back in rotation", || in_rotation(&gateway, "sim-2")).await;
    let slow = Load::start(&gateway, 6, 25, 48).complete().await;
    assert!(slow.iter().all(|o| o.complete));
    let to_slow = slow.iter().filter(|o| o.replica == "sim-2").count();
    let elsewhere: Vec<_> = slow.iter().filter(|o| o.replica != "sim-2").cloned().collect();
    let slow_ratio = median_ttft(&elsewhere) / baseline_ttft;
    println!(
        "TTFT ratio vs no fault: hung {hung_ratio:.2}, slow {slow_ratio:.2}; {to_slow}/{} to the slow replica",
        slow.len()
    );
    assert!(to_slow * 4 < slow.len(), "{to_slow} of {} went to the slow replica", slow.len());
    assert!(hung_ratio < 3.0, "TTFT ratio with a hung replica: {hung_ratio}");
    assert!(slow_ratio < 3.0, "TTFT ratio with a slow replica: {slow_ratio}");
    wait_all_idle(&gateway, &["sim-0", "sim-1"]).await;
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_changes_the_replica_set_without_a_failure() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(3, 1).await;
    let gateway = start_gateway(fast_config(&sims[..2])).await;
    let mut load = Load::start(&gateway, 6, 400, 64);
    load.wait_for_more(20).await;

    gateway.reload(fast_config(&sims)).await.unwrap();
    wait_until("sim-2 serving", || sims[2].stats().requests_total >= 3).await;
    let removed = gateway.state().picker.by_name("sim-0").unwrap();
    gateway.reload(fast_config(&sims[1..])).await.unwrap();
    // Requests that started before the reload may still reach sim-0: let them finish.
    load.wait_for_more(12).await;
    wait_until("sim-0 idle", || removed.load.in_flight() == 0).await;
    let _ = load.drain();
    let removed_total = sims[0].stats().requests_total;
    load.wait_for_more(30).await;
    // Requests already on sim-0 may finish there; none started after the reload.
    let after = load.drain();
    let sim0_after = sims[0].stats().requests_total - removed_total;

    // An invalid file is refused and the replica set stays.
    let path = std::env::temp_dir().join(format!("laneway-reload-{}.toml", std::process::id()));
    std::fs::write(&path, "policy = \"random\"\n[[replicas]]\nname = \"x\"\n").unwrap();
    assert!(gateway.reload_file(&path).await.is_err());
    std::fs::remove_file(&path).unwrap();
    assert_eq!(gateway.state().picker.snapshot().len(), 2);

    let rest = load.finish().await;
    let failures = after.iter().chain(&rest).filter(|o| !o.complete).count();
    assert_eq!(failures, 0);
    assert_eq!(sim0_after, 0, "sim-0 got requests after it was removed");
    wait_all_idle(&gateway, &["sim-1", "sim-2"]).await;
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_times_capacity_gets_429_with_retry_after_and_the_queue_stays_bounded() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(2, 1).await;
    let mut config = fast_config(&sims);
    let admission = &mut config.reliability.admission;
    admission.max_in_flight = 4;
    admission.max_in_flight_per_replica = 2;
    admission.queue_size = 4;
    admission.queue_timeout = Duration::from_millis(200);
    let gateway = start_gateway(config).await;
    let unloaded = Load::start(&gateway, 2, 8, 200).complete().await;
    assert!(unloaded.iter().all(|o| o.complete));

    // Capacity is 4 streams; 12 clients offer three times that.
    let load = Load::start(&gateway, 12, 15, 200);
    let mut peak_in_flight = 0;
    for _ in 0..500 {
        let state = gateway.state();
        peak_in_flight = peak_in_flight.max(state.shared.admission.in_flight());
        for name in ["sim-0", "sim-1"] {
            assert!(gateway.replica_in_flight(name) <= 2);
        }
        if load.finished.load(std::sync::atomic::Ordering::Relaxed) >= 12 * 15 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let outcomes = load.finish().await;
    let admission = gateway.state().shared.admission.clone();
    let accepted: Vec<_> = outcomes.iter().filter(|o| o.status == 200).cloned().collect();
    let refused: Vec<_> = outcomes.iter().filter(|o| o.status == 429).collect();
    assert_eq!(accepted.len() + refused.len(), outcomes.len(), "only 200 and 429");
    assert!(!refused.is_empty() && !accepted.is_empty());
    // Retry-After follows the measured drain (whole seconds, 1 to 60; its arithmetic is
    // unit-tested in admission/drain_rate.rs), so here only its presence and range.
    let retry_after = |o: &&Outcome| o.retry_after.as_deref().and_then(|s| s.parse::<u64>().ok());
    assert!(refused.iter().all(|o| retry_after(o).is_some_and(|s| (1..=60).contains(&s))));
    assert!(accepted.iter().all(|o| o.complete));
    assert!(peak_in_flight <= 4);
    assert!(admission.waiting_peak() <= 4, "queue peaked at {}", admission.waiting_peak());
    // Admitted streams decode as fast as without overload: the limits keep the replicas
    // at the load they were sized for. The queue wait (bounded by its deadline) is the only
    // extra an admitted request pays.
    let ratio = median_decode(&accepted) / median_decode(&unloaded);
    println!(
        "overload: {} accepted, {} refused, queue peak {}, decode-time ratio {ratio:.2}",
        accepted.len(),
        refused.len(),
        admission.waiting_peak()
    );
    assert!(ratio < 3.0, "accepted decode-time ratio under 3x load: {ratio}");
    wait_all_idle(&gateway, &["sim-0", "sim-1"]).await;
    assert_eq!(admission.waiting(), 0);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_mid_way_ends_with_an_error_event_and_done_and_is_counted() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(2, 1).await;
    for sim in &sims {
        sim.set_fault(Fault::CutAfterChunks { chunks: 3 });
    }
    let mut config = fast_config(&sims);
    // Keep both replicas in rotation: this test is about what the client sees.
    config.reliability.health.consecutive_failures = 1000;
    let gateway = start_gateway(config).await;
    let outcomes = Load::start(&gateway, 2, 4, 32).complete().await;
    assert_eq!(outcomes.len(), 8);
    assert!(outcomes.iter().all(|o| o.status == 200 && o.error_event), "{outcomes:?}");
    let text = gateway.metrics_text();
    let counted =
        crate::support::gateway::sample(&text, "laneway_stream_failures_total{reason=\"reset\"}");
    assert_eq!(counted, Some(8.0));
    wait_all_idle(&gateway, &["sim-0", "sim-1"]).await;
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_is_ended_and_shutdown_ends_what_the_drain_left_open() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let mut stub = crate::support::gateway::start_stub().await;
    let mut config =
        crate::support::gateway::loopback_config(vec![crate::support::gateway::replica(
            "stub", stub.addr,
        )]);
    config.reliability.timeouts.idle = Duration::from_millis(300);
    config.drain_deadline = Duration::from_millis(200);
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    let chat = crate::support::gateway::chat_body(16, 8, true);
    let first_chunk = bytes::Bytes::from_static(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
    );

    // Idle: one chunk, then silence.
    let url = crate::support::gateway::url(&gateway, "/v1/chat/completions");
    let mut idle = client.post(&url).json(&chat).send().await.unwrap();
    let idle_sender = stub.streams.recv().await.unwrap();
    idle_sender.send(first_chunk.clone()).await.unwrap();
    let mut received = String::new();
    crate::support::gateway::read_until(&mut idle, &mut received, "[DONE]").await;
    assert!(received.contains("idle_timeout") && received.contains("\"error\""), "{received}");

    // Shutdown: a stream still open after the drain deadline gets the same ending.
    let mut open = client.post(&url).json(&chat).send().await.unwrap();
    let open_sender = stub.streams.recv().await.unwrap();
    open_sender.send(first_chunk).await.unwrap();
    let mut received = String::new();
    crate::support::gateway::read_until(&mut open, &mut received, "\"content\":\"a\"").await;
    let shutdown = tokio::spawn(gateway.shutdown());
    crate::support::gateway::read_until(&mut open, &mut received, "[DONE]").await;
    assert!(received.contains("shutdown") && received.contains("\"error\""), "{received}");
    tokio::time::timeout(Duration::from_secs(10), shutdown).await.unwrap().unwrap();
    drop((idle_sender, open_sender));
}

fn sample_or_zero(text: &str, prefix: &str) -> f64 {
    crate::support::gateway::sample(text, prefix).unwrap_or(0.0)
}

async fn send_plain(gateway: &laneway::gateway::GatewayHandle, count: usize) -> Vec<u16> {
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..count {
        let response = client
            .post(crate::support::gateway::url(gateway, "/v1/chat/completions"))
            .json(&crate::support::gateway::chat_body(16, 4, false))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    statuses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_answering_503_is_retried_elsewhere_then_ejected() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(2, 1).await;
    sims[1].set_fault(Fault::Unavailable);
    let mut config = fast_config(&sims);
    // Only passive ejection may act here: the active checks run once a minute, and round
    // robin keeps sending to the replica that least_queue would avoid for its failed scrapes.
    config.reliability.health.interval = Duration::from_secs(60);
    config.policy = laneway::gateway::config::PolicyKind::RoundRobin;
    let gateway = start_gateway(config).await;
    let statuses = send_plain(&gateway, 30).await;
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let text = gateway.metrics_text();
    let ejections = "laneway_replica_ejections_total{reason=\"5xx\",replica=\"sim-1\"}";
    assert!(sample_or_zero(&text, ejections) >= 1.0, "{text}");
    assert!(sample_or_zero(&text, "laneway_retries_total{outcome=\"sent\"}") >= 1.0);
    assert_eq!(sample_or_zero(&text, "laneway_replica_healthy{replica=\"sim-1\"}"), 0.0);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_budget_caps_retries_when_every_replica_fails() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(2, 1).await;
    for sim in &sims {
        sim.set_fault(Fault::Unavailable);
    }
    let mut config = fast_config(&sims);
    config.reliability.health.interval = Duration::from_secs(60);
    config.reliability.health.consecutive_failures = 1000;
    config.reliability.retry.budget_percent = 0;
    config.reliability.retry.min_per_second = 0;
    let gateway = start_gateway(config).await;
    let statuses = send_plain(&gateway, 40).await;
    // The replicas' own 503s pass through once retrying is no longer allowed.
    assert!(statuses.iter().all(|&s| s == 503), "{statuses:?}");
    let text = gateway.metrics_text();
    let sent = sample_or_zero(&text, "laneway_retries_total{outcome=\"sent\"}");
    let denied = sample_or_zero(&text, "laneway_retries_total{outcome=\"denied\"}");
    // The bucket starts with ten retries and earns none: 40 requests, at most 10 retries.
    assert_eq!(sent, 10.0);
    assert_eq!(denied, 30.0);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_file() {
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(2, 1).await;
    let gateway = start_gateway(fast_config(&sims[..1])).await;
    let path = std::env::temp_dir().join(format!("laneway-sighup-{}.toml", std::process::id()));
    let file = format!(
        "[[replicas]]\nname = \"sim-0\"\nurl = \"http://{}\"\n[[replicas]]\nname = \"sim-1\"\nurl = \"http://{}\"\n",
        sims[0].addr(),
        sims[1].addr()
    );
    std::fs::write(&path, file).unwrap();
    let handler =
        laneway::gateway::state::reload::spawn_sighup(gateway.reloader(), path.clone()).unwrap();
    let pid = std::process::id().to_string();
    let status = std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(status.success());
    wait_until("two replicas after SIGHUP", || gateway.state().picker.snapshot().len() == 2).await;
    handler.abort();
    std::fs::remove_file(&path).unwrap();
    gateway.shutdown().await;
}
