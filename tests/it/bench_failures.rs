//! Against a stub server on port 0: a good stream is measured, and refused connections,
//! 500s, timeouts and truncated streams all stay in the results as counted failures.

use std::convert::Infallible;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use laneway::bench::record::Outcome;
use laneway::bench::{BenchArgs, measure};

const ROLE: &str =
    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
const TOKEN: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";

fn stream(chunks: Vec<String>) -> Response {
    let items = chunks.into_iter().map(|chunk| Ok::<_, Infallible>(Bytes::from(chunk)));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(futures_util::stream::iter(items)))
        .unwrap()
}

async fn good(body: Bytes) -> Response {
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
    if request["stream"] == false {
        return axum::Json(serde_json::json!({"choices": [{"text": "x"}]})).into_response();
    }
    assert_eq!(request["ignore_eos"], true);
    assert_eq!(request["stream_options"]["include_usage"], true);
    let tokens = request["max_tokens"].as_u64().unwrap();
    let mut chunks = vec![ROLE.to_string()];
    chunks.extend((0..tokens).map(|_| TOKEN.to_string()));
    chunks.push(format!(
        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":20,\"completion_tokens\":{tokens}}}}}\n\n"
    ));
    chunks.push("data: [DONE]\n\n".to_string());
    stream(chunks)
}

async fn truncated() -> Response {
    stream(vec![ROLE.to_string(), TOKEN.to_string()])
}

async fn server_error() -> impl IntoResponse {
    (StatusCode::INTERNAL_SERVER_ERROR, "boom")
}

async fn never_answers() -> Response {
    std::future::pending::<()>().await;
    unreachable!()
}

async fn stub_server() -> String {
    let app = Router::new()
        .route("/good/v1/chat/completions", post(good))
        .route("/truncated/v1/chat/completions", post(truncated))
        .route("/error/v1/chat/completions", post(server_error))
        .route("/hang/v1/chat/completions", post(never_answers));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}

async fn refused_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}

fn args(targets: Vec<String>, workload: &str, requests: u64) -> BenchArgs {
    let mut args = BenchArgs {
        target: targets,
        workload: workload.to_string(),
        requests: Some(requests),
        quiet: true,
        seed: 5,
        ..BenchArgs::default()
    };
    args.request.timeout = 0.5;
    args
}

#[tokio::test]
async fn every_failure_kind_is_counted_not_dropped() {
    let base = stub_server().await;
    let targets = vec![
        format!("good={base}/good"),
        format!("error={base}/error"),
        format!("hang={base}/hang"),
        format!("truncated={base}/truncated"),
        format!("refused={}", refused_url().await),
    ];
    let outcome = measure(&args(targets, "20/5/c2", 4)).await.unwrap();
    let by_name = |name: &str| outcome.targets.iter().find(|t| t.name == name).unwrap();

    let good = by_name("good");
    assert_eq!((good.summary.requests, good.summary.successes), (4, 4));
    for record in &good.records {
        assert_eq!(record.output_tokens, 5);
        assert_eq!(record.prompt_tokens, 20);
        assert_eq!(record.chunks, 6, "the role chunk and five tokens");
        assert_eq!(record.itl.len(), 5, "six choice chunks make five gaps");
        assert!(record.ttft.is_some() && record.tpot().is_some());
    }
    assert_eq!((good.summary.chunks_min, good.summary.chunks_max), (6, 6));
    let mut indices: Vec<u64> = good.records.iter().map(|r| r.index).collect();
    indices.sort_unstable();
    assert_eq!(indices, vec![0, 1, 2, 3], "each index once, across the interleaved rounds");

    let expect_all = |name: &str, is_kind: fn(&Outcome) -> bool| {
        let target = by_name(name);
        assert_eq!(target.summary.requests, 4, "{name}");
        assert_eq!(target.summary.failures, 4, "{name}");
        assert!(target.records.iter().all(|r| is_kind(&r.outcome)), "{name}: {:?}", target.records);
    };
    expect_all("error", |o| *o == Outcome::HttpStatus(500));
    expect_all("hang", |o| *o == Outcome::Timeout);
    expect_all("truncated", |o| *o == Outcome::Truncated);
    expect_all("refused", |o| matches!(o, Outcome::Connect(_)));

    assert!(outcome.table.contains("| good | 4 | 0 |"), "{}", outcome.table);
    assert!(outcome.table.contains("| hang | 0 | 4 (timeout 4) |"), "{}", outcome.table);
    assert!(outcome.table.contains("Ratios to `good`"), "{}", outcome.table);
}

