//! A client's request body that fails while it streams to a replica (malformed chunks,
//! over the body limit, too slow) fails the exchange with the replica too; this marks such
//! a failure as the client's, so that it is answered as the client's error and never
//! counted against the replica.

use std::time::Duration;

use crate::error_chain::ErrorChain;
use crate::gateway::body::BoxError;

/// Why a streamed request body ended before its end.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("request body is over the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body did not arrive within {0:?}")]
    TimedOut(Duration),
    #[error("the client's request body failed: {}", ErrorChain(.0.as_ref()))]
    Failed(BoxError),
}

/// The client's body failure under an upstream failure, if that is what it was.
pub fn under<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a UploadError> {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(upload) = error.downcast_ref::<UploadError>() {
            return Some(upload);
        }
        cause = error.source();
    }
    None
}
