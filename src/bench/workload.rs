//! The field's workload notation, parsed into a typed [`Workload`]: business cases
//! `1000/300/c6`, short-output sweeps `c2048_r4096_t128`, weighted mixes
//! `1000/300:0.7+9000/600:0.3`, `tiny` for the proxy-overhead mode, and the prefix-sharing
//! forms of [`super::prefix_workload`] (`sp_...`, `hot_...`, `mt_...`).

use rand::Rng;

use super::prefix_workload::{ConversationSpec, PrefixSpec, parse_conversations, parse_prefix};

/// Input length a sweep uses when its spec does not name one (`_iN`): the short business
/// case's prompt, so a sweep stresses the same entry the short case does.
pub const SWEEP_DEFAULT_INPUT_TOKENS: u64 = 1000;

/// Largest prompt or output length accepted, so a typo cannot allocate gigabytes.
pub const MAX_TOKENS_PER_REQUEST: u64 = 1_000_000;

/// One request shape: prompt and output lengths in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shape {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A shape with its share of the traffic.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct WeightedShape {
    pub shape: Shape,
    pub weight: f64,
}

/// What a workload spec asks for.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Workload {
    /// Streamed inference requests drawn from a mix of shapes (one shape for a business
    /// case), with the concurrency and request count the spec fixes, if any.
    Streaming { mix: Vec<WeightedShape>, concurrency: Option<usize>, requests: Option<u64> },
    /// Tiny non-streaming requests for measuring what a proxy adds.
    Tiny,
    /// Streamed requests sharing prompt prefixes: groups (`sp_...`) or a hot one (`hot_...`).
    SharedPrefix(PrefixSpec),
    /// Multi-turn conversations (`mt_...`), each turn carrying the conversation so far.
    Conversations(ConversationSpec),
}

/// Why a workload spec was refused; every message names the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("the workload spec is empty")]
    Empty,
    #[error(
        "`{spec}` is not a workload: expected IN/OUT/cN (e.g. 1000/300/c6), IN/OUT with \
         --rate, cC_rR_tT (e.g. c2048_r4096_t128), a mix IN/OUT:W+IN/OUT:W, `tiny`, \
         sp_gG_pP_qQ_oO, hot_pP_qQ_oO[_hH] or mt_cC_tT_iI_oO"
    )]
    UnknownForm { spec: String },
    #[error("`{part}` in `{spec}`: {field} must be a whole number, got `{value}`")]
    NotANumber { spec: String, part: String, field: &'static str, value: String },
    #[error("`{part}` in `{spec}`: {field} must be between 1 and {max}, got {value}")]
    OutOfRange { spec: String, part: String, field: &'static str, value: u64, max: u64 },
    #[error("`{part}` in `{spec}`: weight must be a positive number, got `{value}`")]
    BadWeight { spec: String, part: String, value: String },
    #[error(
        "`{part}` in `{spec}`: a mix takes no per-part concurrency; use --max-concurrency \
         or --rate"
    )]
    ConcurrencyInMix { spec: String, part: String },
    #[error("`{part}` in `{spec}`: unknown sweep field `{field}` (expected c, r, t or i)")]
    UnknownSweepField { spec: String, part: String, field: String },
    #[error("`{spec}`: a sweep needs c (concurrency), r (requests) and t (output tokens)")]
    IncompleteSweep { spec: String },
    #[error("`{part}` in `{spec}`: unknown field (expected one of the letters `{expected}`)")]
    UnknownField { spec: String, part: String, expected: &'static str },
    #[error("`{spec}`: the field `{letter}` is required")]
    MissingField { spec: String, letter: char },
}

const MAX_CONCURRENCY: u64 = 100_000;
const MAX_REQUESTS: u64 = 10_000_000;

impl Workload {
    /// Parses a spec in the field's notation.
    pub fn parse(spec: &str) -> Result<Self, WorkloadError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(WorkloadError::Empty);
        }
        if spec.eq_ignore_ascii_case("tiny") {
            return Ok(Self::Tiny);
        }
        if spec.starts_with("sp_") || spec.starts_with("hot_") {
            return parse_prefix(spec).map(Self::SharedPrefix);
        }
        if spec.starts_with("mt_") {
            return parse_conversations(spec).map(Self::Conversations);
        }
        if spec.starts_with('c') && spec.contains('_') {
            return parse_sweep(spec);
        }
        if spec.contains('/') {
            return parse_cases(spec);
        }
        Err(WorkloadError::UnknownForm { spec: spec.to_string() })
    }

    /// The concurrency and request count the spec itself fixes, if any.
    pub fn fixed(&self) -> (Option<usize>, Option<u64>) {
        match self {
            Self::Streaming { concurrency, requests, .. } => (*concurrency, *requests),
            Self::Tiny => (None, None),
            Self::SharedPrefix(spec) => (spec.concurrency, spec.requests),
            Self::Conversations(spec) => {
                (Some(spec.conversations as usize), Some(spec.conversations * spec.turns))
            }
        }
    }

    /// Draws the shape of the next request from the mix.
    pub fn pick_shape(mix: &[WeightedShape], rng: &mut impl Rng) -> Shape {
        let total: f64 = mix.iter().map(|w| w.weight).sum();
        let mut point = rng.random::<f64>() * total;
        for weighted in mix {
            if point < weighted.weight {
                return weighted.shape;
            }
            point -= weighted.weight;
        }
        mix.last().expect("a parsed mix is never empty").shape
    }
}

