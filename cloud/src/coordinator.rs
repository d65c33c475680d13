//! The coordinator's shared state: the store, the live edge connections, and
//! the trigger for scheduling rounds.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use tidemill_proto::Peer;
use tidemill_runtime::clock::SharedClock;
use tidemill_runtime::identity::Authority;
use tidemill_sched::ThroughputTables;
use tidemill_sched::policies::SnapshotDriver;
use tokio::sync::Notify;

use crate::admission::Admission;
use crate::budget::ReportBudget;
use crate::config::CloudConfig;
use crate::metrics::Metrics;
use crate::probing;
use crate::store::Store;

/// One connected edge.
struct Session {
    conn: quinn::Connection,
    probe_addr: Option<SocketAddr>,
    cert_sha256: String,
}

/// State shared by the ingest, the rounds and the API.
pub struct Coordinator {
    /// The durable state.
    pub store: Mutex<Store>,
    /// Report batches waiting to share a commit.
    pub report_commits: crate::group_commit::ReportCommits,
    /// Live connections by node id.
    sessions: Mutex<HashMap<String, Session>>,
    /// Nodes between their hello and their session, by count of such
    /// connections: a round must not call them offline mid-handshake.
    greeting: Mutex<HashMap<String, usize>>,
    /// Edge pairs handed out to probe and not yet measured: (pair, the end
    /// that probes it, when), so the other end is not given it too.
    probing: Mutex<probing::Pending>,
    /// Wakes the scheduling loop early.
    pub wake: Notify,
    /// Whether this replica runs the scheduling rounds.
    pub leadership: crate::leadership::Leadership,
    /// The session that wakes this replica when its edges are owed a
    /// command.
    pub owed_listener: crate::owed_listener::OwedListener,
    /// The configuration in force.
    pub cfg: CloudConfig,
    /// The coordinator's clock for plans, forecasts and records (accelerated in demos); network timeouts use the wall clock.
    pub clock: SharedClock,
    /// What `/metrics` exposes.
    pub metrics: Metrics,
    /// The throughput tables the policies plan with.
    pub throughput: ThroughputTables,
    /// The policy that plans jobs with `[work]`, and what it remembers between rounds.
    pub scheduler: Mutex<SnapshotDriver>,
    /// When history was last pruned, Unix ms (0: never).
    last_prune_ms: AtomicI64,
    /// The CA that issues joining nodes their certificates (replaced at each
    /// step of a CA rotation).
    authority: RwLock<Arc<Authority>>,
    /// The QUIC endpoint edges connect to, once it listens.
    pub endpoint: OnceLock<quinn::Endpoint>,
    /// When the last scheduling round succeeded, wall time.
    last_round: Mutex<Option<std::time::Instant>>,
    /// When the last round that planned jobs ran, on the coordinator's
    /// clock (ms): samples newer than it are new to the next one.
    pub last_planned_ms: AtomicI64,
    /// When this coordinator started, on its clock, for the restart grace.
    pub started_ms: i64,
    /// The caps on QUIC connections and frame bytes (`[quic]`).
    pub admission: Admission,
    /// Each node's hourly report budget (`[ingest]`).
    pub report_budget: ReportBudget,
    /// The checkpoints kept for moving jobs (`[checkpoint]`).
    pub checkpoints: crate::checkpoints::Keeper,
}

impl Coordinator {
    /// Shared state over an opened store.
    pub fn new(
        store: Store,
        cfg: CloudConfig,
        clock: SharedClock,
        throughput: ThroughputTables,
        authority: Authority,
    ) -> Self {
        Coordinator {
            authority: RwLock::new(Arc::new(authority)),
            endpoint: OnceLock::new(),
            last_round: Mutex::new(None),
            last_planned_ms: AtomicI64::new(i64::MIN),
            throughput,
            scheduler: Mutex::new(cfg.scheduler.driver()),
            store: Mutex::new(store),
            report_commits: Default::default(),
            sessions: Mutex::new(HashMap::new()),
            greeting: Mutex::new(HashMap::new()),
            probing: Mutex::new(probing::Pending::new()),
            wake: Notify::new(),
            owed_listener: Default::default(),
            leadership: crate::leadership::Leadership::new(
                cfg.store.replica_name(&cfg.data_dir),
                std::time::Duration::from_secs_f64(cfg.store.lease_secs),
            ),
            admission: Admission::new(&cfg.quic),
            report_budget: ReportBudget::new(
                cfg.ingest.reports_per_hour,
                cfg.ingest.report_bytes_per_hour,
            ),
            metrics: Metrics::new(cfg.metrics.max_node_series),
            checkpoints: crate::checkpoints::Keeper::new(&cfg.data_dir, &cfg.checkpoint),
            cfg,
            started_ms: clock.now_ms(),
            clock,
            last_prune_ms: AtomicI64::new(0),
        }
    }

