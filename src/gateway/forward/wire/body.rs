//! A response body read straight off the socket: each frame is a slice of the read buffer
//! (no copy), decoded from a length, from chunks, or up to the connection's close.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, ReadBuf};

use super::{READ_CHUNK, WireError};

/// The longest chunk-size line (with extensions) or trailer line accepted.
const MAX_LINE_BYTES: usize = 4096;

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (a HEAD response, 204, 304).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Everything up to the connection's close.
    UntilClose,
}

/// Where the decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `remaining` bytes of a length-delimited body.
    Length {
        remaining: u64,
    },
    /// Before a chunk-size line.
    ChunkSize,
    /// Inside a chunk's data.
    ChunkData {
        remaining: u64,
    },
    /// The line end after a chunk's data.
    ChunkEnd,
    /// Trailer lines after the last chunk, up to an empty one.
    Trailers,
    /// Up to the connection's close.
    UntilClose,
    Done,
}

/// What the decoder made of the bytes buffered so far.
enum Step {
    Frame(Bytes),
    End,
    NeedMore,
}

/// Takes a connection whose response ended cleanly, for its next request.
pub type Keep<S> = Box<dyn FnOnce(S) + Send>;

/// A response body read off its connection. The connection goes to the keeper, if any,
/// once the body ended cleanly with nothing after it; it closes when the body is dropped
/// otherwise (mid-body, after an error, or with no keeper).
pub struct WireBody<S> {
    /// `None` once handed to the keeper.
    io: Option<S>,
    buffer: BytesMut,
    state: State,
    keep: Option<Keep<S>>,
}

impl<S> WireBody<S> {
    /// The body after a head: `buffer` holds whatever was read past the head.
    pub fn new(io: S, buffer: BytesMut, framing: Framing, keep: Option<Keep<S>>) -> Self {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(remaining) => State::Length { remaining },
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        };
        let mut body = Self { io: Some(io), buffer, state, keep };
        if body.state == State::Done {
            body.ended_cleanly();
        }
        body
    }

    /// The body ended where its framing said: the connection goes to its keeper if nothing
    /// was sent after the body (anything would be a protocol error on the next response).
    fn ended_cleanly(&mut self) {
        if let (Some(keep), true) = (self.keep.take(), self.buffer.is_empty())
            && let Some(io) = self.io.take()
        {
            keep(io);
        }
    }

    /// The body failed: the connection closes with it.
    fn failed(&mut self) {
        self.state = State::Done;
        self.keep = None;
        self.io = None;
    }
}

/// Reads what `io` has into `buffer`; `Ok(0)` at the connection's end. Into the buffer's
/// own spare room when it has a useful amount; otherwise through a chunk on the stack that
/// is copied in, so that a buffer holds memory only while it holds bytes: a stream waiting
/// for its next event keeps no read buffer (the event is copied once, a few hundred bytes).
pub fn fill<S>(
    io: Pin<&mut S>,
    buffer: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>>
where
    S: AsyncRead,
{
    if buffer.capacity() - buffer.len() >= READ_CHUNK / 4 {
        return tokio_util::io::poll_read_buf(io, cx, buffer);
    }
    let mut chunk = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
    let mut read = ReadBuf::uninit(&mut chunk);
    ready!(io.poll_read(cx, &mut read))?;
    buffer.extend_from_slice(read.filled());
    Poll::Ready(Ok(read.filled().len()))
}

impl<S: AsyncRead + Unpin> WireBody<S> {
    /// Advances the decoder over buffered bytes: a frame, the end, or a need for more.
    fn decode(&mut self) -> Result<Step, WireError> {
        loop {
            match self.state {
                State::Done => return Ok(Step::End),
                State::Length { remaining } | State::ChunkData { remaining } => {
                    if self.buffer.is_empty() {
                        return Ok(Step::NeedMore);
                    }
                    let take = remaining.min(self.buffer.len() as u64);
                    let left = remaining - take;
                    self.state = match self.state {
                        State::Length { .. } if left == 0 => State::Done,
                        State::Length { .. } => State::Length { remaining: left },
                        _ if left == 0 => State::ChunkEnd,
                        _ => State::ChunkData { remaining: left },
                    };
                    return Ok(Step::Frame(self.buffer.split_to(take as usize).freeze()));
                }
                State::UntilClose => {
                    if self.buffer.is_empty() {
                        return Ok(Step::NeedMore);
                    }
                    return Ok(Step::Frame(self.buffer.split().freeze()));
                }
                State::ChunkSize => match httparse::parse_chunk_size(&self.buffer) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        self.buffer.advance(used);
                        self.state = if size == 0 {
                            State::Trailers
                        } else {
                            State::ChunkData { remaining: size }
                        };
                    }
                    Ok(httparse::Status::Partial) => return self.need_line(),
                    Err(_) => return Err(WireError::MalformedChunk("bad chunk size")),
                },
                State::ChunkEnd => {
                    if self.buffer.len() < 2 {
                        return Ok(Step::NeedMore);
                    }
                    if &self.buffer[..2] != b"\r\n" {
                        return Err(WireError::MalformedChunk("chunk data longer than its size"));
                    }
                    self.buffer.advance(2);
                    self.state = State::ChunkSize;
                }
                State::Trailers => match memchr::memchr(b'\n', &self.buffer) {
                    Some(end) => {
                        let empty_line = end == 0 || (end == 1 && self.buffer[0] == b'\r');
                        self.buffer.advance(end + 1);
                        if empty_line {
                            self.state = State::Done;
                        }
                    }
                    None => return self.need_line(),
                },
            }
        }
    }

    /// More bytes are needed to finish a line, unless the line is already too long.
    fn need_line(&self) -> Result<Step, WireError> {
        if self.buffer.len() > MAX_LINE_BYTES {
            return Err(WireError::MalformedChunk("line too long"));
        }
        Ok(Step::NeedMore)
    }

    /// The error for a connection that closed before the body's end.
    fn truncated(&self) -> WireError {
        match self.state {
            State::Length { remaining } => WireError::Truncated { missing: remaining },
            _ => WireError::ChunkedTruncated,
        }
    }
}

