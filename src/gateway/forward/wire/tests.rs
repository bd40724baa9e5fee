//! The client against scripted replicas on an in-memory pipe: framing, interim heads,
//! early closes and malformed answers, with every answer also cut into one-byte reads.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, StreamBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::gateway::body::{ProxyBody, boxed, empty, full};
use crate::gateway::forward::replica_headers::ReplicaHeaders;

/// A response as the client read it: status, headers, and the body or how it failed.
type Read = (StatusCode, http::HeaderMap, Result<Vec<u8>, WireError>);

/// What a scripted replica saw, and what the client made of its answer.
struct Seen {
    request: String,
    outcome: Result<Read, WireError>,
}

/// Reads one request off `server`: its head, then its body by its framing.
async fn read_request(server: &mut DuplexStream) -> String {
    let mut bytes = Vec::new();
    let mut scratch = [0u8; 1024];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut parsed = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = parsed.parse(&bytes) {
            let length = parsed
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).unwrap().parse::<usize>().unwrap());
            let complete = match length {
                Some(length) => bytes.len() >= head + length,
                None if parsed.headers.iter().any(|h| h.name == "transfer-encoding") => {
                    bytes.ends_with(b"0\r\n\r\n")
                }
                None => true,
            };
            if complete {
                return String::from_utf8(bytes).unwrap();
            }
        }
        let read = server.read(&mut scratch).await.unwrap();
        assert!(read > 0, "the client closed mid-request");
        bytes.extend_from_slice(&scratch[..read]);
    }
}

/// Sends `request` to a replica that answers `answer`, written `piece` bytes at a time,
/// then closes.
async fn exchange_with(request: Request<ProxyBody>, answer: &[u8], piece: usize) -> Seen {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let answer = answer.to_vec();
    let replica = tokio::spawn(async move {
        let request = read_request(&mut server).await;
        for part in answer.chunks(piece.max(1)) {
            // A client that has refused the answer stops reading it.
            if server.write_all(part).await.is_err() {
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(server);
        request
    });
    let outcome = match exchange(client, Outgoing::Request(request), After::Close).await {
        Ok(mut response) => {
            // The replica's header lines, read as a map (as hyper's server gets them).
            ReplicaHeaders::merge_into_map(&mut response);
            let (parts, mut body) = response.into_parts();
            let mut data = Vec::new();
            let mut failed = None;
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => data.extend_from_slice(&frame.into_data().unwrap()),
                    Err(error) => {
                        failed = Some(error);
                        break;
                    }
                }
            }
            assert!(body.is_end_stream(), "a finished body says it is finished");
            Ok((parts.status, parts.headers, failed.map_or(Ok(data), Err)))
        }
        Err(error) => Err(error),
    };
    Seen { request: replica.await.unwrap(), outcome }
}

fn post(body: &'static str) -> Request<ProxyBody> {
    Request::post("/v1/completions").header("host", "r:1").body(full(body)).unwrap()
}

/// The body the client read, checked for every way of cutting the answer.
async fn body_of(answer: &[u8]) -> Result<Vec<u8>, WireError> {
    let whole = exchange_with(post("{}"), answer, answer.len()).await;
    let bytewise = exchange_with(post("{}"), answer, 1).await;
    let (_, _, whole) = whole.outcome.expect("a head");
    let (_, _, bytewise) = bytewise.outcome.expect("a head");
    assert_eq!(whole.as_ref().ok(), bytewise.as_ref().ok(), "cut into bytes, the body is the same");
    whole
}

#[tokio::test]
async fn a_request_goes_out_with_its_length_and_a_close() {
    let seen =
        exchange_with(post("{\"a\":1}"), b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", 64).await;
    assert_eq!(
        seen.request,
        "POST /v1/completions HTTP/1.1\r\nhost: r:1\r\nconnection: close\r\n\
         content-length: 7\r\n\r\n{\"a\":1}"
    );
    let (status, _, body) = seen.outcome.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.unwrap(), b"");
}