    /// Records `conn` as the node's connection, closing any older one it
    /// replaces. `probe_port` is where the edge answers link probes, on the
    /// address it connected from.
    pub fn connect(
        &self,
        node_id: &str,
        conn: quinn::Connection,
        probe_port: Option<u16>,
        cert_sha256: &str,
    ) {
        let probe_addr = probe_port.map(|port| SocketAddr::new(conn.remote_address().ip(), port));
        let session = Session {
            conn,
            probe_addr,
            cert_sha256: cert_sha256.to_string(),
        };
        if let Some(old) = self
            .sessions
            .lock()
            .unwrap()
            .insert(node_id.to_string(), session)
        {
            old.conn.close(
                0u32.into(),
                b"replaced by a newer connection from the same node",
            );
        }
        self.wake.notify_one();
    }

    /// The connected edges `node_id` should probe now: of the pairs within
    /// `k` places in node-id order, those that fall to it
    /// ([`probing::assigned`]) and whose link is due ([`probing::due`]), so
    /// the matrix holds every link the scheduler reads, measured from one
    /// end, before it goes stale, and no probe is spent on a fresh one.
    pub fn peers_for(&self, node_id: &str, k: usize) -> Vec<Peer> {
        let measured = match self.store.lock().unwrap().edge_links_of(node_id) {
            Ok(measured) => measured,
            Err(e) => {
                tracing::warn!(node_id = %node_id, error = %e, "cannot read link ages; assigning no peers this time");
                return Vec::new();
            }
        };
        let now = self.clock.now_ms();
        let due_after = probing::due_after_ms(self.cfg.link_stale_secs);
        let sessions = self.sessions.lock().unwrap();
        let mut ids: Vec<&str> = sessions.keys().map(String::as_str).collect();
        ids.sort_unstable();
        let mut pending = self.probing.lock().unwrap();
        probing::assigned(&ids, node_id, k)
            .into_iter()
            .filter(|peer| probing::due(&measured, peer, now, due_after))
            .filter(|peer| probing::claim(&mut pending, node_id, peer, now, due_after))
            .filter_map(|id| {
                let s = &sessions[id];
                s.probe_addr.map(|addr| Peer {
                    node_id: id.to_string(),
                    addr,
                    cert_sha256: s.cert_sha256.clone(),
                })
            })
            .collect()
    }

