//! Learning a replica's capacity at SLO from what the gateway sees, one window at a time:
//! the arrival rate it was sent, how many of its finished requests met their SLO, and
//! whether its queue (requests in flight) grew.
//!
//! A window is evidence about one rate, `arrivals / window`:
//! - *sustained*: attainment at least the target and the queue did not grow: the replica
//!   sustains at least that rate, a lower bound;
//! - *overloaded*: the queue grew by more than a tenth of the window's arrivals (work
//!   arrives faster than it leaves) or, with no backlog draining, attainment fell short:
//!   that rate is too much, an upper bound; when the queue grew, the rate at which requests
//!   finished is one too (a saturated replica finishes as fast as it can, and no faster at
//!   SLO);
//! - a window that drains a backlog (the queue shrank while attainment fell short) says
//!   nothing about its own rate and is ignored.
//!
//! Near its capacity a replica passes some windows and fails others by chance (30 s of
//! Poisson arrivals at 0.95x capacity can fall short, at 1.1x can get through), so the
//! estimate is not the highest rate ever sustained but the rate that best separates the
//! recent windows: the cut with the fewest sustained windows above it and overloaded ones
//! below it (those weighing [`OVERLOAD_WEIGHT`]), over the last [`HISTORY`] informative windows (older ones fall out, so a
//! replica that changes is relearned). With no overloaded window yet it is the highest
//! rate sustained: what the replica has proven, never more.

use std::collections::VecDeque;

/// Informative windows kept (an hour of 30-second windows).
pub const HISTORY: usize = 120;

/// An overloaded window below the cut costs this many sustained windows above it. A short
/// window passes more easily than a long run at the same rate (it often starts with no
/// queue, and congestion comes in spells), so an even weighing lands above the rate held
/// for hours; and for N-1, overstating capacity is the costly mistake.
const OVERLOAD_WEIGHT: usize = 3;

/// What one replica did during one window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowCounts {
    pub seconds: f64,
    /// Requests sent to it.
    pub arrivals: u64,
    /// Requests whose response ended, and those of them that met their SLO.
    pub finished: u64,
    pub good: u64,
    /// Requests in flight at the window's start and end.
    pub queue_start: u64,
    pub queue_end: u64,
}

/// How a window was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    Sustained,
    Overloaded,
    /// No traffic, or a backlog draining: nothing learned.
    None,
}

/// A replica's capacity estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityLearner {
    /// Recent informative windows: (requests per second, sustained at SLO).
    history: VecDeque<(f64, bool)>,
    /// Share of requests that must meet the SLO.
    attainment: f64,
}

impl CapacityLearner {
    pub fn new(attainment: f64) -> Self {
        Self { history: VecDeque::with_capacity(HISTORY), attainment }
    }

    /// Requests per second it sustains at SLO, once a window has shown some.
    pub fn estimate(&self) -> Option<f64> {
        let mut points: Vec<(f64, bool)> = self.history.iter().copied().collect();
        let highest_sustained =
            points.iter().filter(|(_, ok)| *ok).map(|(rate, _)| *rate).reduce(f64::max)?;
        if points.iter().all(|(_, ok)| *ok) {
            return Some(highest_sustained);
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Cut after point i (i = 0: below every point): errors are the overloaded windows
        // at or below the cut, each weighing OVERLOAD_WEIGHT, and the sustained ones above.
        let mut errors = points.iter().filter(|(_, ok)| *ok).count();
        let (mut best_errors, mut best) = (errors, 0);
        for (index, (_, ok)) in points.iter().enumerate() {
            errors = if *ok { errors - 1 } else { errors + OVERLOAD_WEIGHT };
            if errors < best_errors {
                (best_errors, best) = (errors, index + 1);
            }
        }
        Some(match best {
            0 => points[0].0 / 2.0,
            cut if cut == points.len() => points[cut - 1].0,
            cut => (points[cut - 1].0 + points[cut].0) / 2.0,
        })
    }

    /// Reads one window and keeps what it says.
    pub fn observe(&mut self, window: &WindowCounts) -> Evidence {
        let evidence = self.judge(window);
        let rate = window.arrivals as f64 / window.seconds;
        let point = match evidence {
            Evidence::Sustained => (rate, true),
            // A saturated replica finishes as fast as it can: no faster at SLO.
            Evidence::Overloaded => (rate.min(window.finished as f64 / window.seconds), false),
            Evidence::None => return evidence,
        };
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(point);
        evidence
    }

    fn judge(&self, window: &WindowCounts) -> Evidence {
        if window.seconds <= 0.0 || window.arrivals == 0 {
            return Evidence::None;
        }
        let attained =
            window.finished == 0 || window.good as f64 >= self.attainment * window.finished as f64;
        // The queue grew by more than a tenth of the window's arrivals (and more than one
        // request): requests in flight at the edges vary by a few from window to window
        // under any load, which is no queue.
        let growth = window.queue_end.saturating_sub(window.queue_start);
        let grew = growth > 1 && growth * 10 > window.arrivals;
        let drained = window.queue_end < window.queue_start;
        if attained && !grew {
            Evidence::Sustained
        } else if drained {
            Evidence::None
        } else {
            Evidence::Overloaded
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(arrivals: u64, finished: u64, good: u64, queue: (u64, u64)) -> WindowCounts {
        WindowCounts {
            seconds: 10.0,
            arrivals,
            finished,
            good,
            queue_start: queue.0,
            queue_end: queue.1,
        }
    }

    #[test]
    fn a_sustained_window_is_a_lower_bound_and_an_overloaded_one_an_upper_bound() {
        let mut learner = CapacityLearner::new(0.95);
        assert_eq!(learner.estimate(), None);
        assert_eq!(learner.observe(&window(50, 50, 50, (2, 2))), Evidence::Sustained);
        assert_eq!(learner.estimate(), Some(5.0));
        // 9 req/s arrived, 7 finished, the queue grew by 20: at most 7 req/s.
        assert_eq!(learner.observe(&window(90, 70, 40, (2, 22))), Evidence::Overloaded);
        assert_eq!(learner.estimate(), Some(6.0));
        // A lucky window above that does not move the cut past the evidence against it.
        assert_eq!(learner.observe(&window(80, 80, 80, (2, 2))), Evidence::Sustained);
        assert_eq!(learner.observe(&window(85, 60, 30, (2, 30))), Evidence::Overloaded);
        assert_eq!(learner.observe(&window(75, 60, 30, (2, 30))), Evidence::Overloaded);
        assert_eq!(learner.estimate(), Some(5.5));
    }

    #[test]
    fn a_draining_backlog_and_an_idle_window_teach_nothing() {
        let mut learner = CapacityLearner::new(0.95);
        assert_eq!(learner.observe(&window(30, 60, 10, (40, 10))), Evidence::None);
        assert_eq!(learner.observe(&window(0, 0, 0, (0, 0))), Evidence::None);
        assert_eq!(learner.estimate(), None);
    }
}
