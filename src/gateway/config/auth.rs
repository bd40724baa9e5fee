//! `[auth]`: the API keys the inference listeners accept, read from the config or a file and
//! kept only as SHA-256 hashes (checking a presented key is `listen::auth`'s).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::issues::Issues;

/// `[auth]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// Keys written in the config itself.
    #[serde(default)]
    pub keys: Vec<String>,
    /// A file with one key per line (blank lines and `#` comments skipped).
    pub keys_file: Option<String>,
    /// Count requests per key in `laneway_requests_by_key_total{key}`.
    #[serde(default)]
    pub count_by_key: bool,
    /// Keys that may also use the debug entry (besides the admin token).
    #[serde(default)]
    pub debug_keys: Vec<String>,
}

/// The accepted keys, as hashes.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKeys {
    pub(crate) hashes: Vec<[u8; 32]>,
    /// Keys allowed on the debug entry.
    pub(crate) debug_hashes: Vec<[u8; 32]>,
    /// Whether to count requests per key.
    pub count_by_key: bool,
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hashes of short keys can be brute-forced: keep them out of logs too.
        let (keys, debug) = (self.hashes.len(), self.debug_hashes.len());
        write!(f, "ApiKeys({keys} keys, {debug} debug keys, count_by_key: {})", self.count_by_key)
    }
}

impl ApiKeys {
    pub fn new<'a>(keys: impl IntoIterator<Item = &'a str>, count_by_key: bool) -> Self {
        Self {
            hashes: keys.into_iter().map(hash).collect(),
            debug_hashes: Vec::new(),
            count_by_key,
        }
    }

    /// Also allows these keys on the debug entry (they are valid keys everywhere).
    pub fn with_debug_keys<'a>(mut self, keys: impl IntoIterator<Item = &'a str>) -> Self {
        self.debug_hashes = keys.into_iter().map(hash).collect();
        self.hashes.extend(self.debug_hashes.iter().copied());
        self
    }

    /// Also accepts these keys (a tenant's).
    pub fn with_more_keys<'a>(mut self, keys: impl IntoIterator<Item = &'a str>) -> Self {
        self.hashes.extend(keys.into_iter().map(hash));
        self
    }

    /// Validates `[auth]`: reads the key file, refuses an empty key set; what is wrong goes
    /// to `issues` by path.
    pub fn from_raw(raw: &RawAuth, issues: &mut Issues) -> Option<Self> {
        let before = issues.len();
        let mut keys: Vec<String> = raw.keys.clone();
        if let Some(file) = &raw.keys_file {
            match read_keys_file(Path::new(file)) {
                Ok(found) => keys.extend(found),
                // An unreadable file says nothing about how many keys there are.
                Err(message) => {
                    issues.add("auth.keys_file", message);
                    return None;
                }
            }
        }
        if let Some(index) = keys.iter().position(|k| k.trim().is_empty()) {
            issues.add(format!("auth.keys[{index}]"), "an empty key is not allowed");
        }
        if let Some(index) = raw.debug_keys.iter().position(|k| k.trim().is_empty()) {
            issues.add(format!("auth.debug_keys[{index}]"), "an empty key is not allowed");
        }
        if keys.is_empty() && raw.debug_keys.is_empty() {
            issues.add("auth", "no keys: give `keys` or `keys_file`");
        }
        if issues.len() > before {
            return None;
        }
        let debug_keys = raw.debug_keys.iter().map(String::as_str);
        Some(
            Self::new(keys.iter().map(String::as_str), raw.count_by_key)
                .with_debug_keys(debug_keys),
        )
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

pub(crate) fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.trim().as_bytes()).into()
}

pub(crate) fn key_label(hash: &[u8; 32]) -> String {
    hash[..6].iter().map(|byte| format!("{byte:02x}")).collect()
}

fn read_keys_file(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", PathBuf::from(path).display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_string)
        .collect())
}
