//! Phase 2, pick: chooses the replica for a request from a lock-free snapshot of the
//! replica set (behind `ArcSwap`) and per-replica atomic load figures. Each replica also
//! holds its resolved addresses ([`addresses`]) and the gate on its unanswered requests
//! ([`answer_gate`]), which the forward phase reads.

pub mod addresses;
pub mod answer_gate;
mod draw;
pub mod freed;
pub mod guard;
pub mod least_queue;
pub mod policy;
pub mod predict;
pub mod prefix;
pub mod replica;
mod replica_fetch;
pub mod replica_health;
pub mod round_robin;
pub mod scrape;
pub mod served_models;
pub mod serving;
pub mod set;
#[cfg(test)]
mod test_fleet;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::gateway::config::{GatewayConfig, PolicyKind};
pub use guard::InFlightGuard;
pub use policy::{PickContext, Policy, RequestShape};
pub use prefix::{PrefixRouter, PromptKey, PromptPick};
pub use replica::{Replica, ReportedLoad};
pub use set::{ReplicaSet, Source};

/// The replicas (a set shared across reloads) and the policy that chooses among them.
pub struct Picker {
    set: Arc<ReplicaSet>,
    policy: Box<dyn Policy>,
    /// Time base for scrape ages.
    pub epoch: Instant,
    /// Reported figures older than this are ignored.
    pub fresh_for: Duration,
}

impl Picker {
    /// A picker over a set of its own holding `config`'s static replicas.
    pub fn new(config: &GatewayConfig) -> Self {
        Self::with_set(Arc::new(ReplicaSet::new(&config.replicas)), config)
    }

    /// A picker with `config`'s policy over `set` (shared with the picker it replaces).
    pub fn with_set(set: Arc<ReplicaSet>, config: &GatewayConfig) -> Self {
        let fresh_for = config.scrape_interval * config.stale_after_intervals;
        Self::with_policy(set, new_policy(config.policy), fresh_for)
    }

    pub fn with_policy(set: Arc<ReplicaSet>, policy: Box<dyn Policy>, fresh_for: Duration) -> Self {
        Self { epoch: set.epoch, set, policy, fresh_for }
    }

