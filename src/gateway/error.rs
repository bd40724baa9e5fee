//! Everything that can go wrong on the request path, where it came from, whether a retry on
//! another replica is allowed, and the one place it becomes an OpenAI-shape error response.

use http::Response;

use crate::error_chain::ErrorChain;
use crate::gateway::body::{BoxError, ProxyBody, boxed};
use crate::gateway::client_fault::UploadError;
use crate::gateway::config::UnknownEntry;
use crate::gateway::secrets::AuthError;
use crate::openai::{ApiError, ErrorKind, RequestParseError};

/// A failed request, before any response bytes went out.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Downstream: the body is not a valid inference request.
    #[error("invalid request body: {0}")]
    BadBody(#[source] RequestParseError),
    /// Downstream: `x-laneway-entry` names no entry.
    #[error("header x-laneway-entry: {0}")]
    UnknownEntry(#[source] UnknownEntry),
    /// Downstream: a header's value cannot be used; `reason` says why.
    #[error("header {name} {reason}")]
    BadHeader { name: &'static str, reason: &'static str },
    /// Downstream: an `x-laneway-slo-*` header is not a valid limit.
    #[error("{0}")]
    BadSlo(#[from] crate::gateway::classify::slo::BadSloHeader),
    /// Downstream: the debug entry was not told which replica to reach.
    #[error("debug entry needs /debug/{{replica}}/{{path}} or an x-laneway-replica header")]
    MissingReplica,
    /// Downstream: no replica has this name.
    #[error("unknown replica `{0}`")]
    UnknownReplica(String),
    /// Downstream: no replica serves the model and the config maps it nowhere.
    #[error("{0}")]
    ModelNotFound(#[from] ModelNotFound),
    /// Downstream: the tenant is over one of its limits.
    #[error("{0}")]
    QuotaExceeded(#[from] crate::gateway::quota::QuotaExceeded),
    /// Downstream: the debug entry is not served on this listener.
    #[error(
        "the debug entry is not served on this listener: use the debug listener \
         (entries.debug.listen) or set entries.debug.smart_listener = true"
    )]
    DebugNotServedHere,
    /// Downstream: the replica already has its limit of debug requests.
    #[error("replica `{replica}` already serves {limit} debug requests; retry later")]
    DebugBusy { replica: String, limit: u64 },
    /// Downstream: the body is over the configured limit.
    #[error("request body is over the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// Downstream: an inference path called with another method than POST.
    #[error("method {method} is not allowed on {path}; use POST")]
    MethodNotAllowed { method: http::Method, path: String },
    /// Downstream: the request's framing is ambiguous (see `listen::framing`); nothing of
    /// it was sent, and the connection closes after the answer.
    #[error("{0}")]
    Framing(#[source] crate::gateway::framing::FramingError),
    /// Downstream: no route of the listener serves this path (`[routes]` opens more).
    #[error(
        "no route for {method} {path}: this listener serves the OpenAI inference routes and \
         the paths its operator opened ([routes] forward)"
    )]
    RouteNotFound { method: http::Method, path: String },
    /// Downstream: the client's body could not be read.
    #[error("reading the request body failed: {0}")]
    ClientBody(#[source] BoxError),
    /// Downstream: the body did not arrive whole within `timeouts.client_body_ms`.
    #[error("the request body did not arrive within {after:?}")]
    ClientBodyTimeout { after: std::time::Duration },
    /// Downstream: no valid API key.
    #[error("{0}")]
    Unauthorized(#[from] AuthError),
    /// Internal: no replica accepts new requests (the set is empty or all are drained).
    #[error("no replica is available (none configured, or all drained)")]
    NoReplica,
    /// Upstream: the connection could not be made; nothing was sent, so retry is allowed.
    #[error("cannot connect to replica `{replica}`: {}", ErrorChain(source.as_ref()))]
    UpstreamConnect {
        replica: String,
        #[source]
        source: BoxError,
    },
    /// Upstream: the connection closed before any response byte (the replica died or
    /// restarted). It produced nothing the client could have seen, so a retry on another
    /// replica cannot duplicate output (HAProxy's `retry-on empty-response`).
    #[error(
        "replica `{replica}` closed the connection before answering: {}",
        ErrorChain(source.as_ref())
    )]
    UpstreamClosed {
        replica: String,
        #[source]
        source: BoxError,
    },
    /// Upstream: the request was sent and no response headers came in time.
    #[error("replica `{replica}` sent no response within {after:?}")]
    UpstreamTimeout { replica: String, after: std::time::Duration },
    /// Overload: every candidate stayed saturated until the queue deadline, or the queue
    /// was full.
    #[error("every replica is saturated; retry in {retry_after_secs} s")]
    Overloaded { retry_after_secs: u64 },
    /// Upstream: the request was sent, the replica did not answer properly.
    #[error("replica `{replica}` failed: {}", ErrorChain(source.as_ref()))]
    UpstreamReset {
        replica: String,
        #[source]
        source: BoxError,
    },
}

/// The model named is served by no replica and the config does not map it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("The model `{0}` does not exist.")]
pub struct ModelNotFound(pub String);

/// What went wrong on a request, as passive health counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    Connect,
    Reset,
    ServerError,
    Timeout,
}

