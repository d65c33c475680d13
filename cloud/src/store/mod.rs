//! The coordinator's durable state in SQLite: the store handle, its errors,
//! and the helpers its parts share. Each concern lives in its own submodule:
//! the schema, nodes, ingesting reports, bounding the history they
//! leave, jobs and tasks, the outbox of commands
//! owed to edges, what the tidal scheduler reads and writes, and the re-check
//! that each node a plan names can still take its share when it is applied.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use tidemill_runtime::secrets::{SecretError, SecretKey};
use tidemill_runtime::sqlite::{self, DbError};

use tidemill_runtime::config_file::redact_url;

use crate::config::{StoreBackend, StoreConfig};
use crate::report_checks::ReportBounds;
use db::{Connection, Query, Row, Transaction, params};

mod capacity;
mod checkpoints;
pub mod db;
mod forecast_cache;
#[cfg(test)]
mod growth;
mod history;
mod identity;
mod jobs;
mod lease;
mod nodes;
mod outbox;
#[cfg(test)]
pub(crate) mod pg_cluster;
mod priors;
mod probes;
mod reports;
mod schema;
mod schema_pg;
mod secrets;
#[cfg(test)]
pub(crate) mod testkit;
mod tidal;
mod trust;

pub use checkpoints::TransferRecord;
pub use history::PruneBefore;
pub use identity::{ApiTokenRecord, CertRecord, CertStatus, JoinRefusal, TokenRecord};
pub use lease::{Fence, Lead};
pub use nodes::{ForecastView, IdleWindowView, LinkRecord, NodeRecord, devices};
pub use outbox::Owed;
pub use probes::ProbeBytes;
pub use reports::{Applied, Batch, ReportKind};
pub use tidal::{Addresses, PlannedJob};
pub use trust::{Acceptance, ClaimRefusal, NodeTrust, TakenBack};

/// The PostgreSQL schema version this build migrates to.
pub const PG_SCHEMA_VERSION: usize = schema_pg::PG_MIGRATIONS.len();

/// The database file inside the data dir.
pub const DB_FILE: &str = "tidemill.db";

/// SQLite's page cache for the coordinator's one connection, KiB: a round
/// reads every node, job and forecast, and SQLite's default (2 MiB) sent
/// those reads to the disk on a 160-box twin (pread at 7 % of the
/// coordinator's CPU).
const PAGE_CACHE_KIB: i64 = 16 * 1024;

/// Compiled statements SQLite keeps: every statement the store runs, so a
/// round compiles none.
const STATEMENT_CACHE: usize = 256;

/// The SQLite application id of the coordinator's database ("TDML").
const APPLICATION_ID: i32 = 0x5444_4D4C;

/// The device and inode of the file at `path`, if there is one.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Opening or migrating failed.
    #[error(transparent)]
    Open(#[from] DbError),
    /// A query failed.
    #[error("database {path}: {source}")]
    Sql {
        /// The database: SQLite's file, or PostgreSQL's host and database
        /// (never its password).
        path: PathBuf,
        /// The back end's error.
        source: db::Error,
    },
    /// The database file left its path (deleted, moved or replaced) after it
    /// was opened: writes would go where no restart reads them.
    #[error(
        "database {path} is no longer the file the coordinator opened (deleted, moved or replaced); put it back, or restore it from a backup and restart the coordinator"
    )]
    Moved {
        /// The file.
        path: PathBuf,
    },
    /// The secrets key is missing, unreadable or not the one the stored
    /// secrets were sealed with.
    #[error(transparent)]
    Secrets(#[from] SecretError),
    /// PostgreSQL could not be reached, or refused the session or its
    /// schema, at start.
    #[error(
        "database {path}: {source}; check that PostgreSQL runs at that address and lets this host in (pg_hba.conf), the URL's user, password and database, and its TLS (sslmode, PGSSLROOTCERT)"
    )]
    Unreachable {
        /// The database, without its password.
        path: PathBuf,
        /// Why.
        source: db::Error,
    },
    /// This replica's lease passed to another replica: the round's writes
    /// were refused, and it follows from now on.
    #[error(
        "this replica's lease on the scheduling rounds (epoch {epoch}) has passed to another replica, so the round's writes were refused; it follows the new leader"
    )]
    Deposed {
        /// The epoch it held.
        epoch: i64,
    },
    /// A report came from a node that never said hello.
    #[error("node {0:?} sent a report before registering")]
    UnknownNode(String),
    /// The commit of a group of report batches failed, so none of them was
    /// stored; the edges resend them.
    #[error(
        "the database refused the commit of a group of report batches: {0}; they will be resent"
    )]
    GroupCommit(String),
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

