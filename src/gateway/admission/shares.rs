//! Bursts for tenants under their fair share. The fair queue decides who goes next when a
//! place frees, but a light tenant that finds every place taken by a heavy one still waits
//! for a stream to end (a second or more on a busy replica). So a tenant whose recent
//! admissions are under its fair share of its scope's (`weight / sum of active weights`,
//! less a quarter of slack so that two tenants at their share do not take turns bursting)
//! may take a few places beyond the per-replica limit (`admission.tenant_burst`). The
//! tenants over their share pay them back: they are only admitted below the limit, so the
//! replica returns to it as their streams end, and no place ever stands idle. A flow stays
//! active for `window` after its last request arrived or ended, and its recent admissions
//! decay with that time constant. Only admissions made while another flow is active in the
//! scope count: a tenant that had the replicas to itself has no debt when a heavy one
//! comes, and the newcomer gets no head start. Flows are counted per scope, the set of replicas a
//! request may use (a model's replicas, a canary variant's pool): a tenant of another model
//! does not make one here heavy. One flow alone (every request without a tenant) never
//! bursts.
//!
//! Shares are counted within a priority band, as the queue's fair order is. Across bands the
//! rule is simpler: a request may burst while a request of a lower band is present in its
//! scope (waiting or in flight), and the lower bands pay the place back the same way. So a
//! higher band is not only served first from the queue but does not wait for a lower band's
//! stream to end either.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::gateway::clock;
use crate::gateway::config::{DEFAULT_BAND, Flow};

/// The part of its fair share under which a tenant may burst.
const SLACK: f64 = 0.75;

/// Every flow's recent use, under one short lock (a few hash operations a request). Until
/// a tenant's request, or one of a band other than the default, arrives, nothing is
/// counted: one flow alone never bursts.
#[derive(Debug, Default)]
pub struct FlowShares {
    flows: Mutex<HashMap<FlowKey, FlowUse>>,
    counting_started: AtomicBool,
}

/// A flow within a scope (see [`super::Placement::scope`]) and a priority band.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub scope: u64,
    pub flow: Arc<str>,
    pub band: u8,
}

#[derive(Debug, Default)]
struct FlowUse {
    weight: u32,
    /// Waiting or in flight.
    present: u64,
    /// Admissions, decayed with the window as time constant, as of `recent_at`.
    recent: f64,
    recent_at: u64,
    /// When a request of the flow last arrived or ended (`clock::now_micros`).
    last_active: u64,
}

impl FlowUse {
    fn active(&self, now: u64, window: u64) -> bool {
        self.present > 0 || now.saturating_sub(self.last_active) < window
    }

    fn recent_at(&self, now: u64, window: u64) -> f64 {
        let elapsed = now.saturating_sub(self.recent_at) as f64;
        self.recent * (-elapsed / window.max(1) as f64).exp()
    }
}

impl FlowShares {
    /// A request of `flow` arrived in `scope` (it waits or is admitted next).
    pub fn arrived(&self, scope: u64, flow: &Flow, now: u64, window: u64) -> FlowKey {
        let key = FlowKey { scope, flow: flow.key.clone(), band: flow.band };
        if !self.counting_as(&key.flow, key.band) {
            return key;
        }
        let mut flows = self.flows.lock();
        if !flows.contains_key(&key) {
            // Forget flows gone quiet before adding one: the map holds active flows only.
            flows.retain(|_, used| used.active(now, window));
        }
        let used = flows.entry(key.clone()).or_default();
        used.weight = flow.weight.max(1);
        used.present += 1;
        used.last_active = now;
        key
    }

    /// Whether requests are counted: some tenant's request, or one of a band other than
    /// the default, has arrived (`flow` may be the first). Until then a request's scope
    /// need not even be worked out.
    pub fn counting(&self, flow: &Flow) -> bool {
        self.counting_as(&flow.key, flow.band)
    }

