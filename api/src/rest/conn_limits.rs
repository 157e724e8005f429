//! How many connections a REST listener holds, and for how long each may dawdle.
//!
//! [`ConnLimits`] is the configuration (`[api]` in vgpud.toml). The [`Gate`] counts a listener's
//! connections, in total and per peer (a uid on the unix socket, an IP address over TCP), and is
//! asked at accept. A peer over its share, or a listener that is full, does not simply lock
//! everyone out: the oldest connection that has not yet sent its first request head (a silent or
//! trickling client, or a TLS handshake that never ends) is closed to make room. Only when every
//! connection is doing real work is the newcomer refused. This is what keeps a well-behaved
//! client served while a flood of silent connections from the same uid holds the socket.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Transport limits of the REST listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnLimits {
    /// Longest a new connection may take to send its first request head (slowloris).
    pub header_read_timeout: Duration,
    /// Longest a request body may take to arrive once its head has.
    pub body_read_timeout: Duration,
    /// Longest a kept-alive connection may wait for (and read) its next request head.
    pub idle_timeout: Duration,
    /// Longest a TLS handshake may take; each handshake has its own deadline.
    pub tls_handshake_timeout: Duration,
    /// Connections one listener holds at once.
    pub max_connections: usize,
    /// Connections one peer (uid or IP address) holds at once on one listener.
    pub max_connections_per_peer: usize,
    /// Largest request body, bytes: a larger `Content-Length` is refused before it is read.
    pub max_body_bytes: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_read_timeout: Duration::from_millis(5_000),
            body_read_timeout: Duration::from_millis(30_000),
            idle_timeout: Duration::from_millis(60_000),
            tls_handshake_timeout: Duration::from_millis(5_000),
            max_connections: 512,
            max_connections_per_peer: 64,
            max_body_bytes: 1 << 20,
        }
    }
}

impl From<&agent::config::ApiConfig> for ConnLimits {
    fn from(c: &agent::config::ApiConfig) -> Self {
        ConnLimits {
            header_read_timeout: Duration::from_millis(c.header_read_timeout_ms),
            body_read_timeout: Duration::from_millis(c.body_read_timeout_ms),
            idle_timeout: Duration::from_millis(c.idle_timeout_ms),
            tls_handshake_timeout: Duration::from_millis(c.tls_handshake_timeout_ms),
            max_connections: c.max_connections,
            max_connections_per_peer: c.max_connections_per_peer,
            max_body_bytes: c.max_body_bytes,
        }
    }
}

/// Who a connection counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum PeerKey {
    /// A local user (unix socket peer credentials).
    Uid(u32),
    /// A network address (TCP).
    Ip(IpAddr),
}

/// The connection counts of one listener.
pub(super) struct Gate {
    max: usize,
    per_peer: usize,
    /// A waiting connection younger than this is never closed to make room (a TLS client needs
    /// a few round trips to finish its handshake; a local client's head comes at once).
    min_age: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    total: usize,
    peers: HashMap<PeerKey, usize>,
    /// Connections that have not sent their first request head yet, oldest first.
    waiting: VecDeque<Waiting>,
}

struct Waiting {
    id: u64,
    peer: PeerKey,
    since: Instant,
    evict: Arc<Notify>,
}

/// One admitted connection; dropping it gives its place back.
pub(super) struct Ticket {
    gate: Arc<Gate>,
    id: u64,
    peer: PeerKey,
    /// Notified when the connection is closed to make room for another.
    pub evicted: Arc<Notify>,
}

