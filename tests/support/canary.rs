//! Canary tests' client side: requests sent as a named user (the sticky header) and the
//! canary report read once every request is counted.

use laneway::gateway::GatewayHandle;

use super::gateway::{admin_json, chat_body, header, url};

/// The header the tests' canaries stick users by.
pub const USER_HEADER: &str = "x-user-id";

/// Sends one small chat request as `user`; returns (status, variant, strategy).
pub async fn send_as(
    client: &reqwest::Client,
    gateway: &GatewayHandle,
    user: &str,
    stream: bool,
) -> (u16, String, String) {
    let response = client
        .post(url(gateway, "/v1/chat/completions"))
        .header(USER_HEADER, user)
        .json(&chat_body(40, 4, stream))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let variant = header(&response, "x-laneway-variant");
    let strategy = header(&response, "x-laneway-strategy");
    let body = response.bytes().await.unwrap();
    assert!(!stream || body.ends_with(b"data: [DONE]\n\n"), "stream cut short");
    (status, variant, strategy)
}

/// The canary report once the first entry has recorded `requests` since start. A stream's
/// sample reaches the recorder (a task of its own) when its body ends, which can be just
/// after the client has read the last byte; bounded at about ten seconds.
pub async fn report_once_recorded(gateway: &GatewayHandle, requests: u64) -> serde_json::Value {
    for _ in 0..1000 {
        let report = admin_json(gateway, "/admin/canary").await;
        let variants = report["entries"][0]["variants"].as_array().cloned().unwrap_or_default();
        let recorded: u64 =
            variants.iter().filter_map(|v| v["since_start"]["requests"].as_u64()).sum();
        if recorded >= requests {
            return report;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the canary report never counted {requests} requests");
}
