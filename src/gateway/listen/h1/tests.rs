//! The own HTTP/1.1 server against scripted clients on an in-memory pipe, with a stub
//! service: keep-alive and pipelining, each response framing, `close`, `HEAD`, the hand-over
//! to hyper with every byte read, the body deadline, a client that leaves, and a close
//! asked between and during requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::gateway::body::{BoxError, full};
use crate::gateway::listen::body_deadline::BodyTimedOut;

const LIMITS: Limits = Limits {
    head_bytes: 8192,
    headers: 50,
    body_bytes: 1 << 20,
    body_deadline: Duration::from_secs(30),
};

/// What the stub saw of one request.
#[derive(Debug)]
struct Seen {
    method: String,
    target: String,
    host: Option<String>,
    body: Result<Bytes, String>,
}

/// What becomes of a connection handed to hyper: the bytes it then reads, to the end.
type HandedOver = Arc<parking_lot::Mutex<Option<Vec<u8>>>>;

/// A server on one end of a pipe whose stub answers each request with `answer`; every
/// request is reported on the channel.
struct Harness {
    client: DuplexStream,
    seen: mpsc::UnboundedReceiver<Seen>,
    closing: CancellationToken,
    handed_over: HandedOver,
    server: tokio::task::JoinHandle<()>,
}

type Answer = Arc<dyn Fn(&Seen) -> BoxFuture<'static, Response<ProxyBody>> + Send + Sync>;

fn start(limits: Limits, answer: Answer) -> Harness {
    let (client, server_side) = tokio::io::duplex(1 << 20);
    let (report, seen) = mpsc::unbounded_channel();
    let closing = CancellationToken::new();
    let handed_over: HandedOver = Arc::default();
    let server = tokio::spawn({
        let (closing, handed_over) = (closing.clone(), handed_over.clone());
        async move {
            let activity = Activity::new();
            let setup = Setup {
                limits,
                keep_alive: HeaderValue::from_static("timeout=75"),
                activity: &activity,
                closing: &closing,
            };
            let service = move |request: Request<ClientBody>, _received_at| {
                let (report, answer) = (report.clone(), answer.clone());
                Box::pin(async move {
                    let (parts, body) = request.into_parts();
                    let body = body.collect().await.map(|b| b.to_bytes()).map_err(|e| {
                        if e.is::<BodyTimedOut>() { "timed out".to_string() } else { e.to_string() }
                    });
                    let seen = Seen {
                        method: parts.method.to_string(),
                        target: parts.uri.to_string(),
                        host: parts.headers.get("host").map(|h| h.to_str().unwrap().into()),
                        body,
                    };
                    let response = answer(&seen).await;
                    let _ = report.send(seen);
                    response
                })
            };
            let hand_over = |mut rewound: Rewind<DuplexStream>| async move {
                let mut bytes = Vec::new();
                let _ = rewound.read_to_end(&mut bytes).await;
                *handed_over.lock() = Some(bytes);
            };
            serve(server_side, setup, service, hand_over).await;
        }
    });
    Harness { client, seen, closing, handed_over, server }
}

/// Answers `ok` with a length and its own `date` (so that outputs are exact).
fn answer_ok() -> Answer {
    Arc::new(|_| Box::pin(async { dated(Response::new(full("ok"))) }))
}

fn dated(mut response: Response<ProxyBody>) -> Response<ProxyBody> {
    response.headers_mut().insert("date", HeaderValue::from_static("D"));
    response
}

const OK: &str =
    "HTTP/1.1 200 OK\r\ndate: D\r\ncontent-length: 2\r\nkeep-alive: timeout=75\r\n\r\nok";

async fn read_exactly(client: &mut DuplexStream, length: usize) -> String {
    let mut bytes = vec![0; length];
    client.read_exact(&mut bytes).await.unwrap();
    String::from_utf8(bytes).unwrap()
}

