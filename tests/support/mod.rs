//! What the integration test binaries (`tests/it`, `tests/load`) share: a gateway and
//! simulated or scripted replicas on port 0 (`gateway`), the simulator's client side
//! (`sim`), and a test PKI with a TLS front (`tls`).

pub mod gateway;
pub mod sim;
pub mod tls;
