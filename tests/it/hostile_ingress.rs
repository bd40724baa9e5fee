//! The ingress refuses what must not reach a replica: the reproducers of
//! `tests/hostile/ingress/*.http` (exact bytes: each `# expect STATUS reaches N`), sent on
//! the smart listener, a dedicated entry's and the debug listener, under each connection
//! strategy, in front of a raw replica that records every request it reads whole; then the
//! response side, against a raw replica that answers malformed framing.

use std::time::Duration;

use laneway::gateway::config::RoutesConfig;
use laneway::gateway::{Entry, GatewayConfig, GatewayHandle, Strategy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::gateway::{loopback_config, replica, sample, start_gateway};
use crate::support::raw_replica::{Answer, RawReplica};

const STRATEGIES: [Strategy; 3] = [Strategy::ForceClose, Strategy::Spread, Strategy::KeepAlive];

/// A small body limit, so that a body over it is cheap to send.
const BODY_LIMIT: usize = 64 * 1024;

struct Case {
    name: String,
    status: u16,
    /// Requests the replica reads whole because of it.
    reaches: usize,
    bytes: Vec<u8>,
}

fn cases() -> Vec<Case> {
    let mut paths: Vec<_> =
        std::fs::read_dir("tests/hostile/ingress").unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    let mut cases: Vec<Case> = paths
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path).unwrap();
            let newline = bytes.iter().position(|&b| b == b'\n').unwrap();
            let first = std::str::from_utf8(&bytes[..newline]).unwrap();
            let words: Vec<&str> = first.split_whitespace().collect();
            assert_eq!((words[1], words[3]), ("expect", "reaches"), "{}", path.display());
            Case {
                name: path.file_name().unwrap().to_string_lossy().into_owned(),
                status: words[2].parse().unwrap(),
                reaches: words[4].parse().unwrap(),
                bytes: bytes[newline + 1..].to_vec(),
            }
        })
        .collect();
    assert!(cases.len() >= 14, "the corpus went missing");
    // Bodies over the limit, declared and chunked, to a forwarded path.
    let big = vec![b'a'; BODY_LIMIT + 1];
    let mut declared =
        format!("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", big.len())
            .into_bytes();
    declared.extend_from_slice(&big);
    cases.push(Case {
        name: "over-limit-declared".into(),
        status: 413,
        reaches: 0,
        bytes: declared,
    });
    let mut chunked =
        b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for piece in big.chunks(8192) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    cases.push(Case { name: "over-limit-chunked".into(), status: 413, reaches: 0, bytes: chunked });
    cases
}

/// The same request aimed at the debug entry: its target under `/debug/r0`.
fn to_debug(bytes: &[u8]) -> Vec<u8> {
    let space = bytes.iter().position(|&b| b == b' ').unwrap();
    let mut aimed = bytes[..=space].to_vec();
    aimed.extend_from_slice(b"/debug/r0");
    aimed.extend_from_slice(&bytes[space + 1..]);
    aimed
}

/// Sends raw bytes on a fresh connection; returns the status and the head (0: closed first).
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(request).await;
    let text = crate::hostile::read_head(&mut stream).await;
    let status = text.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (status, text)
}

fn config(replica_addr: std::net::SocketAddr, strategy: Strategy) -> GatewayConfig {
    let mut config = loopback_config(vec![replica("r0", replica_addr)]);
    config.body_limit_bytes = BODY_LIMIT;
    config.routes = RoutesConfig::forwarding(&["/tokenize"]).unwrap();
    for entry in [Entry::Short, Entry::Long, Entry::Debug] {
        config.entry_mut(entry).strategy = strategy;
    }
    config.entry_mut(Entry::Short).listen = Some("127.0.0.1:0".parse().unwrap());
    config.entry_mut(Entry::Debug).listen = Some("127.0.0.1:0".parse().unwrap());
    config
}

