//! Fuzzes SSE observation: the scanner must see the same events however the bytes are
//! split into reads, and never panic.
#![no_main]

use laneway::openai::sse::SseScanner;
use libfuzzer_sys::fuzz_target;

fn events(pieces: &[&[u8]]) -> Vec<String> {
    let mut scanner = SseScanner::new();
    let mut seen = Vec::new();
    for piece in pieces {
        scanner.feed(piece, |event| seen.push(format!("{event:?}")));
    }
    seen
}

fuzz_target!(|data: &[u8]| {
    let cut = data.first().map_or(0, |b| usize::from(*b) % (data.len() + 1));
    let whole = events(&[data]);
    assert_eq!(events(&[&data[..cut], &data[cut..]]), whole);
    let bytes: Vec<&[u8]> = data.chunks(1).collect();
    assert_eq!(events(&bytes), whole);
});
