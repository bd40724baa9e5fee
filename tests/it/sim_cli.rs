//! `laneway sim` as a process: the first stdout line names the address, the replica serves,
//! the `exit` fault ends the process as a crash, `--kv-events` publishes KV-cache events,
//! and bad settings are refused.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const LIMIT: Duration = Duration::from_secs(20);

fn laneway() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_laneway"));
    command.kill_on_drop(true).stdout(Stdio::piped()).stderr(Stdio::null());
    command
}

#[tokio::test]
async fn prints_its_address_serves_and_exits_on_the_exit_fault() {
    let profile = concat!(env!("CARGO_MANIFEST_DIR"), "/config/profiles/tiny.toml");
    let mut child = laneway()
        .args(["sim", "--port", "0", "--config", profile, "--speed", "20", "--id", "cli-replica"])
        .args(["--api-workers", "2"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(LIMIT, lines.next_line()).await.unwrap().unwrap().unwrap();
    let base = first.strip_prefix("listening on ").expect("first line names the address");
    assert!(base.starts_with("http://127.0.0.1:"), "{first}");

    let client = reqwest::Client::new();
    let health = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.headers()["x-sim-replica"], "cli-replica");
    let models: serde_json::Value =
        client.get(format!("{base}/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "sim-tiny");

    let exit =
        client.post(format!("{base}/sim/fault")).body(r#"{"mode":"exit"}"#).send().await.unwrap();
    assert_eq!(exit.status(), 200);
    let status = tokio::time::timeout(LIMIT, child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(1), "the exit fault ends the process as a crash");
}

#[tokio::test]
async fn kv_events_flag_publishes_where_kv_event_sources_says() {
    let mut child =
        laneway().args(["sim", "--port", "0", "--profile", "tiny", "--kv-events"]).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(LIMIT, lines.next_line()).await.unwrap().unwrap().unwrap();
    let base = first.strip_prefix("listening on ").expect("first line names the address");
    let sources: serde_json::Value =
        reqwest::get(format!("{base}/kv_event_sources")).await.unwrap().json().await.unwrap();
    let rank = &sources["0"];
    assert_eq!(
        (&rank["enable_kv_cache_events"], &rank["publisher"]),
        (&true.into(), &"zmq".into())
    );
    for endpoint in ["endpoint", "replay_endpoint"] {
        let port = rank[endpoint].as_str().unwrap().strip_prefix("tcp://*:").expect(endpoint);
        assert!(port.parse::<u16>().unwrap() > 0, "{sources}");
    }
    child.kill().await.unwrap();
}

#[tokio::test]
async fn refuses_unknown_profiles_and_bad_settings() {
    for args in [
        vec!["sim", "--port", "0", "--profile", "h100-nope"],
        vec!["sim", "--port", "0", "--profile", "tiny", "--speed", "0"],
        vec!["sim", "--port", "0", "--profile", "tiny", "--api-workers", "0"],
        vec![
            "sim",
            "--port",
            "0",
            "--profile",
            "tiny",
            "--kv-events",
            "--no-enable-prefix-caching",
        ],
    ] {
        let output =
            tokio::time::timeout(LIMIT, laneway().args(&args).output()).await.unwrap().unwrap();
        assert!(!output.status.success(), "{args:?}");
        assert!(output.stdout.is_empty(), "nothing printed before failing: {args:?}");
    }
}
