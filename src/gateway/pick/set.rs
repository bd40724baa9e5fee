//! The replica set's one owner. The static config, DNS discovery and Kubernetes discovery
//! each submit their source's whole list; the set merges them (static first, then DNS, then
//! Kubernetes; a name seen twice keeps its first entry), keeps the `Arc<Replica>` of every
//! replica that stays (load figures, health, drain flag), and runs one metrics scraper per
//! replica. It outlives reloads: a reload submits only the static list, so discovered
//! replicas, their figures and their scrapers stay.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::replica::Replica;
use super::scrape;
use crate::gateway::config::ReplicaConfig;
use crate::gateway::kv_events::following::Following;
use crate::gateway::tls::upstream::UpstreamTls;

/// Where a list of replicas came from, in merge order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Static,
    Dns,
    Kubernetes,
}

impl Source {
    const MERGE_ORDER: [Source; 3] = [Source::Static, Source::Dns, Source::Kubernetes];
}

/// The merged replica set, read lock-free by every pick.
pub struct ReplicaSet {
    members: ArcSwap<Vec<Arc<Replica>>>,
    /// Time base for scrape ages; fixed for the set's life.
    pub epoch: Instant,
    sources: Mutex<Sources>,
    /// Called after every change (the admission queue may have room on a new replica).
    on_change: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

struct Sources {
    lists: HashMap<Source, Vec<ReplicaConfig>>,
    scrapers: Option<Scrapers>,
}

/// One scraper task per member, keyed by the replica's identity.
struct Scrapers {
    interval: Duration,
    tls: Arc<UpstreamTls>,
    /// The replicas' KV-event subscriptions, run by their scrapers.
    following: Option<Arc<Following>>,
    by_replica: HashMap<(String, String), JoinHandle<()>>,
}

impl std::fmt::Debug for ReplicaSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.members.load().iter().map(|r| r.name.clone()).collect();
        f.debug_struct("ReplicaSet").field("members", &names).finish()
    }
}

impl ReplicaSet {
    /// A set holding the static replicas; nothing is scraped until [`Self::scrape`].
    pub fn new(static_replicas: &[ReplicaConfig]) -> Self {
        let members = static_replicas.iter().map(|r| Arc::new(Replica::new(r))).collect();
        let mut lists = HashMap::new();
        lists.insert(Source::Static, static_replicas.to_vec());
        Self {
            members: ArcSwap::from_pointee(members),
            epoch: Instant::now(),
            sources: Mutex::new(Sources { lists, scrapers: None }),
            on_change: OnceLock::new(),
        }
    }

    /// The current members.
    pub fn snapshot(&self) -> Arc<Vec<Arc<Replica>>> {
        self.members.load_full()
    }

    /// Sets the hook run after every change; only the first call takes effect.
    pub fn on_change(&self, hook: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_change.set(hook);
    }

    /// Replaces `source`'s list; returns the merged members. A replica with the same name
    /// and address keeps its `Arc`; requests in flight on a removed one finish on it.
    pub async fn submit(
        &self,
        source: Source,
        replicas: Vec<ReplicaConfig>,
    ) -> Arc<Vec<Arc<Replica>>> {
        let mut sources = self.sources.lock().await;
        if sources.lists.get(&source) == Some(&replicas) {
            return self.snapshot();
        }
        sources.lists.insert(source, replicas);
        self.apply(&mut sources)
    }

    /// Forgets `source`'s list (a discovery source the config no longer has).
    pub async fn withdraw(&self, source: Source) -> Arc<Vec<Arc<Replica>>> {
        let mut sources = self.sources.lock().await;
        if sources.lists.remove(&source).is_none() {
            return self.snapshot();
        }
        self.apply(&mut sources)
    }

    /// Scrapes every member every `interval` over `tls`, and follows their KV events as
    /// `following` says. Running scrapers are kept when nothing changed (`restart` forces
    /// new ones, e.g. after certificate files were read again).
    pub async fn scrape(
        &self,
        interval: Duration,
        tls: Arc<UpstreamTls>,
        following: Option<Arc<Following>>,
        restart: bool,
    ) {
        let mut sources = self.sources.lock().await;
        let unchanged = sources
            .scrapers
            .as_ref()
            .is_some_and(|s| s.interval == interval && s.following == following);
        if !unchanged || restart {
            let by_replica = HashMap::new();
            sources.scrapers = Some(Scrapers { interval, tls, following, by_replica });
        }
        let members = self.snapshot();
        if let Some(scrapers) = &mut sources.scrapers {
            scrapers.sync(&members, self.epoch);
        }
    }

    /// Stops every scraper.
    pub async fn stop_scraping(&self) {
        self.sources.lock().await.scrapers = None;
    }

