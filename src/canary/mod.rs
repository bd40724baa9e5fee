//! Canary comparison on live traffic: assigning requests to variants, recording what each
//! variant's requests felt, and reporting the side-by-side comparison with verdicts.
//!
//! The request path only ever does a non-blocking `try_send` of a finished request's
//! [`Outcome`]; one task owns every series and builds reports on demand, so no lock is taken
//! on the request path.

pub mod assign;
pub mod betting;
pub mod closure;
pub mod compare;
pub mod guard;
pub mod rate;
pub mod report;
pub mod reservoir;
pub mod sequential;
pub mod series;
pub mod tail;
pub mod tally;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fnv::FnvHashMap;
use tokio::sync::{mpsc, oneshot, watch};

pub use assign::{AssignError, VariantTable, WeightedVariant};
pub use compare::{CompareSettings, Verdict};
pub use guard::{Decision, GuardSettings, Metric};
pub use report::{CanaryAction, Report, render_text};
pub use tally::{Outcome, Slo};

use sequential::{Comparison, Side};
use series::Series;

/// Actions the report keeps (the latest).
const ACTIONS_KEPT: usize = 50;

/// Each candidate's current verdict, keyed by (entry, variant): what automation acts on.
pub type Decisions = HashMap<(String, String), CandidateDecision>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CandidateDecision {
    pub decision: Decision,
    /// Pairs of requests behind it.
    pub pairs: u64,
    /// How many times the comparison was restarted (after a promotion step).
    pub generation: u64,
}

/// Outcomes queued for the recorder before new ones are dropped (and counted).
const QUEUE_CAPACITY: usize = 65_536;

/// The entries and their variants in configured order; each entry's first is its baseline.
pub type Layout = Vec<(String, Vec<String>)>;

#[derive(Debug, Clone, PartialEq)]
pub struct CanarySettings {
    pub window: Duration,
    pub slo: Slo,
    pub compare: CompareSettings,
    pub guard: GuardSettings,
}

impl Default for CanarySettings {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(300),
            slo: Slo::default(),
            compare: CompareSettings::default(),
            guard: GuardSettings::default(),
        }
    }
}

enum Command {
    Record(Outcome),
    Report(oneshot::Sender<Report>),
    SetLayout(Layout),
    SetSlo(Slo),
    Action(CanaryAction),
    Restart(String, String),
}

/// A handle to the canary recorder task; cheap to clone.
#[derive(Clone)]
pub struct CanaryRecorder {
    commands: mpsc::Sender<Command>,
    dropped: Arc<AtomicU64>,
    decisions: watch::Receiver<Decisions>,
}