/// A client on a fresh connection is answered with its own response after each case.
async fn second_client_is_served(addr: std::net::SocketAddr, debug: bool, id: &str) {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}"#;
    let target = if debug { "/debug/r0/v1/chat/completions" } else { "/v1/chat/completions" };
    let request = format!(
        "POST {target} HTTP/1.1\r\nHost: x\r\nx-request-id: {id}\r\ncontent-type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (status, head) = exchange(addr, request.as_bytes()).await;
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains(&format!("x-request-id: {id}")), "{head}");
}

#[tokio::test]
async fn ambiguous_requests_and_closed_routes_never_reach_a_replica() {
    for strategy in STRATEGIES {
        let replica = RawReplica::start(Answer::Chat).await;
        let gateway = start_gateway(config(replica.addr, strategy)).await;
        let listeners = [
            ("smart", gateway.addr(), false),
            ("short", gateway.entry_addr(Entry::Short).unwrap(), false),
            ("debug", gateway.entry_addr(Entry::Debug).unwrap(), true),
        ];
        let mut wrong = Vec::new();
        let mut served = 0;
        for (listener, addr, debug) in listeners {
            for case in cases() {
                // The route table is the public listeners'; the debug entry reaches any
                // path of the replica it names, behind its own keys.
                if debug && case.status == 404 {
                    continue;
                }
                let bytes = if debug { to_debug(&case.bytes) } else { case.bytes.clone() };
                let before = replica.requests().len();
                let (status, head) = exchange(addr, &bytes).await;
                served += 1;
                let id = format!("after-{served}");
                second_client_is_served(addr, debug, &id).await;
                let requests = replica.requests();
                let reached = requests.len() - before - 1;
                let label = format!("{strategy:?} {listener} {}", case.name);
                if status != case.status || reached != case.reaches {
                    wrong.push(format!(
                        "{label}: {status} and {reached} reached, expected {} and {}; {head:?}",
                        case.status, case.reaches
                    ));
                }
                // A refused head, or a body not read to its end, ends the connection, and
                // the answer says so.
                if [400, 405, 413, 501].contains(&status) {
                    let head = head.to_ascii_lowercase();
                    let says_close = head.contains("connection: close\r\n");
                    if !says_close || head.contains("keep-alive: timeout") {
                        wrong.push(format!("{label}: the answer does not say it closes: {head}"));
                    }
                }
                // Nothing smuggled behind a refused head was ever read as a request.
                if requests.iter().any(|r| r.target.contains("smuggled")) {
                    wrong.push(format!("{label}: a smuggled request reached the replica"));
                }
                let last = requests.last().unwrap();
                assert_eq!(last.header("x-request-id"), Some(id.as_str()), "{label}");
                if case.name.starts_with("chunked-ok") {
                    // A chunked body the gateway accepts reaches the replica whole, decoded.
                    let sent = &requests[requests.len() - 2];
                    assert_eq!(sent.method, "POST", "{label}");
                    assert!(
                        sent.body.starts_with(b"{\"model\":\"m\"") && sent.body.ends_with(b"}")
                    );
                }
                if case.name.starts_with("connection-names-request-id") {
                    let sent = &requests[requests.len() - 2];
                    assert_eq!(sent.header("x-request-id"), Some("client-id-7"), "{label}");
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        // A client's broken body is the client's error, never the replica's.
        let metrics = gateway.metrics_text();
        assert_eq!(gateway.replica_failures("r0"), 0, "{strategy:?}");
        assert!(!metrics.contains("kind=\"upstream_reset\""), "{strategy:?}: {metrics}");
        let errors = |kind: &str| {
            ["short", "debug"]
                .iter()
                .filter_map(|entry| {
                    let prefix = format!(
                        "laneway_request_errors_total{{entry=\"{entry}\",kind=\"{kind}\"}}"
                    );
                    sample(&metrics, &prefix)
                })
                .sum::<f64>()
        };
        assert!(errors("bad_framing") >= 24.0, "{strategy:?}: {metrics}");
        assert!(errors("client_body") >= 3.0, "{strategy:?}: {metrics}");
        assert!(errors("route_not_found") >= 4.0, "{strategy:?}: {metrics}");
        gateway.shutdown().await;
    }
}

/// What a client gets from a replica's answer: status, head (lowercase) and body.
async fn through(gateway: &GatewayHandle) -> (u16, String, String) {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nconnection: close\r\n\
         content-type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(gateway.addr()).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received))
        .await
        .expect("no answer within 10 s")
        .unwrap();
    let text = String::from_utf8_lossy(&received).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

#[tokio::test]
async fn repeated_lengths_that_agree_reach_the_client_as_one() {
    let answers: [&'static [u8]; 2] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\nhello",
    ];
    for answer in answers {
        for strategy in STRATEGIES {
            let replica = RawReplica::start(Answer::Raw(answer)).await;
            let gateway = start_gateway(config(replica.addr, strategy)).await;
            let (status, head, body) = through(&gateway).await;
            assert_eq!((status, body.as_str()), (200, "hello"), "{strategy:?} {head}");
            assert_eq!(head.matches("content-length").count(), 1, "{strategy:?} {head}");
            assert!(head.contains("content-length: 5\r\n") || head.ends_with("content-length: 5"));
            gateway.shutdown().await;
        }
    }
}

#[tokio::test]
async fn lengths_that_disagree_and_unasked_switches_are_bad_gateways() {
    let answers: [&'static [u8]; 3] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!",
    ];
    for answer in answers {
        for strategy in STRATEGIES {
            let replica = RawReplica::start(Answer::Raw(answer)).await;
            let gateway = start_gateway(config(replica.addr, strategy)).await;
            let (status, head, _) = through(&gateway).await;
            let shown = String::from_utf8_lossy(answer);
            assert_eq!(status, 502, "{strategy:?} {shown}: {head}");
            gateway.shutdown().await;
        }
    }
    // laneway's own client (force_close, spread) also refuses an interim answer nobody asked
    // for; hyper's pooled client (keep_alive) skips it as RFC 9110 §15.2 lets a client.
    let processing: &'static [u8] =
        b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    for strategy in [Strategy::ForceClose, Strategy::Spread] {
        let replica = RawReplica::start(Answer::Raw(processing)).await;
        let gateway = start_gateway(config(replica.addr, strategy)).await;
        assert_eq!(through(&gateway).await.0, 502, "{strategy:?}");
        gateway.shutdown().await;
    }
}

#[tokio::test]
async fn a_length_beside_chunks_is_dropped_and_its_connection_not_reused() {
    let answer: &'static [u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    for strategy in STRATEGIES {
        let replica = RawReplica::start(Answer::Raw(answer)).await;
        let gateway = start_gateway(config(replica.addr, strategy)).await;
        let before = replica.requests().len();
        for _ in 0..2 {
            let (status, head, body) = through(&gateway).await;
            assert_eq!(status, 200, "{strategy:?} {head}");
            assert!(!head.contains("content-length: 50"), "{strategy:?} {head}");
            // The client's own framing carries exactly the five bytes the chunks held.
            let decoded = if head.contains("transfer-encoding: chunked") {
                body.trim_start_matches("5\r\n").trim_end_matches("\r\n0\r\n\r\n").to_string()
            } else {
                body
            };
            assert_eq!(decoded, "hello", "{strategy:?} {head}");
        }
        // Two requests, each on a connection of its own: none was reused after such an answer.
        let requests = replica.requests();
        assert_eq!(requests.len() - before, 2);
        let (first, second) = (&requests[requests.len() - 2], &requests[requests.len() - 1]);
        assert_ne!(first.connection, second.connection, "{strategy:?}");
        gateway.shutdown().await;
    }
}
