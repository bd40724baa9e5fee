//! A non-streamed JSON response's `usage`: the body kept as it passes (a body of one frame,
//! most of them, without a copy) and the object after its last `"usage"` key read alone.

use bytes::Bytes;

use crate::openai::sse::Usage;

/// Largest non-streamed JSON response kept to read its `usage`.
const MAX_JSON_BYTES: usize = 4 << 20;

/// A JSON body's bytes, kept for its usage: a body of one frame (most are) as that frame,
/// without a copy; the frames of a longer one copied one after the other.
#[derive(Debug, Default)]
pub enum JsonBody {
    #[default]
    Empty,
    One(Bytes),
    Many(Vec<u8>),
}

impl JsonBody {
    /// Takes in the body's next frame; past [`MAX_JSON_BYTES`] the body is not kept whole,
    /// and frames are dropped.
    pub fn push(&mut self, frame: &Bytes) {
        if self.as_slice().len() + frame.len() > MAX_JSON_BYTES {
            return;
        }
        match self {
            Self::Empty => *self = Self::One(frame.clone()),
            Self::One(first) => {
                let mut bytes = Vec::with_capacity(first.len() + frame.len());
                bytes.extend_from_slice(first);
                bytes.extend_from_slice(frame);
                *self = Self::Many(bytes);
            }
            Self::Many(bytes) => bytes.extend_from_slice(frame),
        }
    }

    /// The body's `usage`, if it has one.
    pub fn usage(&self) -> Option<Usage> {
        usage_of_json(self.as_slice())
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Empty => &[],
            Self::One(bytes) => bytes,
            Self::Many(bytes) => bytes,
        }
    }
}

/// The `usage` of a complete JSON response. Parsing the whole body to read it cost more
/// than any other step of a small request, so the object after the last `"usage"` key is
/// read alone (vLLM and SGLang write it after `choices`; a key's quotes are never escaped,
/// so those bytes followed by a colon are a key, not text). A body where that fails is
/// parsed whole.
fn usage_of_json(body: &[u8]) -> Option<Usage> {
    usage_after_last_key(body).or_else(|| {
        #[derive(serde::Deserialize)]
        struct Envelope {
            usage: Option<Usage>,
        }
        serde_json::from_slice::<Envelope>(body).ok()?.usage
    })
}

/// A response's usage key, quotes included.
const USAGE_KEY: &[u8] = b"\"usage\"";

/// Where a body's last `"usage"` key starts. Found from its `u`, searched for backwards
/// (vectorised): servers put the usage last, after text that holds few `u`s, and a reverse
/// substring search has no vectorised form.
fn last_usage_key(body: &[u8]) -> Option<usize> {
    memchr::memrchr_iter(b'u', body)
        .filter_map(|at| at.checked_sub(1))
        .find(|&start| body[start..].starts_with(USAGE_KEY))
}

fn usage_after_last_key(body: &[u8]) -> Option<Usage> {
    let after_key = last_usage_key(body)? + USAGE_KEY.len();
    let rest = body[after_key..].trim_ascii_start().strip_prefix(b":")?;
    // Checked as UTF-8 once, so that its keys are not each checked again.
    let mut value = serde_json::Deserializer::from_str(std::str::from_utf8(rest).ok()?);
    serde::Deserialize::deserialize(&mut value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_from_the_last_usage_key_whatever_the_text_says() {
        let usage = |body: &str| usage_of_json(body.as_bytes()).map(|u| u.completion_tokens);
        // Text that quotes the key, escaped as JSON escapes it, is not the key.
        let quoting = r#"{"choices":[{"message":{"content":"say \"usage\": 1"}}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#;
        assert_eq!(usage(quoting), Some(2));
        // A value that reads "usage" is followed by no colon: the whole body is parsed.
        let value =
            r#"{"usage":{"completion_tokens":3},"choices":[{"message":{"content":"usage"}}]}"#;
        assert_eq!(usage(value), Some(3));
        assert_eq!(usage(r#"{"choices":[],"usage" : null}"#), None);
        assert_eq!(usage(r#"{"choices":[]}"#), None);
        assert_eq!(usage("not json"), None);
        let spaced = "{\"usage\" :\n {\"prompt_tokens\": 5, \"completion_tokens\": 7}}";
        assert_eq!(usage(spaced), Some(7));
    }

    #[test]
    fn the_last_usage_key_is_found_wherever_it_stands() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut found = 0;
        for _ in 0..5_000 {
            // Bodies of key pieces and letters that start it, so that near misses abound.
            let pieces: [&[u8]; 5] = [b"\"usage\"", b"\"usag", b"u", b"\"", b"sage\""];
            let body: Vec<u8> = (0..rng.random_range(0..12))
                .flat_map(|_| pieces[rng.random_range(0..pieces.len())].iter().copied())
                .collect();
            let expected = body.windows(7).rposition(|window| window == b"\"usage\"");
            found += usize::from(expected.is_some());
            assert_eq!(last_usage_key(&body), expected, "{}", body.escape_ascii());
        }
        assert!(found > 1_000 && found < 4_900, "{found} of 5,000 held the key");
    }

    #[test]
    fn a_body_is_read_whole_over_any_number_of_frames_up_to_its_bound() {
        let usage = br#"{"usage":{"prompt_tokens":5,"completion_tokens":4}}"#;
        for cut in [usage.len(), 9, 1] {
            let mut body = JsonBody::default();
            for frame in usage.chunks(cut) {
                body.push(&Bytes::copy_from_slice(frame));
            }
            assert_eq!(body.usage().map(|u| u.completion_tokens), Some(4), "frames of {cut}");
        }
        // A body past the bound is not kept whole: no usage is read from what is left.
        let mut long = JsonBody::default();
        long.push(&Bytes::from(vec![b' '; MAX_JSON_BYTES]));
        long.push(&Bytes::from_static(usage));
        assert_eq!(long.usage(), None);
    }
}
