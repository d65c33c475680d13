//! A job's `secret_env` at rest: sealed under the coordinator's key
//! (`<data_dir>/secrets.key`) in `jobs.secret_env`, bound to its job id,
//! opened only to build an assignment, and cleared by the schema's
//! `jobs_purge_secrets` trigger the moment the job ends.

use std::collections::BTreeMap;
use std::path::Path;

use tidemill_runtime::secrets::{self, SecretError, SecretKey};
use tidemill_runtime::sqlite;

use super::db::{self, Connection, Handle, Query, params};
use super::{Store, StoreError};
use crate::config::StoreConfig;

/// What a lost key costs the coordinator, and the way on.
const LOST: &str = "if no backup has it, the secrets of those jobs are lost: start once with `tidemill-cloud serve --forget-lost-secrets`, which cancels them, and submit them again";

/// Secret values by variable name.
pub(super) type SecretEnv = BTreeMap<String, String>;

/// The associated data that binds a sealed blob to job `id`'s row.
fn row(id: i64) -> String {
    format!("tidemill-cloud jobs.secret_env {id}")
}

/// Seals `secrets` into job `id`'s row; nothing is stored for none.
pub(super) fn store(
    tx: &impl Query,
    key: &SecretKey,
    id: i64,
    secrets: &SecretEnv,
) -> db::Result<()> {
    if secrets.is_empty() {
        return Ok(());
    }
    let plain = serde_json::to_vec(secrets).expect("strings serialise");
    tx.execute(
        "UPDATE jobs SET secret_env = ?2 WHERE id = ?1",
        params![id, key.seal(&plain, &row(id))],
    )?;
    Ok(())
}

/// Opens job `id`'s sealed secrets (none when `sealed` is `None`: the job
/// had none, or they were purged).
pub(super) fn open(
    key: &SecretKey,
    id: i64,
    sealed: Option<&[u8]>,
) -> Result<SecretEnv, SecretError> {
    let Some(sealed) = sealed else {
        return Ok(SecretEnv::new());
    };
    let what = format!("job {id}");
    let plain = key.open(sealed, &row(id), &what)?;
    serde_json::from_slice(&plain).map_err(|_| key.refused(&what))
}

/// Loads (or, when no job holds sealed secrets, makes) the key in
/// `data_dir`, proves that every sealed row opens with it, so a lost or
/// replaced key stops the start with the jobs it strands named, and seals
/// the plain-text secrets a database from before encryption still holds.
pub(super) fn load_key(
    conn: &mut Connection,
    db: &Path,
    data_dir: &Path,
) -> Result<SecretKey, StoreError> {
    let err = |source| StoreError::Sql {
        path: db.to_path_buf(),
        source,
    };
    let sealed = sealed_rows(conn).map_err(err)?;
    let ids: Vec<i64> = sealed.iter().map(|(id, _)| *id).collect();
    let what = secrets::holders("job", &ids);
    let key = SecretKey::load_or_create(data_dir, &what, LOST)?;
    for (id, blob) in &sealed {
        open(&key, *id, Some(blob))?;
    }
    if let Some(conn) = conn.as_sqlite() {
        seal_plain(conn, &key).map_err(|e| err(e.into()))?;
    }
    Ok(key)
}

/// Every job holding sealed secrets, as (job id, sealed blob), by id.
fn sealed_rows(conn: &Connection) -> db::Result<Vec<(i64, Vec<u8>)>> {
    conn.prepare("SELECT id, secret_env FROM jobs WHERE secret_env IS NOT NULL ORDER BY id")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
}

