//! Fuzzes request classification: any body, either endpoint, any threshold; it must
//! answer (Ok or a parse error), never panic or overflow the stack.
#![no_main]

use laneway::gateway::classify::classify;
use laneway::openai::request::Endpoint;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let threshold = data.first().map_or(2048, |b| u64::from(*b) * 16 + 1);
    for endpoint in [Endpoint::Chat, Endpoint::Completions] {
        let _ = classify(endpoint, data, None, threshold);
    }
});
