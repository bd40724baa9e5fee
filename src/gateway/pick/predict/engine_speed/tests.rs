//! The engine's prefill speed read off its counters: the two readings, the windows, the
//! first scrape's history and the engine's prefill concurrency.

use std::cell::Cell;
use std::time::Duration;

use super::*;

/// An engine's speed scraped every ten minutes: windows far longer than their prefills'
/// seconds, so the engine ran one prefill at a time.
struct Scraped {
    speed: EngineSpeed,
    clock: Cell<Instant>,
}

impl Default for Scraped {
    fn default() -> Self {
        Self { speed: EngineSpeed::default(), clock: Cell::new(Instant::now()) }
    }
}

impl Scraped {
    fn observe(&self, work: EngineWork) -> Option<Slopes> {
        self.observe_after(work, Duration::from_secs(600))
    }

    fn observe_after(&self, work: EngineWork, wall: Duration) -> Option<Slopes> {
        self.clock.set(self.clock.get() + wall);
        self.speed.observe(work, self.clock.get())
    }
}

impl std::ops::Deref for Scraped {
    type Target = EngineSpeed;
    fn deref(&self) -> &EngineSpeed {
        &self.speed
    }
}

/// Counters after `requests` more prefills of `prompt` tokens, `cached` of them cached,
/// each taking `fixed + per_token * uncached` seconds.
fn served(
    work: &mut EngineWork,
    requests: u32,
    (prompt, cached): (f64, f64),
    (fixed, per_token): (f64, f64),
) -> EngineWork {
    for _ in 0..requests {
        work.add(EngineWork {
            prefill_seconds: fixed + per_token * (prompt - cached),
            prefills: 1.0,
            computed_tokens: prompt - cached,
        });
    }
    *work
}

#[test]
fn hits_and_misses_tell_the_engines_cost_per_token_from_its_cost_per_request() {
    let speed = Scraped::default();
    let engine = (0.01, 80e-6);
    let mut work = EngineWork::default();
    assert_eq!(speed.observe(work), None);
    // Windows of misses, of hits and of both: 3,100 tokens, 2,944 of them cached.
    for round in 0..3 {
        speed.observe(served(&mut work, 4, (3100.0, 0.0), engine));
        speed.observe(served(&mut work, 4, (3100.0, 2944.0), engine));
        speed.observe(served(&mut work, 2, (3100.0, 0.0), engine));
        let published = speed.observe(served(&mut work, 2, (3100.0, 2944.0), engine));
        if round == 0 {
            assert!(published.is_some(), "published with the third window");
        }
    }
    let slope = speed.slope().unwrap();
    assert!((slope - 80e-6).abs() < 1e-9, "{slope}");
    // The line through the origin spreads each request's 10 ms over its tokens (84 us:
    // the misses' 3,100 tokens weigh most).
    assert!(speed.reads_fit());
    let through_origin = speed.slope_read(EngineReading::ThroughOrigin).unwrap();
    assert!((through_origin - 84e-6).abs() < 1e-6, "{through_origin}");
}

#[test]
fn one_shape_of_request_is_read_through_the_origin_and_a_restart_starts_over() {
    let speed = Scraped::default();
    let mut work = EngineWork::default();
    speed.observe(work);
    for _ in 0..6 {
        speed.observe(served(&mut work, 4, (1000.0, 0.0), (0.01, 50e-6)));
    }
    // Every window has the same tokens per request: no telling the two terms apart, and
    // each request's 10 ms is spread over its 1,000 tokens.
    let slope = speed.slope().unwrap();
    assert!((slope - 60e-6).abs() < 1e-9, "{slope}");
    assert!(!speed.reads_fit());
    assert_eq!(speed.slope_read(EngineReading::ThroughOrigin), Some(slope));
    // A restart: counters fall back. The next scrape is only a baseline.
    let mut restarted = EngineWork::default();
    assert_eq!(speed.observe(served(&mut restarted, 1, (500.0, 0.0), (0.01, 50e-6))), None);
    for _ in 0..3 {
        speed.observe(served(&mut restarted, 4, (4000.0, 0.0), (0.01, 50e-6)));
        speed.observe(served(&mut restarted, 4, (200.0, 0.0), (0.01, 50e-6)));
    }
    let slope = speed.slope().unwrap();
    assert!((slope - 50e-6).abs() < 1e-9, "{slope}");
}

