//! The three entries a request can take and the upstream connection strategies they use.

use std::fmt;
use std::str::FromStr;

/// Which entry a request is served by: each has its own connection strategy and labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Entry {
    /// Short inputs, high concurrency, TTFT-sensitive.
    Short,
    /// Long inputs (9k/50k tokens) that must not regress.
    Long,
    /// Native passthrough to one named replica.
    Debug,
}

impl Entry {
    pub const ALL: [Entry; 3] = [Entry::Short, Entry::Long, Entry::Debug];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Short => "short",
            Self::Long => "long",
            Self::Debug => "debug",
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of `short`, `long`, `debug`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown entry `{0}` (expected short, long or debug)")]
pub struct UnknownEntry(pub String);

impl FromStr for Entry {
    type Err = UnknownEntry;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name.trim() {
            "short" => Ok(Self::Short),
            "long" => Ok(Self::Long),
            "debug" => Ok(Self::Debug),
            other => Err(UnknownEntry(other.to_string())),
        }
    }
}

/// How an entry holds its upstream connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// A fresh connection per request, closed after the response.
    ForceClose,
    /// A fixed set of N connections per replica, used in turn.
    Spread,
    /// An ordinary pooled keep-alive client.
    KeepAlive,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ForceClose => "force_close",
            Self::Spread => "spread",
            Self::KeepAlive => "keep_alive",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "force_close" => Ok(Self::ForceClose),
            "spread" => Ok(Self::Spread),
            "keep_alive" => Ok(Self::KeepAlive),
            other => Err(format!(
                "unknown strategy `{other}` (expected force_close, spread or keep_alive)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for entry in Entry::ALL {
            assert_eq!(entry.as_str().parse::<Entry>(), Ok(entry));
        }
        for strategy in [Strategy::ForceClose, Strategy::Spread, Strategy::KeepAlive] {
            assert_eq!(strategy.as_str().parse::<Strategy>(), Ok(strategy));
        }
        assert!("medium".parse::<Entry>().is_err());
    }
}
