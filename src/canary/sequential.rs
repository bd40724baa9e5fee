//! One candidate against its baseline, sample by sample since the comparison began: each
//! variant's finished requests are paired in arrival order (a side that runs ahead lets
//! its oldest waiting samples go, which depends on timing, never on values),
//! and every pair feeds the per-metric tests. The verdicts are valid whenever they are
//! read: the evidence is an e-process, not a p-value recomputed on a moving window.

use std::collections::VecDeque;

use hdrhistogram::Histogram;

use super::closure::judge_worse;
use super::guard::{Decision, GuardSettings, Metric, MetricVerdict, overall};
use super::rate::RateTest;
use super::tail::TailTest;
use super::tally::{Outcome, Slo};

/// Baseline samples a threshold needs before its pairs are tested.
const MIN_HISTORY: u64 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Baseline,
    Candidate,
}

/// Samples a side may hold while waiting for partners; beyond it the oldest is let go.
const WAITING: usize = 16;

/// Pairs samples of the two sides in arrival order.
#[derive(Debug, Clone)]
struct Pairing<T> {
    baseline: VecDeque<T>,
    candidate: VecDeque<T>,
}

impl<T> Default for Pairing<T> {
    fn default() -> Self {
        Self { baseline: VecDeque::new(), candidate: VecDeque::new() }
    }
}

impl<T> Pairing<T> {
    /// A completed pair (baseline, candidate), or the baseline sample let go unpaired.
    fn offer(&mut self, side: Side, value: T) -> Paired<T> {
        let (own, other) = match side {
            Side::Baseline => (&mut self.baseline, &mut self.candidate),
            Side::Candidate => (&mut self.candidate, &mut self.baseline),
        };
        if let Some(partner) = other.pop_front() {
            return match side {
                Side::Baseline => Paired::Pair(value, partner),
                Side::Candidate => Paired::Pair(partner, value),
            };
        }
        own.push_back(value);
        let dropped = if own.len() > WAITING { own.pop_front() } else { None };
        Paired::Unpaired(dropped.filter(|_| side == Side::Baseline))
    }
}

enum Paired<T> {
    Pair(T, T),
    /// The baseline sample that will never be paired, if any.
    Unpaired(Option<T>),
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid bounds")
}

fn micros(seconds: f64) -> u64 {
    (seconds * 1e6).clamp(1.0, 3.6e9) as u64
}

/// One latency (TTFT, TPOT or E2E) and the quantiles compared on it.
#[derive(Debug, Clone)]
struct LatencyStream {
    pairing: Pairing<f64>,
    /// Baseline samples no longer waiting for a partner: where thresholds come from.
    baseline: Histogram<u64>,
    candidate: Histogram<u64>,
    tests: Vec<TailTest>,
}

impl LatencyStream {
    fn new(metrics: &[Metric], settings: &GuardSettings) -> Self {
        let tests = metrics.iter().map(|&m| TailTest::new(m, settings.margin(m))).collect();
        Self { pairing: Pairing::default(), baseline: histogram(), candidate: histogram(), tests }
    }

    fn offer(&mut self, side: Side, seconds: f64) {
        if side == Side::Candidate {
            self.candidate.saturating_record(micros(seconds));
        }
        match self.pairing.offer(side, seconds) {
            Paired::Pair(baseline, candidate) => {
                // Thresholds from earlier samples only: the pair cannot move its own bar.
                if self.baseline.len() >= MIN_HISTORY {
                    for test in &mut self.tests {
                        let at = self.baseline.value_at_quantile(test.quantile()) as f64 / 1e6;
                        test.add(baseline > at, candidate / at);
                    }
                }
                self.baseline.saturating_record(micros(baseline));
            }
            Paired::Unpaired(Some(baseline)) => self.baseline.saturating_record(micros(baseline)),
            Paired::Unpaired(None) => {}
        }
    }

    fn estimate(&self, quantile: f64) -> Option<f64> {
        if self.baseline.is_empty() || self.candidate.is_empty() {
            return None;
        }
        let baseline = self.baseline.value_at_quantile(quantile) as f64;
        Some(self.candidate.value_at_quantile(quantile) as f64 / baseline)
    }
}

