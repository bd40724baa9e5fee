//! `laneway bench`: the load generator. It speaks the field's workload notation, sends
//! closed-loop or Poisson open-loop traffic to one or more targets in interleaved rounds,
//! times every request as `vllm bench serve` does, and prints the field's table with
//! ratios to the first target (plus `--json` and SVG charts with `--plot`).
//!
//! The flow: [`plan`] validates the flags once; [`runner`] runs each round against each
//! target with [`client`] (which times streams with [`timing`]); [`stats`] and [`report`]
//! turn the [`record`]s into the table; [`plot`] draws them.

pub mod arrivals;
pub mod client;
pub mod conversation;
pub mod plan;
pub mod plot;
pub mod prefix_workload;
pub mod progress;
pub mod record;
pub mod report;
pub mod runner;
pub mod stats;
pub mod timing;
pub mod workload;

use std::path::PathBuf;

use anyhow::Context;
use std::sync::Arc;
use std::time::Duration;

use crate::openai::request::Endpoint;

use self::client::{RequestTemplate, http_client};
use self::plan::Plan;
use self::progress::{Progress, ProgressLine};
use self::report::TargetReport;
use self::runner::{RequestKind, Round, TargetContext, run_round};
use self::workload::Workload;

/// Which OpenAI endpoint the requests go to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EndpointArg {
    #[default]
    Chat,
    Completions,
}

/// Command-line arguments of `laneway bench`.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct BenchArgs {
    /// A target as [NAME=]URL (e.g. direct=http://127.0.0.1:8000); repeat to compare.
    /// Ratios are given to the first one.
    #[arg(long, required = true, num_args = 1..)]
    pub target: Vec<String>,
    /// Workload: IN/OUT/cN (1000/300/c6), cC_rR_tT[_iI] (c2048_r4096_t128), a mix
    /// IN/OUT:W+IN/OUT:W (with --rate or --max-concurrency), or `tiny` (overhead mode).
    #[arg(long)]
    pub workload: String,
    /// Requests per target, split over the rounds.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Seconds per target, split over the rounds (instead of --requests).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Open loop: Poisson arrivals at this many requests/s.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Cap on requests in flight (open loop), or the number of clients (closed loop).
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// Closed loop: start the clients evenly over this many seconds (each round).
    #[arg(long)]
    pub ramp_up: Option<f64>,
    /// Interleaved rounds (A B A B ...); default 1 for one target, 3 for several.
    #[arg(long)]
    pub rounds: Option<u32>,
    /// No progress line.
    #[arg(long)]
    pub quiet: bool,
    /// Seed of prompts, the mix and the arrival schedule.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// What the requests look like (boxed: these are the bulky, rarely set flags).
    #[command(flatten)]
    pub request: Box<RequestArgs>,
    /// What is measured beyond the table and where it is written.
    #[command(flatten)]
    pub output: Box<OutputArgs>,
}

/// Flags that shape every request.
#[derive(Debug, Clone, clap::Args)]
pub struct RequestArgs {
    /// Seconds a request may take in all before it counts as timed out.
    #[arg(long, default_value_t = 600.0)]
    pub timeout: f64,
    /// The OpenAI endpoint requests go to.
    #[arg(long, value_enum, default_value_t = EndpointArg::Chat)]
    pub endpoint: EndpointArg,
    /// Extra request header NAME:VALUE; repeatable.
    #[arg(long)]
    pub header: Vec<String>,
    /// The `model` field of every request.
    #[arg(long, default_value = "sim")]
    pub model: String,
}

impl Default for RequestArgs {
    fn default() -> Self {
        Self {
            timeout: 600.0,
            endpoint: EndpointArg::Chat,
            header: Vec::new(),
            model: "sim".to_string(),
        }
    }
}

/// Goodput objectives and the files written besides the table.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct OutputArgs {
    /// SLOs for goodput: ttft:MS tpot:MS e2el:MS.
    #[arg(long, num_args = 1..)]
    pub goodput: Vec<String>,
    /// Write everything (plan, summaries, every request) as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write SVG charts (latency CDFs, TTFT per target) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// What a finished run produced, for callers that embed the bench (tests, scripts).
