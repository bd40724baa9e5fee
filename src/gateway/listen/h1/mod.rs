//! laneway's own HTTP/1.1 server, for the listeners' client connections: one read buffer
//! per connection that heads and bodies are cut from (no copy) and that holds memory only
//! while it holds bytes, no write buffer (the response head and the body's frames go out
//! in vectored writes), and the request served in the connection's own task. hyper's
//! server connection keeps two 8 KiB buffers and a dispatcher per connection; on the proxy
//! path that was a third of the instructions per request and most of the memory of an
//! idle stream.
//!
//! Requests are read one at a time (a pipelined request waits in the buffer for the
//! answer before it). A client that closes while its request is served drops the request,
//! as with hyper. Whatever this server does not take on goes to hyper with the bytes read
//! so far, for the rest of the connection (see [`request`]): HTTP/2, HTTP/1.0, chunked or
//! oversized request bodies, `Expect`, upgrades, malformed or oversized heads.

mod date;
mod outgoing;
mod request;
mod response;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use http::{HeaderValue, Method, Request, Response};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

pub use request::Limits;
use request::ReadHead;
use response::{Reply, Then};

use super::client_body::ClientBody;
use super::connection::Activity;
use super::rewind::Rewind;
use crate::gateway::body::ProxyBody;

/// Bytes a client may send ahead (a pipelined request) while its request is served; past
/// this the connection is not read until the answer is written.
const MAX_READ_AHEAD: usize = 64 * 1024;

/// What a connection is served with.
pub struct Setup<'a> {
    pub limits: Limits,
    /// `Keep-Alive: timeout=N`, sent on responses that keep the connection.
    pub keep_alive: HeaderValue,
    /// Counts the connection's open requests for its timeouts.
    pub activity: &'a Arc<Activity>,
    /// Asks the connection to close once the request it serves is answered.
    pub closing: &'a CancellationToken,
}

/// Serves `io` until the client closes, a response says the connection ends, `closing` is
/// asked between requests, or the connection goes to hyper (`hand_over`, which serves it
/// from then on). `service` gets each request, its body read, with the time its head
/// completed (the request's received time, as for a request hyper reads).
pub async fn serve<S, Service, Served, HandOver, HandedOver>(
    mut io: S,
    setup: Setup<'_>,
    mut service: Service,
    hand_over: HandOver,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    Service: FnMut(Request<ClientBody>, Instant) -> Served,
    Served: Future<Output = Response<ProxyBody>> + Unpin,
    HandOver: FnOnce(Rewind<S>) -> HandedOver,
    HandedOver: Future<Output = ()>,
{
    // Holds memory only while it holds bytes (see `request::read_more`).
    let mut buffer = BytesMut::new();
    loop {
        let read = tokio::select! {
            biased;
            () = setup.closing.cancelled() => return,
            read = request::read_head(&mut io, &mut buffer, &setup.limits) => read,
        };
        let head = match read {
            ReadHead::Request(head) => head,
            ReadHead::HandOver(replay) => {
                // Boxed: the rare path's state (hyper's connection) would otherwise make
                // every connection's future twice the size.
                return Box::pin(hand_over(Rewind::new(replay, io))).await;
            }
            ReadHead::Closed => return,
        };
        let (open, received_at) = (setup.activity.begin(), Instant::now());
        let (head_request, asked_close) = (head.request.method() == Method::HEAD, head.close);
        let (request, body_whole) =
            request::read_body(&mut io, &mut buffer, head, &setup.limits).await;
        if buffer.is_empty() {
            // The request's head and body keep the bytes they were cut from, for as long
            // as they live; the connection keeps none while it serves a stream.
            buffer = BytesMut::new();
        }
        let mut served = service(request, received_at);
        let response = tokio::select! {
            response = &mut served => response,
            () = client_left(&mut io, &mut buffer) => return,
        };
        let close = asked_close || !body_whole || setup.closing.is_cancelled();
        let reply = Reply { head_request, close, keep_alive: &setup.keep_alive };
        let written = response::write(&mut io, &mut buffer, response, reply).await;
        drop(open);
        let then = match written {
            Ok(then) => then,
            Err(error) => {
                tracing::debug!(%error, "a response was not written whole; closing");
                return;
            }
        };
        if then == Then::Close || setup.closing.is_cancelled() {
            let _ = io.shutdown().await;
            return;
        }
    }
}

/// Resolves when the client closes the connection (or it fails); what the client sends
/// meanwhile is kept in `buffer`, up to [`MAX_READ_AHEAD`]. Cancel-safe.
async fn client_left<S: AsyncRead + Unpin>(io: &mut S, buffer: &mut BytesMut) {
    while buffer.len() < MAX_READ_AHEAD {
        match request::read_more(io, buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests;
