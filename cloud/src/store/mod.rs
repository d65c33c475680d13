//! The coordinator's durable state in SQLite: nodes, the ledger of accepted
//! reports, samples, jobs, tasks and events.
//!
//! Each report is applied in one transaction together with the node's new
//! `last_seq`, and acknowledged only after it commits; a duplicate (seq not above
//! `last_seq`) is acknowledged without effect. A crash at any point therefore
//! neither loses an acknowledged report nor applies one twice.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde::{Deserialize, Serialize};
use tidemill_proto::{
    Accelerator, Assignment, CLOUD_PEER, Capabilities, Hello, NodeForecast, Report, ReportBody,
    TaskEvent, TaskStatus,
};
use tidemill_runtime::sqlite::{self, DbError};
use tidemill_sched::{JobView, NodeView, Plan, Snapshot};

use crate::job::{JobRecord, JobSpec, JobState, PlanView};
use crate::rendezvous;

mod tidal;

pub use tidal::{Addresses, PlannedJob};

/// The database file inside the data dir.
pub const DB_FILE: &str = "tidemill.db";

const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        capabilities TEXT NOT NULL,
        last_seq INTEGER NOT NULL DEFAULT 0,
        online INTEGER NOT NULL DEFAULT 0,
        registered_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL,
        cpu_util REAL,
        mem_util REAL,
        gpu_util REAL,
        last_sample_ms INTEGER
    );
    CREATE TABLE reports (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        received_ms INTEGER NOT NULL,
        PRIMARY KEY (node_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE samples (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        seq INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        t_ms INTEGER NOT NULL,
        cpu REAL NOT NULL,
        mem REAL NOT NULL,
        gpu REAL,
        net_rx INTEGER NOT NULL,
        net_tx INTEGER NOT NULL,
        PRIMARY KEY (node_id, seq, idx)
    ) WITHOUT ROWID;
    CREATE INDEX samples_by_time ON samples (node_id, t_ms);
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        spec TEXT NOT NULL,
        state TEXT NOT NULL,
        node TEXT,
        exit_code INTEGER,
        output_tail TEXT NOT NULL DEFAULT '[]',
        reason TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        deadline_ms INTEGER NOT NULL,
        submitted_ms INTEGER NOT NULL,
        started_ms INTEGER,
        finished_ms INTEGER
    );
    CREATE INDEX jobs_by_state ON jobs (state);
    CREATE TABLE tasks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        node_id TEXT NOT NULL REFERENCES nodes(id),
        state TEXT NOT NULL,
        dispatched INTEGER NOT NULL DEFAULT 0,
        cancel_sent INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL
    );
    CREATE INDEX open_tasks ON tasks (state) WHERE state != 'done';
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        t_ms INTEGER NOT NULL,
        node_id TEXT,
        job_id INTEGER,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL
    );
",
    "
    CREATE TABLE forecasts (
        node_id TEXT PRIMARY KEY REFERENCES nodes(id),
        issued_ms INTEGER NOT NULL,
        forecast TEXT NOT NULL
    );
",
    "
    CREATE TABLE links (
        from_node TEXT NOT NULL REFERENCES nodes(id),
        to_node TEXT NOT NULL,
        t_ms INTEGER NOT NULL,
        rtt_ms REAL NOT NULL,
        bandwidth_bps REAL NOT NULL,
        loss REAL NOT NULL,
        PRIMARY KEY (from_node, to_node)
    ) WITHOUT ROWID;
",
    "
    ALTER TABLE jobs ADD COLUMN admission TEXT;
    ALTER TABLE jobs ADD COLUMN reservation TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE jobs ADD COLUMN plan TEXT;
    ALTER TABLE jobs ADD COLUMN done_iters REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN attained_s REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN location TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE jobs ADD COLUMN rate_ips REAL;
    ALTER TABLE jobs ADD COLUMN steps_from_ms INTEGER;
    ALTER TABLE jobs ADD COLUMN progress_ms INTEGER;
    ALTER TABLE tasks ADD COLUMN rank INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN world INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE tasks ADD COLUMN workers INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE tasks ADD COLUMN master_addr TEXT NOT NULL DEFAULT '127.0.0.1';
    ALTER TABLE tasks ADD COLUMN yield_requested INTEGER NOT NULL DEFAULT 0;
",
];

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Opening or migrating failed.
    #[error(transparent)]
    Open(#[from] DbError),
    /// A query failed.
    #[error("database {path}: {source}")]
    Sql {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// A report came from a node that never said hello.
    #[error("node {0:?} sent a report before registering")]
    UnknownNode(String),
}

/// A node as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node id.
    pub id: String,
    /// Connected, or disconnected for less than the grace period.
    pub online: bool,
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
    /// When the node was last heard from.
    pub last_seen_at: DateTime<Utc>,
    /// When the node first registered.
    pub registered_at: DateTime<Utc>,
    /// A summary of the node's latest forecast, if it has sent one.
    pub forecast: Option<ForecastView>,
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

/// The classes of probed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkClass {
    /// Between two edge nodes.
    EdgeEdge,
    /// Between an edge node and the cloud.
    CloudEdge,
}

