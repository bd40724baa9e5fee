//! laneway: a load-balancing gateway for LLM inference clusters, with the replica
//! simulator and load generator it is developed, tested and benchmarked with.
//!
//! The map:
//! - [`gateway`]: `laneway serve`, the product. A request's path reads by folder:
//!   listen -> classify -> pick -> forward -> observe.
//! - [`sim`]: `laneway sim`, a vLLM-like replica (continuous batching, API-server processes,
//!   fault switches) for demos, tests and benchmarks.
//! - [`bench`]: `laneway bench`, the load generator that speaks the field's workload notation.
//! - [`canary`]: live comparison of entry strategies and replica pools (variants).
//! - [`openai`]: the wire format all three share (request bodies, errors, SSE scanning).
//! - [`tokens`]: the prompt-length estimator all three share.
//! - [`error_chain`]: an error with its causes on one line, for logs and reports.
//! - [`kv_events`]: vLLM's KV-cache event batches and block hashes, published by the
//!   simulator and followed by the gateway.
//! - [`prompt_tokens`]: prompt token ids and KV-block hashes, shared by the simulator's
//!   prefix cache and the gateway's prefix index.

pub mod bench;
pub mod canary;
pub mod error_chain;
pub mod gateway;
pub mod kv_events;
pub mod openai;
pub mod prompt_tokens;
pub mod sim;
pub mod telemetry;
pub mod tokens;
