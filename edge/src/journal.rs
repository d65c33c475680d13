//! The edge's durable outbox. Every report is written here, with the next
//! per-node sequence number, before it is sent; it is deleted only once the
//! coordinator acknowledges it. A coordinator restart, a WAN outage or an edge
//! crash therefore loses nothing that was journaled.
//!
//! It keeps the utilisation history the forecaster learns from, and it
//! records the tasks the edge accepted, so that commands are idempotent
//! and a task interrupted by a daemon crash is reported, not forgotten.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use tidemill_proto::{NodeForecast, Report, ReportBody, Sample};
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::secrets::{self, SecretError, SecretKey};
use tidemill_runtime::sqlite::{self, DbError};

mod tasks;

const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    INSERT INTO meta (key, value) VALUES ('last_seq', 0);
    CREATE TABLE outbox (seq INTEGER PRIMARY KEY, body BLOB NOT NULL);
    CREATE TABLE tasks (
        task_id INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL,
        assignment BLOB NOT NULL,
        pid INTEGER,
        finished INTEGER NOT NULL DEFAULT 0
    );
",
    "
    CREATE TABLE history (t_ms INTEGER PRIMARY KEY, cpu REAL, mem REAL, gpu REAL) WITHOUT ROWID;
",
    "
    INSERT INTO meta (key, value) VALUES ('last_ack_ms', 0);
    CREATE TABLE latest_forecast (id INTEGER PRIMARY KEY CHECK (id = 1), body BLOB NOT NULL);
",
    // Assignments (their env holds the job's secrets) are sealed under
    // secrets.key; rows an older build wrote plain are sealed or purged on
    // open (see `seal_plain`).
    "
    ALTER TABLE tasks ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
",
];

/// One utilisation reading kept for the forecaster: time in Unix ms, CPU %,
/// memory %, and accelerator % if known.
pub type HistoryRow = (i64, f32, f32, Option<f32>);

/// The journal file name inside the data dir.
pub const JOURNAL_FILE: &str = "edge-journal.db";

/// Why the journal failed. Journal failures are fatal: the daemon must not run
/// on without durability.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Opening or migrating failed.
    #[error(transparent)]
    Open(#[from] DbError),
    /// A query failed.
    #[error("journal {path}: {source}")]
    Sql {
        /// The journal file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// A stored entry cannot be decoded; the file is corrupt.
    #[error(
        "journal {path}: entry {seq} is corrupt ({detail}); move the file aside to start afresh"
    )]
    Corrupt {
        /// The journal file.
        path: PathBuf,
        /// The entry.
        seq: u64,
        /// The decoder's complaint.
        detail: String,
    },
    /// The secrets key is missing, unreadable or not the one the stored
    /// assignments were sealed with.
    #[error(transparent)]
    Secrets(#[from] SecretError),
    /// The journal was opened read-only, without the secrets key, and the
    /// caller asked for sealed assignments.
    #[error("journal {path} was opened read-only: its assignments are sealed")]
    Sealed {
        /// The journal file.
        path: PathBuf,
    },
    /// The journal predates this build and only the daemon migrates it.
    #[error(
        "journal {path} was written by an older tidemill-edge; start the daemon once to upgrade it, then ask again"
    )]
    Stale {
        /// The journal file.
        path: PathBuf,
    },
}

/// The journal.
#[derive(Debug)]
pub struct Journal {
    conn: Connection,
    path: PathBuf,
    /// Seals and opens the assignments; `None` when opened read-only.
    key: Option<SecretKey>,
}