impl LinkClass {
    /// The class of an edge's link to `peer`: to `cloud` it is cloud-edge,
    /// to another edge edge-edge.
    pub fn of_peer(peer: &str) -> Self {
        if peer == CLOUD_PEER {
            LinkClass::CloudEdge
        } else {
            LinkClass::EdgeEdge
        }
    }

    /// The name shown.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkClass::EdgeEdge => "edge-edge",
            LinkClass::CloudEdge => "cloud-edge",
        }
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
        }
    }
}

/// What applying reports did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The sequence number to acknowledge: every report up to it is stored.
    pub ack: u64,
    /// The reports newly stored, by sequence number and kind.
    pub stored: Vec<(u64, ReportKind)>,
    /// How many were duplicates and changed nothing.
    pub duplicates: usize,
    /// Jobs whose state the reports changed, with their new states.
    pub jobs: Vec<(u64, JobState)>,
}

/// What a report carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportKind {
    /// Utilisation samples.
    Samples,
    /// A task status.
    Task,
    /// A forecast.
    Forecast,
    /// Link measurements.
    Links,
}

impl ReportKind {
    /// The name stored in the ledger and logged.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportKind::Samples => "samples",
            ReportKind::Task => "task",
            ReportKind::Forecast => "forecast",
            ReportKind::Links => "links",
        }
    }
}

/// Counts for the metrics endpoint, read without loading any record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Jobs by state.
    pub jobs: BTreeMap<String, u64>,
    /// Reports in the ledger.
    pub reports: u64,
    /// Nodes online.
    pub nodes_online: u64,
    /// Nodes offline.
    pub nodes_offline: u64,
}

/// A command owed to a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Owed {
    /// Start this task.
    Assign(Assignment),
    /// Stop this task.
    Cancel(u64),
}

/// The store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

fn ms_to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

