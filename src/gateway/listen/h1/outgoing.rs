//! The bytes of a response queued for the client. Small pieces (a head, a tiny body, a
//! stream's events with their chunk framing) are copied into one buffer that goes out in a
//! plain `send`; large ones are queued as they are and go out in one vectored write. A
//! socket's `writev` passes through the kernel's file layer on the way to the socket, which
//! `send` skips: measured, that path was most of the system time laneway spent per request
//! beyond HAProxy's (README, "Performance").

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// A piece up to this size is copied into the gathered buffer rather than queued.
const GATHER_PIECE_BYTES: usize = 4 * 1024;

/// The gathered buffer is given back once written if it grew past this, so that a long
/// stream keeps a small buffer (how much is gathered before a write is the writer's
/// batch limit).
const GATHER_BYTES: usize = 16 * 1024;

/// Bytes queued for one write: queued pieces first, then the gathered ones.
#[derive(Default)]
pub struct Outgoing {
    queued: VecDeque<Bytes>,
    queued_bytes: usize,
    gathered: Vec<u8>,
}

impl Outgoing {
    /// Room for `bytes` gathered at first (a head and a small body).
    pub fn with_capacity(bytes: usize) -> Self {
        Self { queued: VecDeque::new(), queued_bytes: 0, gathered: Vec::with_capacity(bytes) }
    }

    /// The gathered buffer, to write small pieces into directly (a head, a chunk's size
    /// line). Whatever is written there goes out after everything pushed before.
    pub fn gathered(&mut self) -> &mut Vec<u8> {
        &mut self.gathered
    }

    /// Queues `piece`: copied if it is small, else kept as it is.
    pub fn push(&mut self, piece: Bytes) {
        if piece.is_empty() {
            return;
        }
        if piece.len() <= GATHER_PIECE_BYTES {
            self.gathered.extend_from_slice(&piece);
            return;
        }
        self.queue_gathered();
        self.queued_bytes += piece.len();
        self.queued.push_back(piece);
    }

    pub fn remaining(&self) -> usize {
        self.queued_bytes + self.gathered.len()
    }

    /// Pieces a vectored write would take.
    pub fn pieces(&self) -> usize {
        self.queued.len() + usize::from(!self.gathered.is_empty())
    }

    /// Writes everything queued: the gathered bytes alone in a plain write, else all of it
    /// in one vectored write (or as few as the socket takes).
    pub async fn write_to<S: AsyncWrite + Unpin>(&mut self, io: &mut S) -> std::io::Result<()> {
        if self.queued.is_empty() {
            if !self.gathered.is_empty() {
                io.write_all(&self.gathered).await?;
                self.gathered.clear();
            }
        } else {
            self.queue_gathered();
            io.write_all_buf(&mut Queued(self)).await?;
        }
        if self.gathered.capacity() > GATHER_BYTES {
            self.gathered = Vec::new();
        }
        Ok(())
    }

    /// Moves the gathered bytes behind the queued pieces (the buffer itself, not a copy),
    /// to keep their order when a large piece follows them.
    fn queue_gathered(&mut self) {
        if !self.gathered.is_empty() {
            let gathered = Bytes::from(std::mem::take(&mut self.gathered));
            self.queued_bytes += gathered.len();
            self.queued.push_back(gathered);
        }
    }
}

/// The queued pieces, read as one buffer (after [`Outgoing::queue_gathered`]).
struct Queued<'a>(&'a mut Outgoing);

impl Buf for Queued<'_> {
    fn remaining(&self) -> usize {
        self.0.queued_bytes
    }

    fn chunk(&self) -> &[u8] {
        self.0.queued.front().map_or(&[], |piece| piece)
    }

    fn chunks_vectored<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> usize {
        let mut filled = 0;
        for (slice, piece) in slices.iter_mut().zip(&self.0.queued) {
            *slice = IoSlice::new(piece);
            filled += 1;
        }
        filled
    }

    fn advance(&mut self, mut count: usize) {
        self.0.queued_bytes -= count;
        while count > 0 {
            let front = self.0.queued.front_mut().expect("advanced past the end");
            if count < front.len() {
                front.advance(count);
                return;
            }
            count -= front.len();
            self.0.queued.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// A writer that takes at most `limit` bytes a call and counts plain and vectored calls.
    #[derive(Default)]
    struct Counting {
        written: Vec<u8>,
        limit: usize,
        plain: usize,
        vectored: usize,
    }

    impl AsyncWrite for Counting {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.plain += 1;
            let taken = buf.len().min(self.limit);
            self.written.extend_from_slice(&buf[..taken]);
            Poll::Ready(Ok(taken))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            self.vectored += 1;
            let mut left = self.limit;
            for buf in bufs {
                let taken = buf.len().min(left);
                self.written.extend_from_slice(&buf[..taken]);
                left -= taken;
                if left == 0 {
                    break;
                }
            }
            Poll::Ready(Ok(self.limit - left))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_head_and_a_small_body_go_out_in_one_plain_write() {
        let mut out = Outgoing::with_capacity(64);
        out.gathered().extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n");
        out.push(Bytes::from_static(b"ok"));
        let mut io = Counting { limit: usize::MAX, ..Counting::default() };
        out.write_to(&mut io).await.unwrap();
        assert_eq!(io.written, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        assert_eq!((io.plain, io.vectored), (1, 0));
        assert_eq!(out.remaining(), 0);
    }

    #[tokio::test]
    async fn a_large_piece_is_written_in_place_after_what_was_gathered_before_it() {
        let large = Bytes::from(vec![b'x'; GATHER_PIECE_BYTES + 1]);
        let mut out = Outgoing::default();
        out.gathered().extend_from_slice(b"head");
        out.push(large.clone());
        out.gathered().extend_from_slice(b"tail");
        assert_eq!(out.pieces(), 3);
        let mut io = Counting { limit: usize::MAX, ..Counting::default() };
        out.write_to(&mut io).await.unwrap();
        let mut expected = b"head".to_vec();
        expected.extend_from_slice(&large);
        expected.extend_from_slice(b"tail");
        assert_eq!(io.written, expected);
        assert_eq!((io.plain, io.vectored), (0, 1));
    }

    /// Seeded pieces of every size, written through a socket that takes a few bytes at a
    /// time: the bytes arrive whole and in order, and nothing is left queued.
    #[tokio::test]
    async fn seeded_pieces_arrive_whole_and_in_order_through_short_writes() {
        let mut rng = StdRng::seed_from_u64(15);
        for _ in 0..200 {
            let mut out = Outgoing::with_capacity(rng.random_range(0..256));
            let mut expected = Vec::new();
            for _ in 0..rng.random_range(1..12) {
                let size = match rng.random_range(0..3) {
                    0 => rng.random_range(0..64),
                    1 => rng.random_range(64..GATHER_PIECE_BYTES + 2),
                    _ => rng.random_range(GATHER_PIECE_BYTES..3 * GATHER_BYTES),
                };
                let piece: Vec<u8> = (0..size).map(|_| rng.random()).collect();
                expected.extend_from_slice(&piece);
                if rng.random_bool(0.3) {
                    out.gathered().extend_from_slice(&piece);
                } else {
                    out.push(Bytes::from(piece));
                }
            }
            assert_eq!(out.remaining(), expected.len());
            let mut io = Counting { limit: rng.random_range(1..5000), ..Counting::default() };
            out.write_to(&mut io).await.unwrap();
            assert_eq!(io.written, expected);
            assert_eq!((out.remaining(), out.pieces()), (0, 0));
            assert!(out.gathered.capacity() <= GATHER_BYTES);
        }
    }
}
