//! The access log: one JSON line per request at target `laneway::access`, carrying the
//! request id, entry, variant, replica, status, TTFT, tokens and duration; only when the
//! config asks for it (`access_log = true`).

use std::io::Write;
use std::sync::{Arc, OnceLock};

use crate::support::gateway::{chat_body, config_for, start_gateway, start_sims, url};
use laneway::gateway::GatewayConfig;
use tokio::sync::Mutex as AsyncMutex;
use tracing_subscriber::fmt::MakeWriter;

/// Collects log output; a blocking lock is fine here, it is only taken by the logger.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::RwLock<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn captured() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        tracing_subscriber::fmt()
            .json()
            .with_env_filter("laneway::access=info")
            .with_writer(captured.clone())
            .init();
        captured
    })
}

fn access_lines() -> Vec<serde_json::Value> {
    let text = String::from_utf8(captured().0.read().unwrap().clone()).unwrap();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["target"] == "laneway::access")
        .collect()
}

/// The access log is opt-in: these tests turn it on.
fn with_access_log(mut config: GatewayConfig) -> GatewayConfig {
    config.access_log = true;
    config
}

/// Tests in this binary share the global subscriber; run them one at a time.
static SERIAL: AsyncMutex<()> = AsyncMutex::const_new(());

#[tokio::test]
async fn one_line_per_streamed_request_with_ttft_and_tokens() {
    let _serial = SERIAL.lock().await;
    captured();
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(with_access_log(config_for(&sims))).await;
    let response = reqwest::Client::new()
        .post(url(&gateway, "/v1/chat/completions"))
        .header("x-request-id", "access-stream-1")
        .json(&chat_body(100, 5, true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let _ = response.text().await.unwrap();
    crate::support::gateway::wait_until("the access line", || {
        access_lines().iter().any(|l| l["fields"]["request_id"] == "access-stream-1")
    })
    .await;
    let lines: Vec<_> = access_lines()
        .into_iter()
        .filter(|l| l["fields"]["request_id"] == "access-stream-1")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let fields = &lines[0]["fields"];
    assert_eq!(fields["entry"], "short");
    assert_eq!(fields["variant"], "default");
    assert_eq!(fields["replica"], "sim-0");
    assert_eq!(fields["status"], 200);
    assert_eq!(fields["completion_tokens"], 5);
    assert_eq!(fields["outcome"], "complete");
    assert!(fields["ttft_ms"].as_f64().unwrap() > 0.0, "{fields}");
    assert!(fields["duration_ms"].as_f64().unwrap() >= fields["ttft_ms"].as_f64().unwrap());
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_refused_request_gets_a_line_too() {
    let _serial = SERIAL.lock().await;
    captured();
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(with_access_log(config_for(&sims))).await;
    let response = reqwest::Client::new()
        .post(url(&gateway, "/v1/chat/completions"))
        .header("x-request-id", "access-bad-1")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let lines: Vec<_> = access_lines()
        .into_iter()
        .filter(|l| l["fields"]["request_id"] == "access-bad-1")
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["fields"]["status"], 400);
    assert_eq!(lines[0]["fields"]["replica"], "-");
    assert_eq!(lines[0]["fields"]["outcome"], "bad_request");
    gateway.shutdown().await;
}

#[tokio::test]
async fn off_unless_the_config_asks() {
    let _serial = SERIAL.lock().await;
    captured();
    let sims = start_sims(1, 1).await;
    let config = config_for(&sims);
    assert!(!config.access_log, "the access log is opt-in");
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::new();
    for id in ["access-off-1", "access-off-bad-1"] {
        let body =
            if id.contains("bad") { "{".to_string() } else { chat_body(10, 1, false).to_string() };
        let response = client
            .post(url(&gateway, "/v1/chat/completions"))
            .header("x-request-id", id)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        // The id still comes back: only the line is opt-in.
        assert_eq!(response.headers()["x-request-id"], id);
        let _ = response.text().await.unwrap();
    }
    // A line is written before the body's last byte leaves the gateway, so none can be late.
    let lines = access_lines();
    assert!(
        !lines.iter().any(|l| l["fields"]["request_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("access-off"))),
        "{lines:?}"
    );
    gateway.shutdown().await;
}