#[test]
fn replicas_of_one_speed_serving_requests_of_nearly_one_size_read_alike() {
    // Conversation turns: 450 to 520 uncached tokens a request, each window's prefills
    // 20% slower or faster by what else its steps ran, in another order on each replica.
    let read = |phase: usize| {
        let speed = Scraped::default();
        let mut work = EngineWork::default();
        speed.observe(work);
        for window in 0..24 {
            let uncached = [450.0, 470.0, 500.0, 520.0][window % 4];
            let noise = [1.2, 0.8, 1.1, 0.9, 1.0][(window + phase) % 5];
            speed.observe(served(&mut work, 4, (uncached, 0.0), (0.01 * noise, 23e-6 * noise)));
        }
        speed.slope().unwrap()
    };
    let slopes: Vec<f64> = (0..5).map(read).collect();
    let (low, high) = slopes.iter().fold((f64::MAX, 0.0f64), |(l, h), &s| (l.min(s), h.max(s)));
    // Fitted with a fixed cost apart, such windows read 50 and 216 us a token.
    assert!(high < low * 1.15, "{slopes:?}");
    // 23 us a token plus 10 ms spread over about 485 tokens.
    assert!(slopes.iter().all(|s| (38e-6..50e-6).contains(s)), "{slopes:?}");
}

#[test]
fn a_slope_not_told_from_the_steps_noise_is_read_through_the_origin() {
    // Shared prefixes' first windows: a hit scheduled beside a miss's chunk took about
    // as long as the miss, so each window's seconds follow its requests, barely its
    // uncached tokens (four requests, one to three of them misses of 3,000 tokens).
    let speed = Scraped::default();
    let mut work = EngineWork::default();
    speed.observe(work);
    let windows = [(1.0, 0.19), (3.0, 0.23), (2.0, 0.18), (1.0, 0.21), (3.0, 0.20)];
    for (misses, seconds_each) in windows {
        work.add(EngineWork {
            prefill_seconds: 4.0 * seconds_each,
            prefills: 4.0,
            computed_tokens: misses * 3000.0 + (4.0 - misses) * 100.0,
        });
        speed.observe(work);
    }
    let fit = speed.fit.lock();
    let [nn, nu, uu, nt, ut, _] = fit.sums;
    let fitted = (nn * ut - nu * nt) / (nn * uu - nu * nu);
    let through_origin = ut / uu;
    drop(fit);
    // Fitted, a token would cost a few microseconds and a miss about what a hit does.
    assert!(fitted > 0.0 && fitted < through_origin / 10.0, "{fitted} {through_origin}");
    let slope = speed.slope().unwrap();
    assert!((slope - through_origin).abs() < 1e-12, "{slope} {through_origin}");
    // Windows whose seconds follow their tokens (0.01 s a request, 80 us a token, 5%
    // either way) are read as fitted again once they outweigh the first ones.
    for window in 0..20 {
        let misses = [1.0, 3.0, 2.0, 0.0][window % 4];
        let noise = [1.05, 0.95, 1.0, 1.02, 0.98][window % 5];
        let uncached = misses * 3000.0 + (4.0 - misses) * 100.0;
        work.add(EngineWork {
            prefill_seconds: (4.0 * 0.01 + 80e-6 * uncached) * noise,
            prefills: 4.0,
            computed_tokens: uncached,
        });
        speed.observe(work);
    }
    let slope = speed.slope().unwrap();
    assert!((70e-6..90e-6).contains(&slope), "{slope}");
}

#[test]
fn prefills_that_shared_the_engines_steps_read_the_engines_cost() {
    // Windows of four prefills of `uncached` tokens each, at 5 ms a request and 50 us a
    // token of the engine's own work. Four at once share every step: each counts the
    // four's work, and the window takes that long on the wall clock.
    let read = |at_once: bool, sizes: [f64; 2]| {
        let speed = Scraped::default();
        let mut work = EngineWork::default();
        speed.observe(work);
        for window in 0..12 {
            let uncached = sizes[window % 2];
            let own = 0.005 + 50e-6 * uncached;
            let (each, wall) = if at_once { (4.0 * own, 4.0 * own) } else { (own, 600.0) };
            let work = served(&mut work, 4, (uncached, 0.0), (each, 0.0));
            speed.observe_after(work, Duration::from_secs_f64(wall));
        }
        let concurrency = speed.concurrency().expect("published with the slopes");
        (concurrency, speed.slope_read(EngineReading::ThroughOrigin).unwrap(), speed.slope())
    };
    // One size: the line, 5 ms spread over 500 tokens, alike one by one or four at once.
    let (concurrency, line, slope) = read(true, [500.0, 500.0]);
    assert!((concurrency - 4.0).abs() < 1e-9, "{concurrency}");
    assert!((line - 60e-6).abs() < 1e-9 && slope == Some(line), "{line} {slope:?}");
    let (concurrency, alone, _) = read(false, [500.0, 500.0]);
    assert_eq!(concurrency, 1.0);
    assert!((alone - line).abs() < 1e-9, "{alone} {line}");
    // Two sizes tell the terms apart: the fit reads the engine's 50 us a token.
    let (_, _, slope) = read(true, [300.0, 700.0]);
    assert!((slope.unwrap() - 50e-6).abs() < 1e-9, "{slope:?}");
}

