//! A connection to a replica, plain or TLS: one type for the client to read and write
//! (tokio-util's `Either` passes every read and write, vectored ones included, through).

use std::pin::Pin;
use std::task::Context;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

/// An open connection to a replica: plain TCP, or TLS (boxed: its state is kilobytes, and
/// most fleets speak plain HTTP).
pub type Socket = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// Whether an idle connection is still open: nothing to read yet. A close (or bytes no
/// request asked for) is readable at once.
pub fn still_open(socket: &mut Socket) -> bool {
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
    Pin::new(socket).poll_read(&mut cx, &mut buf).is_pending()
}