impl Journal {
    /// Opens the journal in `data_dir`, creating it if needed, with the
    /// secrets key beside it (made on first start).
    pub fn open(data_dir: &Path) -> Result<Self, JournalError> {
        let path = data_dir.join(JOURNAL_FILE);
        let mut conn = sqlite::open(&path, MIGRATIONS)?;
        let sql = |source| JournalError::Sql {
            path: path.clone(),
            source,
        };
        let sealed: Vec<i64> = conn
            .prepare("SELECT task_id FROM tasks WHERE sealed = 1 AND finished = 0 ORDER BY task_id")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(sql)?;
        let what = secrets::holders("task", &sealed);
        let key = SecretKey::load_or_create(data_dir, &what, tasks::LOST)?;
        tasks::seal_plain(&mut conn, &key).map_err(sql)?;
        let journal = Journal {
            conn,
            path,
            key: Some(key),
        };
        journal.unfinished_tasks()?;
        Ok(journal)
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> JournalError + '_ {
        |source| JournalError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    /// The highest sequence number ever assigned.
    pub fn last_seq(&self) -> Result<u64, JournalError> {
        let v: i64 = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'last_seq'", [], |r| {
                r.get(0)
            })
            .map_err(self.sql())?;
        Ok(v as u64)
    }

    /// Durably appends a report and returns its sequence number.
    pub fn append(&mut self, body: &ReportBody) -> Result<u64, JournalError> {
        self.in_transaction(|tx| append_in(tx, body))
    }

    fn in_transaction<T>(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, JournalError> {
        let sql = |source| JournalError::Sql {
            path: self.path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(sql)?;
        let out = f(&tx).map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(out)
    }

    /// Durably appends a sample, both as a report and to the history the
    /// forecaster learns from, and returns the report's sequence number.
    pub fn append_sample(&mut self, sample: &Sample) -> Result<u64, JournalError> {
        self.in_transaction(|tx| {
            tx.execute(
                "INSERT OR REPLACE INTO history (t_ms, cpu, mem, gpu) VALUES (?1, ?2, ?3, ?4)",
                params![sample.t_ms, sample.cpu_pct, sample.mem_pct, sample.gpu_pct],
            )?;
            append_in(tx, &ReportBody::Samples(vec![sample.clone()]))
        })
    }

    /// The utilisation history from `since_ms` on, oldest first.
    pub fn history(&self, since_ms: i64) -> Result<Vec<HistoryRow>, JournalError> {
        let mut stmt = self
            .conn
            .prepare("SELECT t_ms, cpu, mem, gpu FROM history WHERE t_ms >= ?1 ORDER BY t_ms")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([since_ms], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// Forgets history older than `before_ms`.
    pub fn prune_history(&mut self, before_ms: i64) -> Result<(), JournalError> {
        self.conn
            .execute("DELETE FROM history WHERE t_ms < ?1", [before_ms])
            .map_err(self.sql())?;
        Ok(())
    }

    /// Up to `limit` unacknowledged reports, oldest first.
    pub fn pending(&self, limit: usize) -> Result<Vec<Report>, JournalError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT seq, body FROM outbox ORDER BY seq LIMIT ?1")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([limit as i64], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(self.sql())?;
        rows.map(|row| {
            let (seq, blob) = row.map_err(self.sql())?;
            let body = rmp_serde::from_slice(&blob).map_err(|e| JournalError::Corrupt {
                path: self.path.clone(),
                seq,
                detail: e.to_string(),
            })?;
            Ok(Report { seq, body })
        })
        .collect()
    }

    /// Number of unacknowledged reports.
    pub fn pending_count(&self) -> Result<u64, JournalError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
            .map_err(self.sql())?;
        Ok(n as u64)
    }

    /// Forgets every report up to and including `seq`: the coordinator has
    /// it. Notes when, for `tidemill-edge status`.
    pub fn ack(&mut self, seq: u64) -> Result<(), JournalError> {
        let now_ms = SystemClock.now_ms();
        self.in_transaction(|tx| {
            tx.execute("DELETE FROM outbox WHERE seq <= ?1", [seq as i64])?;
            tx.execute(
                "UPDATE meta SET value = ?1 WHERE key = 'last_ack_ms'",
                [now_ms],
            )?;
            Ok(())
        })
    }

    /// Opens the journal in `data_dir` for reading only, as `tidemill-edge
    /// status` does beside a running daemon; it must exist and be migrated
    /// (the daemon has run since the upgrade).
    pub fn open_read_only(data_dir: &Path) -> Result<Self, JournalError> {
        let path = data_dir.join(JOURNAL_FILE);
        let conn = rusqlite::Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|source| DbError::Open {
            path: path.clone(),
            source,
        })?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|source| JournalError::Sql {
                path: path.clone(),
                source,
            })?;
        if version < MIGRATIONS.len() as i64 {
            return Err(JournalError::Stale { path });
        }
        Ok(Journal {
            conn,
            path,
            key: None,
        })
    }

    /// When the coordinator last acknowledged reports (or welcomed this
    /// node), Unix ms on this host's clock; `None` if never.
    pub fn last_ack_ms(&self) -> Result<Option<i64>, JournalError> {
        let v: i64 = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'last_ack_ms'",
                [],
                |r| r.get(0),
            )
            .map_err(self.sql())?;
        Ok((v > 0).then_some(v))
    }

    /// The latest forecast this node issued, if any.
    pub fn latest_forecast(&self) -> Result<Option<NodeForecast>, JournalError> {
        let blob: Option<Vec<u8>> = self
            .conn
            .query_row("SELECT body FROM latest_forecast WHERE id = 1", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.sql())?;
        blob.map(|b| {
            rmp_serde::from_slice(&b).map_err(|e| JournalError::Corrupt {
                path: self.path.clone(),
                seq: 0,
                detail: format!("the latest forecast: {e}"),
            })
        })
        .transpose()
    }

    /// Reconciles with the coordinator's `acked_seq` after a (re)connect.
    ///
    /// Normally `acked_seq ≤ last_seq` and it is an acknowledgement. If the
    /// coordinator knows a higher sequence than this journal ever issued, the
    /// journal was lost or replaced; pending reports are renumbered to follow
    /// `acked_seq`, so the coordinator does not drop them as duplicates.
    pub fn reconcile(&mut self, acked_seq: u64) -> Result<(), JournalError> {
        let last = self.last_seq()?;
        if acked_seq <= last {
            return self.ack(acked_seq);
        }
        tracing::warn!(
            journal = %self.path.display(),
            journal_seq = last,
            coordinator_seq = acked_seq,
            "the coordinator has seen later reports than this journal: it was reset; continuing after the coordinator's sequence"
        );
        self.in_transaction(|tx| {
            let first: Option<i64> =
                tx.query_row("SELECT MIN(seq) FROM outbox", [], |r| r.get(0))?;
            let shift = acked_seq as i64 + 1 - first.unwrap_or(0);
            // Through negative numbers, so the primary key never collides.
            tx.execute("UPDATE outbox SET seq = -(seq + ?1)", [shift])?;
            tx.execute("UPDATE outbox SET seq = -seq", [])?;
            tx.execute(
                "UPDATE meta SET value = ?1 + (SELECT COUNT(*) FROM outbox) WHERE key = 'last_seq'",
                [acked_seq as i64],
            )?;
            Ok(())
        })
    }
}

