//! The wall-clock canary tests' traffic: streamed requests from named users whose variants
//! are spread evenly and at random over the run.

use futures_util::StreamExt;
use laneway::canary::{VariantTable, WeightedVariant};
use laneway::gateway::GatewayHandle;
use laneway::gateway::config::VariantConfig;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::support::canary::send_as;

/// One streamed request from each named user, in order, four at a time.
pub async fn stream_as_named(
    gateway: &GatewayHandle,
    users: &[String],
) -> Vec<(u16, String, String)> {
    let client = reqwest::Client::new();
    futures_util::stream::iter(users)
        .map(|user| {
            let client = &client;
            async move { send_as(client, gateway, user, true).await }
        })
        .buffer_unordered(4)
        .collect()
        .await
}

/// `per_variant` user names on each of `variants`, in an order shuffled by `seed`:
/// the variants are spread over the run as randomly arriving users would spread them, so
/// neither whatever changes with time (the first connections, a busy neighbour) nor a fixed
/// pattern of who follows whom (with `user-0`, `user-1`, ... in order, three of the first
/// four are on the same variant of two) falls on one variant more than the other.
pub fn balanced_users(variants: &[VariantConfig], per_variant: usize, seed: u64) -> Vec<String> {
    let weighted =
        variants.iter().map(|v| WeightedVariant { name: v.name.clone(), weight: v.weight });
    let table = VariantTable::new(weighted.collect()).expect("a valid weight table");
    let variants = variants.len();
    let mut taken = vec![0; variants];
    let mut users: Vec<String> = (0..per_variant * variants * 64)
        .map(|candidate| format!("user-{candidate}"))
        .filter(|name| {
            let variant = table.assign(name.as_bytes());
            taken[variant] += 1;
            taken[variant] <= per_variant
        })
        .collect();
    assert_eq!(users.len(), per_variant * variants, "a variant has too small a weight");
    users.shuffle(&mut StdRng::seed_from_u64(seed));
    users
}
