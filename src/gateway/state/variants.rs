//! Canary variants at run time: for each entry, its variants (strategy, policy, pool, one
//! connector each) and the weight table that assigns requests to them. The table sits
//! behind `ArcSwap`, so weights change under live traffic without a lock or a restart.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use http::{HeaderMap, HeaderName};

use crate::gateway::headers;

use crate::canary::{AssignError, Layout, VariantTable, WeightedVariant};
use crate::gateway::config::{Entry, Strategy};
use crate::gateway::config::{EntryConfig, GatewayConfig};
use crate::gateway::forward::Connector;
use crate::gateway::forward::ready::ReadyCounts;
use crate::gateway::observe::GatewayMetrics;
use crate::gateway::pick::{Picker, Policy, PromptPick, Replica, RequestShape, new_policy};
use crate::gateway::tls::upstream::UpstreamTls;

/// One way of serving an entry's requests.
pub struct Variant {
    pub name: Arc<str>,
    pub strategy: Strategy,
    /// The pool's name, `None` for every replica.
    pub pool: Option<String>,
    members: Option<Vec<String>>,
    /// `None`: the picker's global policy.
    policy: Option<Box<dyn Policy>>,
    pub connector: Connector,
}

impl Variant {
    /// A replica of this variant's pool that accepts new requests and has fewer than
    /// `limit` in flight, never `exclude`.
    pub fn pick(&self, picker: &Picker, exclude: Option<&str>, limit: u64) -> Option<Arc<Replica>> {
        let policy = self.policy.as_deref().unwrap_or(picker.policy());
        picker.pick_in(policy, self.members.as_deref(), exclude, limit)
    }

    /// [`Self::pick`] for one request: among the replicas serving its model (`None`: any),
    /// telling the policy the request's size and SLO, and its prompt for a policy that
    /// places by prompt (see [`Self::reads_prompts`]).
    pub fn pick_for(
        &self,
        picker: &Picker,
        serving: Option<&[String]>,
        exclude: Option<&str>,
        limit: u64,
        request: &RequestShape,
        prompt: Option<&PromptPick<'_>>,
    ) -> Option<Arc<Replica>> {
        let policy = self.policy.as_deref().unwrap_or(picker.policy());
        let pool = self.pool_serving(serving);
        picker.pick_request_in(policy, pool.as_deref(), exclude, limit, request, prompt)
    }

    /// The replicas [`Self::pick_for`] chooses from, draining or not.
    pub fn replicas_for(&self, picker: &Picker, serving: Option<&[String]>) -> Vec<Arc<Replica>> {
        let pool = self.pool_serving(serving);
        let in_pool = |replica: &&Arc<Replica>| {
            pool.as_deref().is_none_or(|members| members.contains(&replica.name))
        };
        picker.snapshot().iter().filter(in_pool).cloned().collect()
    }

    /// A number naming the replicas [`Self::pick_for`] chooses from: equal for requests
    /// that compete for the same places (0: every replica).
    pub fn scope_for(&self, serving: Option<&[String]>) -> u64 {
        self.pool_serving(serving).map_or(0, |pool| {
            let mut hasher = std::hash::DefaultHasher::new();
            pool.hash(&mut hasher);
            hasher.finish() | 1
        })
    }

    /// This variant's members that serve the request's model (`None`: every replica).
    fn pool_serving(&self, serving: Option<&[String]>) -> Option<Cow<'_, [String]>> {
        let Some(serving) = serving else {
            return self.members.as_deref().map(Cow::Borrowed);
        };
        Some(match &self.members {
            Some(pool) => pool.iter().filter(|name| serving.contains(name)).cloned().collect(),
            None => Cow::Owned(serving.to_vec()),
        })
    }

    /// Whether this variant's policy places requests by their prompt.
    pub fn reads_prompts(&self, picker: &Picker) -> bool {
        self.policy.as_deref().unwrap_or(picker.policy()).reads_prompts()
    }

    /// The policy's name as configured (`None`: the global one).
    pub fn policy_name(&self) -> Option<&'static str> {
        self.policy.as_ref().map(|policy| policy.name())
    }
}