/// Whether a request failed, and whether it met every SLO.
type Fate = (bool, bool);

/// A candidate's comparison with its entry's baseline since it began.
#[derive(Debug, Clone)]
pub struct Comparison {
    settings: GuardSettings,
    ttft: LatencyStream,
    tpot: LatencyStream,
    e2e: LatencyStream,
    fates: Pairing<Fate>,
    errors: RateTest,
    goodput: RateTest,
    /// Guarded metrics judged worse, together (see [`super::closure`]), and the pair at
    /// which the guarded metrics together first were: Ville's inequality bounds the chance
    /// that the evidence ever reaches the bar, so a verdict of worse stays once reached.
    worse_metrics: Vec<Metric>,
    worse_since: Option<u64>,
}

impl Comparison {
    pub fn new(settings: &GuardSettings) -> Self {
        use Metric::*;
        Self {
            settings: settings.clone(),
            ttft: LatencyStream::new(&[TtftP50, TtftP95, TtftP99], settings),
            tpot: LatencyStream::new(&[TpotP50, TpotP95, TpotP99], settings),
            e2e: LatencyStream::new(&[E2eP95], settings),
            fates: Pairing::default(),
            errors: RateTest::new(ErrorRate, settings.margin(ErrorRate)),
            goodput: RateTest::new(GoodputShare, settings.margin(GoodputShare)),
            worse_metrics: Vec::new(),
            worse_since: None,
        }
    }

    /// Adds one finished request of either side; returns whether it completed a pair of
    /// requests (so the verdict may have changed).
    pub fn observe(&mut self, side: Side, outcome: &Outcome, slo: &Slo) -> bool {
        if outcome.ok {
            if let Some(ttft) = outcome.ttft {
                self.ttft.offer(side, ttft.as_secs_f64());
            }
            if let Some(tpot) = outcome.tpot {
                self.tpot.offer(side, tpot.as_secs_f64());
            }
            self.e2e.offer(side, outcome.e2e.as_secs_f64());
        }
        let fate = (!outcome.ok, slo.is_met_by(outcome));
        let paired = match self.fates.offer(side, fate) {
            Paired::Pair(baseline, candidate) => {
                self.errors.add(baseline.0, candidate.0);
                self.goodput.add(!baseline.1, !candidate.1);
                true
            }
            Paired::Unpaired(_) => false,
        };
        // Judged when a pair of outcomes completes: looks skipped leave the test valid.
        if paired {
            self.judge_worse();
        }
        paired
    }

    /// A metric's evidence of "worse" (an e-value) and the pairs it rests on.
    fn worse_evidence(&self, metric: Metric) -> (f64, u64) {
        self.worse_evidence_after(metric, 0)
    }

    /// The same after `more` pairs like those seen so far (`0`: as it is).
    fn worse_evidence_after(&self, metric: Metric, more: u64) -> (f64, u64) {
        let rates = [&self.errors, &self.goodput].into_iter().find(|t| t.metric == metric);
        match rates {
            Some(test) => (test.projected_worse_evidence(more), test.pairs()),
            None => self
                .tails()
                .find(|(test, _)| test.metric == metric)
                .map_or((1.0, 0), |(test, _)| (test.projected_worse_evidence(more), test.pairs())),
        }
    }

