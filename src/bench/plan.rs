//! The run's plan: the command line validated once into targets, request kind, arrival
//! process, per-round budgets and SLOs, with a typed error for every bad flag.

use std::time::Duration;

use super::BenchArgs;
use super::arrivals::Arrivals;
use super::runner::Budget;
use super::stats::Slo;
use super::workload::{Workload, WorkloadError};

/// Hard caps so that no flag combination runs unbounded.
pub const MAX_REQUESTS: u64 = 1_000_000;
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Connections of the overhead mode's saturation run (`--workload tiny` without `--rate`)
/// when `--max-concurrency` is not given.
pub const SATURATION_CONNECTIONS: usize = 32;
/// How long the overhead mode runs per target when neither a count nor a duration is given.
pub const TINY_DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Rounds when several targets are compared and `--rounds` is not given.
pub const DEFAULT_ROUNDS_SEVERAL_TARGETS: u32 = 3;

/// One target: a name for the table and the base URL requests go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    pub url: String,
}

/// A validated run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub targets: Vec<Target>,
    pub workload: Workload,
    pub arrivals: Arrivals,
    /// Closed loop: the clients' starts spread over this long in each round.
    pub ramp_up: Duration,
    /// Each round's budget, in order; every target runs every round.
    pub rounds: Vec<(u64, Budget)>,
    pub slo: Slo,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
}

/// Why the command line does not make a run.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("give at least one --target [NAME=]URL")]
    NoTarget,
    #[error("--target `{0}`: expected [NAME=]http://HOST:PORT[,http://HOST:PORT...]")]
    BadTarget(String),
    #[error("--target: the name `{0}` is used twice")]
    DuplicateTarget(String),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error("--goodput `{0}`: expected ttft:MS, tpot:MS or e2el:MS with MS a positive number")]
    BadGoodput(String),
    #[error("--header `{0}`: expected NAME:VALUE")]
    BadHeader(String),
    #[error("--{flag} must be a positive number, got {value}")]
    NotPositive { flag: &'static str, value: String },
    #[error(
        "the workload `{0}` fixes no concurrency: add --rate R (open loop) or \
         --max-concurrency C (closed loop), or write it as IN/OUT/cN"
    )]
    NoArrivals(String),
    #[error("--ramp-up applies to a closed loop (cN or --max-concurrency without --rate)")]
    RampUpInOpenLoop,
    #[error("give --requests or --duration, not both")]
    RequestsAndDuration,
    #[error("--requests {0} is above the cap of {MAX_REQUESTS}")]
    TooManyRequests(u64),
    #[error("--duration {0} s is above the cap of 86400 s")]
    TooLong(f64),
    #[error(
        "conversations (mt_...) run in a closed loop over whole conversations: drop \
         --{0} (use --max-concurrency and --requests)"
    )]
    ConversationsFlag(&'static str),
}

fn positive(flag: &'static str, value: f64) -> Result<f64, PlanError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(PlanError::NotPositive { flag, value: value.to_string() })
    }
}

/// Parses `[NAME=]URL[,URL...]`; a missing name becomes the first URL's host:port. Several
/// URLs make one target that the bench spreads over itself, round robin by request index.
pub fn parse_target(text: &str) -> Result<Target, PlanError> {
    let bad = || PlanError::BadTarget(text.to_string());
    let (name, urls) = match text.split_once('=') {
        Some((name, urls)) if !name.contains("://") => (Some(name.trim()), urls.trim()),
        _ => (None, text.trim()),
    };
    if name.is_some_and(str::is_empty) {
        return Err(bad());
    }
    let mut authorities = Vec::new();
    let mut cleaned = Vec::new();
    for url in urls.split(',').map(str::trim) {
        let authority = url
            .strip_prefix("http://")
            .map(|rest| rest.split('/').next().unwrap_or(""))
            .filter(|authority| !authority.is_empty())
            .ok_or_else(bad)?;
        if url.parse::<http::Uri>().is_err() {
            return Err(bad());
        }
        authorities.push(authority.to_string());
        cleaned.push(url.trim_end_matches('/'));
    }
    Ok(Target {
        name: name.map_or_else(|| authorities[0].clone(), str::to_string),
        url: cleaned.join(","),
    })
}

