//! The example configs are valid, `--check` names every bad field, and h2c clients work.

use std::path::Path;
use std::process::Command;

use crate::support::gateway::*;
use laneway::gateway::{GatewayConfig, Strategy};

#[test]
fn example_configs_are_valid() {
    let tp8x2 = GatewayConfig::load(Path::new("config/tp8x2.toml")).unwrap();
    assert_eq!(tp8x2.replicas.len(), 2);
    assert_eq!(tp8x2.short.strategy, Strategy::ForceClose);
    let tp4x4 = GatewayConfig::load(Path::new("config/tp4x4.toml")).unwrap();
    assert_eq!(tp4x4.replicas.len(), 4);
    assert_eq!(tp4x4.replicas[1].node, "h20-node-1");
    assert!(tp4x4.short.listen.is_some() && tp4x4.long.listen.is_some());
    let multi = GatewayConfig::load(Path::new("config/multi-model.toml")).unwrap();
    assert_eq!(multi.models.declared["small-1"], ["qwen3-8b", "qwen3-8b-sql-lora"]);
    assert_eq!(multi.models.declared["small-0"], ["qwen3-8b", "qwen3-8b-sql-lora"]);
    assert!(!multi.models.declared.contains_key("flash-0"));
    assert_eq!(multi.tenants.len(), 3);
    assert!(multi.auth.is_some());
}

#[test]
fn check_flag_validates_and_reports_every_bad_field() {
    let binary = env!("CARGO_BIN_EXE_laneway");
    let args = ["serve", "--config", "config/tp4x4.toml", "--check"];
    let output = Command::new(binary).args(args).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("4 replicas"));

    let dir = std::env::temp_dir().join(format!("laneway-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "policy = \"fastest\"\n[entries.long]\nstrategy = \"sometimes\"\n\
         [[replicas]]\nname = \"a\"\nurl = \"ftp://x\"\n",
    )
    .unwrap();
    let output =
        Command::new(binary).args(["serve", "--config"]).arg(&bad).arg("--check").output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for path in ["policy:", "entries.long.strategy:", "replicas[0].url:"] {
        assert!(stderr.contains(path), "{path} missing from {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn http2_prior_knowledge_clients_are_served() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(config_for(&sims)).await;
    let client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let response = post_chat(&client, &gateway, &chat_body(10, 3, true)).await;
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(header(&response, "x-laneway-entry"), "short");
    assert!(response.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    gateway.shutdown().await;
}

#[tokio::test]
async fn serves_on_listeners_the_caller_bound() {
    let sims = start_sims(1, 1).await;
    let smart = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (smart_addr, admin_addr) = (smart.local_addr().unwrap(), admin.local_addr().unwrap());
    let listeners = laneway::gateway::Listeners { smart, admin, dedicated: Vec::new() };
    // The config's own addresses are not bound: the sockets given are.
    let gateway = laneway::gateway::spawn_on(config_for(&sims), listeners).await.unwrap();
    assert_eq!((gateway.addr(), gateway.admin_addr()), (smart_addr, admin_addr));
    let response = reqwest::Client::new()
        .post(format!("http://{smart_addr}/v1/chat/completions"))
        .json(&chat_body(50, 2, false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(sims[0].stats().requests_total, 1);
    gateway.shutdown().await;
}
