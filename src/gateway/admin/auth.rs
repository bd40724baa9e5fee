//! Who may use the admin API. With a token configured, writes need
//! `Authorization: Bearer <token>` (else 401) and reads need the token or a loopback peer.
//! Without one, writes are disabled (403) and reads are served to loopback peers only.

use std::net::SocketAddr;

use http::HeaderMap;

use crate::gateway::config::AdminConfig;
use crate::gateway::secrets::{bearer, constant_time_eq};
use crate::openai::{ApiError, ErrorKind};

/// What a request wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Decides whether `peer` may have `access`, given the request's headers.
pub fn authorize(
    config: &AdminConfig,
    peer: SocketAddr,
    headers: &HeaderMap,
    access: Access,
) -> Result<(), ApiError> {
    let loopback = peer.ip().is_loopback();
    match &config.token {
        Some(token) => {
            let presented = bearer(headers)
                .is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()));
            if presented || (access == Access::Read && loopback) {
                Ok(())
            } else {
                Err(ApiError::new(
                    ErrorKind::Unauthorized,
                    "admin API: missing or wrong bearer token (Authorization: Bearer <token>)",
                ))
            }
        }
        None if access == Access::Write => Err(ApiError::new(
            ErrorKind::Forbidden,
            "admin writes disabled: no admin token configured (admin.token or admin.token_env)",
        )),
        None if loopback => Ok(()),
        None => Err(ApiError::new(
            ErrorKind::Forbidden,
            "admin reads are served to loopback peers only when no admin token is configured",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(authorization: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        }
        headers
    }

    const LOOPBACK: &str = "127.0.0.1:5000";
    const REMOTE: &str = "10.1.2.3:5000";

    #[test]
    fn with_a_token_writes_need_it_and_loopback_reads_do_not() {
        let config = AdminConfig { token: Some("s3cret-token".into()) };
        let check = |peer: &str, auth, access| {
            authorize(&config, peer.parse().unwrap(), &headers(auth), access)
                .map_err(|error| error.status().as_u16())
        };
        assert_eq!(check(LOOPBACK, None, Access::Write), Err(401));
        assert_eq!(check(LOOPBACK, Some("Bearer wrong"), Access::Write), Err(401));
        assert_eq!(check(LOOPBACK, Some("Basic s3cret-token"), Access::Write), Err(401));
        assert_eq!(check(REMOTE, Some("Bearer s3cret-token"), Access::Write), Ok(()));
        assert_eq!(check(LOOPBACK, Some("bearer s3cret-token"), Access::Write), Ok(()));
        assert_eq!(check(LOOPBACK, None, Access::Read), Ok(()));
        assert_eq!(check(REMOTE, None, Access::Read), Err(401));
        assert_eq!(check(REMOTE, Some("Bearer s3cret-token"), Access::Read), Ok(()));
    }

    #[test]
    fn without_a_token_writes_are_disabled_and_reads_stay_local() {
        let config = AdminConfig::default();
        let check = |peer: &str, auth, access| {
            authorize(&config, peer.parse().unwrap(), &headers(auth), access)
                .map_err(|error| error.status().as_u16())
        };
        assert_eq!(check(LOOPBACK, Some("Bearer anything"), Access::Write), Err(403));
        assert_eq!(check(LOOPBACK, None, Access::Read), Ok(()));
        assert_eq!(check("[::1]:80", None, Access::Read), Ok(()));
        assert_eq!(check(REMOTE, None, Access::Read), Err(403));
    }
}
