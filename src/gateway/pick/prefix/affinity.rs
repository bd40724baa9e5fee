//! Session affinity by bounded-load rendezvous hashing: every replica gets a weight
//! `hash(session, replica name)`, and a session goes to the heaviest replica that is not
//! overloaded. Only candidates are ranked (drained, ejected and full replicas are filtered
//! out before), so when a replica leaves, only the sessions it held move, each to its
//! next-heaviest replica; the others keep theirs.
//!
//! Overloaded (after Mirrokni et al., consistent hashing with bounded loads): a replica
//! takes a session's request while `in_flight < factor * mean_in_flight + 1`, the mean over
//! the candidates. Some replica is always at or under the mean, so one always qualifies;
//! the `+ 1` keeps a lightly loaded fleet from moving sessions over a request or two.
//! Whether an overloaded home really loses the request is the policy's to decide: the
//! conversation so far is cached there ([`super::policy`]).

use std::sync::Arc;

use super::hash_bytes;
use crate::gateway::pick::replica::Replica;
use crate::prompt_tokens::mix;

/// The rendezvous weight of `replica` for `session`.
pub fn weight(session: u64, replica: &str) -> u64 {
    mix(session ^ hash_bytes(replica.as_bytes()))
}

/// Where a session's request may go, as indexes into `replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPlaces {
    /// The session's rendezvous replica among the candidates, whatever its load.
    pub home: usize,
    /// The heaviest candidate that is not overloaded: `home` unless that one is.
    pub bounded: usize,
}

/// Where `session` may go among `candidates`; `None` if there are none.
pub fn session_places(
    replicas: &[Arc<Replica>],
    candidates: &[usize],
    session: u64,
    load_factor: f64,
) -> Option<SessionPlaces> {
    let total: u64 = candidates.iter().map(|&i| replicas[i].load.in_flight()).sum();
    let bound = load_factor * total as f64 / candidates.len().max(1) as f64 + 1.0;
    let mut ranked: Vec<(u64, usize)> =
        candidates.iter().map(|&i| (weight(session, &replicas[i].name), i)).collect();
    ranked.sort_unstable_by(|a, b| b.cmp(a));
    let home = ranked.first()?.1;
    let bounded = ranked
        .iter()
        .find(|(_, i)| (replicas[*i].load.in_flight() as f64) < bound)
        .map_or(home, |(_, i)| *i);
    Some(SessionPlaces { home, bounded })
}
