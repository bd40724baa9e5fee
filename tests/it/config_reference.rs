//! The configuration reference is generated from the config types: the committed
//! `docs/configuration-reference.md` must name every key and be what `laneway config
//! reference` prints today; and every example config shipped in `config/` validates.

use std::path::PathBuf;
use std::process::Command;

use laneway::gateway::config::reference;

const COMMITTED: &str = "docs/configuration-reference.md";
const REGENERATE: &str = "cargo run -- config reference > docs/configuration-reference.md";

fn committed() -> String {
    std::fs::read_to_string(COMMITTED).unwrap_or_else(|error| panic!("{COMMITTED}: {error}"))
}

#[test]
fn every_config_key_is_in_the_committed_reference() {
    let committed = committed();
    let fields = reference::schema_fields().unwrap();
    assert!(fields.len() > 100, "{} keys", fields.len());
    let missing: Vec<String> = fields
        .iter()
        .map(|field| reference::display_path(&field.path))
        .filter(|path| !committed.contains(&format!("| `{path}` |")))
        .collect();
    assert!(missing.is_empty(), "keys missing from {COMMITTED}: {missing:?}; run `{REGENERATE}`");
}

#[test]
fn the_committed_reference_is_what_the_binary_prints() {
    let output =
        Command::new(env!("CARGO_BIN_EXE_laneway")).args(["config", "reference"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).unwrap();
    let committed = committed();
    let first_difference = printed
        .lines()
        .zip(committed.lines())
        .position(|(printed, committed)| printed != committed)
        .map(|line| line + 1);
    assert!(
        printed == committed,
        "{COMMITTED} is stale (first differing line: {first_difference:?}); run `{REGENERATE}`"
    );
}

#[test]
fn every_example_config_validates() {
    let mut configs: Vec<PathBuf> = std::fs::read_dir("config")
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "toml"))
        .collect();
    configs.sort();
    assert!(configs.len() >= 6, "{configs:?}");
    for config in configs {
        let output = Command::new(env!("CARGO_BIN_EXE_laneway"))
            .args(["serve", "--check", "--config"])
            .arg(&config)
            // The canary examples read the admin token from this variable.
            .env("LANEWAY_ADMIN_TOKEN", "example-admin-token")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{}: {stderr}", config.display());
    }
}