impl FailureReason {
    pub const ALL: [Self; 4] = [Self::Connect, Self::Reset, Self::ServerError, Self::Timeout];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Reset => "reset",
            Self::ServerError => "5xx",
            Self::Timeout => "timeout",
        }
    }
}

/// Which side of the gateway a failure is on: where an operator looks first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's request or credentials (4xx): nothing to fix in the fleet.
    Client,
    /// The gateway's own limits or an empty fleet.
    Gateway,
    /// A replica failed to connect, answer or finish in time.
    Replica,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Gateway => "gateway",
            Self::Replica => "replica",
        }
    }
}

impl GatewayError {
    pub fn side(&self) -> Side {
        match self {
            Self::BadBody(_)
            | Self::UnknownEntry(_)
            | Self::BadHeader { .. }
            | Self::BadSlo(_)
            | Self::MissingReplica
            | Self::UnknownReplica(_)
            | Self::ModelNotFound(_)
            | Self::QuotaExceeded(_)
            | Self::DebugNotServedHere
            | Self::PayloadTooLarge { .. }
            | Self::MethodNotAllowed { .. }
            | Self::Framing(_)
            | Self::RouteNotFound { .. }
            | Self::ClientBody(_)
            | Self::ClientBodyTimeout { .. }
            | Self::Unauthorized(_) => Side::Client,
            Self::NoReplica | Self::Overloaded { .. } | Self::DebugBusy { .. } => Side::Gateway,
            Self::UpstreamConnect { .. }
            | Self::UpstreamClosed { .. }
            | Self::UpstreamTimeout { .. }
            | Self::UpstreamReset { .. } => Side::Replica,
        }
    }

    /// What a replica-side failure counts as for passive ejection; `None` off that side.
    pub fn replica_failure(&self) -> Option<FailureReason> {
        match self {
            Self::UpstreamConnect { .. } => Some(FailureReason::Connect),
            Self::UpstreamTimeout { .. } => Some(FailureReason::Timeout),
            Self::UpstreamClosed { .. } | Self::UpstreamReset { .. } => Some(FailureReason::Reset),
            _ => None,
        }
    }

