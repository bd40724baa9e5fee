//! An error with its causes on one line, `: `-separated: hyper's and hyper-util's top-level
//! messages ("client error (Connect)") alone do not say what went wrong.

use std::error::Error;
use std::fmt;

/// Displays `error` followed by each of its sources.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn every_cause_follows_the_error() {
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(ErrorChain(&error).to_string(), "outer: inner");
        assert_eq!(ErrorChain(&std::io::Error::other("alone")).to_string(), "alone");
    }
}
