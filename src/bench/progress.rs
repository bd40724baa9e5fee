//! The progress line shown while a run goes on: requests done, failures, elapsed time.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Counters the request tasks bump and the progress line reads.
#[derive(Debug, Default)]
pub struct Progress {
    pub done: AtomicU64,
    pub failures: AtomicU64,
}

impl Progress {
    pub fn record(&self, success: bool) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if !success {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Prints the progress line to stderr once a second until dropped; silent when `quiet`.
pub struct ProgressLine {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ProgressLine {
    pub fn start(progress: Arc<Progress>, planned: Option<u64>, quiet: bool) -> Self {
        if quiet {
            return Self { task: None };
        }
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let done = progress.done.load(Ordering::Relaxed);
                let failures = progress.failures.load(Ordering::Relaxed);
                let of = planned.map(|n| format!("/{n}")).unwrap_or_default();
                eprint!(
                    "\r  requests {done}{of}  failures {failures}  elapsed {:.0}s   ",
                    started.elapsed().as_secs_f64()
                );
                let _ = std::io::stderr().flush();
            }
        });
        Self { task: Some(task) }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            eprintln!();
        }
    }
}
