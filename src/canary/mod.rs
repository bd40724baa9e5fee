//! Canary comparison on live traffic: assigning requests to variants, recording what each
//! variant's requests felt, and reporting the side-by-side comparison with verdicts.
//!
//! The request path only ever does a non-blocking `try_send` of a finished request's
//! [`Outcome`]; one task owns every series and builds reports on demand, so no lock is taken
//! on the request path.

pub mod assign;
pub mod betting;
pub mod compare;
pub mod guard;
pub mod rate;
pub mod report;
pub mod reservoir;
pub mod sequential;
pub mod series;
pub mod tail;
pub mod tally;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

pub use assign::{AssignError, VariantTable, WeightedVariant};
pub use compare::{CompareSettings, Verdict};
pub use report::{Report, render_text};
pub use tally::{Outcome, Slo};

use series::Series;

/// Outcomes queued for the recorder before new ones are dropped (and counted).
const QUEUE_CAPACITY: usize = 65_536;

/// The entries and their variants in configured order; each entry's first is its baseline.
pub type Layout = Vec<(String, Vec<String>)>;

#[derive(Debug, Clone, PartialEq)]
pub struct CanarySettings {
    pub window: Duration,
    pub slo: Slo,
    pub compare: CompareSettings,
}

impl Default for CanarySettings {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(300),
            slo: Slo::default(),
            compare: CompareSettings::default(),
        }
    }
}

enum Command {
    Record(Outcome),
    Report(oneshot::Sender<Report>),
    SetLayout(Layout),
    SetSlo(Slo),
}

/// A handle to the canary recorder task; cheap to clone.
#[derive(Clone)]
pub struct CanaryRecorder {
    commands: mpsc::Sender<Command>,
    dropped: Arc<AtomicU64>,
}

impl CanaryRecorder {
    /// Starts the recorder task on the current tokio runtime.
    pub fn spawn(settings: CanarySettings, layout: Layout) -> Self {
        let (commands, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let dropped = Arc::new(AtomicU64::new(0));
        let state =
            RecorderState { settings, layout, series: HashMap::new(), dropped: dropped.clone() };
        tokio::spawn(state.run(receiver));
        Self { commands, dropped }
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
    series: HashMap<(String, String), Series>,
    dropped: Arc<AtomicU64>,
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
            }
        }
    }

    fn record(&mut self, mut outcome: Outcome) {
        let now = Instant::now();
        let seed = self.settings.compare.seed.wrapping_add(self.series.len() as u64 * 1000);
        let window = self.settings.window;
        // The series key takes the outcome's names: no copy per recorded request.
        let key = (std::mem::take(&mut outcome.entry), std::mem::take(&mut outcome.variant));
        let series = self.series.entry(key).or_insert_with(|| Series::new(window, seed, now));
        series.record(&outcome, &self.settings.slo, now);
    }

    fn report(&self, now: Instant) -> Report {
        let entries = self
            .layout
            .iter()
            .map(|(entry, variants)| {
                let with_series: Vec<(&str, Option<&Series>)> = variants
                    .iter()
                    .map(|variant| {
                        (variant.as_str(), self.series.get(&(entry.clone(), variant.clone())))
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
