//! `GET /v1/models` on the inference listeners: the union of what the replicas serve and the
//! config's aliases, in OpenAI's list shape. With nothing known yet (no declared lists, no
//! replica reported one), `None`: a replica answers as before.

use http::{HeaderValue, Response, header};
use serde_json::json;

use crate::gateway::body::{ProxyBody, full};
use crate::gateway::pick::serving;
use crate::gateway::state::GatewayState;

/// The gateway's model list, if it knows any model.
pub fn list(state: &GatewayState) -> Option<Response<ProxyBody>> {
    let replicas = state.picker.snapshot();
    let names = serving::union(&state.config.models, &replicas);
    if names.iter().all(|(_, alias_of)| alias_of.is_some()) {
        return None;
    }
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let data: Vec<_> = names
        .iter()
        .map(|(name, alias_of)| {
            json!({
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": if alias_of.is_some() { "laneway" } else { "vllm" },
                "root": alias_of.as_deref().unwrap_or(name),
            })
        })
        .collect();
    let body = json!({"object": "list", "data": data}).to_string();
    let mut response = Response::new(full(body));
    let json_type = HeaderValue::from_static("application/json");
    response.headers_mut().insert(header::CONTENT_TYPE, json_type);
    Some(response)
}