impl Store {
    /// Opens the database in `data_dir`, creating and migrating it as needed.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        let path = data_dir.join(DB_FILE);
        let conn = sqlite::open(&path, MIGRATIONS)?;
        Ok(Store { conn, path })
    }

    fn sql_err(&self) -> impl Fn(rusqlite::Error) -> StoreError + use<> {
        let path = self.path.clone();
        move |source| StoreError::Sql {
            path: path.clone(),
            source,
        }
    }

    fn write<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let err = self.sql_err();
        let tx = self.conn.transaction().map_err(&err)?;
        let out = f(&tx)?;
        tx.commit().map_err(&err)?;
        Ok(out)
    }

    /// Records a node's hello and returns the highest sequence number stored
    /// for it, from which the edge resends.
    pub fn register(&mut self, hello: &Hello, now_ms: i64) -> Result<u64, StoreError> {
        let err = self.sql_err();
        let caps = serde_json::to_string(&hello.capabilities).expect("capabilities serialise");
        self.write(|tx| {
            tx.execute(
                "INSERT INTO nodes (id, capabilities, online, registered_ms, last_seen_ms)
                 VALUES (?1, ?2, 1, ?3, ?3)
                 ON CONFLICT (id) DO UPDATE SET capabilities = ?2, online = 1, last_seen_ms = ?3",
                params![hello.node_id, caps, now_ms],
            )
            .map_err(&err)?;
            event(
                tx,
                now_ms,
                Some(&hello.node_id),
                None,
                "node-connected",
                "registered",
            )
            .map_err(&err)?;
            let seq: i64 = tx
                .query_row(
                    "SELECT last_seq FROM nodes WHERE id = ?1",
                    [&hello.node_id],
                    |r| r.get(0),
                )
                .map_err(&err)?;
            Ok(seq as u64)
        })
    }

    /// Applies a batch of reports, in order and idempotently, in one
    /// transaction; see the module docs.
    pub fn apply_reports(
        &mut self,
        node_id: &str,
        reports: &[Report],
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let last: Option<i64> = tx
                .query_row("SELECT last_seq FROM nodes WHERE id = ?1", [node_id], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(&err)?;
            let mut last = last.ok_or_else(|| StoreError::UnknownNode(node_id.to_string()))? as u64;
            let mut applied = Applied {
                ack: last,
                stored: Vec::new(),
                duplicates: 0,
                jobs: Vec::new(),
            };
            for report in reports {
                if report.seq <= last {
                    applied.duplicates += 1;
                    continue;
                }
                if report.seq != last + 1 {
                    let detail = format!("sequence jumped from {last} to {}", report.seq);
                    tracing::warn!(node_id, %detail, "report sequence gap");
                    event(tx, now_ms, Some(node_id), None, "sequence-gap", &detail)
                        .map_err(&err)?;
                }
                let (kind, job) = apply_body(tx, node_id, report, now_ms).map_err(&err)?;
                tx.execute(
                    "INSERT INTO reports (node_id, seq, kind, received_ms) VALUES (?1, ?2, ?3, ?4)",
                    params![node_id, report.seq as i64, kind.as_str(), now_ms],
                )
                .map_err(&err)?;
                applied.stored.push((report.seq, kind));
                applied.jobs.extend(job);
                last = report.seq;
            }
            tx.execute(
                "UPDATE nodes SET last_seq = ?2, last_seen_ms = ?3 WHERE id = ?1",
                params![node_id, last as i64, now_ms],
            )
            .map_err(&err)?;
            applied.ack = last;
            Ok(applied)
        })
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

    /// Forgets samples, ledger entries and events older than `before_ms`, so
    /// the database stays bounded; returns how many rows went.
    pub fn prune(&mut self, before_ms: i64) -> Result<usize, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let mut gone = tx
                .execute("DELETE FROM samples WHERE t_ms < ?1", [before_ms])
                .map_err(&err)?;
            gone += tx
                .execute("DELETE FROM reports WHERE received_ms < ?1", [before_ms])
                .map_err(&err)?;
            gone += tx
                .execute("DELETE FROM events WHERE t_ms < ?1", [before_ms])
                .map_err(&err)?;
            Ok(gone)
        })
    }

    /// Marks offline every node that is not connected and has not been heard
    /// from since `cutoff_ms`; returns their ids.
    pub fn expire(
        &mut self,
        connected: &HashSet<String>,
        cutoff_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let stale: Vec<String> = tx
                .prepare("SELECT id FROM nodes WHERE online = 1 AND last_seen_ms < ?1")
                .and_then(|mut s| s.query_map([cutoff_ms], |r| r.get(0))?.collect())
                .map_err(&err)?;
            let gone: Vec<String> = stale
                .into_iter()
                .filter(|id| !connected.contains(id))
                .collect();
            for id in &gone {
                tx.execute("UPDATE nodes SET online = 0 WHERE id = ?1", [id])
                    .map_err(&err)?;
                tidal::lose_node(tx, id, now_ms).map_err(&err)?;
                event(
                    tx,
                    now_ms,
                    Some(id),
                    None,
                    "node-offline",
                    "disconnected past the grace period",
                )
                .map_err(&err)?;
            }
            Ok(gone)
        })
    }

    /// Every node, by id.
    pub fn nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare(
                "SELECT n.id, n.online, n.capabilities, n.last_seq, n.cpu_util, n.mem_util, n.gpu_util,
                        n.last_sample_ms, n.last_seen_ms, n.registered_ms, f.forecast
                 FROM nodes n LEFT JOIN forecasts f ON f.node_id = n.id ORDER BY n.id",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| {
                let caps: Capabilities =
                    serde_json::from_str(&r.get::<_, String>(2)?).map_err(|e| {
                        rusqlite::Error::FromSqlConversionFailure(
                            2,
                            rusqlite::types::Type::Text,
                            e.into(),
                        )
                    })?;
                Ok(NodeRecord {
                    id: r.get(0)?,
                    online: r.get(1)?,
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
                    last_seen_at: ms_to_time(r.get(8)?),
                    registered_at: ms_to_time(r.get(9)?),
                    forecast: r
                        .get::<_, Option<String>>(10)?
                        .and_then(|json| serde_json::from_str::<NodeForecast>(&json).ok())
                        .as_ref()
                        .map(ForecastView::from),
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// The node's latest forecast; `Ok(None)` if it has sent none.
    pub fn forecast(&self, node_id: &str) -> Result<Option<NodeForecast>, StoreError> {
        let err = self.sql_err();
        let json: Option<String> = self
            .conn
            .query_row(
                "SELECT forecast FROM forecasts WHERE node_id = ?1",
                [node_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(&err)?;
        Ok(json.and_then(|j| serde_json::from_str(&j).ok()))
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
                    class: LinkClass::of_peer(&to),
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

    /// Stores a new job and returns its id.
    pub fn submit(&mut self, spec: &JobSpec, now_ms: i64) -> Result<u64, StoreError> {
        let err = self.sql_err();
        let json = serde_json::to_string(spec).expect("job specs serialise");
        self.write(|tx| {
            tx.execute(
                "INSERT INTO jobs (name, spec, state, reason, deadline_ms, submitted_ms)
                 VALUES (?1, ?2, 'queued', 'waiting for the next scheduling round', ?3, ?4)",
                params![spec.name, json, spec.deadline.timestamp_millis(), now_ms],
            )
            .map_err(&err)?;
            let id = tx.last_insert_rowid();
            event(tx, now_ms, None, Some(id), "job-submitted", &spec.name).map_err(&err)?;
            Ok(id as u64)
        })
    }

    /// One job.
    pub fn job(&self, id: u64) -> Result<Option<JobRecord>, StoreError> {
        let err = self.sql_err();
        self.conn
            .query_row(
                &format!("{JOB_COLUMNS} WHERE id = ?1"),
                [id as i64],
                job_from_row,
            )
            .optional()
            .map_err(err)
    }

    /// Every job, newest first.
    pub fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare(&format!("{JOB_COLUMNS} ORDER BY id DESC"))
            .map_err(&err)?;
        let rows = stmt.query_map([], job_from_row).map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// Asks for a job to be cancelled. A job that has not reached a node is
    /// cancelled at once; one that has is stopped by its edge. Returns `None` for
    /// an unknown job.
    pub fn request_cancel(
        &mut self,
        id: u64,
        now_ms: i64,
    ) -> Result<Option<JobRecord>, StoreError> {
        let err = self.sql_err();
        let found = self.write(|tx| {
            let state: Option<String> = tx
                .query_row("SELECT state FROM jobs WHERE id = ?1", [id as i64], |r| r.get(0))
                .optional()
                .map_err(&err)?;
            let Some(state) = state.as_deref().and_then(JobState::parse) else { return Ok(false) };
            if state.is_terminal() {
                return Ok(true);
            }
            // Tasks the edge has not yet received can simply be withdrawn.
            tx.execute(
                "UPDATE tasks SET state = 'done' WHERE job_id = ?1 AND state = 'assigned' AND dispatched = 0",
                [id as i64],
            )
            .map_err(&err)?;
            let on_edge: i64 = tx
                .query_row("SELECT COUNT(*) FROM tasks WHERE job_id = ?1 AND state != 'done'", [id as i64], |r| {
                    r.get(0)
                })
                .map_err(&err)?;
            if on_edge == 0 {
                tx.execute(
                    "UPDATE jobs SET state = 'cancelled', cancel_requested = 1, finished_ms = ?2,
                            reason = 'cancelled by an operator before it started'
                     WHERE id = ?1",
                    params![id as i64, now_ms],
                )
                .map_err(&err)?;
            } else {
                tx.execute(
                    "UPDATE jobs SET cancel_requested = 1, reason = 'cancel requested; stopping it on its node'
                     WHERE id = ?1",
                    [id as i64],
                )
                .map_err(&err)?;
            }
            event(tx, now_ms, None, Some(id as i64), "job-cancel-requested", "by operator").map_err(&err)?;
            Ok(true)
        })?;
        if found { self.job(id) } else { Ok(None) }
    }

    /// The view a first-fit round decides on; with `unplanned_only`, only jobs
    /// without a `[work]` section queue (the tidal scheduler plans the rest).
    pub fn snapshot(&self, now_ms: i64, unplanned_only: bool) -> Result<Snapshot, StoreError> {
        let err = self.sql_err();
        let nodes = self
            .conn
            .prepare(
                "SELECT n.id, n.online, n.cpu_util,
                        (SELECT COUNT(*) FROM tasks t WHERE t.node_id = n.id AND t.state != 'done')
                 FROM nodes n",
            )
            .and_then(|mut s| {
                s.query_map([], |r| {
                    Ok(NodeView {
                        id: r.get(0)?,
                        online: r.get(1)?,
                        cpu_util: r.get(2)?,
                        running_tasks: r.get(3)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&err)?;
        let queued = self
            .conn
            .prepare(
                "SELECT id, submitted_ms, deadline_ms FROM jobs j
                 WHERE state = 'queued' AND cancel_requested = 0
                   AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.state != 'done')
                   AND (?1 = 0 OR json_extract(spec, '$.work') IS NULL)
                 ORDER BY submitted_ms, id",
            )
            .and_then(|mut s| {
                s.query_map([unplanned_only], |r| {
                    Ok(JobView { id: r.get::<_, i64>(0)? as u64, submitted_ms: r.get(1)?, deadline_ms: r.get(2)? })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&err)?;
        Ok(Snapshot {
            now_ms,
            nodes,
            queued,
        })
    }

    /// Commits a plan, re-checking each placement against the current state: the
    /// job must still be queued without a task and the node still online.
    /// Returns how many placements were committed.
    pub fn apply_plan(&mut self, plan: &Plan, now_ms: i64) -> Result<usize, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let mut committed = 0;
            for p in &plan.placements {
                let ok: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM jobs j WHERE j.id = ?1 AND j.state = 'queued' AND j.cancel_requested = 0
                             AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.job_id = j.id AND t.state != 'done'))
                           AND EXISTS (SELECT 1 FROM nodes WHERE id = ?2 AND online = 1)",
                        params![p.job_id as i64, p.node_id],
                        |r| r.get(0),
                    )
                    .map_err(&err)?;
                if !ok {
                    continue;
                }
                tx.execute(
                    "INSERT INTO tasks (job_id, node_id, state, created_ms) VALUES (?1, ?2, 'assigned', ?3)",
                    params![p.job_id as i64, p.node_id, now_ms],
                )
                .map_err(&err)?;
                let reason = format!("placed on {} by first-fit; waiting for it to start", p.node_id);
                tx.execute(
                    "UPDATE jobs SET node = ?2, reason = ?3 WHERE id = ?1",
                    params![p.job_id as i64, p.node_id, reason],
                )
                .map_err(&err)?;
                event(tx, now_ms, Some(&p.node_id), Some(p.job_id as i64), "job-placed", &reason).map_err(&err)?;
                committed += 1;
            }
            for w in &plan.waiting {
                tx.execute(
                    "UPDATE jobs SET reason = ?2 WHERE id = ?1 AND state = 'queued' AND reason IS NOT ?2",
                    params![w.job_id as i64, w.reason],
                )
                .map_err(&err)?;
            }
            Ok(committed)
        })
    }

    /// Commands that `node_id` has not yet acknowledged: assignments of its
    /// tasks, and cancels of its running tasks.
    /// Assignments carry the rendezvous of their job, with rank 0 listening on
    /// `master_port`.
    pub fn owed(&self, node_id: &str, master_port: u16) -> Result<Vec<Owed>, StoreError> {
        let err = self.sql_err();
        let mut out = Vec::new();
        let mut stmt = self
            .conn
            .prepare(
                "SELECT t.id, t.job_id, j.spec, t.rank, t.world, t.workers, t.master_addr
                 FROM tasks t JOIN jobs j ON j.id = t.job_id
                 WHERE t.node_id = ?1 AND t.state = 'assigned' AND t.dispatched = 0
                   AND j.cancel_requested = 0 AND t.yield_requested = 0
                 ORDER BY t.id",
            )
            .map_err(&err)?;
        let assigns = stmt
            .query_map([node_id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    (
                        r.get::<_, u32>(3)?,
                        r.get::<_, u32>(4)?,
                        r.get::<_, u32>(5)?,
                    ),
                    r.get::<_, String>(6)?,
                ))
            })
            .map_err(&err)?;
        for row in assigns {
            let (task_id, job_id, spec, (rank, world, workers), master_addr) = row.map_err(&err)?;
            let spec: JobSpec =
                serde_json::from_str(&spec).expect("stored specs were serialised by this build");
            let mut env = spec.env;
            rendezvous::apply(&mut env, rank, world, workers, &master_addr, master_port);
            out.push(Owed::Assign(Assignment {
                task_id: task_id as u64,
                job_id: job_id as u64,
                command: spec.command,
                env,
            }));
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT t.id FROM tasks t JOIN jobs j ON j.id = t.job_id
                 WHERE t.node_id = ?1 AND t.state != 'done' AND t.dispatched = 1
                   AND (j.cancel_requested = 1 OR t.yield_requested = 1) AND t.cancel_sent = 0",
            )
            .map_err(&err)?;
        let cancels = stmt
            .query_map([node_id], |r| r.get::<_, i64>(0))
            .map_err(&err)?;
        for id in cancels {
            out.push(Owed::Cancel(id.map_err(&err)? as u64));
        }
        Ok(out)
    }

    /// Records that the node acknowledged a command.
    pub fn acknowledged(&mut self, owed: &Owed) -> Result<(), StoreError> {
        let err = self.sql_err();
        let (sql, id) = match owed {
            Owed::Assign(a) => ("UPDATE tasks SET dispatched = 1 WHERE id = ?1", a.task_id),
            Owed::Cancel(id) => ("UPDATE tasks SET cancel_sent = 1 WHERE id = ?1", *id),
        };
        self.conn.execute(sql, [id as i64]).map_err(err)?;
        Ok(())
    }

    /// The sequence numbers in the report ledger of `node_id`, ascending.
    pub fn report_seqs(&self, node_id: &str) -> Result<Vec<u64>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare("SELECT seq FROM reports WHERE node_id = ?1 ORDER BY seq")
            .map_err(&err)?;
        let rows = stmt
            .query_map([node_id], |r| r.get::<_, i64>(0))
            .map_err(&err)?;
        rows.map(|r| r.map(|s| s as u64).map_err(&err)).collect()
    }

    /// Counts for the metrics endpoint: jobs by state, and reports stored.
    pub fn counts(&self) -> Result<Counts, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state")
            .map_err(&err)?;
        let jobs = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })
            .map_err(&err)?
            .collect::<Result<_, _>>()
            .map_err(&err)?;
        let reports: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM reports", [], |r| r.get(0))
            .map_err(&err)?;
        let (online, total): (i64, i64) = self
            .conn
            .query_row(
                "SELECT COALESCE(SUM(online), 0), COUNT(*) FROM nodes",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(&err)?;
        Ok(Counts {
            jobs,
            reports: reports as u64,
            nodes_online: online as u64,
            nodes_offline: (total - online) as u64,
        })
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

const JOB_COLUMNS: &str =
    "SELECT id, name, spec, state, node, exit_code, output_tail, reason, cancel_requested,
    submitted_ms, started_ms, finished_ms, done_iters, attained_s, plan FROM jobs";

/// Column `i` of a row, a value stored as JSON (or NULL, for an `Option`).
fn json_column<T: serde::de::DeserializeOwned>(r: &Row<'_>, i: usize) -> rusqlite::Result<T> {
    let text: Option<String> = r.get(i)?;
    serde_json::from_str(text.as_deref().unwrap_or("null")).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e.into())
    })
}

