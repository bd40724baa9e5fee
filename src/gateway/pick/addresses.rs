//! A replica's socket addresses, resolved off the request path. `TcpStream::connect` on a
//! host name asks the system resolver, on a blocking thread, every time: for `force_close`
//! that is every request, so a fleet named by DNS (the Kubernetes example's
//! `vllm-0.vllm.llm.svc.cluster.local`) would send the cluster's DNS a query or two per
//! request, wait for the answer in every TTFT, and fail requests whenever DNS does.
//!
//! A literal address is used as it is. A name is resolved on first use and kept; once the
//! answer is older than [`REFRESH_AFTER`], or a connect to it failed, the next request
//! starts one lookup in the background and goes on with the answer it has. A failed lookup
//! keeps the last good answer and is tried again [`REFRESH_AFTER`] later.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

/// How long an answer is used before it is looked up again (HAProxy's resolvers hold a
/// valid answer 10 s by default; a pod that moved is also noticed by the failed connect).
pub const REFRESH_AFTER: Duration = Duration::from_secs(5);

/// Where a replica's `host:port` authority points.
#[derive(Debug)]
pub struct ReplicaAddresses {
    authority: Arc<str>,
    /// The authority itself when it is an IP address and port: nothing to resolve.
    literal: Option<SocketAddr>,
    resolved: Arc<Resolved>,
}

/// The last good answer for a name, shared with the background lookup.
#[derive(Debug, Default)]
struct Resolved {
    answer: ArcSwapOption<Answer>,
    looking_up: AtomicBool,
    /// Lookups started, failed ones included.
    lookups: AtomicU64,
}

/// One lookup's addresses.
#[derive(Debug)]
pub struct Answer {
    addresses: Vec<SocketAddr>,
    looked_up_at: Instant,
    /// A connect to these addresses failed since: look them up again.
    doubted: AtomicBool,
}

/// The addresses to connect to, in the resolver's order.
pub enum Addresses {
    Literal(SocketAddr),
    Resolved(Arc<Answer>),
}

impl Addresses {
    pub fn as_slice(&self) -> &[SocketAddr] {
        match self {
            Addresses::Literal(address) => std::slice::from_ref(address),
            Addresses::Resolved(answer) => &answer.addresses,
        }
    }
}

impl ReplicaAddresses {
    pub fn new(authority: &str) -> Self {
        Self {
            authority: Arc::from(authority),
            literal: authority.parse().ok(),
            resolved: Arc::default(),
        }
    }

    /// The addresses to connect to now: the literal one, the answer kept (refreshed in the
    /// background when due), or, the first time, a lookup awaited here.
    pub async fn get(&self) -> io::Result<Addresses> {
        if let Some(address) = self.literal {
            return Ok(Addresses::Literal(address));
        }
        if let Some(answer) = self.resolved.answer.load_full() {
            if answer.is_due(Instant::now()) {
                self.refresh_in_background();
            }
            return Ok(Addresses::Resolved(answer));
        }
        Ok(Addresses::Resolved(self.resolved.look_up(&self.authority).await?))
    }

    /// The addresses kept (none for a literal one or before the first lookup) and the
    /// lookups made so far, for `/admin/replicas`.
    pub fn kept(&self) -> (Vec<SocketAddr>, u64) {
        let kept = self.resolved.answer.load().as_ref().map(|answer| answer.addresses.clone());
        (kept.unwrap_or_default(), self.resolved.lookups.load(Ordering::Relaxed))
    }

    /// A connect reached `address`: when the answer lists others before it (which refused,
    /// as `::1` does for a replica listening on `127.0.0.1` only), it goes first from now
    /// on, so that each connect does not try them again.
    pub fn connected_to(&self, address: SocketAddr) {
        let Some(answer) = self.resolved.answer.load_full() else { return };
        let Some(position) = answer.addresses.iter().position(|known| *known == address) else {
            return;
        };
        if position == 0 {
            return;
        }
        let mut addresses = answer.addresses.clone();
        addresses[..=position].rotate_right(1);
        let reordered = Answer {
            addresses,
            looked_up_at: answer.looked_up_at,
            doubted: AtomicBool::new(false),
        };
        // Only over the answer it reorders: a fresher lookup stays.
        self.resolved.answer.compare_and_swap(&answer, Some(Arc::new(reordered)));
    }

    /// A connect to the kept addresses failed: the next request looks them up again.
    pub fn doubt(&self) {
        if let Some(answer) = self.resolved.answer.load().as_ref() {
            answer.doubted.store(true, Ordering::Relaxed);
        }
    }

    fn refresh_in_background(&self) {
        if self.resolved.looking_up.swap(true, Ordering::AcqRel) {
            return;
        }
        let (resolved, authority) = (self.resolved.clone(), self.authority.clone());
        tokio::spawn(async move {
            if let Err(error) = resolved.look_up(&authority).await {
                tracing::warn!(%authority, %error, "replica address lookup failed; keeping the last answer");
            }
            resolved.looking_up.store(false, Ordering::Release);
        });
    }
}

