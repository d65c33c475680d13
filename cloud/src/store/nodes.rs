//! Nodes: registering them, marking silent ones offline, and the views of
//! nodes, their forecasts and their links that the API and the scheduler read.

use std::collections::HashSet;
use std::sync::Arc;

use super::db;
use super::db::{OptionalExtension, Query, Transaction, params};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tidemill_proto::{Accelerator, CLOUD_PEER, Capabilities, Hello, NodeForecast};
use tidemill_sched::LinkClass;

use super::trust::NodeTrust;
use super::{Store, StoreError, event, ms_to_time, tidal};

/// A node as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node id.
    pub id: String,
    /// Connected, or disconnected for less than the grace period.
    pub online: bool,
    /// An operator drained it: nothing new is placed on it, and what ran
    /// there checkpointed and moved, until `uncordon`.
    #[serde(default)]
    pub drained: bool,
    /// Logical CPU cores.
    pub cpu_cores: u32,
    /// Memory in bytes.
    pub mem_bytes: u64,
    /// Accelerators.
    pub accelerators: Vec<Accelerator>,
    /// Operating system.
    pub os: String,
    /// CPU architecture.
    pub arch: String,
    /// tidemill-edge version.
    pub daemon_version: String,
    /// The highest report sequence number stored.
    pub last_seq: u64,
    /// Latest CPU utilisation, percent.
    pub cpu_util: Option<f32>,
    /// Latest memory utilisation, percent.
    pub mem_util: Option<f32>,
    /// Latest accelerator utilisation, percent; absent when unknown.
    pub gpu_util: Option<f32>,
    /// When the latest sample was taken.
    pub last_sample_at: Option<DateTime<Utc>>,
    /// When the node was last sampled at or over its idle threshold (Unix
    /// ms); `None` when never, as far as the store knows. The scheduler's
    /// input, not a listing's.
    #[serde(skip)]
    pub busy_ms: Option<i64>,
    /// When the node was last heard from.
    pub last_seen_at: DateTime<Utc>,
    /// When the node first registered.
    pub registered_at: DateTime<Utc>,
    /// A summary of the node's latest forecast, if it has sent one.
    pub forecast: Option<ForecastView>,
    /// Its labels, a cordon's reason and any refused claim.
    #[serde(default)]
    pub trust: NodeTrust,
}

/// The devices a node offers the tidal scheduler, each running one worker:
/// one per accelerator, or the whole node as one device when it has none
/// (CPU training). The scheduler's view and the re-check when a plan is
/// applied both count capacity this way, so they agree.
pub fn devices(accelerators: &[Accelerator]) -> u32 {
    (accelerators.len() as u32).max(1)
}

/// A measured link, as `links` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkRecord {
    /// The measuring node.
    pub from: String,
    /// The other end: a node id, or `cloud` for the coordinator.
    pub to: String,
    /// Which class of link it is, for the cost model's defaults.
    pub class: LinkClass,
    /// When it was last measured.
    pub measured_at: DateTime<Utc>,
    /// Round-trip time, ms.
    pub rtt_ms: f64,
    /// Probe throughput, bytes per second.
    pub bandwidth_bps: f64,
    /// Share of packets lost (0-1).
    pub loss: f64,
}

/// The class of an edge's probed link to `peer`: to `cloud` it is
/// cloud-edge, to another edge edge-edge.
fn link_class_of_peer(peer: &str) -> LinkClass {
    if peer == CLOUD_PEER {
        LinkClass::CloudEdge
    } else {
        LinkClass::EdgeEdge
    }
}

/// What `nodes` shows of a node's latest forecast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForecastView {
    /// When the edge made it.
    pub issued_at: DateTime<Utc>,
    /// The next idle window, if one is forecast within the horizon.
    pub next_idle: Option<IdleWindowView>,
    /// Hours forecast idle in the next 24 h.
    pub idle_hours_next_24h: f64,
    /// Whether the node's CPU shows a daily cycle: present, absent or unknown.
    pub daily_cycle: Option<tidemill_forecast::DailyCycle>,
    /// How much history the forecast stands on, so a young one is labelled.
    #[serde(default)]
    pub history: Option<tidemill_forecast::HistoryDepth>,
    /// The peers' prior it leans on while the node's own history is short.
    #[serde(default)]
    pub prior: Option<tidemill_forecast::PriorUse>,
}

