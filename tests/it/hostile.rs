//! Hostile input: a corpus of malformed and malicious requests (`tests/hostile/*.http`,
//! each with its expected status), generated giants (deep nesting, 100k-element arrays,
//! oversized and too many headers), slowloris clients, and property tests of the two
//! parsers that see untrusted bytes (request classification and SSE observation).

use std::time::Duration;

use crate::support::gateway::{start_gateway, start_sims};
use laneway::gateway::GatewayHandle;
use laneway::gateway::classify::classify;
use laneway::openai::request::Endpoint;
use laneway::openai::sse::{SseEvent, SseScanner};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends raw bytes and returns the response's status (0: closed without a response).
async fn raw_status(gateway: &GatewayHandle, request: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(gateway.addr()).await.unwrap();
    // The server may answer and close before reading everything (413, 431): ignore that.
    let _ = stream.write_all(request).await;
    let head = read_head(&mut stream).await;
    head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0)
}

/// Reads until a response head has arrived or the server closed (bounded at 10 s).
pub(crate) async fn read_head(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        while !received.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("no answer within 10 s");
    String::from_utf8_lossy(&received).into_owned()
}

/// A corpus file: `# expect STATUS`, then the request with LF line ends in its head
/// (sent as CRLF) and `Content-Length: auto` filled in.
fn load_case(bytes: &[u8]) -> (u16, Vec<u8>) {
    let newline = bytes.iter().position(|&b| b == b'\n').unwrap();
    let first = std::str::from_utf8(&bytes[..newline]).unwrap();
    let status = first.strip_prefix("# expect ").unwrap().trim().parse().unwrap();
    let rest = &bytes[newline + 1..];
    let (head, body) = match rest.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&rest[..at], &rest[at + 2..]),
        None => (rest, &[][..]),
    };
    let head = String::from_utf8_lossy(head)
        .replace("Content-Length: auto", &format!("Content-Length: {}", body.len()))
        .replace('\n', "\r\n");
    let mut request = format!("{head}\r\n\r\n").into_bytes();
    request.extend_from_slice(body);
    (status, request)
}

