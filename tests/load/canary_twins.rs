//! Two identical variants raise no alarm: the report's verdicts rest on TTFT and TPOT
//! measured on the wall clock, so this runs here, alone, beside the slower-pool test.

use crate::canary_traffic::{balanced_users, stream_as_named};
use crate::support::canary::*;
use crate::support::gateway::*;
use laneway::gateway::Strategy;

#[tokio::test]
async fn two_identical_variants_raise_no_alarm() {
    const USERS: usize = 120;
    let _one = crate::ONE_AT_A_TIME.lock().await;
    // At the profile's own speed (steps of 2 ms), not the functional tests' ten times faster:
    // there a TPOT is a quarter of a millisecond, and with the variants strictly taking
    // turns (`b` always just after `a`) `b`'s TPOT read a third lower in 7 runs of 40 on a
    // loaded machine. Shuffled users remove that pattern; the slower clock shrinks what is
    // left of it tenfold against the latencies compared.
    let sims = start_sims_at(2, 1, 1.0).await;
    let mut config = config_for(&sims);
    config.canary.sticky_header = Some(USER_HEADER.parse().unwrap());
    config.short.variants = vec![
        variant("a", Strategy::ForceClose, None, 1),
        variant("b", Strategy::ForceClose, None, 1),
    ];
    let users = balanced_users(&config.short.variants, USERS / 2, 1);
    let gateway = start_gateway(config).await;
    let results = stream_as_named(&gateway, &users).await;
    assert!(results.iter().all(|(status, _, _)| *status == 200));
    assert_eq!(results.iter().filter(|r| r.1 == "b").count(), USERS / 2);
    let report = report_once_recorded(&gateway, USERS as u64).await;
    let candidate = &report["entries"][0]["variants"][1];
    // Same replicas, same strategy, interleaved traffic: no alarm. The sequential decision,
    // which acts (`auto_rollback`), finds the candidate neither worse nor better.
    let metrics = candidate["judgement"]["metrics"].as_array().expect("the candidate's metrics");
    for metric in metrics {
        let decision = metric["decision"].as_str().unwrap();
        assert!(!["worse", "better"].contains(&decision), "{metric}: {report:#}");
    }
    // The window's fixed-sample comparison, for reference only, may find a shift of a few
    // percent on a loaded machine ("slower by 8%" in one CI run: TTFT medians of a few
    // milliseconds, p = 0.0008, interval 1.02-1.13), but never one wholly beyond the 10% it
    // calls no difference. (That the difference is bounded is asserted on recorded samples
    // in the canary module, where the noise of a shared machine cannot widen the interval.)
    let no_difference =
        1.0 + laneway::canary::compare::CompareSettings::default().equivalence_margin;
    for metric in ["ttft", "tpot"] {
        let window = &candidate["window_vs_baseline"][metric];
        let verdict = window["verdict"].as_str().unwrap();
        if ["no_difference", "inconclusive"].contains(&verdict) {
            continue;
        }
        let low = window["ratio_low"].as_f64().unwrap();
        let high = window["ratio_high"].as_f64().unwrap();
        assert!(low < no_difference && high > 1.0 / no_difference, "{metric}: {report:#}");
    }
    gateway.shutdown().await;
}