fn job_from_row(r: &Row<'_>) -> rusqlite::Result<JobRecord> {
    let spec: JobSpec = json_column(r, 2)?;
    let state_text: String = r.get(3)?;
    let state = JobState::parse(&state_text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            3,
            rusqlite::types::Type::Text,
            format!("unknown state {state_text}").into(),
        )
    })?;
    let tail: Vec<String> = json_column(r, 6)?;
    Ok(JobRecord {
        id: r.get::<_, i64>(0)? as u64,
        name: r.get(1)?,
        state,
        node: r.get(4)?,
        exit_code: r.get(5)?,
        output_tail: tail,
        reason: r.get(7)?,
        command: spec.command,
        env: spec.env,
        deadline: spec.deadline,
        submitted_at: ms_to_time(r.get(9)?),
        started_at: r.get::<_, Option<i64>>(10)?.map(ms_to_time),
        finished_at: r.get::<_, Option<i64>>(11)?.map(ms_to_time),
        cancel_requested: r.get(8)?,
        class: spec.class,
        work: spec.work,
        done_iters: r.get(12)?,
        attained_s: r.get(13)?,
        plan: json_column::<Option<PlanView>>(r, 14)?,
    })
}

fn event(
    tx: &Transaction<'_>,
    t_ms: i64,
    node_id: Option<&str>,
    job_id: Option<i64>,
    kind: &str,
    detail: &str,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO events (t_ms, node_id, job_id, kind, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![t_ms, node_id, job_id, kind, detail],
    )?;
    Ok(())
}

