//! The debug entry's addressing and fence: `/debug/{replica}/{path...}` names the replica
//! in the path (on a dedicated debug listener the `x-laneway-replica` header may name it
//! instead), and a [`DebugSlot`] bounds the debug requests on one replica at once.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::uri::PathAndQuery;

use crate::gateway::pick::Replica;

/// One debug request's place on its replica; dropping it frees the place.
#[derive(Debug)]
pub struct DebugSlot {
    replica: Arc<Replica>,
}

impl DebugSlot {
    /// A place on `replica` if fewer than `limit` debug requests are on it.
    pub fn try_take(replica: Arc<Replica>, limit: u64) -> Option<Self> {
        let count = &replica.load.debug_in_flight;
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < limit).then_some(n + 1))
            .ok()?;
        Some(Self { replica })
    }
}

impl Drop for DebugSlot {
    fn drop(&mut self) {
        self.replica.load.debug_in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

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
    fn debug_slots_are_bounded_per_replica() {
        let replica = Arc::new(Replica::new(&crate::gateway::config::ReplicaConfig {
            name: "r".into(),
            authority: "127.0.0.1:1".into(),
            node: "n".into(),
            tls: false,
            placement: Default::default(),
        }));
        let first = DebugSlot::try_take(replica.clone(), 2).unwrap();
        let _second = DebugSlot::try_take(replica.clone(), 2).unwrap();
        assert!(DebugSlot::try_take(replica.clone(), 2).is_none());
        drop(first);
        assert!(DebugSlot::try_take(replica.clone(), 2).is_some());
    }

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