impl Store {
    /// [`Store::open`] for `serve --forget-lost-secrets`, when the key is lost
    /// or replaced and no backup restores it: the sealed secrets it cannot
    /// open are cleared and their jobs cancelled (they must be submitted
    /// again), then the store opens with the key there is, or a new one.
    /// Returns the store and the jobs cancelled.
    pub fn open_forgetting_lost_secrets(
        data_dir: &Path,
        cfg: &StoreConfig,
        now_ms: i64,
    ) -> Result<(Store, Vec<u64>), StoreError> {
        let (mut conn, db) = super::connect(data_dir, cfg)?;
        let err = |source| StoreError::Sql {
            path: db.clone(),
            source,
        };
        let key = SecretKey::load_or_create(data_dir, "", LOST)?;
        let lost: Vec<i64> = sealed_rows(&conn)
            .map_err(err)?
            .into_iter()
            .filter(|(id, blob)| open(&key, *id, Some(blob)).is_err())
            .map(|(id, _)| id)
            .collect();
        let tx = conn.transaction().map_err(err)?;
        for id in &lost {
            tx.execute("UPDATE jobs SET secret_env = NULL WHERE id = ?1", [id])
                .map_err(err)?;
        }
        tx.commit().map_err(err)?;
        drop(conn);
        let mut store = Store::open_with(data_dir, cfg)?;
        let reason = format!(
            "its secrets were lost with {} (serve --forget-lost-secrets): submit it again",
            key.path().display()
        );
        for &id in &lost {
            store.request_cancel(id as u64, now_ms)?;
            let err = store.sql_err();
            store.write(|tx| {
                tx.execute(
                    "UPDATE jobs SET reason = ?2 WHERE id = ?1 AND state = 'cancelled'",
                    params![id, reason],
                )
                .map_err(&err)?;
                super::event(tx, now_ms, None, Some(id), "secrets-lost", &reason).map_err(&err)
            })?;
            tracing::warn!(job_id = id, %reason, "job cancelled");
        }
        Ok((store, lost.into_iter().map(|id| id as u64).collect()))
    }
}

