//! What the store knows of jobs' checkpoints: the size and step of the
//! latest one the coordinator keeps (the size prices the job's next move),
//! each transfer's size, rate, time and step for `jobs show`, and the step a
//! resumed task started from, which becomes the job's progress.

use super::db;
use super::db::{OptionalExtension, Query, Transaction, params};
use serde::{Deserialize, Serialize};
use tidemill_proto::TaskResume;

use super::{Store, StoreError, event};

/// One checkpoint transfer of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferRecord {
    /// When it ended, ms of the coordinator's clock.
    pub t_ms: i64,
    /// The node it left, or `cloud`.
    pub from: String,
    /// The node it reached, or `cloud`.
    pub to: String,
    /// Bytes of the checkpoint.
    pub bytes: u64,
    /// Bytes moved (fewer when a cut transfer resumed).
    pub moved_bytes: u64,
    /// Wall seconds it took.
    pub seconds: f64,
    /// The step the checkpoint holds.
    pub step: u64,
    /// Chunks that failed their hash and were sent again.
    pub resent_chunks: u32,
}

impl TransferRecord {
    /// Bytes per second moved.
    pub fn rate_bps(&self) -> f64 {
        self.moved_bytes as f64 / self.seconds.max(1e-6)
    }
}

/// Whether `node_id` may send or fetch checkpoints of `job_id`: the job is
/// live and has a task on that node (task `task_id`, when one is named).
fn allowed(
    tx: &Transaction<'_>,
    node_id: &str,
    job_id: u64,
    task_id: Option<u64>,
) -> db::Result<bool> {
    tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM tasks t JOIN jobs j ON j.id = t.job_id
            WHERE t.node_id = ?1 AND t.job_id = ?2 AND (CAST(?3 AS BIGINT) IS NULL OR t.id = ?3)
              AND j.state IN ('queued', 'running'))",
        params![node_id, job_id as i64, task_id.map(|t| t as i64)],
        |r| r.get(0),
    )
}

impl Store {
    /// Whether `node_id` may send or fetch checkpoints of `job_id` (through
    /// task `task_id`, when named): only a node the job has a task on.
    pub fn checkpoint_allowed(
        &mut self,
        node_id: &str,
        job_id: u64,
        task_id: Option<u64>,
    ) -> Result<bool, StoreError> {
        let err = self.sql_err();
        self.write(|tx| allowed(tx, node_id, job_id, task_id).map_err(&err))
    }

    /// Records that the coordinator now keeps a checkpoint of `job_id` that
    /// `t` brought from `t.from`: its size prices the job's next move.
    pub fn checkpoint_stored(&mut self, job_id: u64, t: &TransferRecord) -> Result<(), StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            tx.execute(
                "UPDATE jobs SET checkpoint_bytes = ?2, checkpoint_step = ?3 WHERE id = ?1",
                params![job_id as i64, t.bytes as i64, t.step as i64],
            )
            .map_err(&err)?;
            insert_transfer(tx, job_id, t).map_err(&err)?;
            let what = format!(
                "checkpoint of step {} ({} bytes) stored from {} in {:.2} s",
                t.step, t.bytes, t.from, t.seconds
            );
            event(
                tx,
                t.t_ms,
                Some(&t.from),
                Some(job_id as i64),
                "checkpoint",
                &what,
            )
            .map_err(&err)
        })
    }

    /// The measured size of each job's latest kept checkpoint, by job id.
    pub fn checkpoint_sizes(&self) -> Result<std::collections::HashMap<u64, u64>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare("SELECT id, checkpoint_bytes FROM jobs WHERE checkpoint_bytes IS NOT NULL AND state IN ('queued', 'running')")
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// The job's checkpoint transfers, oldest first.
    pub fn transfers(&self, job_id: u64) -> Result<Vec<TransferRecord>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare(
                "SELECT t_ms, from_node, to_node, bytes, moved_bytes, seconds, step, resent_chunks
                 FROM checkpoint_transfers WHERE job_id = ?1 ORDER BY id",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([job_id as i64], |r| {
                Ok(TransferRecord {
                    t_ms: r.get(0)?,
                    from: r.get(1)?,
                    to: r.get(2)?,
                    bytes: r.get::<_, i64>(3)? as u64,
                    moved_bytes: r.get::<_, i64>(4)? as u64,
                    seconds: r.get(5)?,
                    step: r.get::<_, i64>(6)? as u64,
                    resent_chunks: r.get(7)?,
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// The ids of jobs still queued or running.
    pub fn live_job_ids(&self) -> Result<std::collections::HashSet<u64>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM jobs WHERE state IN ('queued', 'running')")
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| Ok(r.get::<_, i64>(0)? as u64))
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }
}

fn insert_transfer(tx: &Transaction<'_>, job_id: u64, t: &TransferRecord) -> db::Result<()> {
    tx.execute(
        "INSERT INTO checkpoint_transfers
            (job_id, t_ms, from_node, to_node, bytes, moved_bytes, seconds, step, resent_chunks)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            job_id as i64,
            t.t_ms,
            t.from,
            t.to,
            t.bytes as i64,
            t.moved_bytes as i64,
            t.seconds,
            t.step as i64,
            t.resent_chunks
        ],
    )?;
    Ok(())
}