#[tokio::test]
async fn the_open_loop_and_the_overhead_mode_count_every_request() {
    let base = stub_server().await;
    let mut open =
        args(vec![format!("good={base}/good"), format!("error={base}/error")], "20/3", 30);
    open.rate = Some(500.0);
    let outcome = measure(&open).await.unwrap();
    assert_eq!(outcome.targets[0].summary.successes, 30);
    assert_eq!(outcome.targets[1].summary.failures, 30);

    let dir = std::env::temp_dir().join(format!("laneway-bench-test-{}", std::process::id()));
    let mut tiny = args(
        vec![format!("direct={base}/good"), format!("dead={}", refused_url().await)],
        "tiny",
        40,
    );
    tiny.rate = Some(1000.0);
    tiny.output.json = Some(dir.join("tiny.json"));
    tiny.output.plot = Some(dir.clone());
    let outcome = measure(&tiny).await.unwrap();
    assert_eq!(outcome.targets[0].summary.successes, 40);
    assert_eq!(outcome.targets[1].summary.failures, 40);
    assert!(outcome.table.contains("p50 (us)") && outcome.table.contains("Added over `direct`"));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("tiny.json")).unwrap()).unwrap();
    assert_eq!(json["targets"][1]["records"].as_array().unwrap().len(), 40);
    let chart = std::fs::read_to_string(dir.join("latency_cdf.svg")).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("direct"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn streaming_charts_are_written() {
    let base = stub_server().await;
    let dir = std::env::temp_dir().join(format!("laneway-bench-charts-{}", std::process::id()));
    let mut run = args(vec![format!("a={base}/good"), format!("b={base}/good")], "20/4/c2", 6);
    run.ramp_up = Some(0.05);
    run.output.plot = Some(dir.clone());
    measure(&run).await.unwrap();
    for chart in ["ttft_cdf.svg", "e2e_cdf.svg", "ttft_by_target.svg"] {
        let svg = std::fs::read_to_string(dir.join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("\na\n</text>") && svg.contains("\nb\n</text>"),
            "{chart}: {svg}"
        );
    }
    // No objectives, no goodput chart; with them, one bar per target.
    assert!(!dir.join("goodput_by_target.svg").exists());
    run.output.goodput = vec!["ttft:60000".into()];
    measure(&run).await.unwrap();
    let svg = std::fs::read_to_string(dir.join("goodput_by_target.svg")).unwrap();
    assert!(
        svg.contains("Goodput share")
            && svg.contains("\na\n</text>")
            && svg.contains("\nb\n</text>")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_target_of_several_urls_takes_them_in_turn() {
    let base = stub_server().await;
    let spread = format!("direct={base}/good,{base}/error");
    let outcome = measure(&args(vec![spread], "20/2/c3", 10)).await.unwrap();
    let summary = &outcome.targets[0].summary;
    assert_eq!((summary.successes, summary.failures), (5, 5));
    assert!(
        outcome.targets[0].records.iter().all(|r| r.outcome.is_success() == (r.index % 2 == 0))
    );
}

#[tokio::test]
async fn an_open_loop_never_waits_for_a_full_cap_it_counts_the_requests_not_sent() {
    use laneway::bench::arrivals::Arrivals;
    use laneway::bench::client::{RequestTemplate, http_client};
    use laneway::bench::runner::{Budget, RequestKind, Round, TargetContext, run_round};
    let base = stub_server().await;
    let template = RequestTemplate::new(
        &format!("{base}/hang"),
        laneway::openai::request::Endpoint::Chat,
        "sim",
        &[],
        std::time::Duration::from_secs(2),
    )
    .unwrap();
    let context = std::sync::Arc::new(TargetContext {
        client: http_client(),
        kind: RequestKind::Tiny { body: template.tiny_body() },
        template,
        seed: 1,
        progress: Default::default(),
        in_flight_cap: 3,
    });
    let round = Round {
        number: 0,
        first_index: 0,
        budget: Budget::Requests(10),
        // Ten requests due within a few milliseconds, each hanging for the 2 s timeout.
        arrivals: Arrivals::Open { rate: 5000.0, max_concurrency: None },
        ramp_up: std::time::Duration::ZERO,
    };
    let result = run_round(context, round).await;
    let count = |kind: Outcome| result.records.iter().filter(|r| r.outcome == kind).count();
    assert_eq!(result.records.len(), 10);
    assert_eq!(count(Outcome::Timeout), 3);
    assert_eq!(count(Outcome::NotSent), 7);
}