/// The store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// The opened file's device and inode, to tell when the path stops
    /// naming it.
    file_id: Option<(u64, u64)>,
    /// Seals and opens the jobs' `secret_env`.
    secrets: SecretKey,
    /// The range checks reports go through.
    bounds: ReportBounds,
    /// Forecasts parsed by earlier rounds.
    forecasts: forecast_cache::ForecastCache,
    /// The lease every write is fenced by while this replica applies a
    /// round's plan ([`Store::set_fence`]).
    fence: Option<Fence>,
}

/// Connects to the database `cfg` names and migrates it; the path that
/// names it in errors (PostgreSQL's URL without its password).
fn connect(data_dir: &Path, cfg: &StoreConfig) -> Result<(Connection, PathBuf), StoreError> {
    match cfg.backend {
        StoreBackend::Sqlite => {
            let path = data_dir.join(DB_FILE);
            let conn = sqlite::open(&path, schema::MIGRATIONS)?;
            conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)
                .map_err(|source| StoreError::Sql {
                    path: path.clone(),
                    source: source.into(),
                })?;
            conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
            Ok((Connection::sqlite(conn), path))
        }
        StoreBackend::Postgres => {
            let path = PathBuf::from(redact_url(&cfg.url));
            let conn =
                Connection::postgres(&cfg.url, schema_pg::PG_MIGRATIONS).map_err(|source| {
                    StoreError::Unreachable {
                        path: path.clone(),
                        source,
                    }
                })?;
            Ok((conn, path))
        }
    }
}

fn ms_to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

impl Store {
    /// Opens the SQLite database in `data_dir`, creating and migrating it as
    /// needed, with the secrets key beside it (made on first start).
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(data_dir, &StoreConfig::default())
    }

    /// Opens the database `cfg` names, creating and migrating it as needed,
    /// with the secrets key in `data_dir` (made on first start).
    pub fn open_with(data_dir: &Path, cfg: &StoreConfig) -> Result<Self, StoreError> {
        let (mut conn, path) = connect(data_dir, cfg)?;
        let secrets = secrets::load_key(&mut conn, &path, data_dir)?;
        let file_id = conn.as_sqlite_ref().and_then(|_| file_id(&path));
        Ok(Store {
            conn,
            path,
            file_id,
            secrets,
            bounds: ReportBounds::default(),
            forecasts: Default::default(),
            fence: None,
        })
    }

    /// Sets the bounds reports are range-checked against (`[trust]`).
    pub fn set_report_bounds(&mut self, bounds: ReportBounds) {
        self.bounds = bounds;
    }

    fn sql_err(&self) -> impl Fn(db::Error) -> StoreError + use<> {
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
        if let Some(fence) = &self.fence {
            lease::check(&tx, fence)?;
        }
        let out = f(&tx)?;
        tx.commit().map_err(&err)?;
        Ok(out)
    }

    /// Proves that the database takes a durable write, for `/readyz`: the
    /// path still names the opened file (SQLite in WAL mode goes on writing
    /// to a deleted one), and a committed transaction stamps the file
    /// header's application id (the same value each time), so that a
    /// read-only or full disk is caught here before it fails a report.
    pub fn probe_write(&mut self) -> Result<(), StoreError> {
        if self.conn.as_sqlite_ref().is_some() && file_id(&self.path) != self.file_id {
            return Err(StoreError::Moved {
                path: self.path.clone(),
            });
        }
        let err = self.sql_err();
        let Some(conn) = self.conn.as_sqlite() else {
            return self.write(|tx| {
                tx.execute("UPDATE tidemill_schema SET version = version", [])
                    .map(drop)
                    .map_err(err)
            });
        };
        let tx = conn.transaction().map_err(|e| err(e.into()))?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .and_then(|()| tx.commit())
            .map_err(|e| err(e.into()))
    }

    /// When the first `limit` nodes in id order were last seen, Unix ms, for
    /// the metrics endpoint: two columns, whatever the fleet's size.
    pub fn last_seen(&self, limit: usize) -> Result<Vec<(String, i64)>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, last_seen_ms FROM nodes ORDER BY id LIMIT ?1")
            .map_err(&err)?;
        let rows = stmt
            .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
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
}

/// Column `i` of a row, a value stored as JSON (or NULL, for an `Option`).
fn json_column<T: serde::de::DeserializeOwned>(r: &Row<'_>, i: usize) -> db::Result<T> {
    let text: Option<String> = r.get(i)?;
    serde_json::from_str(text.as_deref().unwrap_or("null")).map_err(|e| db::Error::decode(i, e))
}

fn event(
    tx: &impl Query,
    t_ms: i64,
    node_id: Option<&str>,
    job_id: Option<i64>,
    kind: &str,
    detail: &str,
) -> db::Result<()> {
    tx.execute(
        "INSERT INTO events (t_ms, node_id, job_id, kind, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![t_ms, node_id, job_id, kind, detail],
    )?;
    Ok(())
}
