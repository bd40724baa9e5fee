//! The OpenAI error body (`{"error": {"message", "type", "code"}}`) and its HTTP status,
//! built in one place so every component answers bad input the same way vLLM does.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde::Serialize;

/// The `type` field of an OpenAI error, which fixes its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request is malformed or violates a limit of the model.
    BadRequest,
    /// 401: missing or wrong credentials.
    Unauthorized,
    /// 403: the credentials are fine (or absent) but the action is not allowed.
    Forbidden,
    /// 404: no such route, model or replica.
    NotFound,
    /// 405: the path exists but not for this method.
    MethodNotAllowed,
    /// 408: the client did not send its request in time.
    RequestTimeout,
    /// 413: the body is over the configured limit.
    PayloadTooLarge,
    /// 429: every candidate is saturated; retry later.
    TooManyRequests,
    /// 500: a bug on our side.
    Internal,
    /// 501: the request uses a protocol feature the gateway does not implement.
    NotImplemented,
    /// 502: the upstream replica failed.
    BadGateway,
    /// 503: no replica can take the request.
    Unavailable,
    /// 504: the upstream replica did not answer in time.
    GatewayTimeout,
}

impl ErrorKind {
    pub fn status(self) -> StatusCode {
        match self {
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::NotImplemented => StatusCode::NOT_IMPLEMENTED,
            Self::BadGateway => StatusCode::BAD_GATEWAY,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::GatewayTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The `type` string, as vLLM and OpenAI spell it.
    pub fn type_name(self) -> &'static str {
        match self {
            Self::BadRequest
            | Self::PayloadTooLarge
            | Self::MethodNotAllowed
            | Self::RequestTimeout => "BadRequestError",
            Self::Unauthorized => "AuthenticationError",
            Self::Forbidden => "PermissionDeniedError",
            Self::NotFound => "NotFoundError",
            Self::TooManyRequests => "RateLimitError",
            Self::Internal => "InternalServerError",
            Self::NotImplemented => "NotImplementedError",
            Self::BadGateway | Self::Unavailable | Self::GatewayTimeout => {
                "ServiceUnavailableError"
            }
        }
    }
}

/// An error to be sent to an OpenAI client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// OpenAI's named code (`model_not_found`, `rate_limit_exceeded`) where one exists; the
    /// numeric status otherwise, as vLLM sends.
    pub code_name: Option<&'static str>,
    /// The request field at fault (OpenAI's `param`), where one is.
    pub param: Option<&'static str>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorFields<'a>,
}

#[derive(Serialize)]
struct ErrorFields<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<&'a str>,
    code: Code,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Code {
    Status(u16),
    Name(&'static str),
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), code_name: None, param: None }
    }

    /// This error naming the request field at fault.
    pub fn with_param(mut self, field: &'static str) -> Self {
        self.param = Some(field);
        self
    }

    /// This error with OpenAI's named `code` instead of the numeric status.
    pub fn with_code(mut self, name: &'static str) -> Self {
        self.code_name = Some(name);
        self
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The JSON body `{"error": {"message", "type", "param", "code"}}`.
    pub fn body_json(&self) -> String {
        let body = ErrorBody {
            error: ErrorFields {
                message: &self.message,
                kind: self.kind.type_name(),
                param: self.param,
                code: match self.code_name {
                    Some(name) => Code::Name(name),
                    None => Code::Status(self.status().as_u16()),
                },
            },
        };
        serde_json::to_string(&body).expect("error body serializes")
    }

    /// The SSE event a stream ends with when it fails after headers went out.
    pub fn sse_event(&self) -> String {
        format!("data: {}\n\n", self.body_json())
    }

    /// A complete HTTP response carrying this error.
    pub fn into_response<B: From<Bytes>>(self) -> Response<B> {
        let mut response = Response::new(B::from(Bytes::from(self.body_json())));
        *response.status_mut() = self.status();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status(), self.kind.type_name(), self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_the_openai_shape() {
        let error = ApiError::new(ErrorKind::BadRequest, "bad \"json\"");
        let value: serde_json::Value = serde_json::from_str(&error.body_json()).unwrap();
        assert_eq!(value["error"]["message"], "bad \"json\"");
        assert_eq!(value["error"]["type"], "BadRequestError");
        assert_eq!(value["error"]["code"], 400);
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        let named = ApiError::new(ErrorKind::NotFound, "no").with_code("model_not_found");
        let value: serde_json::Value = serde_json::from_str(&named.body_json()).unwrap();
        assert_eq!(value["error"]["code"], "model_not_found");
    }

    #[test]
    fn sse_event_is_one_data_line() {
        let event = ApiError::new(ErrorKind::BadGateway, "upstream reset").sse_event();
        assert!(event.starts_with("data: {\"error\":"));
        assert!(event.ends_with("\n\n"));
        assert_eq!(event.matches('\n').count(), 2);
    }
}
