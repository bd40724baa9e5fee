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
    let verdicts = &report["entries"][0]["variants"][1]["window_vs_baseline"];
    // Same replicas, same strategy, interleaved traffic: never "slower" or "faster". (That
    // the difference is also bounded, "no difference", is asserted on recorded samples in
    // the canary module, where the noise of a shared machine cannot widen the interval.)
    for metric in ["ttft", "tpot"] {
        let verdict = verdicts[metric]["verdict"].as_str().unwrap();
        assert!(["no_difference", "inconclusive"].contains(&verdict), "{metric}: {report:#}");
    }
    gateway.shutdown().await;
}
