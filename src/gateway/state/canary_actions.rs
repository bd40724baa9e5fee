//! Acting on canary verdicts, when configured (`[canary] auto_rollback`, `promote_step`):
//! a candidate judged worse loses its weight, one judged no different or better after
//! enough pairs gains a step. Weights change through the same table swap as
//! `PUT /admin/variants/{entry}`, so requests in flight and new ones never fail because of
//! it. Every action is logged, counted in `laneway_canary_actions_total` and listed in the
//! canary report.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::canary::{CanaryAction, CandidateDecision, Decision};
use crate::gateway::config::Entry;
use crate::gateway::state::GatewayState;
use crate::gateway::state::reload::LiveState;

/// Watches the verdicts until the gateway stops.
pub fn spawn(live: Arc<LiveState>, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    let mut decisions = live.load().shared.canary.decisions();
    tokio::spawn(async move {
        // The (verdict, generation) last seen per candidate: each change is acted on once.
        let mut seen: HashMap<(String, String), (Decision, u64)> = HashMap::new();
        loop {
            tokio::select! {
                changed = decisions.changed() => if changed.is_err() { break },
                _ = stop.wait_for(|stop| *stop) => break,
            }
            let current = decisions.borrow_and_update().clone();
            let state = live.load_full();
            for (key, decision) in current {
                let now = (decision.decision, decision.generation);
                if seen.insert(key.clone(), now) == Some(now) {
                    continue;
                }
                act(&state, &key.0, &key.1, decision).await;
            }
        }
    })
}

async fn act(state: &GatewayState, entry: &str, variant: &str, decision: CandidateDecision) {
    let automation = &state.config.canary.automation;
    let Ok(parsed) = entry.parse::<Entry>() else { return };
    let variants = state.variants.of(parsed);
    let weights = variants.weights();
    let Some(index) = weights.iter().position(|w| w.name == variant).filter(|&i| i > 0) else {
        return;
    };
    let from = weights[index].weight;
    let mut change = HashMap::new();
    let action = match decision.decision {
        Decision::Worse if automation.auto_rollback && from > 0 => {
            change.insert(variant.to_string(), 0);
            // All-zero weights are refused: the baseline takes the candidate's users.
            if weights[0].weight == 0 {
                change.insert(weights[0].name.clone(), u64::from(from));
            }
            "rollback"
        }
        Decision::NoDifference | Decision::Better
            if automation.promote_step > 0
                && decision.pairs >= automation.promote_min_pairs
                && from < automation.promote_max_weight =>
        {
            let to =
                from.saturating_add(automation.promote_step).min(automation.promote_max_weight);
            change.insert(variant.to_string(), u64::from(to));
            "promote"
        }
        _ => return,
    };
    if let Err(error) = variants.set_weights(&change) {
        tracing::warn!(entry, variant, action, %error, "canary action refused");
        return;
    }
    let to = change[variant] as u32;
    tracing::warn!(
        entry,
        variant,
        action,
        from,
        to,
        verdict = decision.decision.words(),
        pairs = decision.pairs,
        "canary action"
    );
    state.metrics.canary_actions.with_label_values(&[entry, variant, action]).inc();
    let unix_seconds =
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let canary = &state.shared.canary;
    canary
        .record_action(CanaryAction {
            unix_seconds,
            entry: entry.to_string(),
            variant: variant.to_string(),
            action,
            from_weight: from,
            to_weight: to,
            verdict: decision.decision,
            pairs: decision.pairs,
        })
        .await;
    if action == "promote" {
        // The next step must be earned at the new weight.
        canary.restart(entry, variant).await;
    }
}
