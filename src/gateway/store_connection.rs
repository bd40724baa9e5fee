//! The connection to the gateways' shared store (`[limits] store`, a Redis), as the tenants'
//! quotas and `prefix_aware`'s shared placements both open it: made on first use, each
//! connect bounded to a second, each answer awaited at most a second (callers on a
//! request's path bound it tighter), and a lost connection made again on the next call
//! (each caller paces its calls while the store does not answer).

use std::time::Duration;

use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// The longest wait for one answer on the connection itself.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection to the Redis at `url`, made on first use. Must run inside a tokio runtime.
pub fn open(url: &str) -> Result<ConnectionManager, RedisError> {
    let client = redis::Client::open(url)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
        .set_number_of_retries(1);
    ConnectionManager::new_lazy_with_config(client, config)
}
