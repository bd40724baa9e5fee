//! `force_close`: a fresh upstream connection per request, sent with `Connection: close`
//! so that the replica closes it after the response. With several API-server processes on
//! one listening socket, every request is accepted anew and the kernel spreads them. The
//! request goes through laneway's own client ([`super::wire`]); [`open`] also opens the
//! connections `spread` keeps, over TLS for https replicas.

use std::time::Duration;

use http::Response;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_util::either::Either;

use super::upstream_body::UpstreamBody;
use super::upstream_error::{self, ConnectError, connect_failed};
use super::wire::{self, After, Outgoing, Socket};
use crate::gateway::error::GatewayError;
use crate::gateway::pick::Replica;
use crate::gateway::pick::addresses::ReplicaAddresses;
use crate::gateway::tls::upstream::UpstreamTls;

/// Where a connection goes: borrowed from the replica, so building one costs nothing.
#[derive(Clone, Copy)]
pub struct Upstream<'a> {
    /// The replica's name, for errors.
    pub name: &'a str,
    /// `host:port`.
    pub authority: &'a str,
    /// Where `authority` points.
    pub addresses: &'a ReplicaAddresses,
    /// For an https replica, the TLS client and the name its certificate must carry.
    pub tls: Option<(&'a UpstreamTls, &'a ServerName<'static>)>,
}

impl<'a> Upstream<'a> {
    pub fn of(replica: &'a Replica, tls: &'a UpstreamTls) -> Self {
        Self {
            name: &replica.name,
            authority: &replica.authority,
            addresses: &replica.addresses,
            tls: replica.server_name.as_ref().map(|name| (tls, name)),
        }
    }
}

/// Opens a connection to the replica. For an https replica the TCP connect and the TLS
/// handshake share the one `timeout`.
pub async fn open(upstream: Upstream<'_>, timeout: Duration) -> Result<Socket, GatewayError> {
    let connect_error = |error| connect_failed(upstream.name, error);
    if let Some((tls, server_name)) = upstream.tls {
        // Boxed: the TLS handshake's state is several kilobytes, and every request future
        // that may open a connection would otherwise carry it, http or not.
        return Box::pin(connect_tls(upstream, tls, server_name, timeout)).await;
    }
    let stream = tokio::time::timeout(timeout, connect_tcp(upstream)).await.map_err(|_| {
        upstream.addresses.doubt();
        connect_error(ConnectError::TimedOut(timeout))
    })??;
    Ok(Either::Left(stream))
}

/// A TCP connection to the first of the replica's addresses that accepts, without Nagle
/// (tokens are small writes). A refused connect casts doubt on the addresses kept.
async fn connect_tcp(upstream: Upstream<'_>) -> Result<TcpStream, GatewayError> {
    let connect_error = |error| connect_failed(upstream.name, error);
    let addresses = upstream
        .addresses
        .get()
        .await
        .map_err(|error| connect_error(ConnectError::Resolve(error)))?;
    let stream = TcpStream::connect(addresses.as_slice()).await.map_err(|error| {
        upstream.addresses.doubt();
        connect_error(ConnectError::Tcp(error))
    })?;
    if addresses.as_slice().len() > 1
        && let Ok(peer) = stream.peer_addr()
    {
        upstream.addresses.connected_to(peer);
    }
    stream.set_nodelay(true).map_err(|error| connect_error(ConnectError::Tcp(error)))?;
    Ok(stream)
}

/// [`connect`] to an https replica: TCP, then TLS, within the one `timeout`.
async fn connect_tls(
    upstream: Upstream<'_>,
    tls: &UpstreamTls,
    server_name: &ServerName<'static>,
    timeout: Duration,
) -> Result<Socket, GatewayError> {
    let connect_error = |error| connect_failed(upstream.name, error);
    let secured = async {
        let tcp = connect_tcp(upstream).await?;
        tls.connect(upstream.authority, server_name, tcp)
            .await
            .map_err(|error| connect_error(ConnectError::Tls(error)))
    };
    let stream = tokio::time::timeout(timeout, secured).await.map_err(|_| {
        upstream.addresses.doubt();
        connect_error(ConnectError::TlsTimedOut(timeout))
    })??;
    Ok(Either::Right(Box::new(stream)))
}

/// Sends `request` (origin-form target) on a connection of its own, which closes after it.
pub async fn send(
    upstream: Upstream<'_>,
    timeout: Duration,
    request: Outgoing<'_>,
) -> Result<Response<UpstreamBody>, GatewayError> {
    let socket = open(upstream, timeout).await?;
    send_on(socket, upstream.name, request).await
}

/// Sends `request` on `socket`, an open connection to the replica named `replica`, and
/// closes it after the response.
pub async fn send_on(
    socket: Socket,
    replica: &str,
    request: Outgoing<'_>,
) -> Result<Response<UpstreamBody>, GatewayError> {
    reset_on_close(&socket);
    let response = wire::exchange(socket, request, After::Close)
        .await
        .map_err(|error| upstream_error::from_wire(replica, error))?;
    Ok(response.map(UpstreamBody::Wire))
}

/// Makes closing a plain TCP `socket` reset it (`SO_LINGER` 0), as HAProxy does with the
/// server connections it closes first: the replica, which closes its side after the
/// response, is left without a `TIME_WAIT` entry per request, and the close is one
/// segment, not a FIN exchange (measured: README, "Upstream connection strategies"). The
/// gateway closes only once the whole response was read, or to abandon it. TLS
/// connections close as before.
fn reset_on_close(socket: &Socket) {
    if let Either::Left(tcp) = socket {
        // A failure leaves the ordinary close: nothing to report.
        let _ = socket2::SockRef::from(tcp).set_linger(Some(Duration::ZERO));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::body::full;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_connection_is_reset_once_the_response_was_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (mut replica, _) = listener.accept().await.unwrap();
        let request = http::Request::get("/v1/models").body(full("")).unwrap();
        let sending = tokio::spawn(async move {
            let request = Outgoing::Request(request);
            let response = send_on(Either::Left(client), "r0", request).await.unwrap();
            http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes()
        });
        let mut head = Vec::new();
        while !head.windows(4).any(|window| window == b"\r\n\r\n") {
            assert!(replica.read_buf(&mut head).await.unwrap() > 0, "the request arrives");
        }
        replica.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.unwrap();
        assert_eq!(&sending.await.unwrap()[..], b"ok");
        // The gateway has read the response and dropped the connection: a reset, not an
        // orderly close (a read of 0 bytes).
        let mut rest = [0u8; 16];
        let read = replica.read(&mut rest).await;
        let reset = read.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset);
        assert!(reset, "{read:?}");
    }
}
