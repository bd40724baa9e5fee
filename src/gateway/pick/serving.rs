//! Which replicas may serve a request's `model`: the names each replica serves (declared in
//! the config, else read from its `/v1/models`), the config's aliases, and what a name that
//! no replica serves gets ([`UnknownModel`]). Entries, variants and policies then pick
//! within the replicas found here.

use std::sync::Arc;

use super::replica::Replica;
use crate::gateway::config::{ModelsConfig, UnknownModel};

/// Where a request's model may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRoute {
    /// Names of the replicas serving the model; `None`: any replica (nothing is known).
    pub serving: Option<Vec<String>>,
    /// The name the replicas know the model by, when it differs from the client's.
    pub rewrite: Option<String>,
    /// The `model` label: a served name, or `other` (bounded by what replicas serve).
    pub label: String,
}

pub use crate::gateway::error::ModelNotFound;

/// The label of requests whose model is not known to be served.
pub const OTHER_MODEL_LABEL: &str = "other";

/// The names `replica` serves under `config`: its declared list, else what it reported.
pub fn served_by(config: &ModelsConfig, replica: &Replica) -> Arc<Vec<String>> {
    match config.declared.get(&replica.name) {
        Some(declared) => Arc::new(declared.clone()),
        None if config.discover => replica.served_models.load_full(),
        None => Arc::new(Vec::new()),
    }
}

fn serves(config: &ModelsConfig, replica: &Replica, model: &str) -> bool {
    match config.declared.get(&replica.name) {
        Some(declared) => declared.iter().any(|name| name == model),
        None => config.discover && replica.served_models.load().iter().any(|name| name == model),
    }
}

fn servers(config: &ModelsConfig, replicas: &[Arc<Replica>], model: &str) -> Vec<String> {
    replicas.iter().filter(|r| serves(config, r, model)).map(|r| r.name.clone()).collect()
}

/// `found` as a restriction: none when every replica serves the model, so that a
/// single-model fleet picks over the whole set without a filtered copy.
fn narrowed(found: Vec<String>, replicas: &[Arc<Replica>]) -> Option<Vec<String>> {
    (found.len() < replicas.len()).then_some(found)
}

/// Resolves `requested` (the body's `model`, if any) against the current `replicas`.
pub fn route(
    config: &ModelsConfig,
    replicas: &[Arc<Replica>],
    requested: Option<&str>,
) -> Result<ModelRoute, ModelNotFound> {
    let any = |rewrite: Option<String>| ModelRoute {
        serving: None,
        rewrite,
        label: OTHER_MODEL_LABEL.to_string(),
    };
    let Some(requested) = requested else {
        // No name: the replica's default model, unless the config names one.
        return Ok(match &config.unknown {
            UnknownModel::ServeAs(target) => served_as(config, replicas, target, true),
            _ => any(None),
        });
    };
    let (target, aliased) = match config.aliases.get(requested) {
        Some(target) => (target.as_str(), true),
        None => (requested, false),
    };
    let found = servers(config, replicas, target);
    if !found.is_empty() {
        let rewrite = aliased.then(|| target.to_string());
        let serving = narrowed(found, replicas);
        return Ok(ModelRoute { serving, rewrite, label: target.to_string() });
    }
    match &config.unknown {
        // An alias names the model the replicas know, even before any replica reported it.
        UnknownModel::Any => Ok(any(aliased.then(|| target.to_string()))),
        UnknownModel::Reject if aliased => Ok(any(Some(target.to_string()))),
        UnknownModel::Reject => Err(ModelNotFound(requested.to_string())),
        UnknownModel::ServeAs(fallback) => Ok(served_as(config, replicas, fallback, true)),
    }
}

/// The route of a request served as `target` (rewritten when `rewrite`).
fn served_as(
    config: &ModelsConfig,
    replicas: &[Arc<Replica>],
    target: &str,
    rewrite: bool,
) -> ModelRoute {
    let found = servers(config, replicas, target);
    let label = if found.is_empty() { OTHER_MODEL_LABEL.to_string() } else { target.to_string() };
    ModelRoute {
        serving: if found.is_empty() { None } else { narrowed(found, replicas) },
        rewrite: rewrite.then(|| target.to_string()),
        label,
    }
}

