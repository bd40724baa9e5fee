//! A prompt's block hashes as vLLM computes them with `--prefix-caching-hash-algo
//! sha256_cbor`: SHA-256 of the canonical CBOR encoding of `(parent digest, the block's token
//! ids, extra keys)`, chained from `H("vllm-none-hash")` (or from `H(PYTHONHASHSEED)` when the
//! engine has that set). Only full blocks are hashed. The events carry each digest's last 8
//! bytes as a `u64`, but the next block's hash needs the whole parent digest, so the chain
//! is computed here in full and truncated at the end.
//!
//! The encoder is four CBOR items written by hand (an array head, a byte string, unsigned
//! integers, null), each head in its shortest form as RFC 8949's deterministic encoding and
//! Python's `cbor2.dumps(canonical=True)` write them, into one buffer reused over the chain:
//! a general CBOR crate would build a value per token. The tests check it against digests
//! the engine published.

use sha2::{Digest, Sha256};

/// The seed vLLM derives its first parent from unless `PYTHONHASHSEED` is set.
pub const DEFAULT_SEED: &str = "vllm-none-hash";

/// Hashes prompts into the block chain of engines that share one seed.
#[derive(Debug, Clone)]
pub struct BlockHasher {
    /// The parent of every prompt's first block: `H(seed)`.
    none_hash: [u8; 32],
}

impl BlockHasher {
    pub fn new(seed: &str) -> Self {
        let mut cbor = Vec::with_capacity(seed.len() + 9);
        head(&mut cbor, MAJOR_TEXT, seed.len() as u64);
        cbor.extend_from_slice(seed.as_bytes());
        Self { none_hash: Sha256::digest(&cbor).into() }
    }

    /// The digests of the full blocks of `tokens`, in order.
    pub fn digests(&self, tokens: &[u64], block_size: usize) -> Vec<[u8; 32]> {
        Self::digests_after(self.none_hash, tokens, block_size)
    }

    /// The digests of the full blocks of `tokens` following the block whose digest is
    /// `parent`.
    pub fn digests_after(parent: [u8; 32], tokens: &[u64], block_size: usize) -> Vec<[u8; 32]> {
        let mut cbor = Vec::with_capacity(48 + block_size * 5);
        let mut parent = parent;
        let mut digests = Vec::with_capacity(tokens.len() / block_size.max(1));
        for block in tokens.chunks_exact(block_size.max(1)) {
            cbor.clear();
            head(&mut cbor, MAJOR_ARRAY, 3);
            head(&mut cbor, MAJOR_BYTES, 32);
            cbor.extend_from_slice(&parent);
            head(&mut cbor, MAJOR_ARRAY, block.len() as u64);
            for &token in block {
                head(&mut cbor, MAJOR_UNSIGNED, token);
            }
            cbor.push(NULL);
            parent = Sha256::digest(&cbor).into();
            digests.push(parent);
        }
        digests
    }

    /// The hashes the engine's events carry for those blocks (each digest's last 8 bytes).
    pub fn event_hashes(&self, tokens: &[u64], block_size: usize) -> Vec<u64> {
        self.digests(tokens, block_size).iter().map(event_hash).collect()
    }
}

/// A digest as the events carry it: its last 8 bytes, big-endian.
pub fn event_hash(digest: &[u8; 32]) -> u64 {
    u64::from_be_bytes(digest[24..].try_into().expect("8 bytes"))
}

const MAJOR_UNSIGNED: u8 = 0;
const MAJOR_BYTES: u8 = 2;
const MAJOR_TEXT: u8 = 3;
const MAJOR_ARRAY: u8 = 4;
const NULL: u8 = 0xf6;

/// A CBOR item head in its shortest form.
fn head(out: &mut Vec<u8>, major: u8, value: u64) {
    let major = major << 5;
    match value {
        0..=23 => out.push(major | value as u8),
        24..=0xff => out.extend_from_slice(&[major | 24, value as u8]),
        0x100..=0xffff => {
            out.push(major | 25);
            out.extend_from_slice(&(value as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(major | 26);
            out.extend_from_slice(&(value as u32).to_be_bytes());
        }
        _ => {
            out.push(major | 27);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_take_their_shortest_form() {
        let encode = |major, value| {
            let mut out = Vec::new();
            head(&mut out, major, value);
            out
        };
        assert_eq!(encode(MAJOR_UNSIGNED, 0), [0x00]);
        assert_eq!(encode(MAJOR_UNSIGNED, 23), [0x17]);
        assert_eq!(encode(MAJOR_UNSIGNED, 24), [0x18, 24]);
        assert_eq!(encode(MAJOR_UNSIGNED, 7999), [0x19, 0x1f, 0x3f]);
        assert_eq!(encode(MAJOR_UNSIGNED, 70_000), [0x1a, 0, 1, 0x11, 0x70]);
        assert_eq!(encode(MAJOR_ARRAY, 128), [0x98, 128]);
        assert_eq!(encode(MAJOR_BYTES, 32), [0x58, 32]);
        assert_eq!(encode(MAJOR_TEXT, 14), [0x6e]);
    }

    #[test]
    fn only_full_blocks_are_hashed_and_each_depends_on_all_before_it() {
        let hasher = BlockHasher::new(DEFAULT_SEED);
        let tokens: Vec<u64> = (0..300).collect();
        let digests = hasher.digests(&tokens, 128);
        assert_eq!(digests.len(), 2);
        let mut changed = tokens.clone();
        changed[0] = 9;
        let other = hasher.digests(&changed, 128);
        assert_ne!(digests[0], other[0]);
        assert_ne!(digests[1], other[1], "the second block's hash covers the first");
        assert_ne!(BlockHasher::new("42").digests(&tokens, 128)[0], digests[0]);
    }
}