    /// [`Self::counting`] for a flow that arrived: whether its admission and departure
    /// count (and are worth a clock read).
    pub fn counts(&self, key: &FlowKey) -> bool {
        self.counting_as(&key.flow, key.band)
    }

    fn counting_as(&self, name: &str, band: u8) -> bool {
        let distinct = !name.is_empty() || band != DEFAULT_BAND;
        if distinct && !self.counting_started.load(Ordering::Relaxed) {
            self.counting_started.store(true, Ordering::Relaxed);
        }
        self.counting_started.load(Ordering::Relaxed)
    }

    /// A request of the flow was admitted: it counts if another flow is active in its scope
    /// and band.
    pub fn admitted(&self, key: &FlowKey, now: u64, window: u64) {
        if !self.counting_as(&key.flow, key.band) {
            return;
        }
        let mut flows = self.flows.lock();
        let contended = flows.iter().any(|(other, used)| {
            same_scope_and_band(other, key) && other.flow != key.flow && used.active(now, window)
        });
        if let Some(used) = flows.get_mut(key) {
            used.recent = used.recent_at(now, window) + f64::from(u8::from(contended));
            used.recent_at = now;
        }
    }

    /// [`Self::left`] now: the clock is read only when the flow counts.
    pub fn left_now(&self, key: &FlowKey) {
        if self.counts(key) {
            self.left(key, clock::now_micros());
        }
    }

    /// A request of the flow left: it ended, or gave up waiting.
    pub fn left(&self, key: &FlowKey, now: u64) {
        if !self.counting_as(&key.flow, key.band) {
            return;
        }
        if let Some(used) = self.flows.lock().get_mut(key) {
            used.present = used.present.saturating_sub(1);
            used.last_active = now;
        }
    }

    /// Whether the flow may burst past the per-replica limit: a request of a lower band is
    /// present in its scope, or the flow's recent admissions are under its fair share of
    /// its scope and band's, with other flows active there.
    pub fn may_burst(&self, key: &FlowKey, now: u64, window: u64) -> bool {
        if !self.counting_as(&key.flow, key.band) {
            return false;
        }
        let flows = self.flows.lock();
        if flows.len() < 2 {
            return false;
        }
        let outranks = flows.iter().any(|(other, used)| {
            other.scope == key.scope && other.band < key.band && used.present > 0
        });
        outranks || under_share(&flows, key, now, window)
    }
}

fn same_scope_and_band(a: &FlowKey, b: &FlowKey) -> bool {
    a.scope == b.scope && a.band == b.band
}