/// Why new weights were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WeightsError {
    #[error("entry `{entry}` has no variant `{variant}`")]
    UnknownVariant { entry: &'static str, variant: String },
    #[error("weight {0} is out of range 0..=1000000")]
    OutOfRange(u64),
    #[error("{0}")]
    Table(#[from] AssignError),
}

/// One entry's variants, in configured order: the first is the baseline and the fallback.
pub struct EntryVariants {
    pub entry: Entry,
    pub variants: Vec<Variant>,
    table: ArcSwap<VariantTable>,
}

impl EntryVariants {
    fn new(
        entry: Entry,
        config: &EntryConfig,
        gateway: &GatewayConfig,
        tls: &Arc<UpstreamTls>,
        ready_counts: &ReadyCounts,
    ) -> Self {
        let configured = config.effective_variants();
        let table = configured
            .iter()
            .map(|v| WeightedVariant { name: v.name.clone(), weight: v.weight })
            .collect();
        let variants = configured
            .into_iter()
            .map(|variant| {
                let connection = EntryConfig { strategy: variant.strategy, ..config.clone() };
                let members = variant.pool.as_deref().and_then(|name| gateway.pool(name));
                Variant {
                    name: variant.name.into(),
                    strategy: variant.strategy,
                    members: members.map(|pool| pool.replicas.clone()),
                    pool: variant.pool,
                    policy: variant.policy.map(new_policy),
                    connector: Connector::new(
                        &connection,
                        gateway.connect_timeout,
                        gateway.reliability.timeouts.first_byte,
                        tls.clone(),
                        ready_counts,
                    ),
                }
            })
            .collect();
        let table = VariantTable::new(table).expect("validated with the config");
        Self { entry, variants, table: ArcSwap::from_pointee(table) }
    }

    /// The index of the variant a request with this sticky key goes to.
    pub fn assign(&self, sticky_key: &[u8]) -> usize {
        self.table.load().assign(sticky_key)
    }

    pub fn weights(&self) -> Vec<WeightedVariant> {
        self.table.load().variants().to_vec()
    }

    /// Sets the weights of the named variants (the others keep theirs); all or nothing.
    pub fn set_weights(&self, weights: &HashMap<String, u64>) -> Result<(), WeightsError> {
        let mut table = self.weights();
        for (name, weight) in weights {
            let slot = table.iter_mut().find(|v| &v.name == name).ok_or_else(|| {
                WeightsError::UnknownVariant { entry: self.entry.as_str(), variant: name.clone() }
            })?;
            if *weight > 1_000_000 {
                return Err(WeightsError::OutOfRange(*weight));
            }
            slot.weight = *weight as u32;
        }
        self.table.store(Arc::new(VariantTable::new(table)?));
        Ok(())
    }
}

/// Every entry's variants and how a request's sticky key is found.
pub struct Variants {
    entries: [EntryVariants; 3],
    sticky_header: Option<HeaderName>,
    /// Keys requests that carry no id, so that they still spread by weight.
    anonymous: AtomicU64,
}

impl Variants {
    pub fn new(config: &GatewayConfig, tls: &Arc<UpstreamTls>, ready_counts: &ReadyCounts) -> Self {
        let entries = Entry::ALL
            .map(|entry| EntryVariants::new(entry, config.entry(entry), config, tls, ready_counts));
        Self {
            entries,
            sticky_header: config.canary.sticky_header.clone(),
            anonymous: AtomicU64::new(0),
        }
    }

    pub fn of(&self, entry: Entry) -> &EntryVariants {
        let index = Entry::ALL.iter().position(|e| *e == entry).expect("every entry is listed");
        &self.entries[index]
    }

    /// Entries that requests are assigned in (the debug entry goes to a named replica).
    pub fn compared(&self) -> impl Iterator<Item = &EntryVariants> {
        self.entries.iter().filter(|e| e.entry != Entry::Debug)
    }

    /// The key that decides a request's variant: the sticky header's value, else the
    /// request id, else a per-request counter.
    pub fn sticky_key(&self, headers: &HeaderMap) -> Vec<u8> {
        let from = |name: &HeaderName| headers.get(name).map(|v| v.as_bytes().to_vec());
        self.sticky_header
            .as_ref()
            .and_then(from)
            .or_else(|| from(&headers::REQUEST_ID))
            .unwrap_or_else(|| {
                let n = self.anonymous.fetch_add(1, Ordering::Relaxed);
                format!("request-{n}").into_bytes()
            })
    }

    /// The variant a request is served by: the one its sticky key is assigned to, or the
    /// entry's baseline when that variant's pool has no replica accepting new requests
    /// (counted in `laneway_canary_fallbacks_total`).
    pub fn choose(
        &self,
        entry: Entry,
        headers: &HeaderMap,
        picker: &Picker,
        metrics: &GatewayMetrics,
    ) -> &Variant {
        let entry_variants = self.of(entry);
        // Outside a canary there is nothing to assign: no key is read.
        let assigned = match entry_variants.variants.as_slice() {
            [only] => only,
            variants => &variants[entry_variants.assign(&self.sticky_key(headers))],
        };
        if assigned.pool.is_none() || picker.any_accepting(assigned.members.as_deref()) {
            return assigned;
        }
        metrics.canary_fallbacks.with_label_values(&[entry.as_str(), &assigned.name]).inc();
        &entry_variants.variants[0]
    }

    /// The entries and variant names the canary report lists.
    pub fn layout(&self) -> Layout {
        self.compared()
            .map(|e| {
                let names = e.variants.iter().map(|v| v.name.to_string()).collect();
                (e.entry.as_str().to_string(), names)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::{ReplicaConfig, VariantConfig};

    fn unregistered_counts() -> ReadyCounts {
        ReadyCounts::new(&prometheus::Registry::new())
    }

    fn config() -> GatewayConfig {
        let replicas = vec![ReplicaConfig {
            name: "r0".into(),
            authority: "127.0.0.1:1".into(),
            node: "n".into(),
            tls: false,
            placement: Default::default(),
        }];
        let mut config = GatewayConfig::with_replicas(replicas);
        config.canary.sticky_header = Some(HeaderName::from_static("x-user-id"));
        config.short.variants = ["a", "b"]
            .map(|name| VariantConfig {
                name: name.into(),
                strategy: Strategy::ForceClose,
                policy: None,
                pool: None,
                weight: 1,
            })
            .to_vec();
        config
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, value.parse().unwrap());
        }
        headers
    }

    #[tokio::test]
    async fn the_sticky_header_wins_then_the_request_id_then_a_counter() {
        let variants =
            Variants::new(&config(), &Arc::new(UpstreamTls::unavailable()), &unregistered_counts());
        let both = headers(&[("x-user-id", "alice"), ("x-request-id", "req-1")]);
        assert_eq!(variants.sticky_key(&both), b"alice");
        assert_eq!(variants.sticky_key(&headers(&[("x-request-id", "req-1")])), b"req-1");
        let first = variants.sticky_key(&HeaderMap::new());
        assert_ne!(first, variants.sticky_key(&HeaderMap::new()));
        // Entries without variants have the implicit one; the debug entry is not compared.
        let layout = variants.layout();
        assert_eq!(layout[0], ("short".to_string(), vec!["a".to_string(), "b".to_string()]));
        assert_eq!(layout[1], ("long".to_string(), vec!["default".to_string()]));
        assert_eq!(layout.len(), 2);
    }

    #[tokio::test]
    async fn weights_change_all_or_nothing() {
        let variants =
            Variants::new(&config(), &Arc::new(UpstreamTls::unavailable()), &unregistered_counts());
        let short = variants.of(Entry::Short);
        short.set_weights(&HashMap::from([("b".to_string(), 0)])).unwrap();
        assert!((0..200).all(|n| short.assign(format!("{n}").as_bytes()) == 0));
        let unknown = HashMap::from([("a".to_string(), 0), ("zz".to_string(), 1)]);
        assert!(matches!(short.set_weights(&unknown), Err(WeightsError::UnknownVariant { .. })));
        let all_zero = HashMap::from([("a".to_string(), 0)]);
        assert_eq!(short.set_weights(&all_zero), Err(WeightsError::Table(AssignError::AllZero)));
        let too_big = HashMap::from([("a".to_string(), 2_000_000)]);
        assert_eq!(short.set_weights(&too_big), Err(WeightsError::OutOfRange(2_000_000)));
        let weights: Vec<u32> = short.weights().iter().map(|w| w.weight).collect();
        assert_eq!(weights, [1, 0], "a refused change left the table as it was");
    }
}
