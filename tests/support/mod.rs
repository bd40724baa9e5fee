//! What the integration test binaries (`tests/it`, `tests/load`) share: a gateway and
//! simulated or scripted replicas on port 0 (`gateway`), the simulator's client side
//! (`sim`), a test PKI with a TLS front (`tls`), and canary requests sent as named users
//! (`canary`), a real Redis on loopback (`redis`), a replica that answers when told
//! (`holding`), and one on a raw socket that records what it reads (`raw_replica`).

pub mod canary;
pub mod gateway;
pub mod holding;
pub mod raw_replica;
pub mod redis;
pub mod sim;
pub mod tls;