async fn read_to_close(client: &mut DuplexStream) -> String {
    let mut bytes = Vec::new();
    client.read_to_end(&mut bytes).await.unwrap();
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn requests_on_one_connection_are_served_in_turn_with_their_bodies() {
    let mut h = start(LIMITS, answer_ok());
    h.client
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nhello",
        )
        .await
        .unwrap();
    assert_eq!(read_exactly(&mut h.client, OK.len()).await, OK);
    // Two more in one write (pipelined), the second without a body.
    h.client
        .write_all(b"POST /a?x=1 HTTP/1.1\r\nHost: t\r\ncontent-length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_exactly(&mut h.client, 2 * OK.len()).await, OK.repeat(2));
    let seen: Vec<Seen> = (0..3).map(|_| h.seen.try_recv().unwrap()).collect();
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].target, "/v1/chat/completions");
    assert_eq!(seen[0].host.as_deref(), Some("gw"));
    assert_eq!(seen[0].body.as_ref().unwrap(), "hello");
    assert_eq!(
        (seen[1].target.as_str(), seen[1].body.as_ref().unwrap().as_ref()),
        ("/a?x=1", &b"abc"[..])
    );
    assert_eq!((seen[2].method.as_str(), seen[2].body.as_ref().unwrap().len()), ("GET", 0));
    drop(h.client);
    h.server.await.unwrap();
    assert!(h.handed_over.lock().is_none());
}

#[tokio::test]
async fn a_request_read_one_byte_at_a_time_is_the_same_request() {
    let mut h = start(LIMITS, answer_ok());
    for byte in b"POST /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\n\r\nbody" {
        h.client.write_all(&[*byte]).await.unwrap();
        tokio::task::yield_now().await;
    }
    assert_eq!(read_exactly(&mut h.client, OK.len()).await, OK);
    assert_eq!(h.seen.recv().await.unwrap().body.unwrap(), "body");
}

/// A stub whose body is `frames`, of unknown size.
fn answer_streamed(frames: &'static [&'static str]) -> Answer {
    Arc::new(move |_| {
        Box::pin(async move {
            let frames = frames.iter().map(|frame| {
                Ok::<_, BoxError>(http_body::Frame::data(Bytes::from_static(frame.as_bytes())))
            });
            let body = StreamBody::new(futures_util::stream::iter(frames));
            dated(Response::new(crate::gateway::body::boxed(body)))
        })
    })
}

