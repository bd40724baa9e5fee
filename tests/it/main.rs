//! laneway's integration tests, in one binary so that the library and the shared support
//! code (`tests/support`: gateways and simulated replicas on port 0, test PKI, bounded
//! waiting) are compiled and linked once. Each module is one area. The few tests that
//! compare latencies measured on the wall clock live in `tests/load`, run one at a time.

#[path = "../support/mod.rs"]
mod support;

mod bench_failures;
mod bench_metrics;
mod bench_plan;
mod bench_prefix_workloads;
mod bench_workload;
mod config_reference;
mod deploy_metrics;
mod gateway_access_log;
mod gateway_admin;
mod gateway_answer_gate;
mod gateway_auth;
mod gateway_bad_input;
mod gateway_balance;
mod gateway_canary;
mod gateway_canary_rollback;
mod gateway_config;
mod gateway_discovery;
mod gateway_engine_speed;
mod gateway_entries;
mod gateway_hardening;
mod gateway_hedge;
mod gateway_hot_copies;
mod gateway_http1;
mod gateway_kv_events;
mod gateway_prefix;
mod gateway_prefix_rounding;
mod gateway_prefix_shared;
mod gateway_replica_names;
mod gateway_routing;
mod gateway_scale_out;
mod gateway_strategies;
mod gateway_streaming;
mod gateway_tls;
mod gateway_upstream_tls;
mod hostile;
mod hostile_ingress;
mod sim_api;
mod sim_calibration;
mod sim_cli;
mod sim_coalescing;
mod sim_engine;
mod sim_faults;
mod sim_kv_events;
mod sim_load;
mod sim_prefix_cache;
mod tenants;
mod tenants_shared;
mod topologies;