    /// About how many more pairs the guarded metrics together need to read worse if the
    /// pairs keep scoring as they have (an estimate, not a promise); `None` once worse, or
    /// while their evidence is not growing.
    pub fn more_pairs_needed_for_worse(&self) -> Option<u64> {
        const LONGEST: u64 = 1 << 20;
        if self.worse_since.is_some() {
            return None;
        }
        let settings = &self.settings;
        let reaches = |more: u64| {
            let evidence = settings.guarded.iter().map(|&m| self.worse_evidence_after(m, more).0);
            evidence.sum::<f64>() / settings.guarded.len().max(1) as f64 >= 1.0 / settings.alpha
        };
        // Doubling until it reaches, then halving the gap back to the first that does.
        let mut high = 1;
        while !reaches(high) {
            if high >= LONGEST {
                return None;
            }
            high *= 2;
        }
        let mut low = high / 2;
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if reaches(middle) {
                high = middle;
            } else {
                low = middle;
            }
        }
        Some(high.max(settings.min_pairs.saturating_sub(self.pairs())))
    }

    /// Judges the guarded metrics together and keeps what is found worse. The judgement
    /// waits until every guarded metric that has pairs at all has the minimum (a metric
    /// without any, say TTFT on traffic that does not stream, holds no evidence and does
    /// not hold the others back); skipping looks never invalidates an e-process.
    fn judge_worse(&mut self) {
        let settings = &self.settings;
        let guarded: Vec<(Metric, (f64, u64))> =
            settings.guarded.iter().map(|&m| (m, self.worse_evidence(m))).collect();
        let short = |pairs: u64| pairs > 0 && pairs < settings.min_pairs;
        if self.pairs() < settings.min_pairs || guarded.iter().any(|(_, (_, p))| short(*p)) {
            return;
        }
        let evidence: Vec<f64> = guarded.iter().map(|(_, (e, _))| *e).collect();
        let judged = judge_worse(&evidence, settings.alpha);
        if judged.any && self.worse_since.is_none() {
            self.worse_since = Some(self.pairs());
        }
        for ((metric, (_, pairs)), worse) in guarded.into_iter().zip(judged.each) {
            if worse && pairs > 0 && !self.worse_metrics.contains(&metric) {
                self.worse_metrics.push(metric);
            }
        }
    }

    /// Whether a metric is called worse: a guarded one as judged together; an unguarded
    /// one on its own evidence, at the level a guarded metric alone would need.
    fn is_worse(&self, metric: Metric) -> bool {
        let settings = &self.settings;
        if settings.is_guarded(metric) {
            return self.worse_metrics.contains(&metric);
        }
        let (evidence, pairs) = self.worse_evidence(metric);
        pairs >= settings.min_pairs && evidence >= settings.worse_evidence_alone()
    }

    fn tails(&self) -> impl Iterator<Item = (&TailTest, &LatencyStream)> {
        [&self.ttft, &self.tpot, &self.e2e]
            .into_iter()
            .flat_map(|stream| stream.tests.iter().map(move |test| (test, stream)))
    }

    /// Pairs of requests compared so far.
    pub fn pairs(&self) -> u64 {
        self.errors.pairs()
    }

    /// The variant's verdict alone (cheap: no intervals): worse once the guarded metrics
    /// together were, even if no single one is named.
    pub fn decision(&self) -> Decision {
        if self.worse_since.is_some() {
            return Decision::Worse;
        }
        let settings = &self.settings;
        let decide = |metric| (metric, self.is_worse(metric));
        let tails = self.tails().map(|(test, _)| {
            let (metric, worse) = decide(test.metric);
            (metric, test.decision(settings, worse))
        });
        let rates = [&self.errors, &self.goodput].map(|test| {
            let (metric, worse) = decide(test.metric);
            (metric, test.decision(settings, worse))
        });
        overall(tails.chain(rates).filter(|(m, _)| settings.is_guarded(*m)).map(|(_, d)| d))
    }

    /// Every metric's verdict, in the order of [`Metric::ALL`].
    pub fn verdicts(&self) -> Vec<MetricVerdict> {
        let settings = &self.settings;
        let tails = self.tails().map(|(test, stream)| {
            test.verdict(settings, stream.estimate(test.quantile()), self.is_worse(test.metric))
        });
        let rates = [&self.errors, &self.goodput]
            .map(|test| test.verdict(settings, self.is_worse(test.metric)));
        tails.chain(rates).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, LogNormal};
    use std::time::Duration;

    /// Latencies of one variant: TTFT lognormal around its median with spread `sigma`.
    /// A share of its requests may wait behind another stream: their TTFT is multiplied.
    struct Variant {
        ttft: LogNormal<f64>,
        tpot: LogNormal<f64>,
        error_rate: f64,
        waiting: (f64, f64),
    }

    impl Variant {
        fn new(ttft_median: f64, ttft_sigma: f64) -> Self {
            Self {
                ttft: LogNormal::new(ttft_median.ln(), ttft_sigma).unwrap(),
                tpot: LogNormal::new(0.015f64.ln(), 0.2).unwrap(),
                error_rate: 0.01,
                waiting: (0.0, 1.0),
            }
        }

        fn outcome(&self, rng: &mut StdRng) -> Outcome {
            let (mut ttft, tpot) = (self.ttft.sample(rng), self.tpot.sample(rng));
            let (share, factor) = self.waiting;
            if rng.random_bool(share) {
                ttft *= factor;
            }
            Outcome {
                entry: "short".into(),
                variant: "".into(),
                ok: !rng.random_bool(self.error_rate),
                ttft: Some(Duration::from_secs_f64(ttft)),
                tpot: Some(Duration::from_secs_f64(tpot)),
                e2e: Duration::from_secs_f64(ttft + 300.0 * tpot),
                prompt_tokens: 1000,
                completion_tokens: 300,
                finished_at: std::time::Instant::now(),
            }
        }
    }

    /// Feeds `per_side` requests of each variant in random arrival order, reading the
    /// variant's decision after every `look_every` requests; returns every decision read.
    fn run(
        baseline: &Variant,
        candidate: &Variant,
        per_side: usize,
        look_every: usize,
        seed: u64,
    ) -> (Comparison, Vec<Decision>) {
        let (comparison, looks, _) =
            run_counting_alone(baseline, candidate, per_side, look_every, seed);
        (comparison, looks)
    }

    /// As [`run`], and whether at any look a guarded metric alone had the evidence that
    /// splitting alpha evenly over the guarded metrics asks for.
    fn run_counting_alone(
        baseline: &Variant,
        candidate: &Variant,
        per_side: usize,
        look_every: usize,
        seed: u64,
    ) -> (Comparison, Vec<Decision>, bool) {
        let settings = GuardSettings::default();
        let slo = Slo { ttft_ms: Some(1000.0), ..Slo::default() };
        let mut rng = StdRng::seed_from_u64(seed);
        let mut comparison = Comparison::new(&settings);
        let (mut left, mut looks, mut alone) = ([per_side, per_side], Vec::new(), false);
        while left != [0, 0] {
            let side = if left[1] == 0 || (left[0] > 0 && rng.random_bool(0.5)) { 0 } else { 1 };
            left[side] -= 1;
            let (variant, side) =
                if side == 0 { (baseline, Side::Baseline) } else { (candidate, Side::Candidate) };
            comparison.observe(side, &variant.outcome(&mut rng), &slo);
            if (2 * per_side - left[0] - left[1]).is_multiple_of(look_every) {
                looks.push(comparison.decision());
                alone |= settings.guarded.iter().any(|&metric| {
                    let (evidence, pairs) = comparison.worse_evidence(metric);
                    pairs >= settings.min_pairs && evidence >= settings.worse_evidence_alone()
                });
            }
        }
        (comparison, looks, alone)
    }

    #[test]
    fn identical_variants_raise_no_false_alarm_however_often_they_are_read() {
        // 200 A/A canaries of 300 requests a side, read after every 10 requests: the share
        // that ever reads "worse" stays within the 5% level.
        let same = Variant::new(0.25, 0.3);
        let alarms = (0..200)
            .filter(|&seed| run(&same, &same, 300, 10, seed).1.contains(&Decision::Worse))
            .count();
        assert!(alarms <= 10, "{alarms} of 200 A/A runs raised a false alarm");
    }

    #[test]
    fn identical_variants_end_up_reading_no_difference() {
        // Without errors: proving two 1% error rates within one point takes far longer.
        let same = Variant { error_rate: 0.0, ..Variant::new(0.25, 0.3) };
        let (comparison, looks) = run(&same, &same, 5000, 500, 7);
        assert_eq!(looks.last(), Some(&Decision::NoDifference), "{looks:?}");
        for verdict in comparison.verdicts().iter().filter(|v| v.guarded) {
            assert!(verdict.low.unwrap() < 1.0 + verdict.margin, "{verdict:?}");
        }
    }

    #[test]
    fn a_doubled_p95_with_the_same_median_is_worse_within_about_120_requests_a_side() {
        // Same median; the candidate's spread makes its TTFT p95 twice the baseline's.
        let baseline = Variant::new(0.25, 0.3);
        let candidate = Variant::new(0.25, (1.645 * 0.3 + 2f64.ln()) / 1.645);
        // Over 40 seeds, more than half the runs decide by 120 requests a side (24 of 40 when
        // written), nearly all by 200 (38): the paired test gains about 0.05 nats a pair here.
        let decided_by = |per_side| {
            (0..40)
                .filter(|&seed| {
                    run(&baseline, &candidate, per_side, 10, 100 + seed)
                        .1
                        .contains(&Decision::Worse)
                })
                .count()
        };
        let (by_120, by_200) = (decided_by(120), decided_by(200));
        eprintln!("worse by 120 a side: {by_120}/40, by 200: {by_200}/40");
        assert!(by_120 >= 20 && by_200 >= 34, "{by_120}/40 by 120, {by_200}/40 by 200");
        let (comparison, _) = run(&baseline, &candidate, 300, 10, 3);
        assert_eq!(comparison.decision(), Decision::Worse);
        let verdicts = comparison.verdicts();
        let p95 = verdicts.iter().find(|v| v.metric == Metric::TtftP95).unwrap();
        assert_eq!(p95.decision, Decision::Worse, "{p95:?}");
        assert!(p95.low.unwrap() > 1.1 && p95.estimate.unwrap() > 1.5, "{p95:?}");
        let p50 = verdicts.iter().find(|v| v.metric == Metric::TtftP50).unwrap();
        assert_ne!(p50.decision, Decision::Worse, "{p50:?}");
    }

    #[test]
    fn the_traffic_still_needed_is_estimated_for_the_metrics_together() {
        let baseline = Variant::new(0.25, 0.3);
        let candidate = Variant { waiting: (0.2, 4.0), ..Variant::new(0.25, 0.3) };
        let (early, _) = run(&baseline, &candidate, 60, 10, 501);
        assert_eq!(early.decision(), Decision::Undecided);
        let needed = early.more_pairs_needed_for_worse().expect("the evidence is growing");
        assert!(needed > 0 && needed < 1000, "{needed}");
        let (late, _) = run(&baseline, &candidate, 400, 10, 501);
        assert_eq!(late.decision(), Decision::Worse);
        assert_eq!(late.more_pairs_needed_for_worse(), None, "decided");
        let same = Variant { error_rate: 0.0, ..baseline };
        let (twins, _) = run(&same, &same, 200, 10, 502);
        assert_eq!(twins.more_pairs_needed_for_worse(), None, "no evidence of worse grows");
    }

    #[test]
    fn a_tail_of_waiting_requests_is_decided_sooner_by_the_metrics_together() {
        // One candidate request in five waits behind another stream (TTFT x4): the median
        // barely moves, TTFT p95 about x3, and E2E p95 and the TTFT objective somewhat.
        // Judged together, their evidence decides runs that no metric alone would.
        let baseline = Variant::new(0.25, 0.3);
        let candidate = Variant { waiting: (0.2, 4.0), ..Variant::new(0.25, 0.3) };
        let (mut together, mut alone) = (0, 0);
        for seed in 0..40 {
            let (_, looks, any_alone) =
                run_counting_alone(&baseline, &candidate, 120, 10, 500 + seed);
            together += u32::from(looks.contains(&Decision::Worse));
            alone += u32::from(any_alone);
        }
        eprintln!("worse by 120 a side: {together}/40 together, {alone}/40 by one metric alone");
        assert!(together > alone, "{together}/40 together, {alone}/40 alone");
    }
}