/// Parses the `--goodput` objectives (`ttft:MS tpot:MS e2el:MS`).
pub fn parse_slo(items: &[String]) -> Result<Slo, PlanError> {
    let mut slo = Slo::default();
    for item in items {
        let bad = || PlanError::BadGoodput(item.clone());
        let (name, ms) = item.split_once(':').ok_or_else(bad)?;
        let ms: f64 = ms.trim().parse().map_err(|_| bad())?;
        if !(ms.is_finite() && ms > 0.0) {
            return Err(bad());
        }
        let limit = Some(Duration::from_secs_f64(ms / 1000.0));
        match name.trim() {
            "ttft" => slo.ttft = limit,
            "tpot" => slo.tpot = limit,
            "e2el" => slo.e2el = limit,
            _ => return Err(bad()),
        }
    }
    Ok(slo)
}

impl Plan {
    pub fn from_args(args: &BenchArgs) -> Result<Self, PlanError> {
        let mut targets = Vec::with_capacity(args.target.len());
        for text in &args.target {
            let target = parse_target(text)?;
            if targets.iter().any(|t: &Target| t.name == target.name) {
                return Err(PlanError::DuplicateTarget(target.name));
            }
            targets.push(target);
        }
        if targets.is_empty() {
            return Err(PlanError::NoTarget);
        }
        let workload = Workload::parse(&args.workload)?;
        let rate = args.rate.map(|rate| positive("rate", rate)).transpose()?;
        let timeout = Duration::from_secs_f64(positive("timeout", args.request.timeout)?);
        if args.max_concurrency == Some(0) {
            return Err(PlanError::NotPositive { flag: "max-concurrency", value: "0".into() });
        }
        let (arrivals, spec_requests) = match (&workload, rate) {
            (Workload::Tiny, Some(rate)) => {
                (Arrivals::Open { rate, max_concurrency: args.max_concurrency }, None)
            }
            (Workload::Tiny, None) => (
                Arrivals::Closed {
                    concurrency: args.max_concurrency.unwrap_or(SATURATION_CONNECTIONS),
                },
                None,
            ),
            (Workload::Conversations(_), Some(_)) => {
                return Err(PlanError::ConversationsFlag("rate"));
            }
            (workload, Some(rate)) => {
                let (concurrency, requests) = workload.fixed();
                (
                    Arrivals::Open { rate, max_concurrency: args.max_concurrency.or(concurrency) },
                    requests,
                )
            }
            (workload, None) => {
                let (concurrency, requests) = workload.fixed();
                let concurrency = args
                    .max_concurrency
                    .or(concurrency)
                    .ok_or_else(|| PlanError::NoArrivals(args.workload.clone()))?;
                (Arrivals::Closed { concurrency }, requests)
            }
        };
        let turns = match &workload {
            Workload::Conversations(_) if args.duration.is_some() => {
                return Err(PlanError::ConversationsFlag("duration"));
            }
            Workload::Conversations(spec) => Some(spec.turns),
            _ => None,
        };
        let total = match (args.requests, args.duration) {
            (Some(_), Some(_)) => return Err(PlanError::RequestsAndDuration),
            (Some(count), None) => Budget::Requests(count),
            (None, Some(seconds)) => {
                let seconds = positive("duration", seconds)?;
                if seconds > MAX_DURATION.as_secs_f64() {
                    return Err(PlanError::TooLong(seconds));
                }
                Budget::Duration(Duration::from_secs_f64(seconds))
            }
            (None, None) => default_budget(&workload, arrivals, spec_requests),
        };
        if let Budget::Requests(count) = total {
            if count == 0 {
                return Err(PlanError::NotPositive { flag: "requests", value: "0".into() });
            }
            if count > MAX_REQUESTS {
                return Err(PlanError::TooManyRequests(count));
            }
        }
        let ramp_up = match (args.ramp_up, arrivals) {
            (None, _) => Duration::ZERO,
            (Some(_), Arrivals::Open { .. }) => return Err(PlanError::RampUpInOpenLoop),
            (Some(seconds), Arrivals::Closed { .. }) => {
                Duration::from_secs_f64(positive("ramp-up", seconds)?)
            }
        };
        let rounds = args.rounds.unwrap_or_else(|| default_rounds(targets.len(), arrivals, total));
        let rounds = match (turns, total) {
            // Rounds hold whole conversations: split the conversations, not the requests.
            (Some(turns), Budget::Requests(count)) => {
                split_rounds(Budget::Requests(count.div_ceil(turns)), rounds.max(1))
                    .into_iter()
                    .map(|(first, budget)| match budget {
                        Budget::Requests(n) => (first * turns, Budget::Requests(n * turns)),
                        other => (first * turns, other),
                    })
                    .collect()
            }
            _ => split_rounds(total, rounds.max(1)),
        };
        let headers = args
            .request
            .header
            .iter()
            .map(|text| match text.split_once(':') {
                Some((name, value)) if !name.trim().is_empty() => {
                    Ok((name.trim().to_string(), value.trim().to_string()))
                }
                _ => Err(PlanError::BadHeader(text.clone())),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            targets,
            workload,
            arrivals,
            ramp_up,
            rounds,
            slo: parse_slo(&args.output.goodput)?,
            headers,
            timeout,
        })
    }