impl CanaryRecorder {
    /// Starts the recorder task on the current tokio runtime.
    pub fn spawn(settings: CanarySettings, layout: Layout) -> Self {
        let (commands, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let dropped = Arc::new(AtomicU64::new(0));
        let (publish, decisions) = watch::channel(Decisions::new());
        let state = RecorderState {
            settings,
            layout,
            series: FnvHashMap::default(),
            dropped: dropped.clone(),
            comparisons: HashMap::new(),
            actions: VecDeque::new(),
            publish,
        };
        tokio::spawn(state.run(receiver));
        Self { commands, dropped, decisions }
    }

    /// Every candidate's verdict, updated when one changes.
    pub fn decisions(&self) -> watch::Receiver<Decisions> {
        self.decisions.clone()
    }

    /// Lists an action taken on a verdict in the report.
    pub async fn record_action(&self, action: CanaryAction) {
        let _ = self.commands.send(Command::Action(action)).await;
    }

    /// Starts a candidate's comparison afresh (after its weight was raised, the next step
    /// must be earned by new evidence).
    pub async fn restart(&self, entry: &str, variant: &str) {
        let _ = self.commands.send(Command::Restart(entry.into(), variant.into())).await;
    }

    /// Records a finished request without waiting; if the recorder is behind, the outcome is
    /// dropped and counted in the report.
    pub fn record(&self, outcome: Outcome) {
        if self.commands.try_send(Command::Record(outcome)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The comparison report as of now, after every outcome recorded before this call.
    pub async fn report(&self) -> Option<Report> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(Command::Report(reply)).await.ok()?;
        answer.await.ok()
    }

    /// Replaces the entries and variants the report lists (after a reload). Ordered after
    /// every outcome recorded before it; if the recorder is that far behind, the change is
    /// dropped with a warning.
    pub fn set_layout(&self, layout: Layout) {
        if self.commands.try_send(Command::SetLayout(layout)).is_err() {
            tracing::warn!("canary recorder is behind: report layout not updated");
        }
    }

    pub async fn set_slo(&self, slo: Slo) {
        let _ = self.commands.send(Command::SetSlo(slo)).await;
    }
}

struct RecorderState {
    settings: CanarySettings,
    layout: Layout,
    /// By (entry, variant): names from the config, hashed by FNV (a request's outcome is
    /// looked up here once, and SipHash over both names cost more than the rest of it).
    series: FnvHashMap<(Arc<str>, Arc<str>), Series>,
    dropped: Arc<AtomicU64>,
    /// Each candidate's sequential comparison with its entry's baseline, and how often it
    /// was restarted.
    comparisons: HashMap<(String, String), (Comparison, u64)>,
    actions: VecDeque<CanaryAction>,
    publish: watch::Sender<Decisions>,
}

impl RecorderState {
    async fn run(mut self, mut receiver: mpsc::Receiver<Command>) {
        while let Some(command) = receiver.recv().await {
            match command {
                Command::Record(outcome) => self.record(outcome),
                Command::Report(reply) => {
                    let _ = reply.send(self.report(Instant::now()));
                }
                Command::SetLayout(layout) => self.layout = layout,
                Command::SetSlo(slo) => self.settings.slo = slo,
                Command::Action(action) => {
                    if self.actions.len() == ACTIONS_KEPT {
                        self.actions.pop_front();
                    }
                    self.actions.push_back(action);
                }
                Command::Restart(entry, variant) => {
                    if let Some((comparison, generation)) =
                        self.comparisons.get_mut(&(entry.clone(), variant.clone()))
                    {
                        *comparison = Comparison::new(&self.settings.guard);
                        *generation += 1;
                        let key = (entry, variant);
                        self.publish_decision(&key);
                    }
                }
            }
        }
    }

    fn record(&mut self, outcome: Outcome) {
        let now = outcome.finished_at;
        let seed = self.settings.compare.seed.wrapping_add(self.series.len() as u64 * 1000);
        let window = self.settings.window;
        self.compare(&outcome);
        // The names are shared: no copy per recorded request.
        let key = (outcome.entry.clone(), outcome.variant.clone());
        let series = self.series.entry(key).or_insert_with(|| Series::new(window, seed, now));
        series.record(&outcome, &self.settings.slo, now);
    }

    /// Feeds the sequential comparisons: a baseline's request to each of its entry's
    /// candidates, a candidate's to its own.
    fn compare(&mut self, outcome: &Outcome) {
        let (entry, variant) = (&*outcome.entry, &*outcome.variant);
        let Some((_, variants)) = self.layout.iter().find(|(name, _)| name == entry) else {
            return;
        };
        let Some(baseline) = variants.first() else { return };
        let (side, candidates): (Side, Vec<String>) = if baseline == variant {
            (Side::Baseline, variants[1..].to_vec())
        } else if variants.iter().any(|known| known == variant) {
            (Side::Candidate, vec![variant.to_string()])
        } else {
            return;
        };
        for candidate in candidates {
            let key = (entry.to_string(), candidate);
            let guard = &self.settings.guard;
            let (comparison, _) =
                self.comparisons.entry(key.clone()).or_insert_with(|| (Comparison::new(guard), 0));
            if comparison.observe(side, outcome, &self.settings.slo) {
                self.publish_decision(&key);
            }
        }
    }

    fn publish_decision(&mut self, key: &(String, String)) {
        let Some((comparison, generation)) = self.comparisons.get(key) else { return };
        let current = CandidateDecision {
            decision: comparison.decision(),
            pairs: comparison.pairs(),
            generation: *generation,
        };
        self.publish.send_if_modified(|decisions| {
            let previous = decisions.insert(key.clone(), current);
            previous.is_none_or(|p| {
                (p.decision, p.generation) != (current.decision, current.generation)
            })
        });
    }

    fn report(&self, now: Instant) -> Report {
        let entries = self
            .layout
            .iter()
            .map(|(entry, variants)| {
                let with_series: Vec<report::VariantData> = variants
                    .iter()
                    .map(|variant| {
                        let key = (entry.clone(), variant.clone());
                        let names = (Arc::from(entry.as_str()), Arc::from(variant.as_str()));
                        (
                            variant.as_str(),
                            self.series.get(&names),
                            self.comparisons.get(&key).map(|(c, _)| c),
                        )
                    })
                    .collect();
                report::entry_report(entry, &with_series, &self.settings.compare, now)
            })
            .collect();
        Report {
            window_seconds: self.settings.window.as_secs_f64(),
            slo: self.settings.slo,
            entries,
            dropped_outcomes: self.dropped.load(Ordering::Relaxed),
            actions: self.actions.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use rand_distr::{Distribution, LogNormal};

    fn outcome(variant: &str, ttft_ms: f64, ok: bool) -> Outcome {
        Outcome {
            entry: "short".into(),
            variant: variant.into(),
            ok,
            ttft: Some(Duration::from_secs_f64(ttft_ms / 1000.0)),
            tpot: Some(Duration::from_millis(15)),
            e2e: Duration::from_secs(5),
            prompt_tokens: 1000,
            completion_tokens: 300,
            finished_at: std::time::Instant::now(),
        }
    }

    fn layout() -> Layout {
        vec![("short".into(), vec!["force_close".into(), "keep_alive".into(), "twin".into()])]
    }

    #[tokio::test]
    async fn the_report_names_the_slower_variant_and_sees_twins_as_equal() {
        let recorder = CanaryRecorder::spawn(CanarySettings::default(), layout());
        let mut rng = StdRng::seed_from_u64(9);
        let fast = LogNormal::new(250f64.ln(), 0.3).unwrap();
        let slow = LogNormal::new(2500f64.ln(), 0.3).unwrap();
        for _ in 0..300 {
            recorder.record(outcome("force_close", fast.sample(&mut rng), true));
            recorder.record(outcome("keep_alive", slow.sample(&mut rng), true));
            recorder.record(outcome("twin", fast.sample(&mut rng), true));
        }
        recorder.record(outcome("keep_alive", 1.0, false));
        let report = recorder.report().await.unwrap();
        let entry = &report.entries[0];
        assert_eq!(entry.baseline, "force_close");
        let keep_alive = &entry.variants[1];
        assert_eq!((keep_alive.window.requests, keep_alive.window.failures), (301, 1));
        let verdicts = keep_alive.window_vs_baseline.as_ref().unwrap();
        assert!(matches!(verdicts.ttft, Verdict::Slower { .. }), "{:?}", verdicts.ttft);
        assert!(matches!(verdicts.tpot, Verdict::NoDifference { .. }), "{:?}", verdicts.tpot);
        let twin = entry.variants[2].window_vs_baseline.as_ref().unwrap();
        assert!(matches!(twin.ttft, Verdict::NoDifference { .. }), "{:?}", twin.ttft);
        assert!(entry.variants[0].window_vs_baseline.is_none());
        let text = render_text(&report);
        assert!(text.contains("keep_alive vs force_close: TTFT slower by"), "{text}");
        assert!(text.contains("twin vs force_close: TTFT no difference"), "{text}");
    }

    #[tokio::test]
    async fn a_variant_without_traffic_reports_not_enough_data() {
        let recorder = CanaryRecorder::spawn(CanarySettings::default(), layout());
        for _ in 0..50 {
            recorder.record(outcome("force_close", 200.0, true));
        }
        let report = recorder.report().await.unwrap();
        let verdicts = report.entries[0].variants[1].window_vs_baseline.clone().unwrap();
        assert!(matches!(verdicts.ttft, Verdict::NotEnoughData { candidate_samples: 0, .. }));
        assert_eq!(report.dropped_outcomes, 0);
    }
}
