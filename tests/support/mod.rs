//! What the integration test binaries (`tests/it`, `tests/load`) share: a gateway and
//! simulated or scripted replicas on port 0 (`gateway`), the simulator's client side
//! (`sim`), a test PKI with a TLS front (`tls`), and canary requests sent as named users
//! (`canary`), a real Redis on loopback (`redis`), and a replica that answers when told
//! (`holding`).

pub mod canary;
pub mod gateway;
pub mod holding;
pub mod redis;
pub mod sim;
pub mod tls;
