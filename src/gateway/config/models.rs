//! `[models]` and the `models` lists of `[[replicas]]` and `[[pools]]`: which replicas serve
//! which model names, the aliases clients may use, and what a name nobody serves gets.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::PoolConfig;
use super::issues::Issues;
use super::raw::{RawPool, RawReplica};

/// `[models]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModels {
    /// `"any"`, `"reject"` or a model name (see [`UnknownModel`]).
    pub unknown: Option<String>,
    /// Read each replica's `GET /v1/models` (its model and LoRA adapters).
    pub discover: Option<bool>,
    /// `"gpt-4o" = "deepseek-v4-flash"`: names clients send, and the model they mean.
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
}

/// What a request for a model that no replica is known to serve gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownModel {
    /// Sent unchanged to any replica, which decides: a single-model fleet, whatever name
    /// its clients hard-code (the default, so every existing client keeps working).
    Any,
    /// 404 with OpenAI's `model_not_found`.
    Reject,
    /// Served as this model (the body's `model` is rewritten).
    ServeAs(String),
}

/// The validated model routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelsConfig {
    pub unknown: UnknownModel,
    pub discover: bool,
    pub aliases: BTreeMap<String, String>,
    /// Models declared per replica name, from `[[replicas]] models` and `[[pools]] models`;
    /// a replica with a declared list is not asked for its own.
    pub declared: BTreeMap<String, Vec<String>>,
}

impl Default for ModelsConfig {
    fn default() -> Self {
        Self {
            unknown: UnknownModel::Any,
            discover: true,
            aliases: BTreeMap::new(),
            declared: BTreeMap::new(),
        }
    }
}

/// Longest model name accepted in the config (vLLM's names are paths, a few dozen bytes).
const MAX_NAME_BYTES: usize = 256;

pub(super) fn models(
    raw: &RawModels,
    replicas: &[RawReplica],
    raw_pools: &[RawPool],
    pools: &[PoolConfig],
    issues: &mut Issues,
) -> ModelsConfig {
    let mut check = |path: String, name: &str| {
        let ok = !name.is_empty() && name.len() <= MAX_NAME_BYTES;
        if !ok {
            issues.add(path, format!("`{name}` must be 1..={MAX_NAME_BYTES} bytes"));
        }
        ok
    };
    let unknown = match raw.unknown.as_deref() {
        None | Some("any") => UnknownModel::Any,
        Some("reject") => UnknownModel::Reject,
        Some(name) => {
            check("models.unknown".into(), name);
            UnknownModel::ServeAs(name.to_string())
        }
    };
    for (alias, target) in &raw.aliases {
        check(format!("models.aliases.{alias}"), alias);
        check(format!("models.aliases.{alias}"), target);
    }
    let mut declared: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (index, replica) in replicas.iter().enumerate() {
        let (Some(name), Some(list)) = (&replica.name, &replica.models) else { continue };
        for model in list {
            if check(format!("replicas[{index}].models"), model) {
                add_unique(declared.entry(name.clone()).or_default(), model);
            }
        }
    }
    for (index, raw_pool) in raw_pools.iter().enumerate() {
        let Some(list) = &raw_pool.models else { continue };
        let Some(pool) = raw_pool.name.as_ref().and_then(|n| pools.iter().find(|p| &p.name == n))
        else {
            continue;
        };
        for model in list {
            if !check(format!("pools[{index}].models"), model) {
                continue;
            }
            for member in &pool.replicas {
                add_unique(declared.entry(member.clone()).or_default(), model);
            }
        }
    }
    let discover = raw.discover.unwrap_or(true);
    ModelsConfig { unknown, discover, aliases: raw.aliases.clone(), declared }
}

fn add_unique(list: &mut Vec<String>, model: &str) {
    if !list.iter().any(|have| have == model) {
        list.push(model.to_string());
    }
}

#[cfg(test)]
mod tests {
    use crate::gateway::config::GatewayConfig;

    use super::*;

    #[test]
    fn declared_lists_merge_replicas_and_pools_and_the_default_is_any() {
        let config = GatewayConfig::from_toml(
            r#"
            [models]
            unknown = "reject"
            aliases = { "gpt-4o" = "big" }
            [[replicas]]
            name = "a"
            url = "http://127.0.0.1:1"
            models = ["big", "big-lora"]
            [[replicas]]
            name = "b"
            url = "http://127.0.0.1:2"
            [[pools]]
            name = "p"
            replicas = ["a", "b"]
            models = ["big"]
            "#,
        )
        .unwrap();
        let models = &config.models;
        assert_eq!(models.unknown, UnknownModel::Reject);
        assert_eq!(models.declared["a"], ["big", "big-lora"]);
        assert_eq!(models.declared["b"], ["big"]);
        assert_eq!(models.aliases["gpt-4o"], "big");
        let plain = GatewayConfig::from_toml("").unwrap();
        assert_eq!(plain.models, ModelsConfig::default());
    }

    #[test]
    fn empty_names_are_reported_by_path() {
        let error = GatewayConfig::from_toml(
            "[models]\nunknown = \"\"\naliases = { x = \"\" }\n\
             [[replicas]]\nname = \"a\"\nurl = \"http://127.0.0.1:1\"\nmodels = [\"\"]\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(paths, ["models.unknown", "models.aliases.x", "replicas[0].models"]);
    }
}