/// A task of `node_id` started from a checkpoint: the job's progress is the
/// step it holds, not the count before the move nor an estimate (the task
/// trains on from there), and its transfer to the node is recorded. A
/// report of a task the coordinator does not know is logged as an event.
pub(super) fn report_resume(
    tx: &Transaction<'_>,
    node_id: &str,
    r: &TaskResume,
    now_ms: i64,
) -> db::Result<()> {
    let job = r.job_id as i64;
    let known: Option<i64> = tx
        .query_row(
            "SELECT id FROM tasks WHERE id = ?1 AND job_id = ?2 AND node_id = ?3",
            params![r.task_id as i64, job, node_id],
            |row| row.get(0),
        )
        .optional()?;
    if known.is_none() {
        let what = format!("resume from step {}", r.step);
        return event(tx, now_ms, Some(node_id), Some(job), "unknown-task", &what);
    }
    tx.execute(
        "UPDATE jobs SET reported_iters = ?2, done_iters = ?2,
                progress_ms = CASE WHEN progress_ms IS NULL THEN NULL ELSE MAX(progress_ms, ?3) END,
                rate_base_ms = NULL, rate_base_iters = NULL
         WHERE id = ?1 AND state IN ('queued', 'running')",
        params![job, r.step as f64, now_ms],
    )?;
    if let Some(t) = &r.transfer {
        insert_transfer(
            tx,
            r.job_id,
            &TransferRecord {
                t_ms: now_ms,
                from: if t.shared {
                    tidemill_proto::SHARED_STORE_PEER
                } else {
                    tidemill_proto::CLOUD_PEER
                }
                .to_string(),
                to: node_id.to_string(),
                bytes: t.bytes,
                moved_bytes: t.moved_bytes,
                seconds: t.seconds,
                step: r.step,
                resent_chunks: t.resent_chunks,
            },
        )?;
    }
    let what = format!(
        "task {} resumed from the checkpoint of step {}",
        r.task_id, r.step
    );
    event(tx, now_ms, Some(node_id), Some(job), "checkpoint", &what)
}

#[cfg(test)]
mod tests {
    use crate::store::testkit::on_both_backends;
    use std::collections::HashMap;

    use tidemill_proto::{Report, ReportBody, TaskProgress, TaskResume, Transfer};
    use tidemill_sched::RoundPlan;

    use super::*;
    use crate::job::{JobFile, ProgressSource};
    use crate::store::testkit::{hello, start_on};

    fn report(seq: u64, body: ReportBody) -> Report {
        Report { seq, body }
    }

    on_both_backends! {
        /// A task that resumed from a checkpoint sets the job's progress to
        /// the checkpoint's step: not the count it reported before it moved
        /// (66), which the work after the checkpoint, lost, had raised.
        fn progress_after_a_resume_is_the_step_of_its_checkpoint(db) {
            let mut store = db.open();
            store.register(&hello("e1"), 0).unwrap();
            let spec = JobFile::from_toml(
                "name = \"j\"\ncommand = [\"true\"]\ndeadline = \"2030-01-01T00:00:00Z\"\n\
                 [work]\nmodel = \"m\"\niterations = 150\nglobal_batch = 32\nmodel_bytes = 1000\n",
                "j",
            )
            .unwrap();
            let job = store.submit(&spec, 1).unwrap();
            let plan = RoundPlan {
                now_ms: 2,
                decisions: vec![start_on(job, &[("e1", 1)])],
            };
            let addrs = HashMap::from([("e1".to_string(), "127.0.0.1".to_string())]);
            store.apply_round(&plan, &addrs).unwrap();
            let task: i64 = store
                .conn
                .query_row(
                    "SELECT id FROM tasks WHERE job_id = ?1",
                    [job as i64],
                    |r| r.get(0),
                )
                .unwrap();
            let task = task as u64;
            let said = TaskProgress {
                task_id: task,
                job_id: job,
                t_ms: 10,
                iterations: 66,
            };
            store
                .apply_report("e1", &report(1, ReportBody::Progress(said)), 10)
                .unwrap();
            assert_eq!(store.job(job).unwrap().unwrap().done_iters, 66.0);
            let resumed = TaskResume {
                task_id: task,
                job_id: job,
                t_ms: 20,
                step: 40,
                transfer: Some(Transfer {
                    bytes: 9_000_000,
                    moved_bytes: 9_000_000,
                    seconds: 1.5,
                    resent_chunks: 0,
                    shared: false,
                }),
            };
            store
                .apply_report("e1", &report(2, ReportBody::Resumed(resumed)), 20)
                .unwrap();
            let shown = store.job(job).unwrap().unwrap();
            assert_eq!(
                (shown.done_iters, shown.progress),
                (40.0, ProgressSource::Reported)
            );
            let t = &store.transfers(job).unwrap()[0];
            assert_eq!(
                (t.from.as_str(), t.to.as_str(), t.step, t.bytes),
                ("cloud", "e1", 40, 9_000_000)
            );
            assert!((t.rate_bps() - 6_000_000.0).abs() < 1e-6);
            // A resume report of a task this node does not have is an event, not progress.
            let stranger = TaskResume {
                task_id: task + 9,
                job_id: job,
                t_ms: 30,
                step: 1,
                transfer: None,
            };
            store
                .apply_report("e1", &report(3, ReportBody::Resumed(stranger)), 30)
                .unwrap();
            assert_eq!(store.job(job).unwrap().unwrap().done_iters, 40.0);
        }
    }
}
