//! What each replica's engine really holds in its prefix cache, from the KV-cache events
//! vLLM publishes (`--kv-events-config`, a ZMQ PUB socket; decoded by
//! [`crate::kv_events`]): the set of blocks each replica holds, kept in step with the
//! events ([`held`]) by a subscription to the replica's publisher ([`subscribe`]), found
//! in the configuration or asked of the replica ([`sources`]); per replica, the longest
//! run of a prompt's blocks it holds ([`engine_cache`]).

pub mod engine_cache;
pub mod following;
pub mod held;
pub mod sources;
pub mod subscribe;
#[cfg(test)]
mod tests;