/// Every name served by a replica, plus the aliases, sorted: `GET /v1/models` on the gateway.
/// Each entry: (name, the model it stands for if an alias).
pub fn union(config: &ModelsConfig, replicas: &[Arc<Replica>]) -> Vec<(String, Option<String>)> {
    let mut names: Vec<(String, Option<String>)> = Vec::new();
    for replica in replicas {
        for model in served_by(config, replica).iter() {
            if !names.iter().any(|(have, _)| have == model) {
                names.push((model.clone(), None));
            }
        }
    }
    for (alias, target) in &config.aliases {
        if !names.iter().any(|(have, _)| have == alias) {
            names.push((alias.clone(), Some(target.clone())));
        }
    }
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::config::ReplicaConfig;

    fn replica(name: &str, serves: &[&str]) -> Arc<Replica> {
        let config = ReplicaConfig {
            name: name.into(),
            authority: "127.0.0.1:1".into(),
            node: name.into(),
            tls: false,
            placement: Default::default(),
        };
        let replica = Replica::new(&config);
        replica.served_models.store(Arc::new(serves.iter().map(|s| s.to_string()).collect()));
        Arc::new(replica)
    }

    fn fleet() -> Vec<Arc<Replica>> {
        vec![replica("a", &["big", "big-sql"]), replica("b", &["big"]), replica("c", &["small"])]
    }

    fn config(unknown: UnknownModel) -> ModelsConfig {
        let mut config = ModelsConfig { unknown, ..ModelsConfig::default() };
        config.aliases.insert("gpt-4o".into(), "big".into());
        config
    }

    fn serving(route: &ModelRoute) -> Vec<&str> {
        route.serving.iter().flatten().map(String::as_str).collect()
    }

    #[test]
    fn names_go_to_their_servers_and_aliases_are_rewritten() {
        let (config, fleet) = (config(UnknownModel::Reject), fleet());
        let big = route(&config, &fleet, Some("big")).unwrap();
        assert_eq!((serving(&big), big.rewrite.as_deref()), (vec!["a", "b"], None));
        assert_eq!(serving(&route(&config, &fleet, Some("big-sql")).unwrap()), ["a"]);
        assert_eq!(serving(&route(&config, &fleet, Some("small")).unwrap()), ["c"]);
        let aliased = route(&config, &fleet, Some("gpt-4o")).unwrap();
        assert_eq!((serving(&aliased), aliased.rewrite.as_deref()), (vec!["a", "b"], Some("big")));
        assert_eq!(aliased.label, "big");
    }

    #[test]
    fn unknown_names_follow_the_config() {
        let fleet = fleet();
        let rejected = route(&config(UnknownModel::Reject), &fleet, Some("nope"));
        assert_eq!(rejected, Err(ModelNotFound("nope".into())));
        let any = route(&config(UnknownModel::Any), &fleet, Some("nope")).unwrap();
        assert_eq!((any.serving, any.rewrite, any.label.as_str()), (None, None, "other"));
        let fallback = config(UnknownModel::ServeAs("small".into()));
        let served = route(&fallback, &fleet, Some("nope")).unwrap();
        assert_eq!((serving(&served), served.rewrite.as_deref()), (vec!["c"], Some("small")));
        // Without a name, the replica's own default unless the config names one.
        let unnamed = route(&config(UnknownModel::Reject), &fleet, None).unwrap();
        assert_eq!(unnamed.serving, None);
        assert_eq!(serving(&route(&fallback, &fleet, None).unwrap()), ["c"]);
    }

    #[test]
    fn declared_lists_win_over_reported_ones_and_the_union_lists_aliases() {
        let mut config = config(UnknownModel::Reject);
        config.declared.insert("c".into(), vec!["big".into()]);
        let fleet = fleet();
        // Every replica serves it: no restriction at all.
        let everywhere = route(&config, &fleet, Some("big")).unwrap();
        assert_eq!((everywhere.serving, everywhere.label.as_str()), (None, "big"));
        assert!(route(&config, &fleet, Some("small")).is_err());
        let names: Vec<_> = union(&config, &fleet).into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["big", "big-sql", "gpt-4o"]);
        config.discover = false;
        config.declared.clear();
        assert_eq!(route(&config, &fleet, Some("big")), Err(ModelNotFound("big".into())));
    }
}