/// Whether the flow's recent admissions are under its fair share of its scope and band's,
/// with other flows active there.
fn under_share(flows: &HashMap<FlowKey, FlowUse>, key: &FlowKey, now: u64, window: u64) -> bool {
    let Some(own) = flows.get(key) else { return false };
    let (mut weights, mut total, mut others) = (0u64, 0.0, false);
    for (other, used) in flows.iter() {
        if !same_scope_and_band(other, key) || !used.active(now, window) {
            continue;
        }
        others |= other.flow != key.flow;
        weights += u64::from(used.weight);
        total += used.recent_at(now, window);
    }
    let share = f64::from(own.weight) / weights.max(1) as f64;
    others && own.recent_at(now, window) <= SLACK * share * total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten seconds, in microseconds.
    const WINDOW: u64 = 10_000_000;

    /// Flows of one scope, by name.
    struct Scope<'a> {
        shares: &'a FlowShares,
        scope: u64,
    }

    impl Scope<'_> {
        fn key(&self, name: &str) -> FlowKey {
            FlowKey { scope: self.scope, flow: Arc::from(name), band: DEFAULT_BAND }
        }

        /// `n` requests of `name` (of `weight`) arrive at `now`, are admitted and end.
        fn serve(&self, name: &str, weight: u32, n: u64, now: u64) {
            for _ in 0..n {
                let flow = Flow { key: Arc::from(name), weight, band: 4 };
                let key = self.shares.arrived(self.scope, &flow, now, WINDOW);
                self.shares.admitted(&key, now, WINDOW);
                self.shares.left(&key, now);
            }
        }

        /// A request of each of `names` arrives and gives up: they are active, with nothing
        /// admitted.
        fn touch(&self, names: &[&str], now: u64) {
            for name in names {
                let flow = Flow { key: Arc::from(*name), weight: 1, band: 4 };
                let key = self.shares.arrived(self.scope, &flow, now, WINDOW);
                self.shares.left(&key, now);
            }
        }

        fn may_burst(&self, name: &str, now: u64) -> bool {
            self.shares.may_burst(&self.key(name), now, WINDOW)
        }
    }

    fn scope(shares: &FlowShares, scope: u64) -> Scope<'_> {
        Scope { shares, scope }
    }

    #[test]
    fn one_flow_alone_never_bursts() {
        let shares = FlowShares::default();
        let fleet = scope(&shares, 0);
        fleet.serve("", 1, 7, 1);
        assert!(!fleet.may_burst("", 1));
        assert!(shares.flows.lock().is_empty(), "nothing is counted before a tenant comes");
        fleet.serve("a", 1, 1, 1);
        fleet.serve("", 1, 7, 1);
        assert_eq!(shares.flows.lock().len(), 2);
    }

    #[test]
    fn a_light_flow_is_under_its_share_and_a_heavy_one_over() {
        let shares = FlowShares::default();
        let fleet = scope(&shares, 0);
        fleet.touch(&["heavy", "light"], 1);
        fleet.serve("heavy", 1, 10, 1);
        fleet.serve("light", 1, 3, 1);
        // Light: 3 of 13 admissions, under 3/4 of half; heavy: 10, over.
        assert!(fleet.may_burst("light", 2));
        assert!(!fleet.may_burst("heavy", 2));
        // Two flows near their equal shares: neither bursts.
        fleet.serve("light", 1, 6, 2);
        assert!(!fleet.may_burst("light", 3) && !fleet.may_burst("heavy", 3));
    }

    #[test]
    fn weights_scale_the_share() {
        let shares = FlowShares::default();
        let fleet = scope(&shares, 0);
        fleet.touch(&["big", "small"], 1);
        fleet.serve("big", 3, 10, 1);
        fleet.serve("small", 1, 3, 1);
        // Small: 3 of 13 is over 3/4 of its quarter (2.4); big: 10 is over 3/4 of 3/4 (7.3).
        assert!(!fleet.may_burst("small", 2));
        assert!(!fleet.may_burst("big", 2));
        fleet.serve("big", 3, 20, 2);
        assert!(fleet.may_burst("small", 3));
    }

    #[test]
    fn a_quiet_flow_stops_counting_and_is_forgotten() {
        let shares = FlowShares::default();
        let fleet = scope(&shares, 0);
        fleet.touch(&["heavy", "light"], 1);
        fleet.serve("heavy", 1, 10, 1);
        fleet.serve("light", 1, 1, 1);
        assert!(fleet.may_burst("light", 2));
        // A window later, the heavy flow is inactive: the light one is alone.
        let later = 1 + WINDOW;
        assert!(!fleet.may_burst("light", later));
        // A newcomer's arrival drops inactive flows from the map.
        fleet.serve("other", 1, 1, later + WINDOW);
        assert_eq!(shares.flows.lock().len(), 1);
    }

    #[test]
    fn recent_admissions_decay() {
        let shares = FlowShares::default();
        let fleet = scope(&shares, 0);
        fleet.touch(&["once-heavy", "steady"], 1);
        fleet.serve("once-heavy", 1, 30, 1);
        fleet.serve("steady", 1, 3, 1);
        assert!(fleet.may_burst("steady", 1));
        // Five windows on, both active again: the old burst weighs e^-5 of 30, about 0.2.
        let later = 1 + 5 * WINDOW;
        fleet.serve("once-heavy", 1, 1, later);
        fleet.serve("steady", 1, 3, later);
        assert!(!fleet.may_burst("steady", later));
        assert!(fleet.may_burst("once-heavy", later));
    }

    #[test]
    fn a_tenant_that_was_alone_has_no_debt_when_a_heavy_one_comes() {
        let shares = FlowShares::default();
        let fleet = scope(&shares, 0);
        // The light tenant alone for a while: its admissions do not count.
        fleet.serve("light", 1, 20, 1);
        // The heavy tenant comes and is admitted ten times to the light one's three.
        fleet.touch(&["heavy"], 2);
        fleet.serve("heavy", 1, 10, 2);
        fleet.serve("light", 1, 3, 2);
        assert!(fleet.may_burst("light", 3));
        assert!(!fleet.may_burst("heavy", 3));
    }

    #[test]
    fn a_flow_of_another_scope_does_not_count_here() {
        let shares = FlowShares::default();
        let (model_a, model_b) = (scope(&shares, 1), scope(&shares, 2));
        model_b.touch(&["heavy"], 1);
        model_a.touch(&["light"], 1);
        model_b.serve("heavy", 1, 30, 1);
        model_a.serve("light", 1, 3, 1);
        assert!(!model_a.may_burst("light", 2), "alone in its scope");
        model_a.serve("heavy", 1, 30, 2);
        assert!(model_a.may_burst("light", 2));
    }

    #[test]
    fn a_higher_band_bursts_while_a_lower_one_is_present_and_not_after() {
        let shares = FlowShares::default();
        let arrive = |band: u8, now: u64| {
            let flow = Flow { key: Arc::from(""), weight: 1, band };
            shares.arrived(0, &flow, now, WINDOW)
        };
        // A flood in band 1: requests in flight, every one admitted.
        let flood: Vec<FlowKey> = (0..4).map(|_| arrive(1, 1)).collect();
        for key in &flood {
            shares.admitted(key, 1, WINDOW);
        }
        let high = arrive(8, 2);
        assert!(shares.may_burst(&high, 2, WINDOW), "band 1 is present");
        assert!(!shares.may_burst(&flood[0], 2, WINDOW), "a lower band never outranks");
        // The flood's requests end: nothing below band 8 is present any more, and band 8
        // is alone in its band, so it waits like anyone else.
        for key in &flood {
            shares.left(key, 3);
        }
        assert!(!shares.may_burst(&high, 3, WINDOW));
        // Another scope's low band does not count here.
        let elsewhere = Flow { key: Arc::from(""), weight: 1, band: 1 };
        let _ = shares.arrived(7, &elsewhere, 4, WINDOW);
        assert!(!shares.may_burst(&high, 4, WINDOW));
    }

    #[test]
    fn shares_are_counted_within_a_band() {
        let shares = FlowShares::default();
        let serve = |name: &str, band: u8, n: u64| {
            for _ in 0..n {
                let flow = Flow { key: Arc::from(name), weight: 1, band };
                let key = shares.arrived(0, &flow, 1, WINDOW);
                shares.admitted(&key, 1, WINDOW);
                shares.left(&key, 1);
            }
        };
        // All three active, then a heavy tenant in band 2 admitted ten times a light one's:
        // the light one is under its share of band 2, a band 6 tenant is alone in its band.
        for (name, band) in [("heavy", 2), ("light", 2), ("other", 6)] {
            let flow = Flow { key: Arc::from(name), weight: 1, band };
            let key = shares.arrived(0, &flow, 1, WINDOW);
            shares.left(&key, 1);
        }
        serve("heavy", 2, 30);
        serve("other", 6, 3);
        let key = |name: &str, band| FlowKey { scope: 0, flow: Arc::from(name), band };
        assert!(
            !shares.may_burst(&key("other", 6), 2, WINDOW),
            "alone in band 6, none below present"
        );
        serve("light", 2, 3);
        assert!(shares.may_burst(&key("light", 2), 2, WINDOW));
        assert!(!shares.may_burst(&key("heavy", 2), 2, WINDOW));
    }
}