/// Moves the secrets an older build kept in the spec's JSON into the sealed
/// column (jobs still live) or drops them (jobs ended), with freed pages
/// zeroed and the WAL emptied, so no plain copy stays on disk. Only SQLite
/// databases are that old.
fn seal_plain(conn: &mut rusqlite::Connection, key: &SecretKey) -> rusqlite::Result<()> {
    let plain: Vec<(i64, bool, String)> = conn
        .prepare(
            "SELECT id, state IN ('succeeded', 'failed', 'cancelled', 'rejected'),
                    json_extract(spec, '$.secret_env')
             FROM jobs WHERE json_extract(spec, '$.secret_env') IS NOT NULL",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    if plain.is_empty() {
        return Ok(());
    }
    sqlite::scrubbing(conn, |tx| {
        for (id, ended, json) in &plain {
            let secrets: SecretEnv = serde_json::from_str(json).unwrap_or_default();
            tx.execute(
                "UPDATE jobs SET spec = json_remove(spec, '$.secret_env') WHERE id = ?1",
                [id],
            )?;
            if !ended {
                store(&Handle::Sqlite(tx), key, *id, &secrets)
                    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
            }
        }
        Ok(())
    })?;
    tracing::info!(
        jobs = plain.len(),
        "sealed the plain-text secret_env an older build stored"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::store::testkit::{TestDb, on_both_backends};
    use std::os::unix::fs::MetadataExt;

    use tidemill_proto::TaskEvent;
    use tidemill_runtime::secrets::KEY_FILE;
    use tidemill_sched::{FirstFitLimits, first_fit};

    use super::*;
    use crate::job::JobPhase;
    use crate::store::testkit::{hello, samples, spec, task};
    use crate::store::{Owed, Store};

    const SECRET: &str = "hf_s3cr3t_value";

    fn secret_spec() -> crate::job::JobFile {
        let mut s = spec();
        s.secret_env.insert("HF_TOKEN".into(), SECRET.into());
        s
    }

    /// A store with node n1 idle and `jobs` secret-bearing jobs submitted.
    fn store_with_jobs(db: &TestDb, jobs: usize) -> (Store, Vec<u64>) {
        let mut store = db.open();
        store.register(&hello("n1"), 0).unwrap();
        store.apply_report("n1", &samples(1, 5.0), 1).unwrap();
        let ids = (0..jobs)
            .map(|_| store.submit(&secret_spec(), 2).unwrap())
            .collect();
        (store, ids)
    }

    /// Places the queued jobs first-fit and returns what n1 is owed.
    fn dispatch(store: &mut Store) -> Result<Vec<Owed>, StoreError> {
        let policy = FirstFitLimits {
            idle_cpu_threshold_pct: 30.0,
            max_tasks_per_node: 4,
        };
        let plan = first_fit(&store.snapshot(3, false).unwrap(), &policy);
        store.apply_plan(&plan, &policy, 3).unwrap();
        store.owed("n1", 29500)
    }

    /// Dispatches the one queued job and checks its assignment carries the
    /// secret in the clear, as the edge needs it.
    fn assert_dispatched_with_secret(store: &mut Store) {
        let owed = dispatch(store).unwrap();
        let [Owed::Assign(a)] = &owed[..] else {
            panic!("{owed:?}")
        };
        assert_eq!(a.env.get("HF_TOKEN").map(String::as_str), Some(SECRET));
    }

    fn stored_bytes(dir: &Path) -> Vec<u8> {
        let mut all = Vec::new();
        for file in [super::super::DB_FILE, "tidemill.db-wal"] {
            all.extend(std::fs::read(dir.join(file)).unwrap_or_default());
        }
        all
    }

    fn contains(hay: &[u8], needle: &str) -> bool {
        hay.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    fn sealed(store: &Store, id: u64) -> Option<Vec<u8>> {
        store
            .conn
            .query_row(
                "SELECT secret_env FROM jobs WHERE id = ?1",
                [id as i64],
                |r| r.get(0),
            )
            .unwrap()
    }

    #[test]
    fn secrets_are_sealed_at_rest_and_opened_for_the_assignment() {
        let db = TestDb::sqlite();
        let dir = &db.dir;
        let (mut store, ids) = store_with_jobs(&db, 1);
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            !contains(&stored_bytes(dir.path()), SECRET),
            "plain text on disk"
        );
        assert!(sealed(&store, ids[0]).is_some());
        assert_eq!(
            store.job(ids[0]).unwrap().unwrap().secret_env,
            vec!["HF_TOKEN"]
        );

        assert_dispatched_with_secret(&mut store);
    }

    on_both_backends! {
        fn a_sealed_blob_moved_to_another_job_does_not_open(db) {
            let (mut store, ids) = store_with_jobs(&db, 2);
            store
                .conn
                .execute(
                    "UPDATE jobs SET secret_env = (SELECT secret_env FROM jobs WHERE id = ?1) WHERE id = ?2",
                    [ids[0] as i64, ids[1] as i64],
                )
                .unwrap();
            let err = dispatch(&mut store).unwrap_err().to_string();
            assert!(
                err.contains(&format!("job {}", ids[1])) && err.contains(KEY_FILE),
                "{err}"
            );
            drop(store);
            let err = db.try_open().unwrap_err().to_string();
            assert!(
                err.contains(&format!("job {}", ids[1])) && err.contains("restore"),
                "{err}"
            );
        }
    }

    on_both_backends! {
        fn secrets_are_purged_when_the_job_ends_and_kept_through_a_yield(db) {
            let (mut store, ids) = store_with_jobs(&db, 2);
            let owed = dispatch(&mut store).unwrap();
            let [Owed::Assign(a), Owed::Assign(_)] = &owed[..] else {
                panic!("{owed:?}")
            };
            for o in &owed {
                store.acknowledged(o, 3).unwrap();
            }
            store
                .apply_report(
                    "n1",
                    &task(2, a.task_id, ids[0], TaskEvent::Started { pid: 7 }),
                    4,
                )
                .unwrap();
            // A yield hands the job back to the queue: it still needs its secrets.
            store
                .conn
                .execute(
                    "UPDATE tasks SET yield_requested = 1 WHERE id = ?1",
                    [a.task_id as i64],
                )
                .unwrap();
            let stopped = TaskEvent::Exited {
                exit_code: None,
                signal: Some(15),
                cancelled: true,
            };
            store
                .apply_report("n1", &task(3, a.task_id, ids[0], stopped), 5)
                .unwrap();
            assert_eq!(store.job(ids[0]).unwrap().unwrap().state, JobPhase::Queued);
            assert!(
                sealed(&store, ids[0]).is_some(),
                "a yielded job keeps its secrets"
            );

            store.request_cancel(ids[0], 6).unwrap();
            assert_eq!(
                store.job(ids[0]).unwrap().unwrap().state,
                JobPhase::Cancelled
            );
            assert_eq!(sealed(&store, ids[0]), None, "purged on cancel");
            let Owed::Assign(b) = &owed[1] else {
                unreachable!()
            };
            let exit = TaskEvent::Exited {
                exit_code: Some(0),
                signal: None,
                cancelled: false,
            };
            store
                .apply_report("n1", &task(4, b.task_id, ids[1], exit), 7)
                .unwrap();
            assert_eq!(
                store.job(ids[1]).unwrap().unwrap().state,
                JobPhase::Succeeded
            );
            assert_eq!(sealed(&store, ids[1]), None, "purged on success");
            assert_eq!(
                store.job(ids[1]).unwrap().unwrap().secret_env,
                vec!["HF_TOKEN"],
                "the names stay listed"
            );
        }
    }

    #[test]
    fn plain_secrets_of_an_older_database_are_sealed_or_dropped_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(super::super::DB_FILE);
        // The schema as it stood before secret_env left the spec's JSON.
        let before = super::super::schema::MIGRATIONS
            .iter()
            .position(|m| m.contains("ADD COLUMN secret_env"))
            .unwrap();
        {
            let conn =
                tidemill_runtime::sqlite::open(&db, &super::super::schema::MIGRATIONS[..before])
                    .unwrap();
            let json = serde_json::to_string(&secret_spec()).unwrap();
            for state in ["queued", "succeeded"] {
                conn.execute(
                    "INSERT INTO jobs (name, spec, state, deadline_ms, submitted_ms) VALUES ('j', ?1, ?2, 0, 0)",
                    rusqlite::params![json, state],
                )
                .unwrap();
            }
        }
        assert!(contains(&stored_bytes(dir.path()), SECRET));
        let mut store = Store::open(dir.path()).unwrap();
        assert!(
            !contains(&stored_bytes(dir.path()), SECRET),
            "a plain copy stayed on disk"
        );
        assert!(sealed(&store, 1).is_some() && sealed(&store, 2).is_none());
        for id in [1, 2] {
            assert_eq!(store.job(id).unwrap().unwrap().secret_env, vec!["HF_TOKEN"]);
        }
        store.register(&hello("n1"), 0).unwrap();
        store.apply_report("n1", &samples(1, 5.0), 1).unwrap();
        assert_dispatched_with_secret(&mut store);
    }

    on_both_backends! {
        fn a_lost_key_stops_the_start_until_its_jobs_are_given_up(db) {
            let (store, ids) = store_with_jobs(&db, 2);
            drop(store);
            std::fs::remove_file(db.dir.path().join(KEY_FILE)).unwrap();
            let err = db.try_open().unwrap_err().to_string();
            let key = db.dir.path().join(KEY_FILE).display().to_string();
            assert!(
                err.contains(&key)
                    && err.contains(&format!("jobs {}, {}", ids[0], ids[1]))
                    && err.contains("restore the file from the backup"),
                "{err}"
            );
            assert!(
                !db.dir.path().join(KEY_FILE).exists(),
                "no new key over sealed rows"
            );
            assert!(err.contains("--forget-lost-secrets"), "{err}");

            // With no backup, the operator gives those jobs up and goes on.
            let (mut store, lost) = Store::open_forgetting_lost_secrets(db.dir.path(), &db.cfg, 9).unwrap();
            assert_eq!(lost, ids);
            for id in ids {
                let job = store.job(id).unwrap().unwrap();
                assert_eq!(job.state, JobPhase::Cancelled);
                assert!(job.reason.unwrap().contains("submit it again"));
                assert_eq!(sealed(&store, id), None);
            }
            let mode = std::fs::metadata(db.dir.path().join(KEY_FILE)).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600, "a new key");
            store.submit(&secret_spec(), 10).unwrap();
            drop(store);
            db.open();
        }
    }
}