/// Applies one report's body; returns its kind and any job state change.
fn apply_body(
    tx: &Transaction<'_>,
    node_id: &str,
    report: &Report,
    now_ms: i64,
) -> rusqlite::Result<(ReportKind, Option<(u64, JobState)>)> {
    match &report.body {
        ReportBody::Samples(samples) => {
            let mut insert = tx.prepare_cached(
                "INSERT INTO samples (node_id, seq, idx, t_ms, cpu, mem, gpu, net_rx, net_tx)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            for (idx, s) in samples.iter().enumerate() {
                insert.execute(params![
                    node_id,
                    report.seq as i64,
                    idx as i64,
                    s.t_ms,
                    s.cpu_pct,
                    s.mem_pct,
                    s.gpu_pct,
                    s.net_rx_bytes as i64,
                    s.net_tx_bytes as i64
                ])?;
            }
            if let Some(s) = samples.last() {
                tx.execute(
                    "UPDATE nodes SET cpu_util = ?2, mem_util = ?3, gpu_util = ?4, last_sample_ms = ?5 WHERE id = ?1",
                    params![node_id, s.cpu_pct, s.mem_pct, s.gpu_pct, s.t_ms],
                )?;
            }
            Ok((ReportKind::Samples, None))
        }
        ReportBody::Task(status) => Ok((
            ReportKind::Task,
            apply_task_status(tx, node_id, status, now_ms)?,
        )),
        ReportBody::Forecast(f) => {
            let json = serde_json::to_string(f).expect("forecasts serialise");
            tx.execute(
                "INSERT INTO forecasts (node_id, issued_ms, forecast) VALUES (?1, ?2, ?3)
                 ON CONFLICT (node_id) DO UPDATE SET issued_ms = ?2, forecast = ?3
                 WHERE excluded.issued_ms >= forecasts.issued_ms",
                params![node_id, f.issued_ms, json],
            )?;
            Ok((ReportKind::Forecast, None))
        }
        ReportBody::Links(links) => {
            let mut upsert = tx.prepare_cached(
                "INSERT INTO links (from_node, to_node, t_ms, rtt_ms, bandwidth_bps, loss)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (from_node, to_node) DO UPDATE
                 SET t_ms = ?3, rtt_ms = ?4, bandwidth_bps = ?5, loss = ?6 WHERE excluded.t_ms >= links.t_ms",
            )?;
            for l in links {
                upsert.execute(params![
                    node_id,
                    l.peer,
                    l.t_ms,
                    l.rtt_ms,
                    l.bandwidth_bps,
                    l.loss
                ])?;
            }
            Ok((ReportKind::Links, None))
        }
    }
}

