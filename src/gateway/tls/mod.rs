//! TLS on both sides: the inference listeners' certificate, swappable without a restart
//! ([`server`]), and the client that reaches `https://` replicas ([`upstream`]).

pub mod server;
pub mod upstream;

pub use server::{RawTls, ServerTls, TlsConfig, TlsError, handshake, read_certs, reload_on_sighup};