    /// The `kind` label of `laneway_request_errors_total`.
    pub fn kind_label(&self) -> &'static str {
        match self {
            Self::BadBody(_) | Self::BadHeader { .. } | Self::BadSlo(_) | Self::MissingReplica => {
                "bad_request"
            }
            Self::UnknownEntry(_) => "unknown_entry",
            Self::UnknownReplica(_) => "unknown_replica",
            Self::ModelNotFound(_) => "model_not_found",
            Self::QuotaExceeded(_) => "quota_exceeded",
            Self::DebugNotServedHere => "debug_not_served",
            Self::DebugBusy { .. } => "debug_busy",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::Framing(_) => "bad_framing",
            Self::RouteNotFound { .. } => "route_not_found",
            Self::ClientBody(_) => "client_body",
            Self::ClientBodyTimeout { .. } => "client_body_timeout",
            Self::NoReplica => "no_replica",
            Self::Unauthorized(_) => "unauthorized",
            Self::UpstreamConnect { .. } => "upstream_connect",
            Self::UpstreamReset { .. } => "upstream_reset",
            Self::UpstreamTimeout { .. } => "upstream_timeout",
            Self::UpstreamClosed { .. } => "upstream_closed",
            Self::Overloaded { .. } => "overloaded",
        }
    }

    /// Whether the request may be sent to another replica: only when this one never saw it.
    pub fn retry_allowed(&self) -> bool {
        matches!(self, Self::UpstreamConnect { .. } | Self::UpstreamClosed { .. })
    }

    fn api_kind(&self) -> ErrorKind {
        match self {
            Self::BadBody(_)
            | Self::UnknownEntry(_)
            | Self::BadHeader { .. }
            | Self::BadSlo(_)
            | Self::MissingReplica
            | Self::ClientBody(_) => ErrorKind::BadRequest,
            Self::UnknownReplica(_)
            | Self::DebugNotServedHere
            | Self::ModelNotFound(_)
            | Self::RouteNotFound { .. } => ErrorKind::NotFound,
            Self::Framing(error) => match error.status() {
                http::StatusCode::METHOD_NOT_ALLOWED => ErrorKind::MethodNotAllowed,
                http::StatusCode::NOT_IMPLEMENTED => ErrorKind::NotImplemented,
                _ => ErrorKind::BadRequest,
            },
            Self::DebugBusy { .. } | Self::QuotaExceeded(_) => ErrorKind::TooManyRequests,
            Self::PayloadTooLarge { .. } => ErrorKind::PayloadTooLarge,
            Self::ClientBodyTimeout { .. } => ErrorKind::RequestTimeout,
            Self::MethodNotAllowed { .. } => ErrorKind::MethodNotAllowed,
            Self::NoReplica => ErrorKind::Unavailable,
            Self::Unauthorized(AuthError::NotAllowedToDebug) => ErrorKind::Forbidden,
            Self::Unauthorized(_) => ErrorKind::Unauthorized,
            Self::UpstreamConnect { .. }
            | Self::UpstreamReset { .. }
            | Self::UpstreamClosed { .. } => ErrorKind::BadGateway,
            Self::UpstreamTimeout { .. } => ErrorKind::GatewayTimeout,
            Self::Overloaded { .. } => ErrorKind::TooManyRequests,
        }
    }

    /// Whether the client's connection cannot carry another request after this answer:
    /// its framing was refused, or its body was not read to its end.
    pub fn ends_the_connection(&self) -> bool {
        matches!(
            self,
            Self::Framing(_)
                | Self::ClientBody(_)
                | Self::ClientBodyTimeout { .. }
                | Self::PayloadTooLarge { .. }
        )
    }

    /// The client's error a failure of its streamed body stands for.
    pub fn client_fault(fault: &UploadError) -> Self {
        match fault {
            UploadError::TooLarge { limit } => Self::PayloadTooLarge { limit: *limit },
            UploadError::TimedOut(after) => Self::ClientBodyTimeout { after: *after },
            UploadError::Failed(error) => {
                Self::ClientBody(ErrorChain(error.as_ref()).to_string().into())
            }
        }
    }

    /// The OpenAI-shape error response sent to the client.
    pub fn into_response(self) -> Response<ProxyBody> {
        let mut api_error = ApiError::new(self.api_kind(), self.to_string());
        if let Self::ModelNotFound(_) = self {
            api_error = api_error.with_code("model_not_found");
        }
        if let Self::QuotaExceeded(_) = self {
            api_error = api_error.with_code("rate_limit_exceeded");
        }
        if let Self::BadBody(error) = &self
            && let Some(field) = error.field()
        {
            api_error = api_error.with_param(field);
        }
        let mut response =
            api_error.into_response::<http_body_util::Full<bytes::Bytes>>().map(boxed);
        if let Self::MethodNotAllowed { .. } = self {
            response
                .headers_mut()
                .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
        }
        if self.ends_the_connection() {
            // What follows a refused head, or a body not read to its end, cannot be trusted
            // to start the next request: the connection closes after this answer.
            let close = http::HeaderValue::from_static("close");
            response.headers_mut().insert(http::header::CONNECTION, close);
        }
        if let Self::Framing(crate::gateway::framing::FramingError::Connect) = self {
            let allow = http::HeaderValue::from_static("GET, POST");
            response.headers_mut().insert(http::header::ALLOW, allow);
        }
        if let Self::Unauthorized(_) = self {
            let challenge = http::HeaderValue::from_static("Bearer");
            response.headers_mut().insert(http::header::WWW_AUTHENTICATE, challenge);
        }
        if let Self::Overloaded { retry_after_secs } = self {
            response.headers_mut().insert(http::header::RETRY_AFTER, retry_after_secs.into());
        }
        if let Self::QuotaExceeded(exceeded) = &self {
            let headers = response.headers_mut();
            headers.insert(http::header::RETRY_AFTER, exceeded.retry_after_secs.into());
            exceeded.headers.apply(headers);
        }
        if let Self::DebugBusy { .. } = self {
            response.headers_mut().insert(http::header::RETRY_AFTER, 1.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_retry_rules() {
        let cases: Vec<(GatewayError, u16, bool)> = vec![
            (GatewayError::BadBody(RequestParseError::MissingMessages), 400, false),
            (GatewayError::UnknownEntry(UnknownEntry("x".into())), 400, false),
            (GatewayError::PayloadTooLarge { limit: 1 }, 413, false),
            (
                GatewayError::ClientBodyTimeout { after: std::time::Duration::from_secs(1) },
                408,
                false,
            ),
            (
                GatewayError::MethodNotAllowed {
                    method: http::Method::GET,
                    path: "/v1/completions".into(),
                },
                405,
                false,
            ),
            (GatewayError::UnknownReplica("r".into()), 404, false),
            (GatewayError::NoReplica, 503, false),
            (GatewayError::Overloaded { retry_after_secs: 2 }, 429, false),
            (
                GatewayError::UpstreamTimeout {
                    replica: "r".into(),
                    after: std::time::Duration::from_millis(1),
                },
                504,
                false,
            ),
            (
                GatewayError::UpstreamConnect { replica: "r".into(), source: "refused".into() },
                502,
                true,
            ),
        ];
        for (error, status, retry) in cases {
            assert_eq!(error.retry_allowed(), retry, "{error}");
            // Every 4xx but the gateway's own 429 is the client's; 5xx are never the client's.
            let own_limit = matches!(error, GatewayError::Overloaded { .. });
            assert_eq!(error.side() == Side::Client, status < 500 && !own_limit, "{error}");
            assert_eq!(error.side() == Side::Replica, error.replica_failure().is_some(), "{error}");
            assert_eq!(error.into_response().status().as_u16(), status);
        }
    }

    #[test]
    fn upstream_errors_show_their_causes() {
        let cause = std::io::Error::other("certificate expired");
        let error = GatewayError::UpstreamConnect {
            replica: "r".into(),
            source: Box::new(crate::gateway::forward::upstream_error::ConnectError::Tls(cause)),
        };
        assert_eq!(
            error.to_string(),
            "cannot connect to replica `r`: TLS handshake: certificate expired"
        );
        assert_eq!(error.replica_failure(), Some(FailureReason::Connect));
    }
}
