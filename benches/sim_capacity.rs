//! Capacity benchmark of one `laneway sim` process (run by `benches/sim_capacity.sh`): opens
//! N concurrent streaming chat requests, each on its own connection, reads every stream to
//! its end, and reports failures, the sim process's CPU seconds and peak RSS (from /proc).

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;

const PROMPT_TOKENS: usize = 200;
const LIMIT: Duration = Duration::from_secs(300);

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// (utime + stime) in seconds and VmHWM in MiB of a process.
fn cpu_and_peak_rss(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let peak_kib: f64 = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    // Linux reports CPU time in clock ticks of 1/100 s.
    (ticks / 100.0, peak_kib / 1024.0)
}

/// Runs one streamed request on a fresh connection; returns the SSE events received and
/// whether the stream ended with `[DONE]`.
async fn one_stream(addr: String, body: Bytes) -> Result<u64, String> {
    let stream = TcpStream::connect(&addr).await.map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    let request = http::Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("host", &addr)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| format!("send: {e}"))?;
    if response.status() != 200 {
        return Err(format!("status {}", response.status()));
    }
    let mut body = response.into_body();
    let mut events = 0;
    let mut tail = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        if let Some(data) = frame.data_ref() {
            events += data.windows(6).filter(|w| w == b"data: ").count() as u64;
            tail = data.to_vec();
        }
    }
    if !tail.ends_with(b"data: [DONE]\n\n") {
        return Err("stream ended without [DONE]".into());
    }
    Ok(events)
}

async fn sample_running(base: String, peak: Arc<AtomicU64>, stop: Arc<AtomicU64>) {
    let client = reqwest::Client::new();
    while stop.load(Ordering::Relaxed) == 0 {
        if let Ok(response) = client.get(format!("{base}/sim/stats")).send().await
            && let Ok(stats) = response.json::<laneway::sim::SimStats>().await
        {
            peak.fetch_max(stats.running, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::main]
async fn main() {
    let concurrency = env_number("SIM_CAPACITY_CONCURRENCY", 2000);
    let output_tokens = env_number("SIM_CAPACITY_OUTPUT_TOKENS", 128);
    // A built-in profile by name, or the benchmark's own wide profile.
    let profile_args = match std::env::var("SIM_CAPACITY_PROFILE") {
        Ok(name) if !name.is_empty() => vec!["--profile".to_owned(), name],
        _ => {
            let file = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/sim_capacity.toml");
            vec!["--config".to_owned(), file.to_owned()]
        }
    };
    let speed = std::env::var("SIM_CAPACITY_SPEED").unwrap_or_else(|_| "1".to_owned());
    let mut child = Command::new(env!("CARGO_BIN_EXE_laneway"))
        .args(["sim", "--port", "0", "--api-workers", "4", "--speed", &speed])
        .args(&profile_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("laneway sim starts");
    let pid = child.id().expect("pid");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().expect("first line");
    let base = first.strip_prefix("listening on ").expect("address line").to_owned();
    let addr = base.trim_start_matches("http://").to_owned();

    let content = "abc ".repeat(PROMPT_TOKENS - 4);
    let body = Bytes::from(
        serde_json::json!({
            "model": "sim-capacity",
            "messages": [{"role": "user", "content": content}],
            "max_tokens": output_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
        .to_string(),
    );
    let (cpu_before, _) = cpu_and_peak_rss(pid);
    let peak_running = Arc::new(AtomicU64::new(0));
    let stop_sampling = Arc::new(AtomicU64::new(0));
    let sampler =
        tokio::spawn(sample_running(base.clone(), peak_running.clone(), stop_sampling.clone()));
    let started = Instant::now();
    let tasks: Vec<_> =
        (0..concurrency).map(|_| tokio::spawn(one_stream(addr.clone(), body.clone()))).collect();
    let mut ok = 0;
    let mut events = 0;
    let mut errors: Vec<String> = Vec::new();
    for task in tasks {
        match tokio::time::timeout(LIMIT, task).await {
            Ok(Ok(Ok(count))) => {
                ok += 1;
                events += count;
            }
            Ok(Ok(Err(error))) => errors.push(error),
            Ok(Err(join)) => errors.push(join.to_string()),
            Err(_) => errors.push("timed out".into()),
        }
    }
    let wall = started.elapsed().as_secs_f64();
    stop_sampling.store(1, Ordering::Relaxed);
    let _ = sampler.await;
    let (cpu_after, peak_rss_mib) = cpu_and_peak_rss(pid);
    let _ = child.kill().await;

    println!(
        "sim capacity: {concurrency} concurrent streams x {output_tokens} tokens, 4 API workers, \
         {}, speed {speed}",
        profile_args.join(" ")
    );
    println!("  completed      {ok}/{concurrency}, errors {}", errors.len());
    for error in errors.iter().take(5) {
        println!("    error: {error}");
    }
    println!(
        "  peak running   {} sequences in the engine at once",
        peak_running.load(Ordering::Relaxed)
    );
    println!("  SSE events     {events} in {wall:.2} s wall ({:.0}/s)", events as f64 / wall);
    // Three events per stream carry no content: the role, the usage and [DONE].
    let content_events = events.saturating_sub(3 * ok as u64).max(1);
    println!(
        "  tokens/event   {:.2} (content events carry what queued up while a worker was busy)",
        (ok as u64 * output_tokens) as f64 / content_events as f64
    );
    println!(
        "  sim CPU        {:.2} s ({:.0}% of one core over the run)",
        cpu_after - cpu_before,
        100.0 * (cpu_after - cpu_before) / wall
    );
    println!("  sim peak RSS   {peak_rss_mib:.1} MiB");
    if !errors.is_empty() {
        std::process::exit(1);
    }
}