/// An idle window in wall-clock terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleWindowView {
    /// When it opens.
    pub start: DateTime<Utc>,
    /// When it closes.
    pub end: DateTime<Utc>,
    /// The probability that the node stays idle throughout (0-1).
    pub confidence: f64,
}

impl From<&NodeForecast> for ForecastView {
    fn from(f: &NodeForecast) -> Self {
        let summary = f.summary();
        ForecastView {
            issued_at: ms_to_time(f.issued_ms),
            next_idle: summary.next_idle.map(|w| IdleWindowView {
                start: ms_to_time(w.start_ms),
                end: ms_to_time(w.end_ms),
                confidence: w.confidence,
            }),
            idle_hours_next_24h: summary.idle_hours_next_24h,
            daily_cycle: summary.daily_cycle,
            history: summary.history,
            prior: summary.prior,
        }
    }
}

impl Store {
    /// Records a node's hello and returns the highest sequence number stored
    /// for it, from which the edge resends.
    pub fn register(&mut self, hello: &Hello, now_ms: i64) -> Result<u64, StoreError> {
        let err = self.sql_err();
        self.write(|tx| register(tx, hello, now_ms, None).map_err(&err))
    }

    /// The address each online node's edge last connected from, by node
    /// id: where a distributed job's rank 0 on it is reached. The replica
    /// holding the edge's session writes it with the hello
    /// ([`Store::hello`]), and the leading replica reads it.
    pub fn addresses(&self) -> Result<super::Addresses, StoreError> {
        let err = self.sql_err();
        let rows = self
            .conn
            .prepare_cached(
                "SELECT id, address FROM nodes WHERE online = 1 AND address IS NOT NULL",
            )
            .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// Notes when a node was last heard from, for the offline grace period.
    pub fn touch(&mut self, node_id: &str, now_ms: i64) -> Result<(), StoreError> {
        let err = self.sql_err();
        self.conn
            .execute(
                "UPDATE nodes SET last_seen_ms = ?2 WHERE id = ?1",
                params![node_id, now_ms],
            )
            .map_err(err)?;
        Ok(())
    }

    /// Marks offline every node that is not connected and has not been heard
    /// from since `cutoff_ms`, sparing those last heard from before
    /// `spare_before_ms` (a restart's grace); returns their ids.
    pub fn expire(
        &mut self,
        connected: &HashSet<String>,
        cutoff_ms: i64,
        spare_before_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let stale: Vec<String> = tx
                .prepare(
                    "SELECT id FROM nodes WHERE online = 1 AND last_seen_ms < ?1 AND last_seen_ms >= ?2",
                )
                .and_then(|mut s| {
                    s.query_map(params![cutoff_ms, spare_before_ms.unwrap_or(i64::MIN)], |r| r.get(0))?
                        .collect()
                })
                .map_err(&err)?;
            let gone: Vec<String> = stale
                .into_iter()
                .filter(|id| !connected.contains(id))
                .collect();
            for id in &gone {
                go_offline(tx, id, now_ms, "disconnected past the grace period").map_err(&err)?;
            }
            Ok(gone)
        })
    }

    /// Drains `node_id`: nothing new is placed there, and each job with a
    /// task there is asked to checkpoint and stop, to resume elsewhere.
    /// Returns those jobs' ids, or `None` for an unknown node.
    pub fn drain(&mut self, node_id: &str, now_ms: i64) -> Result<Option<Vec<u64>>, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            if tx
                .execute("UPDATE nodes SET drained = 1 WHERE id = ?1", [node_id])
                .map_err(&err)?
                == 0
            {
                return Ok(None);
            }
            let jobs = tidal::move_off(tx, node_id, now_ms, &format!("{node_id} is draining"))
                .map_err(&err)?;
            event(
                tx,
                now_ms,
                Some(node_id),
                None,
                "node-drained",
                &format!("{} jobs asked to move", jobs.len()),
            )
            .map_err(&err)?;
            Ok(Some(jobs.into_iter().map(|j| j as u64).collect()))
        })
    }

    /// Lets the scheduler use a drained node again; `false` for an unknown node.
    pub fn uncordon(&mut self, node_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let known = tx
                .execute(
                    "UPDATE nodes SET drained = 0, unstarted = 0, cordon_reason = NULL WHERE id = ?1",
                    [node_id],
                )
                .map_err(&err)?
                > 0;
            if known {
                event(
                    tx,
                    now_ms,
                    Some(node_id),
                    None,
                    "node-uncordoned",
                    "schedulable again",
                )
                .map_err(&err)?;
            }
            Ok(known)
        })
    }

    /// Marks a node offline at once because its edge said it is stopping;
    /// returns whether it was online.
    pub fn stopped(&mut self, node_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let online: bool = tx
                .query_row("SELECT online FROM nodes WHERE id = ?1", [node_id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(&err)?
                .unwrap_or(false);
            if online {
                go_offline(tx, node_id, now_ms, "its edge stopped").map_err(&err)?;
            }
            Ok(online)
        })
    }

    /// Every node, by id.
    pub fn nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare(
                "SELECT n.id, n.online, n.capabilities, n.last_seq, n.cpu_util, n.mem_util, n.gpu_util,
                        n.last_sample_ms, n.last_seen_ms, n.registered_ms, f.forecast, n.drained,
                        n.labels, n.cordon_reason, n.unstarted, n.claimed_capabilities, n.busy_ms,
                        f.issued_ms
                 FROM nodes n LEFT JOIN forecasts f ON f.node_id = n.id ORDER BY n.id",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| {
                let caps: Capabilities = serde_json::from_str(&r.get::<_, String>(2)?)
                    .map_err(|e| db::Error::decode(2, e))?;
                let id: String = r.get(0)?;
                let forecast = match r.get::<_, Option<i64>>(17)? {
                    Some(t) => self.forecasts.get(&id, t, || r.get(10))?.ok(),
                    None => None,
                };
                Ok(NodeRecord {
                    id,
                    online: r.get(1)?,
                    drained: r.get(11)?,
                    cpu_cores: caps.cpu_cores,
                    mem_bytes: caps.mem_bytes,
                    accelerators: caps.accelerators,
                    os: caps.os,
                    arch: caps.arch,
                    daemon_version: caps.daemon_version,
                    last_seq: r.get::<_, i64>(3)? as u64,
                    cpu_util: r.get(4)?,
                    mem_util: r.get(5)?,
                    gpu_util: r.get(6)?,
                    last_sample_at: r.get::<_, Option<i64>>(7)?.map(ms_to_time),
                    busy_ms: r.get(16)?,
                    last_seen_at: ms_to_time(r.get(8)?),
                    registered_at: ms_to_time(r.get(9)?),
                    forecast: forecast.as_deref().map(ForecastView::from),
                    trust: NodeTrust {
                        labels: serde_json::from_str(&r.get::<_, String>(12)?).unwrap_or_default(),
                        cordon_reason: r.get(13)?,
                        unstarted: r.get(14)?,
                        refused_claim: r
                            .get::<_, Option<String>>(15)?
                            .and_then(|json| serde_json::from_str(&json).ok()),
                    },
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// The node's latest forecast; `Ok(None)` if it has sent none (or what
    /// it sent does not parse). Parsed once per issue: each hello builds a
    /// prior from up to 128 peers' forecasts per source (`store::priors`).
    pub fn forecast(&self, node_id: &str) -> Result<Option<Arc<NodeForecast>>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare_cached("SELECT issued_ms, forecast FROM forecasts WHERE node_id = ?1")
            .map_err(&err)?;
        let parsed = stmt
            .query_row([node_id], |r| {
                self.forecasts.get(node_id, r.get(0)?, || r.get(1))
            })
            .optional()
            .map_err(&err)?;
        Ok(parsed.and_then(Result::ok))
    }

    /// The latest measurement of every link, by its two ends.
    pub fn links(&self) -> Result<Vec<LinkRecord>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare("SELECT from_node, to_node, t_ms, rtt_ms, bandwidth_bps, loss FROM links ORDER BY from_node, to_node")
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| {
                let from: String = r.get(0)?;
                let to: String = r.get(1)?;
                Ok(LinkRecord {
                    class: link_class_of_peer(&to),
                    from,
                    to,
                    measured_at: ms_to_time(r.get(2)?),
                    rtt_ms: r.get(3)?,
                    bandwidth_bps: r.get(4)?,
                    loss: r.get(5)?,
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// Whether a node of this id has ever registered.
    pub fn node_known(&self, node_id: &str) -> Result<bool, StoreError> {
        let err = self.sql_err();
        self.conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM nodes WHERE id = ?1)",
                [node_id],
                |r| r.get(0),
            )
            .map_err(err)
    }
}

/// [`Store::register`] inside `tx`, recording `address`, where the edge
/// connected from, when given ([`Store::addresses`]).
pub(super) fn register(
    tx: &Transaction<'_>,
    hello: &Hello,
    now_ms: i64,
    address: Option<&str>,
) -> db::Result<u64> {
    let caps = serde_json::to_string(&hello.capabilities).expect("capabilities serialise");
    tx.execute(
        "INSERT INTO nodes (id, capabilities, online, registered_ms, last_seen_ms, site, address)
         VALUES (?1, ?2, 1, ?3, ?3, ?4, ?5)
         ON CONFLICT (id) DO UPDATE SET capabilities = ?2, online = 1, last_seen_ms = ?3,
            site = ?4, address = COALESCE(?5, nodes.address)",
        params![hello.node_id, caps, now_ms, hello.site, address],
    )?;
    event(
        tx,
        now_ms,
        Some(&hello.node_id),
        None,
        "node-connected",
        "registered",
    )?;
    let seq: i64 = tx.query_row(
        "SELECT last_seq FROM nodes WHERE id = ?1",
        [&hello.node_id],
        |r| r.get(0),
    )?;
    Ok(seq as u64)
}

/// Takes `node_id` offline for `why`: the jobs on it are requeued
/// ([`tidal::lose_node`]) and the event log says why.
fn go_offline(tx: &Transaction<'_>, node_id: &str, now_ms: i64, why: &str) -> db::Result<()> {
    tx.execute("UPDATE nodes SET online = 0 WHERE id = ?1", [node_id])?;
    tidal::lose_node(tx, node_id, now_ms)?;
    event(tx, now_ms, Some(node_id), None, "node-offline", why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testkit::hello;
    use crate::store::testkit::on_both_backends;

    on_both_backends! {
        fn expire_marks_only_disconnected_stale_nodes_offline(db) {
            let mut store = db.open();
            store.register(&hello("a"), 0).unwrap();
            store.register(&hello("b"), 0).unwrap();
            store.register(&hello("c"), 100).unwrap();
            let connected: HashSet<String> = ["b".to_string()].into();
            assert_eq!(
                store.expire(&connected, 50, None, 200).unwrap(),
                vec!["a".to_string()]
            );
            let online: Vec<bool> = store.nodes().unwrap().iter().map(|n| n.online).collect();
            assert_eq!(online, vec![false, true, true]);
            let counts = store.counts().unwrap();
            assert_eq!((counts.nodes_online, counts.nodes_offline), (2, 1));
            assert!(store.node_known("a").unwrap() && !store.node_known("zz").unwrap());
            store.register(&hello("a"), 300).unwrap();
            assert!(
                store.nodes().unwrap()[0].online,
                "online again as soon as it reconnects"
            );
        }
    }

    on_both_backends! {
        fn a_restart_spares_nodes_not_heard_from_since_and_a_stop_is_offline_at_once(db) {
            let mut store = db.open();
            store.register(&hello("before"), 0).unwrap();
            store.register(&hello("after"), 1_000).unwrap();
            // Restarted at 500: "before" is reconnecting, "after" came and went.
            let none = HashSet::new();
            assert_eq!(
                store.expire(&none, 5_000, Some(500), 6_000).unwrap(),
                vec!["after".to_string()]
            );
            assert_eq!(
                store.expire(&none, 5_000, None, 6_000).unwrap(),
                vec!["before".to_string()]
            );
            store.register(&hello("s"), 7_000).unwrap();
            assert!(store.stopped("s", 7_001).unwrap());
            assert!(!store.stopped("s", 7_002).unwrap(), "already offline");
            assert!(!store.nodes().unwrap().iter().any(|n| n.online));
        }
    }
}