#[tokio::test]
async fn a_body_of_unknown_size_goes_in_chunks_and_ends_with_the_last_chunk() {
    let mut h = start(LIMITS, answer_streamed(&["data: a\n\n", "", "data: [DONE]\n\n"]));
    h.client
        .write_all(b"POST /s HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let expected = "HTTP/1.1 200 OK\r\ndate: D\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
                    9\r\ndata: a\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";
    assert_eq!(read_to_close(&mut h.client).await, expected);
    h.server.await.unwrap();
}

#[tokio::test]
async fn a_declared_length_is_kept_and_a_body_short_of_it_closes_the_connection() {
    let answer: Answer = Arc::new(|_| {
        Box::pin(async {
            let mut response = dated(Response::new(full("abc")));
            response.headers_mut().insert("content-length", HeaderValue::from_static("10"));
            response
        })
    });
    let mut h = start(LIMITS, answer);
    h.client.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let got = read_to_close(&mut h.client).await;
    assert_eq!(
        got,
        "HTTP/1.1 200 OK\r\ndate: D\r\ncontent-length: 10\r\nkeep-alive: timeout=75\r\n\r\nabc"
    );
    h.server.await.unwrap();
}

#[tokio::test]
async fn head_and_no_content_answers_carry_no_body() {
    let answer: Answer = Arc::new(|seen| {
        let status = if seen.method == "HEAD" { StatusCode::OK } else { StatusCode::NO_CONTENT };
        Box::pin(async move {
            let mut response = dated(Response::new(full("never sent")));
            *response.status_mut() = status;
            response
        })
    });
    let mut h = start(LIMITS, answer);
    h.client
        .write_all(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\nDELETE /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let expected = "HTTP/1.1 200 OK\r\ndate: D\r\nkeep-alive: timeout=75\r\n\r\n\
                    HTTP/1.1 204 No Content\r\ndate: D\r\nconnection: close\r\n\r\n";
    assert_eq!(read_to_close(&mut h.client).await, expected);
}

#[tokio::test]
async fn a_response_without_a_date_gets_one() {
    let answer: Answer = Arc::new(|_| Box::pin(async { Response::new(full("ok")) }));
    let mut h = start(LIMITS, answer);
    h.client.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nconnection: close\r\n\r\n").await.unwrap();
    let got = read_to_close(&mut h.client).await;
    let dates: Vec<&str> = got.lines().filter(|line| line.starts_with("date: ")).collect();
    assert_eq!(dates.len(), 1, "{got}");
    assert!(httpdate::parse_http_date(&dates[0]["date: ".len()..]).is_ok(), "{got}");
}

#[tokio::test]
async fn what_the_own_server_does_not_take_on_goes_to_hyper_with_every_byte() {
    let cases: [&[u8]; 9] = [
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00",
        b"GET / HTTP/1.0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\nab",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: +2\r\n\r\nab",
        b"GET http://elsewhere/ HTTP/1.1\r\nHost: elsewhere\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    ];
    for case in cases {
        let mut h = start(LIMITS, answer_ok());
        h.client.write_all(case).await.unwrap();
        h.client.shutdown().await.unwrap();
        h.server.await.unwrap();
        let handed = h.handed_over.lock().take();
        assert_eq!(handed.as_deref(), Some(case), "{}", String::from_utf8_lossy(case));
        assert!(h.seen.try_recv().is_err());
    }
}

#[tokio::test]
async fn a_connection_goes_to_hyper_after_requests_the_own_server_answered() {
    let mut limits = LIMITS;
    limits.head_bytes = 64;
    let mut h = start(limits, answer_ok());
    h.client.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    assert_eq!(read_exactly(&mut h.client, OK.len()).await, OK);
    let big = format!("GET / HTTP/1.1\r\nHost: t\r\nx-big: {}\r\n\r\n", "a".repeat(100));
    h.client.write_all(big.as_bytes()).await.unwrap();
    h.client.shutdown().await.unwrap();
    h.server.await.unwrap();
    assert_eq!(h.handed_over.lock().take().unwrap(), big.as_bytes());
}

#[tokio::test(start_paused = true)]
async fn a_body_that_does_not_arrive_in_time_fails_and_the_connection_closes() {
    let answer: Answer = Arc::new(|_| {
        Box::pin(async {
            let mut response = dated(Response::new(full("late")));
            *response.status_mut() = StatusCode::REQUEST_TIMEOUT;
            response
        })
    });
    let mut h = start(LIMITS, answer);
    h.client
        .write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
        .await
        .unwrap();
    let got = read_to_close(&mut h.client).await;
    assert!(got.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{got}");
    assert!(got.contains("connection: close\r\n"), "{got}");
    assert_eq!(h.seen.recv().await.unwrap().body.unwrap_err(), "timed out");
}

#[tokio::test]
async fn a_client_that_leaves_while_served_drops_its_request() {
    let dropped = Arc::new(AtomicUsize::new(0));
    struct CountsDrop(Arc<AtomicUsize>);
    impl Drop for CountsDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let (arrived, mut arrival) = mpsc::unbounded_channel::<()>();
    let counter = dropped.clone();
    let answer: Answer = Arc::new(move |_| {
        let guard = CountsDrop(counter.clone());
        let _ = arrived.send(());
        Box::pin(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            unreachable!()
        })
    });
    let mut h = start(LIMITS, answer);
    h.client.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    arrival.recv().await.unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    h.client.shutdown().await.unwrap();
    h.server.await.unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_close_asked_while_idle_ends_the_connection_and_one_asked_while_serving_closes_after_the_answer()
 {
    let h = start(LIMITS, answer_ok());
    h.closing.cancel();
    h.server.await.unwrap();

    let (arrived, mut arrival) = mpsc::unbounded_channel::<()>();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(parking_lot::Mutex::new(Some(released)));
    let answer: Answer = Arc::new(move |_| {
        let released = released.lock().take().unwrap();
        let _ = arrived.send(());
        Box::pin(async move {
            released.await.unwrap();
            dated(Response::new(full("ok")))
        })
    });
    let mut h = start(LIMITS, answer);
    h.client.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    arrival.recv().await.unwrap();
    h.closing.cancel();
    release.send(()).unwrap();
    let got = read_to_close(&mut h.client).await;
    assert_eq!(
        got,
        "HTTP/1.1 200 OK\r\ndate: D\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
    );
    h.server.await.unwrap();
}

#[tokio::test]
async fn the_connections_own_headers_are_this_connections_and_a_close_in_the_response_is_kept() {
    let answer: Answer = Arc::new(|_| {
        Box::pin(async {
            let mut response = dated(Response::new(full("abc")));
            let headers = response.headers_mut();
            headers.insert("transfer-encoding", HeaderValue::from_static("gzip, chunked"));
            headers.insert("keep-alive", HeaderValue::from_static("timeout=1"));
            headers.insert("content-length", HeaderValue::from_static("+3"));
            headers.insert("connection", HeaderValue::from_static("close"));
            response
        })
    });
    let mut h = start(LIMITS, answer);
    h.client
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\nGET /never HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut h.client).await;
    let expected =
        "HTTP/1.1 200 OK\r\ndate: D\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc";
    assert_eq!(got, expected);
    h.server.await.unwrap();
    assert_eq!(h.seen.try_recv().unwrap().target, "/");
    assert!(h.seen.try_recv().is_err(), "the connection closed before the second request");
}

#[tokio::test]
async fn a_body_larger_than_the_room_made_at_once_arrives_whole() {
    let mut h = start(LIMITS, answer_ok());
    let body: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let head = format!("POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", body.len());
    h.client.write_all(head.as_bytes()).await.unwrap();
    for piece in body.chunks(7_000) {
        h.client.write_all(piece).await.unwrap();
    }
    assert_eq!(read_exactly(&mut h.client, OK.len()).await, OK);
    assert_eq!(h.seen.recv().await.unwrap().body.unwrap(), body);
}

#[tokio::test]
async fn an_ambiguous_head_is_served_as_refused_and_nothing_after_it_is_read() {
    use crate::gateway::framing::{FramingError, Refused};
    let cases: [(&[u8], FramingError); 6] = [
        (b"CONNECT 127.0.0.1:28003 HTTP/1.1\r\nHost: x\r\n\r\n", FramingError::Connect),
        (b"GET / HTTP/1.1\r\n\r\n", FramingError::MissingHost),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", FramingError::RepeatedHost),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 125\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            FramingError::LengthWithTransferEncoding,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            FramingError::UnsupportedTransferCoding,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
            FramingError::UnsupportedTransferCoding,
        ),
    ];
    for (head, expected) in cases {
        let (report, mut refusals) = mpsc::unbounded_channel();
        let (client, server_side) = tokio::io::duplex(1 << 16);
        let closing = CancellationToken::new();
        let server = tokio::spawn(async move {
            let activity = Activity::new();
            let keep_alive = HeaderValue::from_static("timeout=75");
            let setup =
                Setup { limits: LIMITS, keep_alive, activity: &activity, closing: &closing };
            let service = move |request: Request<ClientBody>, _| {
                let _ = report.send(request.extensions().get::<Refused>().map(|r| r.0));
                Box::pin(async { dated(Response::new(full("no"))) })
            };
            let hand_over = |_: Rewind<DuplexStream>| async { panic!("handed over") };
            serve(server_side, setup, service, hand_over).await;
        });
        let mut client = client;
        let mut sent = head.to_vec();
        sent.extend_from_slice(b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n");
        client.write_all(&sent).await.unwrap();
        let answer = read_to_close(&mut client).await;
        server.await.unwrap();
        let shown = String::from_utf8_lossy(head);
        assert_eq!(refusals.recv().await, Some(Some(expected)), "{shown}");
        // One answer, then the connection closed: the request behind it was never served.
        assert!(refusals.try_recv().is_err(), "{shown}");
        assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer}");
        assert!(answer.contains("connection: close\r\n"), "{answer}");
    }
}
