//! The one body type the request path passes along, up- and downstream: buffered request
//! bodies, streamed upstream bodies and error bodies all box into it.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// Errors a body can fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed body; `Unsync` because hyper only needs `Send`, and stream observers need not
/// be `Sync`.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// A body of bytes already in memory.
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// An empty body.
pub fn empty() -> ProxyBody {
    Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync()
}

/// Boxes any body whose error converts into [`BoxError`].
pub fn boxed<B>(body: B) -> ProxyBody
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}
