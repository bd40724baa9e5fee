//! One row of the configuration reference: what validation accepts of a key (its
//! [`Bounds`]), where its default comes from ([`Fallback`]) and what it means ([`Doc`]),
//! with the constructors the table in `fields.rs` is written with.

/// What validation accepts.
#[derive(Debug, Clone, Copy)]
pub enum Bounds {
    /// Anything of the key's type.
    Any,
    /// An integer in `min..=max`.
    Int(i64, i64),
    /// A float above `min` (or from it, when `min_included`), up to `max` when there is one.
    Float { min: f64, min_included: bool, max: Option<f64> },
    /// A rule validation checks that is not a range (a name's characters, a URL's shape).
    Text(&'static str),
    /// The key is refused whatever its value (kept to say what replaced it).
    Refused,
}

/// Where the default shown comes from.
#[derive(Debug, Clone, Copy)]
pub enum Fallback {
    /// `default.toml` has it (for an entry's key: for every entry).
    FromFile,
    /// The code's default, a TOML value; `default.toml` has it for no entry or says the same.
    Value(&'static str),
    /// No value: what leaving the key out means.
    Text(&'static str),
}

/// One key.
#[derive(Debug, Clone, Copy)]
pub struct Doc {
    /// The key's path (`<entry>`: each of `short`, `long` and `debug`).
    pub path: &'static str,
    /// The entries that take the key; empty for every one.
    pub only: &'static [&'static str],
    pub bounds: Bounds,
    pub default: Fallback,
    pub meaning: &'static str,
}

pub const fn key(
    path: &'static str,
    bounds: Bounds,
    default: Fallback,
    meaning: &'static str,
) -> Doc {
    Doc { path, only: &[], bounds, default, meaning }
}

pub const fn only(entries: &'static [&'static str], doc: Doc) -> Doc {
    Doc { only: entries, ..doc }
}

pub const fn from(min: f64, max: f64) -> Bounds {
    Bounds::Float { min, min_included: true, max: Some(max) }
}

pub const fn above(min: f64, max: Option<f64>) -> Bounds {
    Bounds::Float { min, min_included: false, max }
}

pub const fn none(text: &'static str) -> Fallback {
    Fallback::Text(text)
}