#[test]
fn an_engine_idle_part_of_its_windows_reads_at_least_its_own_cost() {
    // Four prefills at once, then as long idle: counted at half their concurrency, the
    // line reads twice the engine's cost, never below it.
    let speed = Scraped::default();
    let mut work = EngineWork::default();
    speed.observe(work);
    for _ in 0..12 {
        let each = 4.0 * 0.03;
        let work = served(&mut work, 4, (500.0, 0.0), (each, 0.0));
        speed.observe_after(work, Duration::from_secs_f64(2.0 * each));
    }
    let slope = speed.slope().unwrap();
    assert!((slope - 120e-6).abs() < 1e-9, "{slope}");
    // The history before the first scrape has no wall time: it leaves the concurrency
    // at one.
    let speed = Scraped::default();
    speed.observe(EngineWork { prefill_seconds: 64.0, prefills: 100.0, computed_tokens: 50_000.0 });
    assert_eq!(speed.fit.lock().concurrency(), 1.0);
    assert!((speed.slope().unwrap() - 64.0 / 50_000.0).abs() < 1e-12);
}

#[test]
fn a_window_closes_only_with_enough_prefills() {
    let speed = Scraped::default();
    let mut work = EngineWork::default();
    speed.observe(work);
    for _ in 0..12 {
        // One prefill a scrape: a window every fourth.
        speed.observe(served(&mut work, 1, (3000.0, 0.0), (0.0, 80e-6)));
    }
    let fit = speed.fit.lock();
    assert_eq!((fit.weight > 2.0, fit.prefills), (true, 12.0));
}

#[test]
fn an_engine_that_served_before_the_first_scrape_has_its_speed_from_it() {
    // Two replicas that served before the gateway started, one eight times slower.
    let read_first_scrape = |per_token: f64| {
        let speed = Scraped::default();
        let mut work = EngineWork::default();
        speed.observe(served(&mut work, 32, (400.0, 0.0), (0.005, per_token)));
        speed.slope()
    };
    let fast = read_first_scrape(80e-6).expect("published at the first scrape");
    let slow = read_first_scrape(640e-6).expect("published at the first scrape");
    // Through the origin: 5 ms a request spread over its 400 tokens.
    assert!((fast - 92.5e-6).abs() < 1e-9, "{fast}");
    assert!((slow - 652.5e-6).abs() < 1e-9, "{slow} against {fast}");
    // A long history weighs as one window: the engine slowed, and the windows after it
    // say so within a few.
    let speed = Scraped::default();
    let mut work = EngineWork::default();
    speed.observe(served(&mut work, 100_000, (400.0, 0.0), (0.0, 80e-6)));
    for _ in 0..10 {
        speed.observe(served(&mut work, 4, (400.0, 0.0), (0.0, 160e-6)));
    }
    let slope = speed.slope().unwrap();
    assert!(slope > 140e-6, "{slope}");
    // Fewer prefills than a window: they open the first window, and nothing is published
    // before the windows hold twelve.
    let speed = Scraped::default();
    let mut work = EngineWork::default();
    let mut three_more = || speed.observe(served(&mut work, 3, (400.0, 0.0), (0.0, 80e-6)));
    let published: Vec<bool> = (0..4).map(|_| three_more().is_some()).collect();
    assert_eq!(published, [false, false, false, true]);
    assert_eq!(speed.fit.lock().prefills, 12.0);
    assert!((speed.slope().unwrap() - 80e-6).abs() < 1e-12);
}
