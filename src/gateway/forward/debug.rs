//! The debug entry's addressing: `/debug/{replica}/{path...}` names the replica in the path;
//! on a dedicated debug listener the `x-laneway-replica` header may name it instead.

use http::uri::PathAndQuery;

/// Header naming the replica on a debug listener (and reporting it on every response).
pub const REPLICA_HEADER: &str = "x-laneway-replica";

/// Splits `/debug/{replica}/{rest}?query` into the replica's name and `/{rest}?query`.
pub fn split_debug_path(path_and_query: &PathAndQuery) -> Option<(&str, PathAndQuery)> {
    let rest = path_and_query.path().strip_prefix("/debug/")?;
    let (replica, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    if replica.is_empty() {
        return None;
    }
    let target = match path_and_query.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_string(),
    };
    Some((replica, target.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_replica_and_path() {
        let split = |text: &'static str| {
            split_debug_path(&PathAndQuery::from_static(text))
                .map(|(replica, path)| (replica.to_string(), path.to_string()))
        };
        assert_eq!(split("/debug/r0/metrics"), Some(("r0".into(), "/metrics".into())));
        assert_eq!(split("/debug/r0/v1/models?a=b"), Some(("r0".into(), "/v1/models?a=b".into())));
        assert_eq!(split("/debug/r0"), Some(("r0".into(), "/".into())));
        assert_eq!(split("/debug/"), None);
        assert_eq!(split("/v1/models"), None);
    }
}
