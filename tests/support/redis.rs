//! A `redis-server` of a test's own on a free loopback port (a real Redis, never a mock),
//! for the gateways' shared store: tenants' quotas and sessions' placements.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// A `redis-server` of this test's own, killed when dropped.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    /// Starts one on a free loopback port; `None` (with a printed reason) if the binary is
    /// not installed.
    pub async fn start(test: &str) -> Option<Self> {
        let installed = std::process::Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status();
        if installed.is_err() {
            println!(
                "SKIPPED {test}: redis-server is not installed \
                 (apt-get install redis-server, or scripts/install-test-deps.sh)"
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Some(Self::start_on(port).await)
    }

    pub async fn start_on(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts");
        let server = Self { child, port };
        for _ in 0..1000 {
            if server.answers_ping().await {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("redis-server on port {port} never answered PING");
    }

    async fn answers_ping(&self) -> bool {
        let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await else {
            return false;
        };
        let mut answer = [0u8; 7];
        stream.write_all(b"PING\r\n").await.is_ok()
            && stream.read_exact(&mut answer).await.is_ok()
            && &answer == b"+PONG\r\n"
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn kill(mut self) {
        self.child.kill().await.unwrap();
    }

    /// Every key in the store.
    pub async fn keys(&self) -> Vec<String> {
        let client = redis::Client::open(self.url()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        redis::cmd("KEYS").arg("*").query_async(&mut connection).await.unwrap()
    }
}
