//! The header names the gateway reads or writes, in one place: `x-request-id` and the
//! `x-laneway-*` family (documented in the README's "Headers" section); and how a request's
//! few headers are searched for them.

use http::{HeaderMap, HeaderName, HeaderValue};

/// Maps of at most this many names are scanned for a name before it is looked up: a custom
/// name (each of the family) costs more to hash than a few names cost to compare, and most
/// requests carry none of them among a handful of headers.
const SCANNED_HEADERS: usize = 8;

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

/// `headers.get(name)`, a small map's names scanned first.
pub fn find<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    holds(headers, name).then(|| headers.get(name)).flatten()
}

/// `headers.get_all(name)`, a small map's names scanned first: the values in the order
/// they came.
pub fn find_all<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> impl Iterator<Item = &'a HeaderValue> {
    holds(headers, name).then(|| headers.get_all(name).iter()).into_iter().flatten()
}

/// Whether `headers` may hold `name`: false only for a small map whose names it is not
/// among (one pass over its few names, no hash).
fn holds(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers.keys_len() > SCANNED_HEADERS || headers.keys().any(|each| each == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn a_scan_finds_what_a_lookup_finds_in_maps_of_any_size() {
        use http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST};
        let names = [
            REQUEST_ID,
            ENTRY,
            REPLICA,
            STRATEGY,
            VARIANT,
            PRIORITY,
            SLO_TTFT_MS,
            SLO_TPOT_MS,
            HOST,
            CONTENT_TYPE,
            CONTENT_LENGTH,
            AUTHORIZATION,
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        let (mut small, mut large) = (0, 0);
        for _ in 0..500 {
            let mut map = HeaderMap::new();
            for value in 0..rng.random_range(0..32) {
                let name = names[rng.random_range(0..names.len())].clone();
                map.append(name, HeaderValue::from(value));
            }
            for name in &names {
                assert_eq!(find(&map, name), map.get(name), "{name} in {map:?}");
                let all: Vec<_> = find_all(&map, name).collect();
                assert_eq!(all, map.get_all(name).iter().collect::<Vec<_>>(), "{name} in {map:?}");
            }
            if map.keys_len() > SCANNED_HEADERS { large += 1 } else { small += 1 }
        }
        // Both ways of searching were tried, many times each.
        assert!(small > 100 && large > 100, "{small} small maps, {large} large");
    }
}
