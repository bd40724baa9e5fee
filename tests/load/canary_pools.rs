//! The canary report names a clearly slower pool: its verdict rests on TTFT and TPOT
//! measured on the wall clock, so it runs here, alone, not beside the functional tests.

use crate::canary_traffic::{balanced_users, stream_as_named};
use crate::support::canary::*;
use crate::support::gateway::*;
use laneway::gateway::Strategy;
use laneway::sim::Fault;

#[tokio::test]
async fn the_report_names_a_clearly_slower_pool() {
    const USERS: usize = 120;
    let _one = crate::ONE_AT_A_TIME.lock().await;
    let sims = start_sims(2, 1).await;
    // Every engine step 100x longer: at the test speed, TTFT and TPOT gain about 20 ms,
    // well above the noise of a loaded machine.
    sims[1].set_fault(Fault::Slow { factor: 100.0 });
    let mut config = config_for(&sims);
    config.canary.sticky_header = Some(USER_HEADER.parse().unwrap());
    config.pools = vec![pool("fast", &["sim-0"]), pool("slow", &["sim-1"])];
    config.short.variants = vec![
        variant("fast", Strategy::ForceClose, Some("fast"), 1),
        variant("slow", Strategy::ForceClose, Some("slow"), 1),
    ];
    let users = balanced_users(&config.short.variants, USERS / 2, 1);
    let gateway = start_gateway(config).await;
    let results = stream_as_named(&gateway, &users).await;
    assert!(results.iter().all(|(status, _, _)| *status == 200));
    let report = report_once_recorded(&gateway, USERS as u64).await;
    let short = &report["entries"][0];
    assert_eq!(short["entry"], "short");
    assert_eq!(short["baseline"], "fast");
    let slow = &short["variants"][1];
    assert_eq!(slow["variant"], "slow");
    let on_slow = results.iter().filter(|r| r.1 == "slow").count() as u64;
    assert_eq!(slow["window"]["requests"], on_slow);
    assert_eq!(short["variants"][0]["window"]["requests"], USERS as u64 - on_slow);
    assert_eq!(slow["window_vs_baseline"]["ttft"]["verdict"], "slower", "{report:#}");
    assert_eq!(slow["window_vs_baseline"]["tpot"]["verdict"], "slower", "{report:#}");
    let text = admin_text(&gateway, "/admin/canary?format=text").await;
    assert!(text.contains("slow vs fast: TTFT slower by"), "{text}");
    gateway.shutdown().await;
}
