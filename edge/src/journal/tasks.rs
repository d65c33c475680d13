//! The tasks the edge accepted: each assignment sealed under the edge's
//! secrets key (its env holds the job's secrets) and bound to its task id,
//! its process id once started, and whether it finished; a finished task's
//! assignment is purged at once.

use rusqlite::{Connection, OptionalExtension, params};
use tidemill_proto::{ReportBody, TaskAssignment};
use tidemill_runtime::secrets::SecretKey;
use tidemill_runtime::sqlite;

use super::{Journal, JournalError, append_in};

/// What a lost key costs the edge, and the way on.
pub(super) const LOST: &str = "if no backup has it, those tasks cannot be read back: `tidemill-edge reset` empties this data dir (the node joins again with a new token, and the coordinator runs the jobs elsewhere)";

/// The associated data that binds a sealed assignment to its task's row.
fn row(task_id: u64) -> String {
    format!("tidemill-edge tasks.assignment {task_id}")
}

impl Journal {
    /// Records an accepted task; returns false if it was already known, which
    /// makes a repeated assignment a no-op.
    /// The assignment is sealed under the secrets key, as its env holds the
    /// job's secrets.
    pub fn accept_task(&mut self, a: &TaskAssignment) -> Result<bool, JournalError> {
        let plain = rmp_serde::to_vec_named(a).expect("assignments always serialise");
        let blob = self.key()?.seal(&plain, &row(a.task_id));
        let n = self
            .conn
            .execute(
                "INSERT OR IGNORE INTO tasks (task_id, job_id, assignment, sealed) VALUES (?1, ?2, ?3, 1)",
                params![a.task_id as i64, a.job_id as i64, blob],
            )
            .map_err(self.sql())?;
        Ok(n == 1)
    }

    fn key(&self) -> Result<&SecretKey, JournalError> {
        self.key.as_ref().ok_or_else(|| JournalError::Sealed {
            path: self.path.clone(),
        })
    }

    /// Records the process id of a started task.
    pub fn task_started(&mut self, task_id: u64, pid: u32) -> Result<(), JournalError> {
        self.conn
            .execute(
                "UPDATE tasks SET pid = ?2 WHERE task_id = ?1",
                params![task_id as i64, pid],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// Journals a task's last report and marks it finished, atomically, so a
    /// crash cannot leave the task both finished and unreported. Its
    /// assignment, and the secrets in it, go at once.
    pub fn finish_task(&mut self, task_id: u64, last: &ReportBody) -> Result<u64, JournalError> {
        self.in_transaction(|tx| {
            let seq = append_in(tx, last)?;
            tx.execute(
                "UPDATE tasks SET finished = 1, assignment = x'' WHERE task_id = ?1",
                [task_id as i64],
            )?;
            Ok(seq)
        })
    }

    /// Tasks accepted but not finished, with their process ids if they started.
    pub fn unfinished_tasks(&self) -> Result<Vec<(TaskAssignment, Option<u32>)>, JournalError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT task_id, assignment, pid FROM tasks WHERE finished = 0 ORDER BY task_id",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, Option<u32>>(2)?,
                ))
            })
            .map_err(self.sql())?;
        let key = self.key()?;
        rows.map(|r| {
            let (task_id, sealed, pid) = r.map_err(self.sql())?;
            let blob = key.open(&sealed, &row(task_id), &format!("task {task_id}"))?;
            let a = rmp_serde::from_slice(&blob).map_err(|e| JournalError::Corrupt {
                path: self.path.clone(),
                seq: task_id,
                detail: e.to_string(),
            })?;
            Ok((a, pid))
        })
        .collect()
    }

    /// Tasks accepted but not finished as (task id, job id, process id if
    /// started), read without the secrets key, as `status` does.
    pub fn unfinished_task_ids(&self) -> Result<Vec<(u64, u64, Option<u32>)>, JournalError> {
        let mut stmt = self
            .conn
            .prepare("SELECT task_id, job_id, pid FROM tasks WHERE finished = 0 ORDER BY task_id")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get::<_, i64>(1)? as u64,
                    r.get(2)?,
                ))
            })
            .map_err(self.sql())?;
        rows.collect::<Result<_, _>>().map_err(self.sql())
    }

    /// The process ids of the unfinished tasks that have started.
    pub fn running_pids(&self) -> Result<Vec<u32>, JournalError> {
        let mut stmt = self
            .conn
            .prepare("SELECT pid FROM tasks WHERE finished = 0 AND pid IS NOT NULL")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| r.get::<_, u32>(0))
            .map_err(self.sql())?;
        rows.map(|r| r.map_err(self.sql())).collect()
    }

    /// Whether a task is known and unfinished.
    pub fn task_running(&self, task_id: u64) -> Result<bool, JournalError> {
        Ok(self
            .conn
            .query_row(
                "SELECT finished FROM tasks WHERE task_id = ?1",
                [task_id as i64],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map_err(self.sql())?
            == Some(0))
    }
}