/// Applies a task's status to its task and job; returns the job's new state
/// if it changed.
fn apply_task_status(
    tx: &Transaction<'_>,
    node_id: &str,
    s: &TaskStatus,
    now_ms: i64,
) -> rusqlite::Result<Option<(u64, JobState)>> {
    let job = s.job_id as i64;
    let known: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?1 AND job_id = ?2 AND node_id = ?3)",
        params![s.task_id as i64, job, node_id],
        |r| r.get(0),
    )?;
    if !known {
        event(
            tx,
            now_ms,
            Some(node_id),
            Some(job),
            "unknown-task",
            &format!("{:?}", s.event),
        )?;
        return Ok(None);
    }
    let tail = serde_json::to_string(&s.output_tail).expect("strings serialise");
    let yielding: bool = tx.query_row(
        "SELECT yield_requested FROM tasks WHERE id = ?1",
        [s.task_id as i64],
        |r| r.get(0),
    )?;
    let (how, ended) = match &s.event {
        TaskEvent::Started { pid } => {
            tx.execute(
                "UPDATE tasks SET state = 'running' WHERE id = ?1",
                [s.task_id as i64],
            )?;
            let reason = format!("running on {node_id} (pid {pid})");
            let changed = tx.execute(
                "UPDATE jobs SET state = 'running', started_ms = COALESCE(started_ms, ?2),
                        progress_ms = COALESCE(progress_ms, ?2), reason = ?3
                 WHERE id = ?1 AND state = 'queued'",
                params![job, s.t_ms, reason],
            )?;
            event(tx, now_ms, Some(node_id), Some(job), "task", &reason)?;
            return Ok((changed > 0).then_some((s.job_id, JobState::Running)));
        }
        TaskEvent::Exited {
            exit_code,
            signal,
            cancelled,
        } => {
            let how = match (exit_code, signal) {
                (Some(c), _) => format!("exited with code {c}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                (None, None) => "ended".to_string(),
            };
            let state = if *cancelled {
                JobState::Cancelled
            } else if *exit_code == Some(0) {
                JobState::Succeeded
            } else {
                JobState::Failed
            };
            (how, (state, *exit_code))
        }
        TaskEvent::Failed { reason } => (reason.clone(), (JobState::Failed, None)),
    };
    tx.execute(
        "UPDATE tasks SET state = 'done' WHERE id = ?1",
        [s.task_id as i64],
    )?;
    // Tasks being stopped (moved, or lost with an offline node) no longer
    // count towards the job's outcome.
    let others_open: i64 = tx.query_row(
        "SELECT COUNT(*) FROM tasks WHERE job_id = ?1 AND state != 'done' AND yield_requested = 0",
        [job],
        |r| r.get(0),
    )?;
    let (state, exit_code) = ended;
    let live = "WHERE id = ?1 AND state IN ('queued', 'running')";
    let (new_state, reason) = if yielding {
        if others_open > 0 {
            (
                None,
                format!("stopped on {node_id} to follow the plan ({how})"),
            )
        } else {
            tidal::settle_progress(tx, job, s.t_ms)?;
            let reason = format!(
                "checkpointed and stopped on {node_id} to follow the plan ({how}); waiting to resume"
            );
            (Some(JobState::Queued), reason)
        }
    } else if state == JobState::Succeeded && others_open > 0 {
        (
            None,
            format!("rank on {node_id} {how}; waiting for the other ranks"),
        )
    } else {
        if state == JobState::Failed {
            // One rank failing fails the job: stop the others.
            tidal::stop_tasks(tx, job)?;
        }
        let reason = match state {
            JobState::Cancelled => format!("cancelled by an operator; {how}"),
            _ if others_open > 0 => format!("{how} on {node_id}; stopping the other ranks"),
            _ => how,
        };
        (Some(state), reason)
    };
    let changed = match new_state {
        None => 0,
        Some(JobState::Queued) => tx.execute(
            &format!("UPDATE jobs SET state = 'queued', progress_ms = NULL, reason = ?2 {live}"),
            params![job, reason],
        )?,
        Some(state) => tx.execute(
            &format!(
                "UPDATE jobs SET state = ?2, exit_code = ?3, output_tail = ?4, reason = ?5, finished_ms = ?6 {live}"
            ),
            params![job, state.as_str(), exit_code, tail, reason, s.t_ms],
        )?,
    };
    event(tx, now_ms, Some(node_id), Some(job), "task", &reason)?;
    Ok(new_state.filter(|_| changed > 0).map(|st| (s.job_id, st)))
}

