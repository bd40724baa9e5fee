//! The `[canary]` knobs of the verdict and of what is done on it: the false-alarm level,
//! the guarded metrics and their margins, and the automation (off by default), validated
//! with their paths (`canary.margins.ttft_p95: ...`).

use super::issues::Issues;
use super::raw::RawCanary;
use crate::canary::{GuardSettings, Metric};

/// What is done on a verdict; nothing unless configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Automation {
    /// On "worse", the candidate's weight goes to 0.
    pub auto_rollback: bool,
    /// On "no difference" or "better", the candidate's weight rises by this much (0: off).
    pub promote_step: u32,
    /// Promotion never raises a weight beyond this.
    pub promote_max_weight: u32,
    /// Pairs of requests a promotion needs at least.
    pub promote_min_pairs: u64,
}

impl Default for Automation {
    fn default() -> Self {
        Self {
            auto_rollback: false,
            promote_step: 0,
            promote_max_weight: 100,
            promote_min_pairs: 500,
        }
    }
}

impl Automation {
    pub fn is_active(&self) -> bool {
        self.auto_rollback || self.promote_step > 0
    }
}

pub(super) fn guard(raw: &RawCanary, issues: &mut Issues) -> GuardSettings {
    let mut settings = GuardSettings::default();
    if let Some(alpha) = raw.alpha {
        if alpha > 0.0 && alpha <= 0.5 {
            settings.alpha = alpha;
        } else {
            issues.add("canary.alpha", format!("{alpha} is out of range (0, 0.5]"));
        }
    }
    if let Some(names) = &raw.guard {
        settings.guarded.clear();
        for (index, name) in names.iter().enumerate() {
            match Metric::parse(name) {
                Some(metric) if !settings.guarded.contains(&metric) => {
                    settings.guarded.push(metric)
                }
                Some(_) => issues.add(format!("canary.guard[{index}]"), format!("`{name}` twice")),
                None => issues.add(format!("canary.guard[{index}]"), unknown(name)),
            }
        }
        if names.is_empty() {
            issues.add("canary.guard", "needs at least one metric");
        }
    }
    for (name, &margin) in &raw.margins {
        let path = format!("canary.margins.{name}");
        let Some(metric) = Metric::parse(name) else {
            issues.add(path, unknown(name));
            continue;
        };
        if !(margin.is_finite() && (0.0..1.0).contains(&margin)) {
            issues.add(path, format!("{margin} is out of range 0..1"));
            continue;
        }
        let index = Metric::ALL.iter().position(|m| *m == metric).expect("listed");
        settings.margins[index] = margin;
    }
    settings.min_pairs = issues.positive("canary.min_pairs", raw.min_pairs, 30, 1_000_000);
    settings
}

fn unknown(name: &str) -> String {
    let known: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
    format!("unknown metric `{name}` (expected one of {})", known.join(", "))
}

pub(super) fn automation(raw: &RawCanary, issues: &mut Issues) -> Automation {
    let defaults = Automation::default();
    let promote_step = match raw.promote_step {
        None | Some(0) => 0,
        Some(step) => issues.positive("canary.promote_step", Some(step), 0, 1_000_000) as u32,
    };
    Automation {
        auto_rollback: raw.auto_rollback.unwrap_or(false),
        promote_step,
        promote_max_weight: issues.positive(
            "canary.promote_max_weight",
            raw.promote_max_weight,
            u64::from(defaults.promote_max_weight),
            1_000_000,
        ) as u32,
        promote_min_pairs: issues.positive(
            "canary.promote_min_pairs",
            raw.promote_min_pairs,
            defaults.promote_min_pairs,
            100_000_000,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::GatewayConfig;
    use crate::canary::Metric;

    #[test]
    fn verdict_and_automation_knobs_are_read_with_defaults() {
        let config = GatewayConfig::from_toml("").unwrap();
        assert!(!config.canary.automation.is_active());
        assert_eq!(config.canary.guard.alpha, 0.05);
        let text = "[canary]\nalpha = 0.01\nguard = [\"ttft_p99\", \"error_rate\"]\n\
            margins = { ttft_p99 = 0.25 }\nauto_rollback = true\npromote_step = 10\n";
        let config = GatewayConfig::from_toml(text).unwrap();
        let guard = &config.canary.guard;
        assert_eq!(guard.guarded, [Metric::TtftP99, Metric::ErrorRate]);
        assert_eq!(guard.margin(Metric::TtftP99), 0.25);
        assert_eq!(guard.margin(Metric::TtftP95), 0.10);
        assert!(config.canary.automation.auto_rollback);
        assert_eq!(config.canary.automation.promote_step, 10);
    }

    #[test]
    fn every_bad_knob_is_named_by_its_path() {
        let text = "[canary]\nalpha = 0.9\nguard = [\"ttft_p95\", \"ttft_p42\"]\n\
            margins = { nope = 0.1, e2e_p95 = -1 }\nmin_pairs = 0\npromote_step = -3\n\
            promote_max_weight = 0\n";
        let error = GatewayConfig::from_toml(text).unwrap_err();
        let mut paths: Vec<&str> = error.issues.iter().map(|i| i.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "canary.alpha",
                "canary.guard[1]",
                "canary.margins.e2e_p95",
                "canary.margins.nope",
                "canary.min_pairs",
                "canary.promote_max_weight",
                "canary.promote_step",
            ],
            "{error}"
        );
    }
}
