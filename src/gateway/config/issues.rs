//! How the config reports what is wrong: every bad field with its path (`replicas[2].url:
//! ...`), collected while the typed config is built instead of stopping at the first.

use std::fmt;
use std::net::SocketAddr;

/// One bad field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Where it is, e.g. `replicas[2].url`.
    pub path: String,
    pub message: String,
}

/// Everything wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub issues: Vec<ConfigIssue>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration ({} problems)", self.issues.len())?;
        for issue in &self.issues {
            write!(f, "\n  {}: {}", issue.path, issue.message)?;
        }
        Ok(())
    }
}

/// Collects issues while the typed config is built: every section reports here, by path.
#[derive(Debug, Default)]
pub struct Issues(Vec<ConfigIssue>);

impl Issues {
    /// The paths reported so far, in order.
    pub fn paths(&self) -> Vec<&str> {
        self.0.iter().map(|issue| issue.path.as_str()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `built` when nothing was reported, else every issue.
    pub fn into_result<T>(self, built: T) -> Result<T, ConfigError> {
        if self.0.is_empty() { Ok(built) } else { Err(ConfigError { issues: self.0 }) }
    }

    pub(in crate::gateway::config) fn add(
        &mut self,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(ConfigIssue { path: path.into(), message: message.into() });
    }

    pub(super) fn addr(&mut self, path: &str, value: Option<&str>, default: &str) -> SocketAddr {
        let text = value.unwrap_or(default);
        text.parse().unwrap_or_else(|_| {
            self.add(path, format!("`{text}` is not an address like 127.0.0.1:8080"));
            default.parse().expect("defaults are valid")
        })
    }

    pub(in crate::gateway::config) fn positive(
        &mut self,
        path: &str,
        value: Option<i64>,
        default: u64,
        max: u64,
    ) -> u64 {
        self.number(path, value, default, 1, max)
    }

    /// `value` if it is within `min..=max`, else an issue and `default`; `default` if unset.
    pub(in crate::gateway::config) fn number(
        &mut self,
        path: &str,
        value: Option<i64>,
        default: u64,
        min: u64,
        max: u64,
    ) -> u64 {
        match value {
            None => default,
            Some(number) if number >= min as i64 && number as u64 <= max => number as u64,
            Some(number) => {
                self.add(path, format!("{number} is out of range {min}..={max}"));
                default
            }
        }
    }
}