#[cfg(test)]
impl Store {
    /// Applies one report; see [`Store::apply_reports`].
    fn apply_report(
        &mut self,
        node_id: &str,
        report: &Report,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        self.apply_reports(node_id, std::slice::from_ref(report), now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemill_proto::Sample;
    use tidemill_sched::{FirstFit, first_fit};

    fn hello(id: &str) -> Hello {
        Hello {
            node_id: id.into(),
            capabilities: Capabilities {
                cpu_cores: 8,
                mem_bytes: 1 << 34,
                accelerators: vec![],
                os: "linux".into(),
                arch: "x86_64".into(),
                daemon_version: "0.1.0".into(),
            },
            token: None,
            probe_port: None,
        }
    }

    fn samples(seq: u64, cpu: f32) -> Report {
        let s = Sample {
            t_ms: seq as i64 * 1000,
            cpu_pct: cpu,
            per_core_pct: vec![],
            mem_pct: 10.0,
            net_rx_bytes: 0,
            net_tx_bytes: 0,
            gpu_pct: None,
        };
        Report {
            seq,
            body: ReportBody::Samples(vec![s]),
        }
    }

    fn task(seq: u64, task_id: u64, job_id: u64, event: TaskEvent) -> Report {
        Report {
            seq,
            body: ReportBody::Task(TaskStatus {
                task_id,
                job_id,
                t_ms: 5,
                event,
                output_tail: vec!["hi".into()],
            }),
        }
    }

    fn spec() -> JobSpec {
        JobSpec::from_toml(
            "name = \"j\"\ncommand = [\"true\"]\ndeadline = \"2030-01-01T00:00:00Z\"",
            "j",
        )
        .unwrap()
    }

    #[test]
    fn reports_apply_once_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(store.register(&hello("n1"), 0).unwrap(), 0);
        assert_eq!(
            store.apply_report("n1", &samples(1, 20.0), 1).unwrap().ack,
            1
        );
        let dup = store.apply_report("n1", &samples(1, 99.0), 2).unwrap();
        assert_eq!(
            dup,
            Applied {
                ack: 1,
                stored: vec![],
                duplicates: 1,
                jobs: vec![]
            }
        );
        // A batch that overlaps what is stored applies only the new reports, in order.
        let batch = [samples(1, 99.0), samples(2, 30.0), samples(3, 40.0)];
        let applied = store.apply_reports("n1", &batch[..2], 3).unwrap();
        assert_eq!((applied.ack, applied.duplicates), (2, 1));
        assert_eq!(applied.stored, vec![(2, ReportKind::Samples)]);
        drop(store);
        let mut store = Store::open(dir.path()).unwrap();
        assert_eq!(store.register(&hello("n1"), 4).unwrap(), 2);
        assert_eq!(store.report_seqs("n1").unwrap(), vec![1, 2]);
        assert_eq!(store.apply_reports("n1", &batch, 5).unwrap().ack, 3);
        let node = &store.nodes().unwrap()[0];
        assert_eq!(
            (node.last_seq, node.cpu_util, node.cpu_cores),
            (3, Some(40.0), 8)
        );
        assert!(matches!(
            store.apply_report("ghost", &samples(1, 0.0), 5),
            Err(StoreError::UnknownNode(_))
        ));
    }

    #[test]
    fn a_job_runs_through_its_life() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.register(&hello("n1"), 0).unwrap();
        store.apply_report("n1", &samples(1, 5.0), 1).unwrap();
        let id = store.submit(&spec(), 2).unwrap();
        let policy = FirstFit {
            idle_cpu_threshold_pct: 30.0,
            max_tasks_per_node: 1,
        };
        let plan = first_fit(&store.snapshot(3, false).unwrap(), &policy);
        assert_eq!(store.apply_plan(&plan, 3).unwrap(), 1);
        assert_eq!(
            store.apply_plan(&plan, 3).unwrap(),
            0,
            "re-check refuses a second placement"
        );
        let owed = store.owed("n1", 29500).unwrap();
        let [Owed::Assign(a)] = &owed[..] else {
            panic!("{owed:?}")
        };
        store.acknowledged(&owed[0]).unwrap();
        assert!(store.owed("n1", 29500).unwrap().is_empty());
        store
            .apply_report(
                "n1",
                &task(2, a.task_id, id, TaskEvent::Started { pid: 7 }),
                4,
            )
            .unwrap();
        assert_eq!(store.job(id).unwrap().unwrap().state, JobState::Running);
        let exit = TaskEvent::Exited {
            exit_code: Some(3),
            signal: None,
            cancelled: false,
        };
        let applied = store
            .apply_report("n1", &task(3, a.task_id, id, exit), 5)
            .unwrap();
        assert_eq!(applied.jobs, vec![(id, JobState::Failed)]);
        let job = store.job(id).unwrap().unwrap();
        assert_eq!(
            (job.state, job.exit_code, job.node.as_deref()),
            (JobState::Failed, Some(3), Some("n1"))
        );
        assert_eq!(job.output_tail, vec!["hi".to_string()]);
        assert_eq!(job.reason.as_deref(), Some("exited with code 3"));
    }