#[derive(Debug)]
pub struct BenchOutcome {
    pub plan: Plan,
    pub targets: Vec<TargetReport>,
    /// The Markdown table printed to stdout.
    pub table: String,
}

/// Runs `laneway bench` and prints its table.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let outcome = measure(&args).await?;
    println!("{}", outcome.table);
    Ok(())
}

/// Runs the plan the arguments describe and writes `--json` and `--plot` outputs.
pub async fn measure(args: &BenchArgs) -> anyhow::Result<BenchOutcome> {
    let plan = Plan::from_args(args)?;
    let endpoint = match args.request.endpoint {
        EndpointArg::Chat => Endpoint::Chat,
        EndpointArg::Completions => Endpoint::Completions,
    };
    let progress = Arc::new(Progress::default());
    let mut contexts = Vec::with_capacity(plan.targets.len());
    for target in &plan.targets {
        let template = RequestTemplate::new(
            &target.url,
            endpoint,
            &args.request.model,
            &plan.headers,
            plan.timeout,
        )?;
        let kind = match &plan.workload {
            Workload::Tiny => RequestKind::Tiny { body: template.tiny_body() },
            Workload::Streaming { mix, .. } => RequestKind::Streaming { mix: mix.clone() },
            Workload::SharedPrefix(spec) => RequestKind::SharedPrefix { spec: *spec },
            Workload::Conversations(spec) => RequestKind::Conversations { spec: *spec },
        };
        contexts.push(Arc::new(TargetContext {
            // One client (and pool) per target: idle connections of one do not pile up with
            // the next one's.
            client: http_client(),
            template,
            kind,
            seed: args.seed,
            progress: progress.clone(),
            in_flight_cap: runner::OPEN_LOOP_IN_FLIGHT_CAP,
        }));
    }
    let planned = plan.planned_requests().map(|n| n * plan.targets.len() as u64);
    let line = ProgressLine::start(progress, planned, args.quiet);
    let mut records = vec![Vec::new(); plan.targets.len()];
    let mut elapsed = vec![Duration::ZERO; plan.targets.len()];
    for (number, (first_index, budget)) in plan.rounds.iter().enumerate() {
        for (slot, context) in contexts.iter().enumerate() {
            let round = Round {
                number: number as u32,
                first_index: *first_index,
                budget: *budget,
                arrivals: plan.arrivals,
                ramp_up: plan.ramp_up,
            };
            let result = run_round(context.clone(), round).await;
            records[slot].extend(result.records);
            elapsed[slot] += result.elapsed;
        }
    }
    drop(line);
    let targets: Vec<TargetReport> = plan
        .targets
        .iter()
        .zip(records)
        .zip(elapsed)
        .map(|((target, records), elapsed)| TargetReport {
            name: target.name.clone(),
            url: target.url.clone(),
            summary: stats::summarise(
                &records,
                elapsed,
                &plan.slo,
                matches!(plan.arrivals, arrivals::Arrivals::Open { .. }),
            ),
            records,
        })
        .collect();
    let overhead = matches!(plan.workload, Workload::Tiny);
    let table =
        if overhead { report::overhead_table(&targets) } else { report::streaming_table(&targets) };
    if let Some(path) = &args.output.json {
        let document = serde_json::json!({
            "workload": args.workload,
            "parsed_workload": plan.workload,
            "arrivals": plan.arrivals,
            "rounds": plan.rounds.len(),
            "slo": plan.slo,
            "seed": args.seed,
            "timeout_s": plan.timeout.as_secs_f64(),
            "targets": targets,
        });
        if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, serde_json::to_vec(&document)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &args.output.plot {
        plot::write_charts(dir, &targets, overhead, &plan.slo)
            .with_context(|| format!("writing charts into {}", dir.display()))?;
    }
    Ok(BenchOutcome { plan, targets, table })
}
