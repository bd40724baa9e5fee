//! The workload notation: the field's forms parse to what they mean, and bad specs are
//! refused with a message naming the offending part.

use laneway::bench::workload::{Shape, WeightedShape, Workload, WorkloadError};

fn single(input_tokens: u64, output_tokens: u64) -> Vec<WeightedShape> {
    vec![WeightedShape { shape: Shape { input_tokens, output_tokens }, weight: 1.0 }]
}

#[test]
fn business_cases_parse_with_their_concurrency() {
    for (spec, input, output, concurrency) in [
        ("1000/300/c6", 1000, 300, 6),
        ("9000/600/c2", 9000, 600, 2),
        ("50000/1000/c1", 50000, 1000, 1),
    ] {
        assert_eq!(
            Workload::parse(spec).unwrap(),
            Workload::Streaming {
                mix: single(input, output),
                concurrency: Some(concurrency),
                requests: None
            },
            "{spec}"
        );
    }
}

#[test]
fn a_case_without_concurrency_leaves_it_to_the_flags() {
    assert_eq!(
        Workload::parse("1000/300").unwrap(),
        Workload::Streaming { mix: single(1000, 300), concurrency: None, requests: None }
    );
}

#[test]
fn sweeps_parse_with_the_default_or_given_input() {
    assert_eq!(
        Workload::parse("c2048_r4096_t128").unwrap(),
        Workload::Streaming {
            mix: single(1000, 128),
            concurrency: Some(2048),
            requests: Some(4096)
        }
    );
    assert_eq!(
        Workload::parse("c16_r64_t32_i200").unwrap(),
        Workload::Streaming { mix: single(200, 32), concurrency: Some(16), requests: Some(64) }
    );
}

#[test]
fn weighted_mixes_parse_and_draw_in_proportion() {
    let Workload::Streaming { mix, concurrency: None, requests: None } =
        Workload::parse("1000/300:0.7+9000/600:0.3").unwrap()
    else {
        panic!("a mix is a streaming workload without concurrency");
    };
    assert_eq!(mix.len(), 2);
    assert_eq!(
        mix[1],
        WeightedShape { shape: Shape { input_tokens: 9000, output_tokens: 600 }, weight: 0.3 }
    );
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let long =
        (0..10_000).filter(|_| Workload::pick_shape(&mix, &mut rng).input_tokens == 9000).count();
    assert!((2_700..3_300).contains(&long), "{long} of 10000 drew the 0.3 shape");
}

#[test]
fn tiny_is_the_overhead_mode() {
    assert_eq!(Workload::parse("tiny").unwrap(), Workload::Tiny);
}

#[test]
fn bad_specs_are_refused_with_the_part_named() {
    /// A spec, a test of the error kind, and a part the message must contain.
    type Case = (&'static str, fn(&WorkloadError) -> bool, &'static str);
    let cases: &[Case] = &[
        ("", |e| matches!(e, WorkloadError::Empty), "empty"),
        ("fast", |e| matches!(e, WorkloadError::UnknownForm { .. }), "expected IN/OUT/cN"),
        (
            "1000/abc/c6",
            |e| matches!(e, WorkloadError::NotANumber { field: "output tokens", .. }),
            "`abc`",
        ),
        (
            "1000/300/c0",
            |e| matches!(e, WorkloadError::OutOfRange { field: "concurrency", .. }),
            "got 0",
        ),
        (
            "0/300/c6",
            |e| matches!(e, WorkloadError::OutOfRange { field: "input tokens", .. }),
            "input tokens",
        ),
        ("1000/300/x6", |e| matches!(e, WorkloadError::UnknownForm { .. }), "1000/300/x6"),
        ("1000/300/c6/9", |e| matches!(e, WorkloadError::UnknownForm { .. }), "IN/OUT"),
        ("1000/300:-1+9000/600:1", |e| matches!(e, WorkloadError::BadWeight { .. }), "`-1`"),
        ("1000/300:x+9000/600:1", |e| matches!(e, WorkloadError::BadWeight { .. }), "weight"),
        (
            "1000/300/c2:1+9000/600:1",
            |e| matches!(e, WorkloadError::ConcurrencyInMix { .. }),
            "--max-concurrency",
        ),
        ("c10_r20", |e| matches!(e, WorkloadError::IncompleteSweep { .. }), "needs c"),
        ("c10_r20_t5_z3", |e| matches!(e, WorkloadError::UnknownSweepField { .. }), "`z`"),
        ("c10_rX_t5", |e| matches!(e, WorkloadError::NotANumber { field: "requests", .. }), "`rX`"),
        ("2000000/1/c1", |e| matches!(e, WorkloadError::OutOfRange { .. }), "between 1 and"),
    ];
    for (spec, is_expected, message_part) in cases {
        let error = Workload::parse(spec).expect_err(spec);
        assert!(is_expected(&error), "{spec}: {error:?}");
        let message = error.to_string();
        assert!(
            message.contains(message_part),
            "{spec}: message `{message}` lacks `{message_part}`"
        );
    }
}
