//! A connection to a replica, plain or TLS: one type for the client to read and write
//! (tokio-util's `Either` passes every read and write, vectored ones included, through).

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

/// An open connection to a replica: plain TCP, or TLS (boxed: its state is kilobytes, and
/// most fleets speak plain HTTP).
pub type Socket = Either<TcpStream, Box<TlsStream<TcpStream>>>;