fn chat_request(extra_headers: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
         {extra_headers}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

#[tokio::test]
async fn every_hostile_input_gets_its_expected_status_and_the_gateway_keeps_serving() {
    let sims = start_sims(1, 1).await;
    let gateway = start_gateway(crate::support::gateway::config_for(&sims)).await;
    let mut cases: Vec<(String, u16, Vec<u8>)> = Vec::new();
    // Files only: `tests/hostile/ingress/` has its own test (hostile_ingress.rs).
    let mut paths: Vec<_> = std::fs::read_dir("tests/hostile")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    for path in paths {
        let (status, request) = load_case(&std::fs::read(&path).unwrap());
        cases.push((path.file_name().unwrap().to_string_lossy().into(), status, request));
    }
    assert!(cases.len() >= 15);
    let deep = format!("{{\"model\":\"m\",\"messages\":{}", "[".repeat(100_000));
    cases.push(("deep-nesting".into(), 400, chat_request("", deep.as_bytes())));
    let message = r#"{"role":"user","content":"x"}"#;
    let many = format!("{{\"model\":\"m\",\"messages\":[{}]}}", vec![message; 100_000].join(","));
    // Valid JSON: the replica refuses a prompt over its context length.
    cases.push(("array-100k".into(), 400, chat_request("", many.as_bytes())));
    let numbers =
        format!("{{\"model\":\"m\",\"prompt\":\"x\",\"stop\":[{}]}}", vec!["1"; 100_000].join(","));
    cases.push(("numbers-100k".into(), 400, chat_request("", numbers.as_bytes())));
    let big_header = format!("x-big: {}\r\n", "a".repeat(70_000));
    cases.push(("header-too-large".into(), 431, chat_request(&big_header, b"{}")));
    let many_headers: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    cases.push(("too-many-headers".into(), 431, chat_request(&many_headers, b"{}")));
    let mut wrong = Vec::new();
    for (name, expected, request) in &cases {
        let status = raw_status(&gateway, request).await;
        if status != *expected {
            wrong.push(format!("{name}: expected {expected}, got {status}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Still serving, and nothing left counted in flight.
    let (_, ok) = load_case(&std::fs::read("tests/hostile/ok-baseline.http").unwrap());
    assert_eq!(raw_status(&gateway, &ok).await, 200);
    crate::support::gateway::wait_until("idle", || gateway.replica_in_flight("sim-0") == 0).await;
    gateway.shutdown().await;
}

#[tokio::test]
async fn slowloris_clients_are_cut_at_the_header_timeout_while_others_are_served() {
    let sims = start_sims(1, 1).await;
    let mut config = crate::support::gateway::config_for(&sims);
    config.reliability.timeouts.client_header = Duration::from_millis(300);
    let gateway = start_gateway(config).await;
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nx-padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let dribblers: Vec<_> = (0..4)
        .map(|_| {
            let addr = gateway.addr();
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                let mut sent = 0;
                for byte in head.iter() {
                    // Pacing, not synchronisation: one byte every 20 ms, 2 s for the head.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if stream.write_all(&[*byte]).await.is_err() {
                        break;
                    }
                    sent += 1;
                }
                let mut rest = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
                    .await;
                (sent, rest)
            })
        })
        .collect();
    let client = reqwest::Client::new();
    let mut served = 0;
    for _ in 0..10 {
        let response = client
            .post(crate::support::gateway::url(&gateway, "/v1/chat/completions"))
            .json(&crate::support::gateway::chat_body(16, 4, false))
            .send()
            .await
            .unwrap();
        served += usize::from(response.status() == 200);
    }
    let mut cut = 0;
    for dribbler in dribblers {
        let (sent, _) = dribbler.await.unwrap();
        // Cut long before the whole head went out.
        cut += usize::from(sent < head.len());
    }
    assert_eq!(served, 10);
    assert_eq!(cut, 4);
    gateway.shutdown().await;
}

fn events(chunks: &[&[u8]]) -> Vec<String> {
    let mut scanner = SseScanner::new();
    let mut seen = Vec::new();
    for chunk in chunks {
        scanner.feed(chunk, |event: SseEvent| seen.push(format!("{event:?}")));
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Classification answers every body, never panics.
    #[test]
    fn classification_never_panics(body in proptest::collection::vec(any::<u8>(), 0..2048), threshold in 1u64..5000) {
        for endpoint in [Endpoint::Chat, Endpoint::Completions] {
            let _ = classify(endpoint, &body, None, threshold);
        }
    }

    /// SSE observation sees the same events however the stream is cut into reads.
    #[test]
    fn sse_observation_ignores_chunk_boundaries(
        events_in in proptest::collection::vec("[ -~]{0,40}", 0..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut stream: Vec<u8> = Vec::new();
        for event in &events_in {
            stream.extend_from_slice(format!("data: {{\"choices\":[{{\"text\":{event:?}}}]}}\n\n").as_bytes());
        }
        stream.extend_from_slice(&noise);
        let whole = events(&[&stream]);
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        points.sort_unstable();
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut start = 0;
        for point in points {
            pieces.push(&stream[start..point]);
            start = point;
        }
        pieces.push(&stream[start..]);
        prop_assert_eq!(events(&pieces), whole);
    }
}

/// The fuzz targets' properties on their seed corpus, on the stable toolchain (the
/// targets themselves need nightly and `cargo fuzz`).
#[test]
fn the_fuzz_corpus_replays_without_a_failure() {
    let files = |target: &str| {
        let mut paths: Vec<_> = std::fs::read_dir(format!("fuzz/corpus/{target}"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        paths.sort();
        paths.into_iter().map(|path| std::fs::read(path).unwrap()).collect::<Vec<_>>()
    };
    let classify_inputs = files("classify");
    assert!(!classify_inputs.is_empty());
    for data in &classify_inputs {
        for endpoint in [Endpoint::Chat, Endpoint::Completions] {
            let _ = classify(endpoint, data, None, 2048);
        }
    }
    let sse_inputs = files("sse_observe");
    assert!(!sse_inputs.is_empty());
    for data in &sse_inputs {
        let whole = events(&[data]);
        let bytes: Vec<&[u8]> = data.chunks(1).collect();
        assert_eq!(events(&bytes), whole);
        for cut in 0..=data.len() {
            assert_eq!(events(&[&data[..cut], &data[cut..]]), whole);
        }
    }
}

#[tokio::test]
async fn an_h2_connection_gets_no_more_concurrent_streams_than_the_limit() {
    let mut stub = crate::support::gateway::start_stub().await;
    let mut config =
        crate::support::gateway::loopback_config(vec![crate::support::gateway::replica(
            "stub", stub.addr,
        )]);
    config.reliability.limits.h2_max_concurrent_streams = 2;
    let gateway = start_gateway(config).await;
    let client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let url = crate::support::gateway::url(&gateway, "/v1/chat/completions");
    let requests: Vec<_> = (0..3)
        .map(|_| {
            let request = client.post(&url).json(&crate::support::gateway::chat_body(16, 4, true));
            tokio::spawn(async move { request.send().await.unwrap().text().await.unwrap() })
        })
        .collect();
    let first = stub.streams.recv().await.unwrap();
    let second = stub.streams.recv().await.unwrap();
    // The third waits on the client side for a stream slot on the shared connection.
    let third = tokio::time::timeout(Duration::from_millis(500), stub.streams.recv()).await;
    assert!(third.is_err(), "a third stream was opened on a connection limited to two");
    drop((first, second));
    let third = stub.streams.recv().await.unwrap();
    drop(third);
    for request in requests {
        tokio::time::timeout(Duration::from_secs(10), request).await.unwrap().unwrap();
    }
    gateway.shutdown().await;
}

/// Reads from a raw connection until the server closes it (bounded at 10 s); the bytes.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let read = stream.read_to_end(&mut received);
    match tokio::time::timeout(Duration::from_secs(10), read).await {
        Ok(_) => received,
        Err(_) => panic!("the connection was still open after 10 s"),
    }
}

/// The HTTP/2 frame types in a byte stream from the server.
fn h2_frame_types(mut bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while bytes.len() >= 9 {
        let length = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        types.push(bytes[3]);
        bytes = &bytes[(9 + length).min(bytes.len())..];
    }
    types
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame.
const H2_SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];
const GOAWAY: u8 = 7;

#[tokio::test]
async fn h2_connections_that_never_complete_a_request_are_cut_with_goaway() {
    let sims = start_sims(1, 1).await;
    let mut config = crate::support::gateway::config_for(&sims);
    config.reliability.timeouts.client_header = Duration::from_millis(300);
    let gateway = start_gateway(config).await;
    // Preface and SETTINGS only.
    let mut idle = TcpStream::connect(gateway.addr()).await.unwrap();
    idle.write_all(&[H2_PREFACE, H2_SETTINGS].concat()).await.unwrap();
    // HEADERS on stream 1 without END_HEADERS, and no CONTINUATION ever.
    let mut unfinished = TcpStream::connect(gateway.addr()).await.unwrap();
    let headers_frame = [0, 0, 1, 1, 0x1, 0, 0, 0, 1, 0x82]; // :method GET, flags END_STREAM only
    unfinished.write_all(&[H2_PREFACE, H2_SETTINGS, &headers_frame].concat()).await.unwrap();
    for stream in [&mut idle, &mut unfinished] {
        let received = read_until_closed(stream).await;
        let types = h2_frame_types(&received);
        assert!(types.contains(&GOAWAY), "frames before the close: {types:?}");
    }
    // Others are still served.
    let response = reqwest::Client::new()
        .post(crate::support::gateway::url(&gateway, "/v1/chat/completions"))
        .json(&crate::support::gateway::chat_body(16, 2, false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_slowly_dribbled_body_is_cut_with_408() {
    let sims = start_sims(1, 1).await;
    let mut config = crate::support::gateway::config_for(&sims);
    config.reliability.timeouts.client_body = Duration::from_millis(300);
    let gateway = start_gateway(config).await;
    let body = br#"{"model":"m","messages":[{"role":"user","content":"a body that arrives one byte at a time, far too slowly"}]}"#;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let stream = TcpStream::connect(gateway.addr()).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    writer.write_all(head.as_bytes()).await.unwrap();
    let dribble = tokio::spawn(async move {
        let mut sent = 0;
        for byte in body {
            // Pacing, not synchronisation: a byte every 50 ms would take 5 s for the body.
            tokio::time::sleep(Duration::from_millis(50)).await;
            if writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            sent += 1;
        }
        sent
    });
    let head = read_head(&mut reader).await;
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    dribble.abort();
    let metrics = gateway.metrics_text();
    let timed_out = crate::support::gateway::sample(
        &metrics,
        "laneway_request_errors_total{entry=\"short\",kind=\"client_body_timeout\"}",
    );
    assert_eq!(timed_out, Some(1.0), "{metrics}");
    gateway.shutdown().await;
}