impl<S: AsyncRead + Unpin> Body for WireBody<S> {
    type Data = Bytes;
    type Error = WireError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, WireError>>> {
        let this = self.get_mut();
        loop {
            match this.decode() {
                Ok(Step::Frame(data)) => {
                    if this.state == State::Done {
                        this.ended_cleanly();
                    }
                    if this.buffer.is_empty() {
                        // The frame keeps the bytes it was cut from; the body keeps none.
                        this.buffer = BytesMut::new();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Step::End) => {
                    this.ended_cleanly();
                    return Poll::Ready(None);
                }
                Ok(Step::NeedMore) => {}
                Err(error) => {
                    this.failed();
                    return Poll::Ready(Some(Err(error)));
                }
            }
            let Some(io) = this.io.as_mut() else {
                // Handed over or failed: both leave the state at `Done`, decoded above.
                return Poll::Ready(None);
            };
            let read = ready!(fill(Pin::new(io), &mut this.buffer, cx));
            match read {
                // A body delimited by the close has no keeper: nothing to hand over.
                Ok(0) if this.state == State::UntilClose => this.state = State::Done,
                Ok(0) => {
                    let error = this.truncated();
                    this.failed();
                    return Poll::Ready(Some(Err(error)));
                }
                Ok(_) => {}
                Err(error) => {
                    this.failed();
                    return Poll::Ready(Some(Err(WireError::Read(error))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Done => SizeHint::with_exact(0),
            State::Length { remaining } => SizeHint::with_exact(remaining),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use futures_util::FutureExt;
    use http_body_util::BodyExt;
    use proptest::prelude::*;

    use super::*;

    /// A connection that has everything to say at once but says it in given pieces.
    struct Pieces {
        data: VecDeque<u8>,
        cuts: VecDeque<usize>,
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let cut = self.cuts.pop_front().unwrap_or(usize::MAX).max(1);
            let take = cut.min(buf.remaining()).min(self.data.len());
            let bytes: Vec<u8> = self.data.drain(..take).collect();
            buf.put_slice(&bytes);
            Poll::Ready(Ok(()))
        }
    }

    /// Every frame of a body over `wire` cut at `cuts`, or its error.
    fn decode(wire: Vec<u8>, cuts: Vec<usize>, framing: Framing) -> Result<Vec<u8>, WireError> {
        let io = Pieces { data: wire.into(), cuts: cuts.into() };
        let mut body = WireBody::new(io, BytesMut::new(), framing, None);
        let mut out = Vec::new();
        while let Some(frame) = body.frame().now_or_never().expect("the pieces are all there") {
            out.extend_from_slice(&frame?.into_data().unwrap());
        }
        assert!(body.is_end_stream());
        Ok(out)
    }

    /// `parts` as a chunked body, with an extension on odd chunks and a trailer.
    fn chunked(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut wire = Vec::new();
        for (index, part) in parts.iter().filter(|part| !part.is_empty()).enumerate() {
            let extension = if index % 2 == 1 { ";ext=\"x\"" } else { "" };
            wire.extend_from_slice(format!("{:X}{extension}\r\n", part.len()).as_bytes());
            wire.extend_from_slice(part);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\nx-checksum: 1\r\n\r\n");
        wire
    }

    proptest! {
        #[test]
        fn chunked_bodies_decode_however_the_reads_fall(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..12),
            cuts in proptest::collection::vec(1usize..64, 0..200),
        ) {
            let expected: Vec<u8> = parts.concat();
            prop_assert_eq!(decode(chunked(&parts), cuts, Framing::Chunked).unwrap(), expected);
        }

        #[test]
        fn length_bodies_stop_at_their_length_however_the_reads_fall(
            data in proptest::collection::vec(any::<u8>(), 0..2000),
            extra in proptest::collection::vec(any::<u8>(), 0..50),
            cuts in proptest::collection::vec(1usize..700, 0..20),
        ) {
            let framing = Framing::Length(data.len() as u64);
            let wire = [data.clone(), extra].concat();
            prop_assert_eq!(decode(wire, cuts, framing).unwrap(), data);
        }

        #[test]
        fn a_chunked_body_cut_anywhere_fails_as_truncated(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..100), 1..5),
            keep in 0.0f64..1.0,
        ) {
            let wire = chunked(&parts);
            let kept = ((wire.len() - 1) as f64 * keep) as usize;
            let error = decode(wire[..kept].to_vec(), vec![], Framing::Chunked).unwrap_err();
            prop_assert!(matches!(error, WireError::ChunkedTruncated), "{error}");
        }
    }
}
