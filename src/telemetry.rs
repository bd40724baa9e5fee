//! Process-wide logging setup (`tracing`), human-readable by default, JSON lines on request.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; `RUST_LOG` overrides the default `info` level. Safe to
/// call more than once (later calls are ignored), so tests may call it freely.
pub fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
