//! Cost of classifying inference bodies of the field's sizes (1k, 9k and 50k prompt
//! tokens): the length bound, then the parse the long ones need.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use laneway::gateway::classify::{classify, classify_by_length};
use laneway::openai::request::Endpoint;
use laneway::tokens::synthetic_text;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn body(tokens: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(tokens);
    serde_json::to_vec(&serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": synthetic_text(tokens, &mut rng)},
        ],
        "max_tokens": 300,
        "stream": true,
    }))
    .unwrap()
}

fn bench_classify(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify");
    for tokens in [1_000u64, 9_000, 50_000] {
        let body = body(tokens);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("full", tokens), &body, |b, body| {
            b.iter(|| classify(Endpoint::Chat, std::hint::black_box(body), None, 2048).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("length_bound", tokens), &body, |b, body| {
            b.iter(|| classify_by_length(std::hint::black_box(body.len() as u64), 2048))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_classify);
criterion_main!(benches);