/// Seals the assignments an older build stored plain (unfinished tasks) and
/// drops those of finished ones, with freed pages zeroed and the WAL
/// emptied, so no plain copy of a secret stays on disk.
pub(super) fn seal_plain(conn: &mut Connection, key: &SecretKey) -> rusqlite::Result<()> {
    let plain: Vec<(i64, bool, Vec<u8>)> = conn
        .prepare("SELECT task_id, finished, assignment FROM tasks WHERE sealed = 0")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    if plain.is_empty() {
        return Ok(());
    }
    sqlite::scrubbing(conn, |tx| {
        for (task_id, finished, assignment) in &plain {
            let stored = if *finished {
                Vec::new()
            } else {
                key.seal(assignment, &row(*task_id as u64))
            };
            tx.execute(
                "UPDATE tasks SET assignment = ?2, sealed = 1 WHERE task_id = ?1",
                params![task_id, stored],
            )?;
        }
        Ok(())
    })?;
    tracing::info!(
        tasks = plain.len(),
        "sealed the plain-text assignments an older build journaled"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use tidemill_runtime::secrets::KEY_FILE;

    use super::*;
    use crate::journal::JOURNAL_FILE;
    use crate::journal::tests::body;

    const SECRET: &str = "hf_s3cr3t_value";

    fn assignment(task_id: u64) -> TaskAssignment {
        TaskAssignment {
            task_id,
            job_id: 4,
            command: vec!["true".into()],
            env: [("HF_TOKEN".to_string(), SECRET.to_string())].into(),
            memory_bytes: None,
            checkpoint_interval_s: None,
        }
    }

    /// The journal's bytes on disk, database and WAL.
    fn on_disk(dir: &Path) -> Vec<u8> {
        let mut all = std::fs::read(dir.join(JOURNAL_FILE)).unwrap();
        all.extend(std::fs::read(dir.join(format!("{JOURNAL_FILE}-wal"))).unwrap_or_default());
        all
    }

    fn holds_secret(dir: &Path) -> bool {
        on_disk(dir)
            .windows(SECRET.len())
            .any(|w| w == SECRET.as_bytes())
    }

    fn stored(j: &Journal, task_id: u64) -> Vec<u8> {
        j.conn
            .query_row(
                "SELECT assignment FROM tasks WHERE task_id = ?1",
                [task_id as i64],
                |r| r.get(0),
            )
            .unwrap()
    }

    #[test]
    fn tasks_are_accepted_once_and_tracked_until_finished() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        let a = assignment(9);
        assert!(j.accept_task(&a).unwrap());
        assert!(!j.accept_task(&a).unwrap());
        assert!(
            j.running_pids().unwrap().is_empty(),
            "accepted, not started"
        );
        j.task_started(9, 1234).unwrap();
        assert_eq!(j.unfinished_tasks().unwrap(), vec![(a, Some(1234))]);
        assert_eq!(j.unfinished_task_ids().unwrap(), vec![(9, 4, Some(1234))]);
        assert_eq!(j.running_pids().unwrap(), vec![1234]);
        assert!(j.task_running(9).unwrap());
        j.finish_task(9, &body(5)).unwrap();
        assert!(j.unfinished_tasks().unwrap().is_empty());
        assert!(j.running_pids().unwrap().is_empty());
        assert!(!j.task_running(9).unwrap());
        assert_eq!(j.pending_count().unwrap(), 1);
    }

    #[test]
    fn assignments_are_sealed_at_rest_and_purged_when_the_task_ends() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        j.accept_task(&assignment(9)).unwrap();
        assert!(!holds_secret(dir.path()), "a plain secret in the journal");
        drop(j);
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(
            j.unfinished_tasks().unwrap()[0].0,
            assignment(9),
            "round trip"
        );
        j.finish_task(9, &body(5)).unwrap();
        assert!(stored(&j, 9).is_empty(), "purged when the task ended");
    }

    #[test]
    fn a_sealed_assignment_moved_to_another_task_does_not_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.accept_task(&assignment(9)).unwrap();
        j.accept_task(&assignment(10)).unwrap();
        j.conn
            .execute(
                "UPDATE tasks SET assignment = ?1 WHERE task_id = 10",
                [stored(&j, 9)],
            )
            .unwrap();
        let err = j.unfinished_tasks().unwrap_err().to_string();
        assert!(err.contains("task 10") && err.contains(KEY_FILE), "{err}");
        drop(j);
        let err = Journal::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("task 10") && err.contains("restore"), "{err}");
    }

    #[test]
    fn a_lost_key_with_sealed_assignments_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.accept_task(&assignment(9)).unwrap();
        drop(j);
        std::fs::remove_file(dir.path().join(KEY_FILE)).unwrap();
        let err = Journal::open(dir.path()).unwrap_err().to_string();
        let key = dir.path().join(KEY_FILE).display().to_string();
        assert!(
            err.contains(&key) && err.contains("task 9") && err.contains("tidemill-edge reset"),
            "{err}"
        );
    }

    #[test]
    fn plain_assignments_of_an_older_journal_are_sealed_or_purged_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        {
            let before = &super::super::MIGRATIONS[..super::super::MIGRATIONS.len() - 1];
            let conn = tidemill_runtime::sqlite::open(&path, before).unwrap();
            for (task, finished) in [(9, 0), (10, 1)] {
                let blob = rmp_serde::to_vec_named(&assignment(task)).unwrap();
                conn.execute(
                    "INSERT INTO tasks (task_id, job_id, assignment, finished) VALUES (?1, 4, ?2, ?3)",
                    params![task as i64, blob, finished],
                )
                .unwrap();
            }
        }
        assert!(holds_secret(dir.path()));
        let j = Journal::open(dir.path()).unwrap();
        assert!(!holds_secret(dir.path()), "a plain copy stayed on disk");
        assert_eq!(j.unfinished_tasks().unwrap(), vec![(assignment(9), None)]);
        assert!(stored(&j, 10).is_empty());
    }
}
