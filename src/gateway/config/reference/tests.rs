//! The reference against the schema (every key documented, nothing else), against
//! `default.toml` (one source per default) and against validation (the bounds it states
//! are the ones enforced, and refused keys are refused).

use std::collections::BTreeSet;

use super::doc::{Bounds, Doc, Fallback};
use super::fields::DOCS;
use super::schema::{self, Kind};
use super::{ENTRIES, default_of, default_table, markdown};
use crate::gateway::config::GatewayConfig;

/// Every documented schema path.
fn documented_paths() -> BTreeSet<String> {
    DOCS.iter().flat_map(Doc::expansions).collect()
}

#[test]
fn every_field_is_documented_and_every_entry_is_a_field() {
    let fields: BTreeSet<String> =
        schema::fields().unwrap().into_iter().map(|field| field.path).collect();
    let documented = documented_paths();
    let missing: Vec<&String> = fields.difference(&documented).collect();
    let extra: Vec<&String> = documented.difference(&fields).collect();
    assert!(missing.is_empty(), "fields without a row in reference/fields.rs: {missing:?}");
    assert!(extra.is_empty(), "rows in reference/fields.rs that are no field: {extra:?}");
    let rows: usize = DOCS.iter().map(|doc| doc.expansions().len()).sum();
    assert_eq!(rows, documented.len(), "a field is documented twice");
}

#[test]
fn an_entry_key_has_one_type_in_every_entry() {
    let fields = schema::fields().unwrap();
    for doc in DOCS {
        let kinds: BTreeSet<String> = fields
            .iter()
            .filter(|field| doc.expansions().contains(&field.path))
            .map(|field| field.kind.to_string())
            .collect();
        assert_eq!(kinds.len(), 1, "{}: {kinds:?}", doc.path);
    }
}

/// A default is written once: in `default.toml`, or (where that file has none) in the
/// table; where both have it they must agree.
#[test]
fn defaults_have_one_source() {
    let defaults = default_table();
    for doc in DOCS {
        let in_file: Vec<Option<String>> = doc
            .expansions()
            .iter()
            .map(|path| default_of(&defaults, path).map(|value| value.to_string()))
            .collect();
        match doc.default {
            Fallback::FromFile => {
                assert!(in_file.iter().all(Option::is_some), "{}: not in default.toml", doc.path)
            }
            Fallback::Value(value) => {
                assert!(in_file.iter().any(Option::is_none), "{}: take it from the file", doc.path);
                for found in in_file.into_iter().flatten() {
                    assert_eq!(found, value, "{}: default.toml says otherwise", doc.path);
                }
            }
            Fallback::Text(_) => {
                assert!(in_file.iter().all(Option::is_none), "{}: default.toml has it", doc.path)
            }
        }
    }
}

#[test]
fn default_toml_sets_only_fields() {
    let fields: BTreeSet<String> =
        schema::fields().unwrap().into_iter().map(|field| field.path).collect();
    let mut leaves = Vec::new();
    collect_leaves(&default_table(), "", &mut leaves);
    for leaf in leaves {
        assert!(fields.contains(&leaf), "default.toml sets `{leaf}`, which is no field");
    }
}

fn collect_leaves(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            toml::Value::Table(inner) => collect_leaves(inner, &path, out),
            _ => out.push(path),
        }
    }
}

/// The integer and float bounds the reference states are exactly what validation takes:
/// both ends accepted, one step beyond either refused, naming the field (or its section).
#[test]
fn stated_bounds_are_the_ones_validation_enforces() {
    let mut checked = 0;
    for doc in DOCS {
        for (entry, path) in targets(doc) {
            if !doc.only.is_empty() && !doc.only.contains(&entry) {
                continue;
            }
            let (accepted, refused) = match doc.bounds {
                Bounds::Int(min, max) => (
                    vec![min.to_string(), max.to_string()],
                    vec![(min - 1).to_string(), (max + 1).to_string()],
                ),
                Bounds::Float { min, min_included, max } => {
                    let low = if min_included { min } else { min + 0.001 };
                    let mut accepted = vec![format!("{low:?}")];
                    let mut refused =
                        vec![format!("{:?}", if min_included { min - 1.0 } else { min })];
                    if let Some(max) = max {
                        accepted.push(format!("{max:?}"));
                        refused.push(format!("{:?}", max + 1.0));
                    }
                    (accepted, refused)
                }
                _ => continue,
            };
            for value in accepted {
                let text = snippet(&path, &value);
                // Accepted as far as the key goes (a lone variant of weight 0 is refused
                // for its section: not every variant may be at 0).
                if let Err(error) = GatewayConfig::from_toml(&text) {
                    let concrete = concrete(&path);
                    let named = error.issues.iter().any(|issue| issue.path == concrete);
                    assert!(!named, "{path} = {value} is refused:\n{text}\n{error}");
                }
            }
            for value in refused {
                let text = snippet(&path, &value);
                let error = GatewayConfig::from_toml(&text)
                    .expect_err(&format!("{path} = {value} is accepted:\n{text}"));
                let concrete = concrete(&path);
                let named = error
                    .issues
                    .iter()
                    .any(|issue| names(&issue.path, &concrete) || issue.path.starts_with("line "));
                assert!(named, "{path} = {value}: refused elsewhere:\n{text}\n{error}");
            }
            checked += 1;
        }
    }
    assert!(checked > 60, "only {checked} bounds checked");
}