impl Resolved {
    /// Looks `authority` up and keeps the answer; on failure, keeps the last good answer
    /// as if just looked up, so that the next try waits its turn.
    async fn look_up(&self, authority: &str) -> io::Result<Arc<Answer>> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let looked_up = tokio::net::lookup_host(authority).await.and_then(|found| {
            let addresses: Vec<SocketAddr> = found.collect();
            if addresses.is_empty() {
                Err(io::Error::new(io::ErrorKind::NotFound, "the name has no address"))
            } else {
                Ok(addresses)
            }
        });
        let addresses = match (looked_up, self.answer.load_full()) {
            (Ok(addresses), _) => addresses,
            (Err(error), Some(last)) => {
                let kept = Arc::new(Answer::new(last.addresses.clone()));
                self.answer.store(Some(kept));
                return Err(error);
            }
            (Err(error), None) => return Err(error),
        };
        let answer = Arc::new(Answer::new(addresses));
        self.answer.store(Some(answer.clone()));
        Ok(answer)
    }
}

impl Answer {
    fn new(addresses: Vec<SocketAddr>) -> Self {
        Self { addresses, looked_up_at: Instant::now(), doubted: AtomicBool::new(false) }
    }

    fn is_due(&self, now: Instant) -> bool {
        self.doubted.load(Ordering::Relaxed)
            || now.saturating_duration_since(self.looked_up_at) >= REFRESH_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_literal_address_is_used_as_it_is() {
        let addresses = ReplicaAddresses::new("127.0.0.1:8000");
        assert_eq!(addresses.get().await.unwrap().as_slice(), ["127.0.0.1:8000".parse().unwrap()]);
        let v6 = ReplicaAddresses::new("[::1]:8000");
        assert_eq!(v6.get().await.unwrap().as_slice(), ["[::1]:8000".parse().unwrap()]);
        assert!(v6.resolved.answer.load().is_none(), "nothing looked up");
    }

    #[tokio::test]
    async fn a_name_is_looked_up_once_and_kept() {
        let addresses = ReplicaAddresses::new("localhost:8000");
        let first = addresses.get().await.unwrap();
        assert!(first.as_slice().iter().all(|a| a.ip().is_loopback() && a.port() == 8000));
        let Addresses::Resolved(first) = first else { panic!("a name is resolved") };
        let Addresses::Resolved(second) = addresses.get().await.unwrap() else { panic!() };
        assert!(Arc::ptr_eq(&first, &second), "the second request used the kept answer");
        assert!(!addresses.resolved.looking_up.load(Ordering::Acquire), "nothing was due");
        assert_eq!(addresses.kept().1, 1);
    }

    #[tokio::test]
    async fn a_doubted_answer_is_used_while_one_lookup_replaces_it() {
        let addresses = ReplicaAddresses::new("localhost:8000");
        let Addresses::Resolved(first) = addresses.get().await.unwrap() else { panic!() };
        addresses.doubt();
        assert!(first.is_due(Instant::now()));
        let Addresses::Resolved(meanwhile) = addresses.get().await.unwrap() else { panic!() };
        assert!(Arc::ptr_eq(&first, &meanwhile), "the request did not wait for the lookup");
        // What the background lookup does, awaited here: a fresh answer replaces it.
        let fresh = addresses.resolved.look_up("localhost:8000").await.unwrap();
        assert!(!Arc::ptr_eq(&fresh, &first));
        assert!(!fresh.is_due(Instant::now()));
        // (The background lookup may have stored its own answer since: as fresh.)
        let Addresses::Resolved(after) = addresses.get().await.unwrap() else { panic!() };
        assert!(!Arc::ptr_eq(&after, &first) && !after.is_due(Instant::now()));
    }

    #[test]
    fn the_address_that_accepted_goes_first() {
        let addresses = ReplicaAddresses::new("replica:8000");
        let (v6, v4, other) = ("[::1]:8000", "127.0.0.1:8000", "10.0.0.1:8000");
        let listed = [v6, other, v4].map(|a| a.parse::<SocketAddr>().unwrap());
        addresses.resolved.answer.store(Some(Arc::new(Answer::new(listed.to_vec()))));
        addresses.connected_to(v4.parse().unwrap());
        let (kept, _) = addresses.kept();
        assert_eq!(kept, [listed[2], listed[0], listed[1]]);
        addresses.connected_to(v4.parse().unwrap());
        addresses.connected_to("10.9.9.9:8000".parse().unwrap());
        assert_eq!(addresses.kept().0, kept, "already first, or not listed: unchanged");
    }

    #[tokio::test]
    async fn a_failed_lookup_keeps_the_last_answer_and_waits_its_turn() {
        let resolved = Resolved::default();
        let last = Arc::new(Answer::new(vec!["10.0.0.1:8000".parse().unwrap()]));
        last.doubted.store(true, Ordering::Relaxed);
        resolved.answer.store(Some(last));
        // No port: refused before any query is sent.
        assert!(resolved.look_up("replica").await.is_err());
        let kept = resolved.answer.load_full().unwrap();
        assert_eq!(kept.addresses, ["10.0.0.1:8000".parse().unwrap()]);
        assert!(!kept.is_due(Instant::now()), "tried again only after REFRESH_AFTER");
        assert!(kept.is_due(Instant::now() + REFRESH_AFTER));
    }

    #[tokio::test]
    async fn a_name_that_never_resolved_is_an_error() {
        let addresses = ReplicaAddresses::new("replica");
        assert!(addresses.get().await.is_err());
        assert!(addresses.resolved.answer.load().is_none());
    }
}