    /// Whether an hour has passed since history was last pruned; if so, notes
    /// `now_ms` as the time of this pruning.
    pub fn prune_due(&self, now_ms: i64) -> bool {
        let last = self.last_prune_ms.load(Ordering::Relaxed);
        now_ms - last >= 3_600_000
            && self
                .last_prune_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Forgets the node's connection if it is still `conn`; returns whether
    /// it was (a newer connection of the node stays).
    pub fn disconnect(&self, node_id: &str, conn: &quinn::Connection) -> bool {
        let mut sessions = self.sessions.lock().unwrap();
        let current = sessions
            .get(node_id)
            .is_some_and(|s| s.conn.stable_id() == conn.stable_id());
        if current {
            sessions.remove(node_id);
        }
        current
    }

    /// The node's live connection, if it has one.
    pub fn session_of(&self, node_id: &str) -> Option<quinn::Connection> {
        let sessions = self.sessions.lock().unwrap();
        sessions.get(node_id).map(|s| s.conn.clone())
    }

    /// SHA-256 of the certificate the node's live connection uses, if it
    /// has one.
    pub fn session_cert(&self, node_id: &str) -> Option<String> {
        let sessions = self.sessions.lock().unwrap();
        sessions.get(node_id).map(|s| s.cert_sha256.clone())
    }

    /// Notes that a scheduling round succeeded just now.
    pub fn round_done(&self) {
        *self.last_round.lock().unwrap() = Some(std::time::Instant::now());
    }

    /// Why the coordinator is not ready to serve, if it is not: the store
    /// cannot be written, or no scheduling round has succeeded within three
    /// round intervals (wall time).
    pub fn not_ready(&self) -> Option<String> {
        if let Err(e) = self.store.lock().unwrap().probe_write() {
            return Some(format!(
                "the store cannot be written: {e}; check that the data dir's disk has space and the database file is in place and writable"
            ));
        }
        let interval = std::time::Duration::from_secs_f64(
            self.cfg.round_interval_secs / self.cfg.clock.speed.max(1.0),
        );
        match *self.last_round.lock().unwrap() {
            None => Some("no scheduling round has finished yet".into()),
            Some(t) if t.elapsed() > 3 * interval + std::time::Duration::from_secs(1) => {
                Some(format!(
                    "the last scheduling round finished {:.0} s ago",
                    t.elapsed().as_secs_f64()
                ))
            }
            Some(_) => None,
        }
    }

    /// The CA as it stands.
    pub fn authority(&self) -> Arc<Authority> {
        self.authority.read().unwrap().clone()
    }

    /// Puts a reloaded CA in force (a CA rotation's step).
    pub fn set_authority(&self, authority: Authority) {
        *self.authority.write().unwrap() = Arc::new(authority);
    }

    /// Closes every node's live connection, so that each reconnects (once)
    /// into what changed: a CA rotation's step.
    pub fn drop_sessions(&self, why: &str) {
        for (_, s) in self.sessions.lock().unwrap().drain() {
            s.conn.close(3u32.into(), why.as_bytes());
        }
    }

    /// Closes a node's live connection, if it has one (its certificate was
    /// just revoked).
    pub fn drop_session(&self, node_id: &str) {
        if let Some(s) = self.sessions.lock().unwrap().remove(node_id) {
            s.conn.close(2u32.into(), b"this node was removed");
        }
    }

    /// The ids of connected nodes, and of nodes in their handshake: the
    /// hello marks a node heard from before its session is registered, and a
    /// round between the two must not take it for gone.
    pub fn connected(&self) -> HashSet<String> {
        let mut ids: HashSet<String> = self.sessions.lock().unwrap().keys().cloned().collect();
        ids.extend(self.greeting.lock().unwrap().keys().cloned());
        ids
    }

    /// Counts `node_id` as connected until the returned guard drops: hold it
    /// from before the hello is stored until the session is registered.
    pub fn greeting(&self, node_id: &str) -> Greeting<'_> {
        *self
            .greeting
            .lock()
            .unwrap()
            .entry(node_id.to_string())
            .or_default() += 1;
        Greeting {
            coord: self,
            node_id: node_id.to_string(),
        }
    }

    /// The live connections, for dispatch.
    pub fn connections(&self) -> Vec<(String, quinn::Connection)> {
        self.sessions
            .lock()
            .unwrap()
            .iter()
            .map(|(k, s)| (k.clone(), s.conn.clone()))
            .collect()
    }
}

/// A node's handshake in progress (see [`Coordinator::greeting`]).
pub struct Greeting<'a> {
    coord: &'a Coordinator,
    node_id: String,
}

impl Drop for Greeting<'_> {
    fn drop(&mut self) {
        let mut greeting = self.coord.greeting.lock().unwrap();
        if let Some(n) = greeting.get_mut(&self.node_id) {
            *n -= 1;
            if *n == 0 {
                greeting.remove(&self.node_id);
            }
        }
    }
}

/// A coordinator on the default config over the store in `dir` with nodes
/// `n1` and `n2` registered at 100 ms, for unit tests.
#[cfg(test)]
pub(crate) fn test_coordinator(dir: &std::path::Path) -> Coordinator {
    use crate::store::testkit::hello;
    tidemill_runtime::tls::load_or_create(dir, &["localhost".into()], 0).unwrap();
    let mut store = Store::open(dir).unwrap();
    store.register(&hello("n1"), 100).unwrap();
    store.register(&hello("n2"), 100).unwrap();
    Coordinator::new(
        store,
        CloudConfig {
            data_dir: dir.to_path_buf(),
            ..CloudConfig::default()
        },
        Arc::new(tidemill_runtime::clock::SystemClock),
        tidemill_sched::ThroughputTables::default(),
        Authority::load(dir).unwrap(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_in_its_handshake_is_not_expired_and_counts_until_its_last_greeting_ends() {
        let dir = tempfile::tempdir().unwrap();
        let coord = test_coordinator(dir.path());
        let first = coord.greeting("n1");
        let second = coord.greeting("n1");
        // Both heard from at 100; with no grace, only the one not greeting goes.
        let gone = coord
            .store
            .lock()
            .unwrap()
            .expire(&coord.connected(), 200, None, 200);
        assert_eq!(gone.unwrap(), vec!["n2".to_string()]);
        drop(first);
        assert!(coord.connected().contains("n1"), "one handshake still open");
        drop(second);
        assert!(coord.connected().is_empty());
    }
}
