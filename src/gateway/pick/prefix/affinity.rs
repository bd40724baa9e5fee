//! Session affinity by bounded-load rendezvous hashing: every replica gets a weight
//! `hash(session, replica name)`, and a session goes to the heaviest replica that is not
//! overloaded. Only candidates are ranked (drained, ejected and full replicas are filtered
//! out before), so when a replica leaves, only the sessions it held move, each to its
//! next-heaviest replica; the others keep theirs.
//!
//! Overloaded (after Mirrokni et al., consistent hashing with bounded loads), by
//! [`LoadBound`]: for a conversation's later turns a replica takes the request while
//! `in_flight < factor * mean_in_flight + 1`, the mean over the candidates. Some replica is
//! always at or under the mean, so one always qualifies; the `+ 1` keeps a lightly loaded
//! fleet from moving sessions over a request or two. Whether an overloaded home really
//! loses the request is the policy's to decide: the conversation so far is cached there
//! ([`super::policy`]). A conversation's first turn has nothing cached to lose, and is held
//! to an even share instead, `in_flight < ceil((total + 1) / candidates)`: sixteen
//! conversations opened at once land four on each of four replicas, where the loose bound
//! let rendezvous put six on one.

use std::sync::Arc;

use crate::gateway::pick::replica::Replica;
use crate::prompt_tokens::mix;

/// The rendezvous weight of a replica (by the hash of its name) for `session`.
pub fn weight(session: u64, replica_name_hash: u64) -> u64 {
    mix(session ^ replica_name_hash)
}

/// Where a session's request may go, as indexes into `replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPlaces {
    /// The session's rendezvous replica among the candidates, whatever its load.
    pub home: usize,
    /// The heaviest candidate that is not overloaded: `home` unless that one is.
    pub bounded: usize,
}

/// When a replica counts as overloaded for a session's request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadBound {
    /// `in_flight < factor * mean + 1`: a conversation's later turns, cached at home.
    Loose { factor: f64 },
    /// `in_flight < ceil((total + 1) / candidates)`: a first turn, nothing cached yet.
    Even,
}

impl LoadBound {
    /// The in-flight count a replica must stay under, given the candidates' `total`.
    fn limit(self, total: u64, candidates: usize) -> f64 {
        let candidates = candidates.max(1) as u64;
        match self {
            Self::Loose { factor } => factor * total as f64 / candidates as f64 + 1.0,
            Self::Even => (total + 1).div_ceil(candidates) as f64,
        }
    }

    /// Whether a replica with `in_flight` requests is within the bound, given the
    /// candidates' `total`.
    pub fn admits(self, in_flight: u64, total: u64, candidates: usize) -> bool {
        (in_flight as f64) < self.limit(total, candidates)
    }
}

/// Where `session` may go among `candidates`; `None` if there are none.
pub fn session_places(
    replicas: &[Arc<Replica>],
    candidates: &[usize],
    session: u64,
    load: LoadBound,
) -> Option<SessionPlaces> {
    let total: u64 = candidates.iter().map(|&i| replicas[i].load.in_flight()).sum();
    let mut ranked: Vec<(u64, usize)> =
        candidates.iter().map(|&i| (weight(session, replicas[i].name_hash), i)).collect();
    ranked.sort_unstable_by(|a, b| b.cmp(a));
    let home = ranked.first()?.1;
    let bounded = ranked
        .iter()
        .find(|(_, i)| load.admits(replicas[*i].load.in_flight(), total, candidates.len()))
        .map_or(home, |(_, i)| *i);
    Some(SessionPlaces { home, bounded })
}