    /// Requests the plan sends per target, if it is count-based.
    pub fn planned_requests(&self) -> Option<u64> {
        self.rounds
            .iter()
            .map(|(_, budget)| match budget {
                Budget::Requests(count) => Some(*count),
                Budget::Duration(_) => None,
            })
            .sum()
    }
}

/// Without `--requests` or `--duration`: a sweep's own `rR`, ten requests per closed-loop
/// client, thirty seconds of an open loop, ten seconds of the overhead mode.
fn default_budget(workload: &Workload, arrivals: Arrivals, spec_requests: Option<u64>) -> Budget {
    if let Some(count) = spec_requests {
        return Budget::Requests(count);
    }
    match (workload, arrivals) {
        (Workload::Tiny, _) => Budget::Duration(TINY_DEFAULT_DURATION),
        (_, Arrivals::Closed { concurrency }) => Budget::Requests(10 * concurrency as u64),
        (_, Arrivals::Open { rate, .. }) => {
            Budget::Requests(((rate * 30.0).ceil() as u64).clamp(1, MAX_REQUESTS))
        }
    }
}

/// One round for one target; for several, up to three, but never so many that a
/// closed-loop round has fewer than two requests per client, or it would never reach its
/// concurrency.
fn default_rounds(targets: usize, arrivals: Arrivals, total: Budget) -> u32 {
    if targets < 2 {
        return 1;
    }
    match (arrivals, total) {
        (Arrivals::Closed { concurrency }, Budget::Requests(count)) => {
            (count / (2 * concurrency as u64)).clamp(1, u64::from(DEFAULT_ROUNDS_SEVERAL_TARGETS))
                as u32
        }
        _ => DEFAULT_ROUNDS_SEVERAL_TARGETS,
    }
}

/// Splits the budget into `rounds` rounds, returned as (first request index, budget).
/// Request indices continue across rounds, so each index (and prompt) is sent once per
/// target, and the same index goes to every target.
pub fn split_rounds(total: Budget, rounds: u32) -> Vec<(u64, Budget)> {
    match total {
        Budget::Requests(count) => {
            let rounds = u64::from(rounds).min(count).max(1);
            let per_round = count.div_ceil(rounds);
            (0..rounds)
                .map(|round| {
                    let first = round * per_round;
                    (first, Budget::Requests(per_round.min(count - first.min(count))))
                })
                .filter(|(_, budget)| *budget != Budget::Requests(0))
                .collect()
        }
        Budget::Duration(length) => (0..rounds)
            .map(|round| (u64::from(round) * MAX_REQUESTS, Budget::Duration(length / rounds)))
            .collect(),
    }
}