    #[test]
    fn cancel_withdraws_undelivered_work_and_stops_delivered_work() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.register(&hello("n1"), 0).unwrap();
        store.apply_report("n1", &samples(1, 5.0), 1).unwrap();
        let queued = store.submit(&spec(), 2).unwrap();
        assert_eq!(
            store.request_cancel(queued, 3).unwrap().unwrap().state,
            JobState::Cancelled
        );
        assert!(store.request_cancel(999, 3).unwrap().is_none());

        let id = store.submit(&spec(), 4).unwrap();
        let policy = FirstFit {
            idle_cpu_threshold_pct: 30.0,
            max_tasks_per_node: 1,
        };
        store
            .apply_plan(&first_fit(&store.snapshot(5, false).unwrap(), &policy), 5)
            .unwrap();
        let assign = store.owed("n1", 29500).unwrap().remove(0);
        store.acknowledged(&assign).unwrap();
        let job = store.request_cancel(id, 6).unwrap().unwrap();
        assert_eq!((job.state, job.cancel_requested), (JobState::Queued, true));
        let Owed::Assign(a) = assign else {
            unreachable!()
        };
        assert_eq!(
            store.owed("n1", 29500).unwrap(),
            vec![Owed::Cancel(a.task_id)]
        );
        let exit = TaskEvent::Exited {
            exit_code: None,
            signal: Some(15),
            cancelled: true,
        };
        store
            .apply_report("n1", &task(2, a.task_id, id, exit), 7)
            .unwrap();
        assert_eq!(store.job(id).unwrap().unwrap().state, JobState::Cancelled);
    }

    #[test]
    fn prune_keeps_only_recent_history() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.register(&hello("n1"), 0).unwrap();
        // samples(seq, _) is taken at seq seconds; reports are received at `now`.
        store.apply_report("n1", &samples(1, 5.0), 1_000).unwrap();
        store.apply_report("n1", &samples(2, 6.0), 2_000).unwrap();
        store.apply_report("n1", &samples(3, 7.0), 3_000).unwrap();
        // Two samples, two ledger entries and the registration event predate 2.5 s.
        assert_eq!(store.prune(2_500).unwrap(), 5);
        assert_eq!(store.report_seqs("n1").unwrap(), vec![3]);
        let node = &store.nodes().unwrap()[0];
        assert_eq!(
            (node.last_seq, node.cpu_util),
            (3, Some(7.0)),
            "the node's state is kept"
        );
    }

    #[test]
    fn expire_marks_only_disconnected_stale_nodes_offline() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.register(&hello("a"), 0).unwrap();
        store.register(&hello("b"), 0).unwrap();
        store.register(&hello("c"), 100).unwrap();
        let connected: HashSet<String> = ["b".to_string()].into();
        assert_eq!(
            store.expire(&connected, 50, 200).unwrap(),
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
