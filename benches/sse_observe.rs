//! Observing an SSE stream per chunk: the cost the gateway (and the load generator) pay
//! for every chunk they watch with the shared `SseScanner`, for streams of 300 and 1000
//! tokens read one event per chunk, and in 4 KiB reads.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use laneway::openai::sse::{SseEvent, SseScanner};
use std::hint::black_box;

/// A vLLM-shaped chat stream of `tokens` content chunks: role chunk, tokens, usage, done.
fn vllm_stream(tokens: usize) -> Vec<Vec<u8>> {
    let mut events = vec![
        b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"sim\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n".to_vec(),
    ];
    for _ in 0..tokens {
        events.push(b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"sim\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" the\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n".to_vec());
    }
    events.push(format!("data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"sim\",\"choices\":[],\"usage\":{{\"prompt_tokens\":1000,\"total_tokens\":{},\"completion_tokens\":{tokens}}}}}\n\n", 1000 + tokens).into_bytes());
    events.push(b"data: [DONE]\n\n".to_vec());
    events
}

fn observe(chunks: &[Vec<u8>]) -> u64 {
    let mut scanner = SseScanner::new();
    let mut choices = 0u64;
    for chunk in chunks {
        scanner.feed(chunk, |event| {
            if let SseEvent::Data { has_choices: true, .. } = event {
                choices += 1;
            }
        });
    }
    choices
}

fn sse_observe(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse_observe");
    for tokens in [300usize, 1000] {
        let per_event = vllm_stream(tokens);
        group.throughput(Throughput::Elements(per_event.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("one_event_per_chunk", tokens),
            &per_event,
            |b, chunks| b.iter(|| black_box(observe(black_box(chunks)))),
        );
        let joined: Vec<u8> = per_event.concat();
        let reads: Vec<Vec<u8>> = joined.chunks(4096).map(<[u8]>::to_vec).collect();
        group.bench_with_input(BenchmarkId::new("4k_reads", tokens), &reads, |b, chunks| {
            b.iter(|| black_box(observe(black_box(chunks))))
        });
    }
    group.finish();
}

criterion_group!(benches, sse_observe);
criterion_main!(benches);
