//! Opening tidemill's SQLite databases: WAL mode, full sync, and versioned
//! schema migrations tracked in `PRAGMA user_version`.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, Transaction};

/// Why a database could not be opened or migrated.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database file could not be opened.
    #[error("cannot open database {path}: {source}; check that the data dir is writable")]
    Open {
        /// The file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The database was written by a newer tidemill.
    #[error(
        "database {path} has schema version {found}, newer than the {known} this build knows; run a newer tidemill or restore a backup"
    )]
    TooNew {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: usize,
        /// The newest version this build can migrate to.
        known: usize,
    },
    /// A migration step failed.
    #[error("migrating database {path} to schema version {version} failed: {source}")]
    Migrate {
        /// The file.
        path: PathBuf,
        /// The version being applied.
        version: usize,
        /// SQLite's error.
        source: rusqlite::Error,
    },
}

/// Runs `f` in one transaction with SQLite's `secure_delete` on, then
/// checkpoints and truncates the WAL, so what `f` overwrote or deleted (a
/// plain-text secret) is zeroed in the file and gone from the WAL.
pub fn scrubbing<T>(
    conn: &mut Connection,
    f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.pragma_update(None, "secure_delete", true)?;
    let tx = conn.transaction()?;
    let out = f(&tx)?;
    tx.commit()?;
    conn.pragma_update(None, "secure_delete", false)?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(out)
}

/// Opens (creating if needed) the database at `path` and applies every migration
/// it lacks, each in its own transaction. `migrations[i]` takes the schema from
/// version `i` to `i + 1`; entries are only ever appended.
pub fn open(path: &Path, migrations: &[&str]) -> Result<Connection, DbError> {
    let open_err = |source| DbError::Open {
        path: path.to_owned(),
        source,
    };
    let mut conn = Connection::open(path).map_err(open_err)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;",
    )
    .map_err(open_err)?;
    let found: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(open_err)?;
    let found = usize::try_from(found).unwrap_or(usize::MAX);
    if found > migrations.len() {
        return Err(DbError::TooNew {
            path: path.to_owned(),
            found,
            known: migrations.len(),
        });
    }
    for (version, sql) in migrations.iter().enumerate().skip(found) {
        let step = |source| DbError::Migrate {
            path: path.to_owned(),
            version: version + 1,
            source,
        };
        let tx = conn.transaction().map_err(step)?;
        tx.execute_batch(sql).map_err(step)?;
        tx.pragma_update(None, "user_version", (version + 1) as i64)
            .map_err(step)?;
        tx.commit().map_err(step)?;
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "CREATE TABLE a (x INTEGER);";
    const V2: &str = "ALTER TABLE a ADD COLUMN y INTEGER;";

    #[test]
    fn applies_only_missing_migrations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        open(&path, &[V1])
            .unwrap()
            .execute("INSERT INTO a (x) VALUES (1)", [])
            .unwrap();
        let conn = open(&path, &[V1, V2]).unwrap();
        let (x, y): (i64, Option<i64>) = conn
            .query_row("SELECT x, y FROM a", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        assert_eq!((x, y), (1, None));
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn refuses_a_newer_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        open(&path, &[V1, V2]).unwrap();
        let err = open(&path, &[V1]).unwrap_err();
        assert!(
            matches!(
                err,
                DbError::TooNew {
                    found: 2,
                    known: 1,
                    ..
                }
            ),
            "{err}"
        );
    }
}