#[tokio::test]
async fn a_body_of_unknown_length_goes_out_in_chunks() {
    let frames = ["ab", "", "cde"].map(|text| {
        Ok::<_, crate::gateway::body::BoxError>(http_body::Frame::data(Bytes::from_static(
            text.as_bytes(),
        )))
    });
    let body = boxed(StreamBody::new(futures_util::stream::iter(frames)));
    let request = Request::put("/x").header("host", "r:1").body(body).unwrap();
    let seen = exchange_with(request, b"HTTP/1.1 204 No Content\r\n\r\n", 64).await;
    assert!(
        seen.request
            .ends_with("transfer-encoding: chunked\r\n\r\n2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n")
    );
    assert_eq!(seen.outcome.unwrap().0, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn length_delimited_bodies_end_at_their_length() {
    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nX-Sim-Replica: r0\r\n\r\nhello world";
    assert_eq!(body_of(answer).await.unwrap(), b"hello world");
    let seen = exchange_with(post("{}"), answer, 5).await;
    let (_, headers, _) = seen.outcome.unwrap();
    assert_eq!(headers["x-sim-replica"], "r0");
    assert_eq!(headers["content-length"], "11");
}

#[tokio::test]
async fn chunked_bodies_with_extensions_and_trailers_decode() {
    let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
        5;name=x\r\ndata:\r\n10\r\n {\"a\":1}\n\ndata: \r\n0\r\nx-trailer: 1\r\n\r\n";
    assert_eq!(body_of(answer).await.unwrap(), b"data: {\"a\":1}\n\ndata: ");
}

#[tokio::test]
async fn bodies_without_framing_run_to_the_close() {
    let answer = b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end";
    assert_eq!(body_of(answer).await.unwrap(), b"until the end");
}

#[tokio::test]
async fn interim_heads_are_skipped() {
    let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: x\r\n\r\n\
        HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok";
    let seen = exchange_with(post("{}"), answer, 1).await;
    let (status, headers, body) = seen.outcome.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    assert!(headers.get("link").is_none());
    assert_eq!(body.unwrap(), b"ok");
}

#[tokio::test]
async fn a_head_request_has_no_body_whatever_its_length_says() {
    let request = Request::head("/v1/models").header("host", "r:1").body(empty()).unwrap();
    let seen = exchange_with(request, b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n", 64).await;
    assert!(seen.request.starts_with("HEAD /v1/models HTTP/1.1\r\n"));
    assert!(!seen.request.contains("content-length"));
    assert_eq!(seen.outcome.unwrap().2.unwrap(), b"");
}

#[tokio::test]
async fn a_close_before_the_head_is_a_close_not_a_malformed_answer() {
    for answer in [&b""[..], b"HTTP/1.1 200 OK\r\ncontent-"] {
        let error = exchange_with(post("{}"), answer, 3).await.outcome.unwrap_err();
        assert!(matches!(error, WireError::ClosedBeforeHead), "{error}");
        assert!(!error.is_malformed());
    }
}

#[tokio::test]
async fn answers_that_are_not_http_are_malformed() {
    let answers: [&[u8]; 6] = [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nx-bad: a\x01b\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: lots\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: +1\r\n\r\nx",
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n",
    ];
    for answer in answers {
        let error = exchange_with(post("{}"), answer, 64).await.outcome.unwrap_err();
        assert!(error.is_malformed(), "{error}");
    }
}

#[tokio::test]
async fn a_head_past_the_bound_is_refused() {
    let mut answer = b"HTTP/1.1 200 OK\r\n".to_vec();
    while answer.len() <= MAX_HEAD_BYTES {
        answer.extend_from_slice(b"x-padding: ");
        answer.extend_from_slice(&[b'a'; 1000]);
        answer.extend_from_slice(b"\r\n");
    }
    let error = exchange_with(post("{}"), &answer, 4096).await.outcome.unwrap_err();
    assert!(matches!(error, WireError::HeadTooLarge), "{error}");
}

#[tokio::test]
async fn bodies_cut_short_fail_and_say_how() {
    let short = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc";
    assert!(matches!(body_of(short).await, Err(WireError::Truncated { missing: 7 })));
    let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab";
    assert!(matches!(body_of(chunked).await, Err(WireError::ChunkedTruncated)));
    let overlong = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n";
    assert!(matches!(body_of(overlong).await, Err(WireError::MalformedChunk(_))));
}

/// Where a keeper puts the connection it is handed.
type Kept = std::sync::Arc<parking_lot::Mutex<Option<DuplexStream>>>;

/// A request on `client` that hands the connection to `kept` if the answer allows; the
/// answer's body is read to its end.
async fn exchange_keeping(client: DuplexStream, kept: &Kept) -> Result<Vec<u8>, WireError> {
    let keeper = kept.clone();
    let keep: Keep<DuplexStream> = Box::new(move |io| *keeper.lock() = Some(io));
    let request = Request::get("/v1/models").header("host", "r:1").body(empty()).unwrap();
    let response = exchange(client, Outgoing::Request(request), After::Keep(keep)).await?;
    Ok(response.into_body().collect().await?.to_bytes().to_vec())
}

#[tokio::test]
async fn a_kept_connection_carries_the_next_request_once_the_body_ended() {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let kept = Kept::default();
    let replica = tokio::spawn(async move {
        let mut requests = Vec::new();
        for answer in [
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\none",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n",
        ] {
            requests.push(read_request(&mut server).await);
            server.write_all(answer.as_bytes()).await.unwrap();
        }
        requests
    });
    assert_eq!(exchange_keeping(client, &kept).await.unwrap(), b"one");
    let again = kept.lock().take().expect("a clean end hands the connection back");
    assert_eq!(exchange_keeping(again, &kept).await.unwrap(), b"two");
    assert!(kept.lock().is_some(), "a chunked body's end hands it back too");
    let requests = replica.await.unwrap();
    assert!(requests.iter().all(|request| !request.contains("connection: close")));
}

#[tokio::test]
async fn a_connection_the_replica_will_close_is_not_kept() {
    // Each answer, and whether the replica then closes (the body delimited by the close).
    let answers: [(&[u8], bool); 4] = [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok", false),
        (b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok", false),
        (b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nok", true),
        // Bytes after the body: the next response would start with them.
        (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n", false),
    ];
    for (answer, closes) in answers {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let replica = tokio::spawn(async move {
            read_request(&mut server).await;
            server.write_all(answer).await.unwrap();
            if closes {
                drop(server);
            } else {
                std::future::pending::<()>().await;
            }
        });
        let kept = Kept::default();
        assert_eq!(exchange_keeping(client, &kept).await.unwrap(), b"ok");
        assert!(kept.lock().is_none(), "kept after {}", String::from_utf8_lossy(answer));
        replica.abort();
    }
}

#[tokio::test]
async fn an_empty_buffer_holds_no_memory_while_it_waits_and_keeps_every_byte_read() {
    let (mut replica, mut client) = tokio::io::duplex(1 << 16);
    let mut buffer = bytes::BytesMut::new();
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    let waiting = fill(std::pin::Pin::new(&mut client), &mut buffer, &mut cx);
    assert!(waiting.is_pending());
    assert_eq!(buffer.capacity(), 0, "nothing read, nothing held");
    replica.write_all(b"data: a\n\n").await.unwrap();
    let read = std::future::poll_fn(|cx| fill(std::pin::Pin::new(&mut client), &mut buffer, cx));
    assert_eq!(read.await.unwrap(), 9);
    assert_eq!(&buffer[..], b"data: a\n\n");
    // With room to spare, bytes go straight into the buffer's own room.
    buffer.reserve(READ_CHUNK);
    let room = buffer.capacity();
    replica.write_all(b"data: b\n\n").await.unwrap();
    let read = std::future::poll_fn(|cx| fill(std::pin::Pin::new(&mut client), &mut buffer, cx));
    assert_eq!(read.await.unwrap(), 9);
    assert_eq!(&buffer[..], b"data: a\n\ndata: b\n\n");
    assert_eq!(buffer.capacity(), room);
    drop(replica);
    let read = std::future::poll_fn(|cx| fill(std::pin::Pin::new(&mut client), &mut buffer, cx));
    assert_eq!(read.await.unwrap(), 0, "the end of the connection");
}
