//! A replica's served models, read from its `GET /v1/models` (vLLM lists the base model and
//! every loaded LoRA adapter there) every few seconds by the metrics scraper.

use std::time::Duration;

use serde::Deserialize;

use super::replica::Replica;
use super::replica_fetch::{FetchError, ReplicaClient, fetch_body};

/// How often the list is read: adapters load and unload in seconds, not milliseconds.
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// Largest `/v1/models` body read.
const MAX_BODY_BYTES: usize = 1 << 20;

/// Most names kept per replica: the list feeds a metrics label and every pick's lookup.
pub const MAX_MODELS_PER_REPLICA: usize = 64;

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelCard>,
}

#[derive(Deserialize)]
struct ModelCard {
    id: String,
}

/// Reads the replica's list and stores it; on any failure the last list stays (a replica
/// that is briefly unreachable still serves what it served).
pub async fn refresh(client: &ReplicaClient, replica: &Replica) {
    if let Ok(models) = fetch(client, replica).await
        && **replica.served_models.load() != models
    {
        tracing::info!(replica = %replica.name, ?models, "served models");
        replica.served_models.store(std::sync::Arc::new(models));
    }
}

async fn fetch(client: &ReplicaClient, replica: &Replica) -> Result<Vec<String>, FetchError> {
    parse(&fetch_body(client, replica, "/v1/models", MAX_BODY_BYTES).await?)
}

/// The model ids of an OpenAI model list, at most [`MAX_MODELS_PER_REPLICA`], deduplicated.
pub fn parse(body: &[u8]) -> Result<Vec<String>, Box<dyn std::error::Error + Send + Sync>> {
    let list: ModelList = serde_json::from_slice(body)?;
    let mut models: Vec<String> = Vec::new();
    for card in list.data {
        if models.len() == MAX_MODELS_PER_REPLICA {
            break;
        }
        if !card.id.is_empty() && !models.contains(&card.id) {
            models.push(card.id);
        }
    }
    Ok(models)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_base_models_and_adapters_and_bounds_the_list() {
        let body = br#"{"object":"list","data":[
            {"id":"base","object":"model","root":"base"},
            {"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"base"},
            {"id":"base"}]}"#;
        assert_eq!(parse(body).unwrap(), ["base", "sql-lora"]);
        let many: Vec<_> = (0..100).map(|i| serde_json::json!({"id": format!("m{i}")})).collect();
        let body = serde_json::to_vec(&serde_json::json!({"data": many})).unwrap();
        assert_eq!(parse(&body).unwrap().len(), MAX_MODELS_PER_REPLICA);
        assert!(parse(b"{}").is_err());
    }
}
