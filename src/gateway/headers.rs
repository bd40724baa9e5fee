//! The header names the gateway reads or writes, in one place: `x-request-id` and the
//! `x-laneway-*` family (documented in the README's "Headers" section).

use http::HeaderName;

/// A request's id: kept when the client sent a usable one, else made; echoed on the
/// response and sent to the replica.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// Request: ask for an entry by name (`debug` opens the debug entry). Response: the entry
/// that served it.
pub const ENTRY: HeaderName = HeaderName::from_static("x-laneway-entry");
/// Request (debug entry): the replica to reach. Response: the replica that answered.
pub const REPLICA: HeaderName = HeaderName::from_static("x-laneway-replica");
/// Response: the upstream connection strategy used.
pub const STRATEGY: HeaderName = HeaderName::from_static("x-laneway-strategy");
/// Response: the canary variant that served the request.
pub const VARIANT: HeaderName = HeaderName::from_static("x-laneway-variant");
/// Request: the priority band, 0..=9 (higher first, shed last).
pub const PRIORITY: HeaderName = HeaderName::from_static("x-laneway-priority");
/// Request: a tighter TTFT objective than the entry's, in milliseconds.
pub const SLO_TTFT_MS: HeaderName = HeaderName::from_static("x-laneway-slo-ttft-ms");
/// Request: a tighter TPOT objective than the entry's, in milliseconds.
pub const SLO_TPOT_MS: HeaderName = HeaderName::from_static("x-laneway-slo-tpot-ms");