fn parse_cases(spec: &str) -> Result<Workload, WorkloadError> {
    let parts: Vec<&str> = spec.split('+').map(str::trim).collect();
    let is_mix = parts.len() > 1;
    let mut mix = Vec::with_capacity(parts.len());
    let mut concurrency = None;
    for part in parts {
        let (shape_text, weight) = match part.split_once(':') {
            Some((shape_text, weight_text)) => (shape_text, parse_weight(spec, part, weight_text)?),
            None => (part, 1.0),
        };
        let fields: Vec<&str> = shape_text.split('/').collect();
        let (input, output, conc) = match fields.as_slice() {
            [input, output] => (*input, *output, None),
            [input, output, conc] => (*input, *output, Some(*conc)),
            _ => return Err(WorkloadError::UnknownForm { spec: spec.to_string() }),
        };
        let shape = Shape {
            input_tokens: number(spec, part, "input tokens", input, MAX_TOKENS_PER_REQUEST)?,
            output_tokens: number(spec, part, "output tokens", output, MAX_TOKENS_PER_REQUEST)?,
        };
        if let Some(conc) = conc {
            if is_mix {
                return Err(WorkloadError::ConcurrencyInMix {
                    spec: spec.to_string(),
                    part: part.to_string(),
                });
            }
            let digits = conc
                .strip_prefix('c')
                .ok_or_else(|| WorkloadError::UnknownForm { spec: spec.to_string() })?;
            concurrency =
                Some(number(spec, part, "concurrency", digits, MAX_CONCURRENCY)? as usize);
        }
        mix.push(WeightedShape { shape, weight });
    }
    Ok(Workload::Streaming { mix, concurrency, requests: None })
}

fn parse_sweep(spec: &str) -> Result<Workload, WorkloadError> {
    let (mut concurrency, mut requests, mut output, mut input) = (None, None, None, None);
    for part in spec.split('_') {
        // Each field is one letter followed by its number.
        let (field, digits) = part.split_at(part.chars().next().map_or(0, char::len_utf8));
        let value = |name, max| number(spec, part, name, digits, max);
        match field {
            "c" => concurrency = Some(value("concurrency", MAX_CONCURRENCY)?),
            "r" => requests = Some(value("requests", MAX_REQUESTS)?),
            "t" => output = Some(value("output tokens", MAX_TOKENS_PER_REQUEST)?),
            "i" => input = Some(value("input tokens", MAX_TOKENS_PER_REQUEST)?),
            _ => {
                return Err(WorkloadError::UnknownSweepField {
                    spec: spec.to_string(),
                    part: part.to_string(),
                    field: field.to_string(),
                });
            }
        }
    }
    let (Some(concurrency), Some(requests), Some(output)) = (concurrency, requests, output) else {
        return Err(WorkloadError::IncompleteSweep { spec: spec.to_string() });
    };
    let shape =
        Shape { input_tokens: input.unwrap_or(SWEEP_DEFAULT_INPUT_TOKENS), output_tokens: output };
    Ok(Workload::Streaming {
        mix: vec![WeightedShape { shape, weight: 1.0 }],
        concurrency: Some(concurrency as usize),
        requests: Some(requests),
    })
}

pub(super) fn number(
    spec: &str,
    part: &str,
    field: &'static str,
    text: &str,
    max: u64,
) -> Result<u64, WorkloadError> {
    let value: u64 = text.trim().parse().map_err(|_| WorkloadError::NotANumber {
        spec: spec.to_string(),
        part: part.to_string(),
        field,
        value: text.to_string(),
    })?;
    if value == 0 || value > max {
        return Err(WorkloadError::OutOfRange {
            spec: spec.to_string(),
            part: part.to_string(),
            field,
            value,
            max,
        });
    }
    Ok(value)
}

fn parse_weight(spec: &str, part: &str, text: &str) -> Result<f64, WorkloadError> {
    match text.trim().parse::<f64>() {
        Ok(weight) if weight.is_finite() && weight > 0.0 => Ok(weight),
        _ => Err(WorkloadError::BadWeight {
            spec: spec.to_string(),
            part: part.to_string(),
            value: text.to_string(),
        }),
    }
}