impl Gate {
    pub(super) fn new(limits: &ConnLimits, min_age: Duration) -> Arc<Gate> {
        Arc::new(Gate {
            max: limits.max_connections,
            per_peer: limits.max_connections_per_peer,
            min_age,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The counts stay consistent even if a holder panicked: every update is one statement.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection from `peer`, or `None`: refuse it.
    pub(super) fn admit(self: &Arc<Self>, peer: PeerKey) -> Option<Ticket> {
        let mut s = self.lock();
        let now = Instant::now();
        let mine = s.peers.get(&peer).copied().unwrap_or(0);
        if mine >= self.per_peer {
            if !s.evict(now, self.min_age, Some(&peer)) {
                return None;
            }
        } else if s.total >= self.max && !s.evict(now, self.min_age, None) {
            return None;
        }
        s.total += 1;
        *s.peers.entry(peer.clone()).or_default() += 1;
        let id = s.next;
        s.next += 1;
        let evicted = Arc::new(Notify::new());
        s.waiting.push_back(Waiting {
            id,
            peer: peer.clone(),
            since: now,
            evict: evicted.clone(),
        });
        Some(Ticket {
            gate: self.clone(),
            id,
            peer,
            evicted,
        })
    }

    /// Connections held now (for tests and logs).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().total
    }
}

impl State {
    /// Closes the oldest waiting connection (of `peer`, or of anyone) old enough to be judged.
    fn evict(&mut self, now: Instant, min_age: Duration, peer: Option<&PeerKey>) -> bool {
        let found = self
            .waiting
            .iter()
            .position(|w| peer.is_none_or(|p| *p == w.peer));
        match found {
            Some(i) if now.duration_since(self.waiting[i].since) >= min_age => {
                if let Some(w) = self.waiting.remove(i) {
                    w.evict.notify_one();
                }
                true
            }
            _ => false,
        }
    }

    fn forget(&mut self, id: u64) {
        if let Some(i) = self.waiting.iter().position(|w| w.id == id) {
            self.waiting.remove(i);
        }
    }
}

impl Ticket {
    /// The first request head has arrived: from now on the connection does real work and is
    /// never evicted.
    pub(super) fn started(&self) {
        self.gate.lock().forget(self.id);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.gate.lock();
        s.forget(self.id);
        s.total = s.total.saturating_sub(1);
        if let Some(n) = s.peers.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.peers.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVICT_MIN_AGE: Duration = Duration::from_millis(20);

    fn limits(max: usize, per_peer: usize) -> ConnLimits {
        ConnLimits {
            max_connections: max,
            max_connections_per_peer: per_peer,
            ..ConnLimits::default()
        }
    }

    #[test]
    fn the_config_defaults_are_the_library_defaults() {
        let from_config = ConnLimits::from(&agent::config::ApiConfig::default());
        assert_eq!(from_config, ConnLimits::default());
    }

    #[test]
    fn a_peer_over_its_share_is_refused_while_its_connections_are_young() {
        let gate = Gate::new(&limits(10, 2), EVICT_MIN_AGE);
        let a = PeerKey::Uid(1);
        let _t1 = gate.admit(a.clone()).unwrap();
        let _t2 = gate.admit(a.clone()).unwrap();
        assert!(gate.admit(a.clone()).is_none());
        // Another peer still gets in.
        assert!(gate.admit(PeerKey::Uid(2)).is_some());
    }

    #[test]
    fn the_oldest_silent_connection_makes_room_and_busy_ones_do_not() {
        let gate = Gate::new(&limits(10, 2), EVICT_MIN_AGE);
        let a = PeerKey::Uid(1);
        let t1 = gate.admit(a.clone()).unwrap();
        let t2 = gate.admit(a.clone()).unwrap();
        t2.started();
        std::thread::sleep(EVICT_MIN_AGE);
        let t3 = gate.admit(a.clone()).unwrap();
        // t1 was told to go; t2 (busy) was not.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), t1.evicted.notified())
                .await
                .unwrap();
            assert!(
                tokio::time::timeout(Duration::from_millis(20), t2.evicted.notified())
                    .await
                    .is_err()
            );
        });
        t3.started();
        drop(t1);
        // Both left are busy: a newcomer is refused.
        std::thread::sleep(EVICT_MIN_AGE);
        assert!(gate.admit(a.clone()).is_none());
        assert_eq!(gate.held(), 2);
        drop((t2, t3));
        assert_eq!(gate.held(), 0);
    }

    #[test]
    fn a_full_listener_evicts_across_peers() {
        let gate = Gate::new(&limits(2, 2), EVICT_MIN_AGE);
        let _t1 = gate.admit(PeerKey::Uid(1)).unwrap();
        let _t2 = gate.admit(PeerKey::Uid(2)).unwrap();
        assert!(gate.admit(PeerKey::Uid(3)).is_none());
        std::thread::sleep(EVICT_MIN_AGE);
        assert!(gate.admit(PeerKey::Uid(3)).is_some());
    }
}
