//! A client's request body streamed to a replica as it arrives (forwarded routes, the
//! debug entry): held to the body limit and the body deadline like an inference body, and
//! its failures marked as the client's, so that a malformed chunked body or one over the
//! limit is the client's 400 or 413, never a replica failure counted toward ejection.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::body_deadline::{BodyTimedOut, DeadlineBody};
use super::client_body::ClientBody;
use crate::gateway::body::BoxError;
use crate::gateway::client_fault::UploadError;
use crate::gateway::error::GatewayError;

pin_project! {
    /// A client body counted against `limit` as it streams, under the body deadline.
    pub struct Upload {
        #[pin]
        inner: DeadlineBody<ClientBody>,
        limit: usize,
        seen: usize,
    }
}

impl Upload {
    /// `body` must end within `deadline` and hold at most `limit` bytes; a declared length
    /// over the limit is refused before anything is sent.
    pub fn new(
        body: ClientBody,
        declared: Option<u64>,
        (limit, deadline): (usize, Duration),
    ) -> Result<Self, GatewayError> {
        if declared.is_some_and(|length| length > limit as u64) {
            return Err(GatewayError::PayloadTooLarge { limit });
        }
        Ok(Self { inner: DeadlineBody::new(body, deadline), limit, seen: 0 })
    }
}

impl Body for Upload {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let frame = match std::task::ready!(this.inner.poll_frame(cx)) {
            None => return Poll::Ready(None),
            Some(Ok(frame)) => frame,
            Some(Err(error)) => {
                let upload = match error.downcast::<BodyTimedOut>() {
                    Ok(timed_out) => UploadError::TimedOut(timed_out.0),
                    Err(error) => UploadError::Failed(error),
                };
                return Poll::Ready(Some(Err(Box::new(upload))));
            }
        };
        if let Some(data) = frame.data_ref() {
            *this.seen += data.len();
            if *this.seen > *this.limit {
                let too_large = UploadError::TooLarge { limit: *this.limit };
                return Poll::Ready(Some(Err(Box::new(too_large))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::gateway::client_fault::under;

    const LIMITS: (usize, Duration) = (4, Duration::from_secs(5));

    #[tokio::test]
    async fn a_body_within_the_limit_passes_whole() {
        let body = ClientBody::whole(Bytes::from_static(b"abcd"));
        let upload = Upload::new(body, Some(4), LIMITS).unwrap();
        assert_eq!(upload.collect().await.unwrap().to_bytes(), "abcd");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_the_clients_413_declared_or_not() {
        let body = || ClientBody::whole(Bytes::from_static(b"abcde"));
        let refused = Upload::new(body(), Some(5), LIMITS).err().unwrap();
        assert!(matches!(refused, GatewayError::PayloadTooLarge { limit: 4 }));
        let error = Upload::new(body(), None, LIMITS).unwrap().collect().await.unwrap_err();
        let blamed = GatewayError::client_fault(under(error.as_ref()).unwrap());
        assert!(matches!(blamed, GatewayError::PayloadTooLarge { limit: 4 }), "{blamed}");
    }

    #[tokio::test]
    async fn a_failed_body_is_found_under_the_errors_that_wrap_it() {
        let upload = Upload::new(ClientBody::failed("bad chunk size"), None, LIMITS).unwrap();
        let error = upload.collect().await.unwrap_err();
        let wrapped = crate::gateway::forward::wire::WireError::RequestBody(error);
        let blamed = GatewayError::client_fault(under(&wrapped).unwrap());
        assert_eq!(blamed.into_response().status(), 400);
        assert!(under(&std::io::Error::other("reset")).is_none());
    }
}