    /// The replica set this picker reads.
    pub fn set(&self) -> &Arc<ReplicaSet> {
        &self.set
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// The global policy.
    pub fn policy(&self) -> &dyn Policy {
        self.policy.as_ref()
    }

    /// The current replica set.
    pub fn snapshot(&self) -> Arc<Vec<Arc<Replica>>> {
        self.set.snapshot()
    }

    pub fn by_name(&self, name: &str) -> Option<Arc<Replica>> {
        self.snapshot().iter().find(|r| r.name == name).cloned()
    }

    /// What a pick at `now` reads reported figures with, excluding nobody.
    pub fn context(&self, now: Instant) -> PickContext {
        PickContext { epoch: self.epoch, now, fresh_for: self.fresh_for, exclude: None }
    }

    /// Picks a replica with the global policy among all replicas, never `exclude` (by name).
    pub fn pick(&self, exclude: Option<&str>) -> Option<Arc<Replica>> {
        self.pick_within(exclude, u64::MAX)
    }

    /// Picks with the default policy among every replica that accepts new requests and has
    /// fewer than `limit` in flight, never `exclude` (by name).
    pub fn pick_within(&self, exclude: Option<&str>, limit: u64) -> Option<Arc<Replica>> {
        self.pick_in(self.policy.as_ref(), None, exclude, limit)
    }

    /// Whether any member of `pool` (`None`: any replica) accepts new requests.
    pub fn any_accepting(&self, pool: Option<&[String]>) -> bool {
        let in_pool = |r: &&Arc<Replica>| pool.is_none_or(|members| members.contains(&r.name));
        self.snapshot().iter().filter(in_pool).any(|r| r.accepts_new_requests())
    }

    /// Picks a replica with `policy` among the members of `pool` (`None`: every replica)
    /// that are not draining, are in rotation and have fewer than `limit` requests in
    /// flight, never `exclude`. When no member is in rotation, health is ignored (Envoy's
    /// panic mode: a guess beats a certain failure); a drain never is. `None`: every
    /// candidate is at its limit, or there is none.
    pub fn pick_in(
        &self,
        policy: &dyn Policy,
        pool: Option<&[String]>,
        exclude: Option<&str>,
        limit: u64,
    ) -> Option<Arc<Replica>> {
        self.pick_request_in(policy, pool, exclude, limit, &RequestShape::default(), None)
    }

    /// As [`Self::pick_in`], telling the policy the request's size and SLO, and its prompt
    /// when the policy places by prompt.
    pub fn pick_request_in(
        &self,
        policy: &dyn Policy,
        pool: Option<&[String]>,
        exclude: Option<&str>,
        limit: u64,
        request: &RequestShape,
        prompt: Option<&PromptPick<'_>>,
    ) -> Option<Arc<Replica>> {
        let all = self.snapshot();
        let in_pool = |r: &Arc<Replica>| pool.is_none_or(|members| members.contains(&r.name));
        let any_in_rotation =
            all.iter().any(|r| in_pool(r) && !r.is_draining() && r.health.in_rotation());
        let usable = |r: &Arc<Replica>| {
            in_pool(r)
                && !r.is_draining()
                && (!any_in_rotation || r.health.in_rotation())
                && r.load.in_flight() < limit
        };
        let filtered: Vec<Arc<Replica>>;
        // Only a pool, a degraded or a saturated set pays for a filtered copy.
        let replicas: &[Arc<Replica>] = if all.iter().all(usable) {
            &all
        } else {
            filtered = all.iter().filter(|r| usable(r)).cloned().collect();
            &filtered
        };
        let context = PickContext {
            exclude: exclude.and_then(|name| replicas.iter().position(|r| r.name == name)),
            ..self.context(Instant::now())
        };
        let index = match prompt {
            Some(prompt) => policy.pick_prompt(replicas, &context, prompt, request)?,
            None => policy.pick_for(replicas, &context, request)?,
        };
        Some(replicas[index].clone())
    }
}

/// A fresh instance of a policy (each keeps its own state, e.g. round robin's turn).
pub fn new_policy(kind: PolicyKind) -> Box<dyn Policy> {
    match kind {
        PolicyKind::LeastQueue => Box::new(least_queue::LeastQueue::new(rand::random())),
        PolicyKind::RoundRobin => Box::new(round_robin::RoundRobin::default()),
        PolicyKind::PrefixAware => Box::new(prefix::policy::PrefixAware::new(rand::random())),
        PolicyKind::PrefixLatency => {
            Box::new(prefix::policy::PrefixAware::measured(rand::random()))
        }
        PolicyKind::PredictedLatency => Box::new(predict::PredictedLatency::new(rand::random())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::ReplicaConfig;

    fn picker(policy: PolicyKind) -> Picker {
        let replicas = (0..3)
            .map(|i| ReplicaConfig {
                name: format!("r{i}"),
                authority: format!("127.0.0.1:{}", 9000 + i),
                node: "n".into(),
                tls: false,
                placement: Default::default(),
            })
            .collect();
        let mut config = GatewayConfig::with_replicas(replicas);
        config.policy = policy;
        Picker::new(&config)
    }

    #[test]
    fn round_robin_takes_turns_and_skips_the_excluded() {
        let picker = picker(PolicyKind::RoundRobin);
        let names: Vec<String> = (0..6).map(|_| picker.pick(None).unwrap().name.clone()).collect();
        assert_eq!(names, ["r0", "r1", "r2", "r0", "r1", "r2"]);
        for _ in 0..6 {
            assert_ne!(picker.pick(Some("r1")).unwrap().name, "r1");
        }
    }

    #[tokio::test]
    async fn an_empty_set_or_an_excluded_only_replica_picks_nothing() {
        let picker = picker(PolicyKind::LeastQueue);
        let only = picker.snapshot()[0].clone();
        let config = ReplicaConfig {
            name: only.name.clone(),
            authority: only.authority.clone(),
            node: only.node.clone(),
            tls: false,
            placement: Default::default(),
        };
        picker.set().submit(Source::Static, vec![config]).await;
        assert_eq!(picker.pick(Some("r0")).map(|r| r.name.clone()), None);
        assert_eq!(picker.pick(None).unwrap().name, "r0");
        picker.set().submit(Source::Static, Vec::new()).await;
        assert!(picker.pick(None).is_none());
    }

    #[test]
    fn draining_replicas_and_other_pools_are_never_picked() {
        let picker = picker(PolicyKind::RoundRobin);
        picker.by_name("r1").unwrap().set_draining(true);
        for _ in 0..6 {
            assert_ne!(picker.pick(None).unwrap().name, "r1");
        }
        let pool = ["r1".to_string(), "r2".to_string()];
        let policy = new_policy(PolicyKind::RoundRobin);
        for _ in 0..6 {
            assert_eq!(
                picker.pick_in(policy.as_ref(), Some(&pool), None, u64::MAX).unwrap().name,
                "r2"
            );
        }
        assert!(picker.pick_in(policy.as_ref(), Some(&pool), Some("r2"), u64::MAX).is_none());
        picker.by_name("r1").unwrap().set_draining(false);
        assert_eq!(
            picker.pick_in(policy.as_ref(), Some(&pool), Some("r2"), u64::MAX).unwrap().name,
            "r1"
        );
    }
}
