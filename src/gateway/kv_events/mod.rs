//! What each replica's engine really holds in its prefix cache, from the KV-cache events
//! vLLM publishes (`--kv-events-config`, a ZMQ PUB socket): the decoding of its batches
//! ([`wire`]), the block hashes a request's tokens have in the engine's own chain
//! ([`block_hash`], `--prefix-caching-hash-algo sha256_cbor`), and the set of blocks each
//! replica holds, kept in step with the events ([`held`]) by a subscription to the
//! replica's publisher ([`subscribe`]).

pub mod block_hash;
pub mod held;
pub mod subscribe;
#[cfg(test)]
mod tests;
pub mod wire;