/// Keys refused whatever their value, and entry keys outside the entries that take them.
#[test]
fn refused_keys_are_refused() {
    let fields = schema::fields().unwrap();
    let kind = |path: &str| fields.iter().find(|f| f.path == path).map(|f| f.kind.clone());
    for doc in DOCS {
        for (entry, path) in targets(doc) {
            let refused = matches!(doc.bounds, Bounds::Refused)
                || (!doc.only.is_empty() && !doc.only.contains(&entry));
            if !refused {
                continue;
            }
            let value = sample(&kind(&path).expect("a field"));
            let text = snippet(&path, &value);
            let error = GatewayConfig::from_toml(&text).expect_err(&format!("{path} accepted"));
            let concrete = concrete(&path);
            assert!(
                error.issues.iter().any(|issue| names(&issue.path, &concrete)),
                "{path}: refused elsewhere\n{error}"
            );
        }
    }
}

#[test]
fn the_reference_lists_every_field_once() {
    let text = markdown().unwrap();
    for doc in DOCS {
        let row = format!("| `{}` |", doc.path);
        assert_eq!(text.matches(&row).count(), 1, "{}", doc.path);
    }
    assert!(text.contains("| `entries.<entry>.strategy` | string | short: `\"force_close\"`"));
    assert!(text.contains("| `health.interval_ms` | integer | `2000` | 1..=86400000 |"));
}

/// Each schema path a row documents, with its entry (`""` outside the entries).
fn targets(doc: &Doc) -> Vec<(&'static str, String)> {
    if doc.path.contains(super::ENTRY) {
        ENTRIES.into_iter().zip(doc.expansions()).collect()
    } else {
        vec![("", doc.path.to_string())]
    }
}

/// The path as validation names it: the first element of every array.
fn concrete(path: &str) -> String {
    path.replace("[]", "[0]")
}

/// Whether an issue at `issue` is about `field`: the field, or a section holding it.
fn names(issue: &str, field: &str) -> bool {
    issue == field
        || field.starts_with(&format!("{issue}."))
        || field.starts_with(&format!("{issue}["))
}

/// A value of `kind` to set a refused key to.
fn sample(kind: &Kind) -> String {
    match kind {
        Kind::Integer => "1".into(),
        Kind::Float => "1.0".into(),
        Kind::String => "\"x\"".into(),
        Kind::Boolean => "true".into(),
        Kind::Array(element) => format!("[{}]", sample(element)),
        Kind::Table(value) => format!("{{ x = {} }}", sample(value)),
    }
}

/// A config that sets `path` to `value` and holds what its section needs besides.
fn snippet(path: &str, value: &str) -> String {
    let (section, field) = path.rsplit_once('.').unwrap_or(("", path));
    let replica = "[[replicas]]\nname = \"r\"\nurl = \"http://127.0.0.1:1\"\n";
    if section.is_empty() {
        return format!("{field} = {value}\n{replica}");
    }
    let required: &[(&str, &str)] = match section {
        "replicas[]" => &[("name", "\"r\""), ("url", "\"http://127.0.0.1:1\"")],
        "pools[]" => &[("name", "\"p\""), ("replicas", "[\"r\"]")],
        "tenants[]" => &[("name", "\"t\""), ("keys", "[\"k\"]")],
        "discovery.dns" => &[("name", "\"fleet.local\""), ("port", "8000")],
        "discovery.kubernetes" => &[("namespace", "\"llm\""), ("label_selector", "\"app=vllm\"")],
        _ if section.ends_with(".variants[]") => &[("name", "\"v\"")],
        _ => &[],
    };
    let mut text = String::new();
    if section != "replicas[]" {
        text.push_str(replica);
    }
    match section.strip_suffix("[]") {
        Some(array) => text.push_str(&format!("[[{array}]]\n")),
        None => text.push_str(&format!("[{section}]\n")),
    }
    for (key, required) in required {
        if *key != field {
            text.push_str(&format!("{key} = {required}\n"));
        }
    }
    text.push_str(&format!("{field} = {value}\n"));
    text
}
