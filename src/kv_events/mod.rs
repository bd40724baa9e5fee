//! vLLM's KV-cache events as both ends speak them: the batches on the wire ([`wire`]) and
//! the block hashes of a prompt in the engine's own chain ([`block_hash`],
//! `--prefix-caching-hash-algo sha256_cbor`). Shared by the gateway, which follows the
//! replicas' events (`gateway::kv_events`), and the simulator, which publishes them.

pub mod block_hash;
#[cfg(test)]
pub(crate) mod capture;
#[cfg(test)]
mod tests;
pub mod wire;