    fn apply(&self, sources: &mut Sources) -> Arc<Vec<Arc<Replica>>> {
        let current = self.snapshot();
        let next: Vec<Arc<Replica>> = merge(&sources.lists)
            .iter()
            .map(|wanted| {
                current
                    .iter()
                    .find(|have| have.is(wanted))
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Replica::new(wanted)))
            })
            .collect();
        let next = Arc::new(next);
        self.members.store(next.clone());
        if let Some(scrapers) = &mut sources.scrapers {
            scrapers.sync(&next, self.epoch);
        }
        if let Some(hook) = self.on_change.get() {
            hook();
        }
        next
    }
}

/// Every source's list in merge order; a name seen twice keeps its first entry.
fn merge(lists: &HashMap<Source, Vec<ReplicaConfig>>) -> Vec<ReplicaConfig> {
    let mut merged: Vec<ReplicaConfig> = Vec::new();
    for source in Source::MERGE_ORDER {
        for replica in lists.get(&source).into_iter().flatten() {
            if !merged.iter().any(|have| have.name == replica.name) {
                merged.push(replica.clone());
            }
        }
    }
    merged
}

impl Scrapers {
    fn sync(&mut self, members: &[Arc<Replica>], epoch: Instant) {
        let key = |replica: &Replica| (replica.name.clone(), replica.authority.clone());
        self.by_replica.retain(|wanted, handle| {
            let keep = members.iter().any(|replica| key(replica) == *wanted);
            if !keep {
                handle.abort();
            }
            keep
        });
        let new: Vec<Arc<Replica>> =
            members.iter().filter(|r| !self.by_replica.contains_key(&key(r))).cloned().collect();
        let handles =
            scrape::spawn_scrapers(&new, epoch, self.interval, &self.tls, self.following.as_ref());
        for (replica, handle) in new.iter().zip(handles) {
            self.by_replica.insert(key(replica), handle);
        }
    }
}

impl Drop for Scrapers {
    fn drop(&mut self) {
        for handle in self.by_replica.values() {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(name: &str, port: u16) -> ReplicaConfig {
        ReplicaConfig {
            name: name.into(),
            authority: format!("127.0.0.1:{port}"),
            node: "n".into(),
            tls: false,
            placement: Default::default(),
        }
    }

    fn names(members: &[Arc<Replica>]) -> Vec<(&str, &str)> {
        members.iter().map(|r| (r.name.as_str(), r.authority.as_str())).collect()
    }

    #[tokio::test]
    async fn replicas_that_stay_keep_their_load_counters() {
        let set = ReplicaSet::new(&[replica("a", 1), replica("b", 2)]);
        let a = set.snapshot()[0].clone();
        a.load.record_failure();
        a.set_draining(true);
        let applied = set.submit(Source::Static, vec![replica("a", 1), replica("c", 3)]).await;
        assert!(Arc::ptr_eq(&applied[0], &a));
        assert!(applied[0].is_draining());
        assert_eq!(names(&applied), [("a", "127.0.0.1:1"), ("c", "127.0.0.1:3")]);
        assert_eq!(applied[1].load.failures(), 0);
        // Same name, new address: a new replica.
        let moved = set.submit(Source::Static, vec![replica("a", 9)]).await;
        assert!(!Arc::ptr_eq(&moved[0], &a));
    }

    #[tokio::test]
    async fn a_static_change_keeps_every_discovered_replica() {
        let set = ReplicaSet::new(&[replica("s", 1)]);
        let found = set.submit(Source::Dns, vec![replica("d", 4)]).await;
        let discovered = found[1].clone();
        let after = set.submit(Source::Static, vec![replica("t", 2)]).await;
        assert_eq!(names(&after), [("t", "127.0.0.1:2"), ("d", "127.0.0.1:4")]);
        assert!(Arc::ptr_eq(&after[1], &discovered));
        // No static replica at all: the discovered ones still serve.
        let only_found = set.submit(Source::Static, Vec::new()).await;
        assert_eq!(names(&only_found), [("d", "127.0.0.1:4")]);
        assert!(set.withdraw(Source::Dns).await.is_empty());
    }

    #[tokio::test]
    async fn static_replicas_win_name_clashes_and_changes_are_announced() {
        let set = ReplicaSet::new(&[replica("s", 1)]);
        let changes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = changes.clone();
        set.on_change(Box::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }));
        set.submit(Source::Kubernetes, vec![replica("k", 5), replica("s", 6)]).await;
        let merged = set.submit(Source::Dns, vec![replica("d", 4)]).await;
        assert_eq!(
            names(&merged),
            [("s", "127.0.0.1:1"), ("d", "127.0.0.1:4"), ("k", "127.0.0.1:5")]
        );
        // The same list again changes nothing and announces nothing.
        set.submit(Source::Dns, vec![replica("d", 4)]).await;
        assert_eq!(changes.load(std::sync::atomic::Ordering::Relaxed), 2);
    }
}