fn append_in(tx: &rusqlite::Transaction<'_>, body: &ReportBody) -> rusqlite::Result<u64> {
    let blob = rmp_serde::to_vec_named(body).expect("report bodies always serialise");
    if let ReportBody::Forecast(f) = body {
        let latest = rmp_serde::to_vec_named(f).expect("forecasts always serialise");
        tx.execute(
            "INSERT OR REPLACE INTO latest_forecast (id, body) VALUES (1, ?1)",
            [latest],
        )?;
    }
    let seq: i64 = tx.query_row(
        "UPDATE meta SET value = value + 1 WHERE key = 'last_seq' RETURNING value",
        [],
        |r| r.get(0),
    )?;
    tx.execute(
        "INSERT INTO outbox (seq, body) VALUES (?1, ?2)",
        params![seq, blob],
    )?;
    Ok(seq as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemill_proto::{TaskEvent, TaskStatus};

    #[test]
    fn acks_and_the_latest_forecast_are_read_back_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.last_ack_ms().unwrap(), None);
        assert_eq!(j.latest_forecast().unwrap(), None);
        let forecaster =
            tidemill_forecast::NodeForecaster::new(tidemill_forecast::ForecastConfig::default())
                .unwrap();
        let forecast = forecaster.forecast(1_700_000_000_000);
        j.append(&ReportBody::Forecast(Box::new(forecast.clone())))
            .unwrap();
        let seq = j.append(&body(1)).unwrap();
        j.ack(seq).unwrap();
        let reader = Journal::open_read_only(dir.path()).unwrap();
        assert!(reader.last_ack_ms().unwrap().is_some_and(|ms| ms > 0));
        assert_eq!(reader.latest_forecast().unwrap(), Some(forecast));
        assert_eq!(reader.pending_count().unwrap(), 0);
        let missing = Journal::open_read_only(&dir.path().join("nowhere")).unwrap_err();
        assert!(missing.to_string().contains(JOURNAL_FILE), "{missing}");
    }

    /// A task report stamped `n`, as the journal's tests append.
    pub(super) fn body(n: i64) -> ReportBody {
        ReportBody::Task(TaskStatus {
            task_id: 1,
            job_id: 1,
            t_ms: n,
            event: TaskEvent::Started { pid: 1 },
            output_tail: vec![],
            checkpoint: None,
        })
    }

    fn t_ms(r: &Report) -> i64 {
        match &r.body {
            ReportBody::Task(t) => t.t_ms,
            _ => unreachable!("only task reports are journaled here"),
        }
    }

    #[test]
    fn sequences_survive_reopen_and_acks_delete() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(
            (j.append(&body(1)).unwrap(), j.append(&body(2)).unwrap()),
            (1, 2)
        );
        j.ack(1).unwrap();
        drop(j);
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.append(&body(3)).unwrap(), 3);
        let pending: Vec<u64> = j.pending(10).unwrap().iter().map(|r| r.seq).collect();
        assert_eq!(pending, vec![2, 3]);
        j.reconcile(3).unwrap();
        assert_eq!(j.pending_count().unwrap(), 0);
        assert_eq!(
            j.append(&body(4)).unwrap(),
            4,
            "acks never reset the sequence"
        );
    }

    #[test]
    fn samples_become_reports_and_history_until_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        for t in [1_000, 2_000, 3_000] {
            let s = Sample {
                t_ms: t,
                cpu_pct: t as f32 / 100.0,
                per_core_pct: vec![],
                mem_pct: 50.0,
                net_rx_bytes: 0,
                net_tx_bytes: 0,
                gpu_pct: None,
            };
            j.append_sample(&s).unwrap();
        }
        assert_eq!(j.pending_count().unwrap(), 3);
        assert_eq!(
            j.history(2_000).unwrap(),
            vec![(2_000, 20.0, 50.0, None), (3_000, 30.0, 50.0, None)]
        );
        j.prune_history(3_000).unwrap();
        drop(j);
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.history(0).unwrap(), vec![(3_000, 30.0, 50.0, None)]);
    }

    #[test]
    fn a_reset_journal_continues_after_the_coordinator() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.append(&body(10)).unwrap();
        j.append(&body(11)).unwrap();
        j.reconcile(50).unwrap();
        let pending = j.pending(10).unwrap();
        assert_eq!(
            pending.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![51, 52]
        );
        assert_eq!(
            pending.iter().map(t_ms).collect::<Vec<_>>(),
            vec![10, 11],
            "order kept"
        );
        assert_eq!(j.append(&body(12)).unwrap(), 53);
    }
}
