//! Calibration: single requests on an idle replica take, in simulated time, what the
//! profile's parameters say they should (within 15%), and the built-in H20 profiles'
//! parameters reproduce the field's figures.
//!
//! Figures are read from the replica's own accounting (its TTFT, E2E and per-request TPOT
//! histograms' sums, each replica serving one request), so a busy machine delays the test
//! but does not move the figures.

use crate::support::sim::{chat_body, expected_ttft_from, metric, metrics_text, start, url};
use laneway::sim::Profile;

/// Single-request TTFT (seconds) of an idle replica, nothing cached.
fn expected_ttft(profile: &Profile, prompt_tokens: u64) -> f64 {
    expected_ttft_from(profile, prompt_tokens, 0)
}

/// Batch-1 TPOT (seconds): one decode per step.
fn expected_tpot(profile: &Profile) -> f64 {
    (profile.engine.step_base_us + profile.engine.decode_us_per_seq) / 1e6
}

fn assert_within_15_percent(what: &str, measured: f64, expected: f64) {
    let error = (measured - expected).abs() / expected;
    eprintln!("{what}: measured {measured:.4} s, expected {expected:.4} s");
    assert!(error <= 0.15, "{what}: measured {measured:.4} s, expected {expected:.4} s");
}

/// Runs one streamed chat request on a fresh replica; returns (TTFT, per-request TPOT).
async fn single_request(profile: &str, speed: f64, prompt: u64, output: u64) -> (f64, f64) {
    let sim = start(profile, 1, speed).await;
    let response = reqwest::Client::new()
        .post(url(&sim, "/v1/chat/completions"))
        .json(&chat_body(prompt, output, true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    let text = metrics_text(&sim).await;
    assert_eq!(metric(&text, "vllm:time_to_first_token_seconds_count"), 1.0);
    assert_eq!(metric(&text, "vllm:prompt_tokens_total"), prompt as f64);
    let ttft = metric(&text, "vllm:time_to_first_token_seconds_sum");
    let tpot = metric(&text, "vllm:request_time_per_output_token_seconds_sum");
    sim.shutdown().await;
    (ttft, tpot)
}

#[tokio::test]
async fn h20_tp8_short_request_ttft_and_tpot() {
    let profile = Profile::built_in("h20-tp8").unwrap();
    let (ttft, tpot) = single_request("h20-tp8", 1.0, 1000, 300).await;
    assert_within_15_percent("1000/300 TTFT", ttft, expected_ttft(&profile, 1000));
    assert_within_15_percent("1000/300 TPOT", tpot, expected_tpot(&profile));
}

#[tokio::test]
async fn h20_tp8_long_prompts_ttft() {
    let profile = Profile::built_in("h20-tp8").unwrap();
    for prompt in [9000, 50000] {
        let (ttft, _) = single_request("h20-tp8", 1.0, prompt, 2).await;
        assert_within_15_percent(&format!("{prompt} TTFT"), ttft, expected_ttft(&profile, prompt));
    }
}

#[tokio::test]
async fn h20_tp4_long_prompts_ttft_at_high_speed() {
    // Simulated-time accounting does not depend on the clock speed.
    let profile = Profile::built_in("h20-tp4").unwrap();
    for prompt in [9000, 50000] {
        let (ttft, tpot) = single_request("h20-tp4", 50.0, prompt, 20).await;
        assert_within_15_percent(&format!("{prompt} TTFT"), ttft, expected_ttft(&profile, prompt));
        assert_within_15_percent("TPOT", tpot, expected_tpot(&profile));
    }
}

#[test]
fn built_in_profiles_reproduce_the_field_figures() {
    // Field notes, section 3: TP8x2 and TP4x4 single-replica figures (seconds).
    let tp8 = Profile::built_in("h20-tp8").unwrap();
    assert_within_15_percent("tp8 9000 TTFT", expected_ttft(&tp8, 9000), 0.224857);
    assert_within_15_percent("tp8 50000 TTFT", expected_ttft(&tp8, 50000), 0.353421);
    assert_within_15_percent("tp8 TPOT", expected_tpot(&tp8), 0.015);
    let tp4 = Profile::built_in("h20-tp4").unwrap();
    assert_within_15_percent("tp4 9000 TTFT", expected_ttft(&tp4, 9000), 0.967701);
    assert_within_15_percent("tp4 50000 TTFT", expected_ttft(&tp4, 50000), 11.128173);
    assert_within_15_percent("tp4 TPOT", expected_tpot(&tp4), 0.016);
}
