//! One request's context: what the phases learn about a request, kept in one place that
//! grows as the request moves (listen -> classify -> tenant and variant -> pick and forward)
//! and is handed to the response's observer, which labels every figure and writes the
//! access line from it when the body ends.

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderValue, Method, Uri};

use crate::gateway::config::{DEFAULT_VARIANT_NAME, Entry, Flow, Strategy};
use crate::gateway::quota::QuotaTicket;

/// The variant name outside canaries, allocated once (every request starts with it).
static DEFAULT_VARIANT: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(DEFAULT_VARIANT_NAME));

/// A request in flight, from its arrival to the end of its response body.
pub struct RequestCtx {
    // Set by listen.
    /// The request's id (the client's or a new one), echoed on the response.
    pub request_id: HeaderValue,
    pub method: Method,
    pub uri: Uri,
    pub received_at: Instant,
    /// Whether the access line is written for it (`access_log = true`).
    pub access_log: bool,

    // Set by classify; until then, the entry the request is headed for.
    pub entry: Entry,
    /// An inference request (tokens can be measured), not a passthrough.
    pub inference: bool,
    /// The prompt estimate (the response's `usage` replaces it when present).
    pub prompt_tokens: u64,

    // Set by the tenant check.
    /// Where the request waits, if it must: its tenant's flow and priority band.
    pub flow: Flow,
    /// The tenant's hold: released, and its tokens settled, when the body ends.
    pub quota: Option<QuotaTicket>,

    // Set by the variant assignment; the entry's own strategy outside canaries.
    pub variant: Arc<str>,
    pub strategy: Strategy,
}

impl RequestCtx {
    /// A request as it arrives (its head complete at `received_at`): headed for `entry`,
    /// served by `strategy` unless a variant or another entry takes it.
    pub fn new(
        request_id: HeaderValue,
        (method, uri): (Method, Uri),
        received_at: Instant,
        (entry, strategy): (Entry, Strategy),
        access_log: bool,
    ) -> Self {
        Self {
            request_id,
            method,
            uri,
            received_at,
            access_log,
            entry,
            inference: false,
            prompt_tokens: 0,
            flow: Flow::default(),
            quota: None,
            variant: DEFAULT_VARIANT.clone(),
            strategy,
        }
    }

    pub fn path(&self) -> &str {
        self.uri.path()
    }

    pub fn request_id_text(&self) -> &str {
        self.request_id.to_str().unwrap_or("-")
    }

    /// The context the response's observer keeps until the body ends (the tenant's hold
    /// goes with it); the handler keeps the rest, which is all an error answer needs.
    ///
    /// The observer's id and URI are copies: hyper parses them as views into the client
    /// connection's read buffer, and a view kept for a whole stream keeps that buffer
    /// (8 KiB) alive beside the one hyper reads the next request into.
    pub fn hand_over(&mut self) -> Self {
        let request_id = HeaderValue::from_bytes(self.request_id.as_bytes())
            .unwrap_or_else(|_| self.request_id.clone());
        let uri = detached(&self.uri);
        Self {
            request_id,
            method: self.method.clone(),
            uri,
            received_at: self.received_at,
            access_log: self.access_log,
            entry: self.entry,
            inference: self.inference,
            prompt_tokens: self.prompt_tokens,
            flow: self.flow.clone(),
            quota: self.quota.take(),
            variant: self.variant.clone(),
            strategy: self.strategy,
        }
    }
}

/// A copy of `uri` in memory of its own (an origin-form target, as requests bring, is
/// copied as is; the rare absolute form is formatted and parsed again).
fn detached(uri: &Uri) -> Uri {
    let copy = match (uri.scheme(), uri.path_and_query()) {
        (None, Some(path)) => {
            let bytes = Bytes::copy_from_slice(path.as_str().as_bytes());
            PathAndQuery::from_maybe_shared(bytes).map(Uri::from).ok()
        }
        _ => Uri::try_from(uri.to_string()).ok(),
    };
    copy.unwrap_or_else(|| uri.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_uri_is_equal_to_the_original() {
        for text in ["/v1/chat/completions", "/v1/models?limit=2", "http://h:8000/health"] {
            let uri = Uri::from_static(text);
            assert_eq!(detached(&uri), uri);
        }
    }
}
