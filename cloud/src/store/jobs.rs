//! Jobs and their tasks: submitting, listing and cancelling jobs, committing
//! first-fit placements, and moving a job through its states as its tasks
//! report.

use super::db;
use super::db::{OptionalExtension, Query, Row, Transaction, params};
use tidemill_proto::{CheckpointState, NodeForecast, TaskStatus};
use tidemill_sched::{FirstFitLimits, JobView, NodeView, Plan, Snapshot};

use super::capacity::{self, Capacity};
use super::{IdleWindowView, Store, StoreError, event, json_column, ms_to_time, secrets, tidal};
use crate::job::{JobFile, JobPhase, JobRecord, PlanView, ProgressSource, StartWindow};
use crate::lifecycle;

impl Store {
    /// Stores a new job and returns its id.
    pub fn submit(&mut self, spec: &JobFile, now_ms: i64) -> Result<u64, StoreError> {
        self.submit_as(spec, "", now_ms)
    }

    /// Stores a new job owned by the API token `owner` (empty: none), so
    /// that a submit-scoped token may cancel it; returns its id. Its
    /// `secret_env` is sealed under the secrets key, apart from the spec.
    pub fn submit_as(
        &mut self,
        spec: &JobFile,
        owner: &str,
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        let err = self.sql_err();
        let mut public = spec.clone();
        let secret_env = std::mem::take(&mut public.secret_env);
        let json = serde_json::to_string(&public).expect("job specs serialise");
        let names =
            serde_json::to_string(&secret_env.keys().collect::<Vec<_>>()).expect("names serialise");
        let tx = self.conn.transaction().map_err(&err)?;
        let id: i64 = tx.query_row(
            "INSERT INTO jobs (name, spec, state, reason, deadline_ms, submitted_ms, owner, secret_names)
             VALUES (?1, ?2, 'queued', 'waiting for the next scheduling round', ?3, ?4, ?5, ?6)
             RETURNING id",
            params![
                spec.name,
                json,
                spec.deadline.timestamp_millis(),
                now_ms,
                owner,
                names
            ],
            |r| r.get(0),
        )
        .map_err(&err)?;
        secrets::store(&tx, &self.secrets, id, &secret_env).map_err(&err)?;
        event(&tx, now_ms, None, Some(id), "job-submitted", &spec.name).map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(id as u64)
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
        self.jobs_page(u32::MAX, None)
    }

    /// At most `limit` jobs, newest first, older than job `before` if given:
    /// one page of a listing.
    pub fn jobs_page(&self, limit: u32, before: Option<u64>) -> Result<Vec<JobRecord>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare(&format!(
                "{JOB_COLUMNS} WHERE id < ?1 ORDER BY id DESC LIMIT ?2"
            ))
            .map_err(&err)?;
        let before = before.map_or(i64::MAX, |b| b as i64);
        let rows = stmt
            .query_map(params![before, i64::from(limit)], job_from_row)
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// The API token that submitted job `id` (empty: none), or `None` for an
    /// unknown job.
    pub fn job_owner(&self, id: u64) -> Result<Option<String>, StoreError> {
        let err = self.sql_err();
        self.conn
            .query_row("SELECT owner FROM jobs WHERE id = ?1", [id as i64], |r| {
                r.get(0)
            })
            .optional()
            .map_err(err)
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
            let Some(state) = state.as_deref().and_then(JobPhase::parse) else { return Ok(false) };
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
                "SELECT n.id, n.online = 1 AND n.drained = 0, n.cpu_util,
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
                   AND NOT EXISTS (SELECT 1 FROM tasks t JOIN nodes n ON n.id = t.node_id
                                   WHERE t.job_id = j.id AND t.state != 'done' AND n.online = 1)
                   AND (?1 = 0 OR json_extract(spec, '$.work') IS NULL)
                 ORDER BY submitted_ms, id",
            )
            .and_then(|mut s| {
                s.query_map([unplanned_only], |r| {
                    Ok(JobView {
                        id: r.get::<_, i64>(0)? as u64,
                        submitted_ms: r.get(1)?,
                        deadline_ms: r.get(2)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(&err)?;
        Ok(Snapshot {
            now_ms,
            nodes,
            queued,
            constraints: self.constraints()?,
        })
    }

    /// Commits a first-fit plan made under `policy`, re-checking each
    /// placement against the current state: the job must still be queued
    /// without a task, and the node known, online and with a free task slot
    /// (counting the tasks this plan placed before it). A placement that no
    /// longer fits is refused: the job stays queued with a reason naming the
    /// node. Returns how many placements were committed.
    pub fn apply_plan(
        &mut self,
        plan: &Plan,
        policy: &FirstFitLimits,
        now_ms: i64,
    ) -> Result<usize, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let mut committed = 0;
            for p in &plan.placements {
                let job = p.job_id as i64;
                let queued: bool = tx
                    .query_row(
                        "SELECT EXISTS (SELECT 1 FROM jobs j WHERE j.id = ?1 AND j.state = 'queued' AND j.cancel_requested = 0
                             AND NOT EXISTS (SELECT 1 FROM tasks t JOIN nodes n ON n.id = t.node_id
                                             WHERE t.job_id = j.id AND t.state != 'done' AND n.online = 1))",
                        [job],
                        |r| r.get(0),
                    )
                    .map_err(&err)?;
                if !queued {
                    continue;
                }
                let slots = Capacity::Slots(policy.max_tasks_per_node);
                if let Err(m) = capacity::check(tx, job, &[(&p.node_id, 1)], slots).map_err(&err)? {
                    capacity::refuse(tx, job, now_ms, &m, &format!("not started: {m}")).map_err(&err)?;
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
                tracing::info!(job_id = p.job_id, node_id = %p.node_id, "job placed first-fit");
                committed += 1;
            }
            for w in &plan.waiting {
                tx.execute(
                    "UPDATE jobs SET reason = ?2 WHERE id = ?1 AND state = 'queued' AND reason IS DISTINCT FROM ?2",
                    params![w.job_id as i64, w.reason],
                )
                .map_err(&err)?;
            }
            Ok(committed)
        })
    }
}

const JOB_COLUMNS: &str =
    "SELECT id, name, spec, state, node, exit_code, output_tail, reason, cancel_requested,
    submitted_ms, started_ms, finished_ms, done_iters, attained_s, plan, start_window,
    reported_iters IS NOT NULL, measured_ips, secret_names, checkpoint, last_started_ms FROM jobs";

fn job_from_row(r: &Row<'_>) -> db::Result<JobRecord> {
    let spec: JobFile = json_column(r, 2)?;
    let state_text: String = r.get(3)?;
    let state = JobPhase::parse(&state_text)
        .ok_or_else(|| db::Error::decode(3, format!("unknown state {state_text}")))?;
    let tail: Vec<String> = json_column(r, 6)?;
    Ok(JobRecord {
        id: r.get::<_, i64>(0)? as u64,
        name: r.get(1)?,
        state,
        node: r.get(4)?,
        exit_code: r.get(5)?,
        output_tail: tail,
        output_hidden: None,
        reason: r.get(7)?,
        command: spec.command,
        env: spec.env,
        secret_env: json_column(r, 18)?,
        deadline: spec.deadline,
        submitted_at: ms_to_time(r.get(9)?),
        started_at: r.get::<_, Option<i64>>(10)?.map(ms_to_time),
        last_started_at: r.get::<_, Option<i64>>(20)?.map(ms_to_time),
        finished_at: r.get::<_, Option<i64>>(11)?.map(ms_to_time),
        cancel_requested: r.get(8)?,
        class: spec.class,
        work: spec.work,
        done_iters: r.get(12)?,
        attained_s: r.get(13)?,
        plan: json_column::<Option<PlanView>>(r, 14)?,
        start_window: json_column::<Option<StartWindow>>(r, 15)?,
        checkpoint_transfers: Vec::new(),
        progress: if r.get(16)? {
            ProgressSource::Reported
        } else {
            ProgressSource::Estimated
        },
        measured_ips: r.get(17)?,
        checkpoint: json_column(r, 19)?,
    })
}

/// The idle window that holds `t_ms` in `node_id`'s availability as the
/// scheduler reads it (its latest forecast, the slot in progress judged by
/// its latest sample: [`crate::world::edge_availability`]), as a job started
/// then records it; `None` when no window does.
fn start_window(tx: &Transaction<'_>, node_id: &str, t_ms: i64) -> db::Result<Option<StartWindow>> {
    let row = tx
        .query_row(
            "SELECT n.cpu_util, n.gpu_util, n.last_sample_ms, f.forecast, n.busy_ms
             FROM nodes n JOIN forecasts f ON f.node_id = n.id WHERE n.id = ?1",
            [node_id],
            |r| {
                let sample = crate::world::LatestSample {
                    utils: [r.get(0)?, r.get(1)?],
                    sampled_ms: r.get(2)?,
                    busy_ms: r.get(4)?,
                };
                Ok((sample, r.get::<_, String>(3)?))
            },
        )
        .optional()?;
    let Some((sample, forecast)) = row else {
        return Ok(None);
    };
    let Ok(forecast) = serde_json::from_str::<NodeForecast>(&forecast) else {
        return Ok(None);
    };
    let availability = crate::world::edge_availability(&sample, Some(&forecast), t_ms);
    Ok(availability
        .windows
        .iter()
        .find(|w| (w.start_ms..w.end_ms).contains(&t_ms))
        .map(|w| StartWindow {
            node: node_id.to_string(),
            window: IdleWindowView {
                start: ms_to_time(w.start_ms),
                end: ms_to_time(w.end_ms),
                confidence: w.confidence,
            },
            forecast_issued_at: ms_to_time(forecast.issued_ms),
        }))
}

/// Applies a task's status to its task and job, by the rules of
/// [`lifecycle::on_task_event`]; returns the job's new phase if it changed.
pub(super) fn apply_task_status(
    tx: &Transaction<'_>,
    node_id: &str,
    s: &TaskStatus,
    now_ms: i64,
) -> db::Result<Option<(u64, JobPhase)>> {
    let job = s.job_id as i64;
    let task = s.task_id as i64;
    let yielding: Option<bool> = tx
        .query_row(
            "SELECT yield_requested FROM tasks
             WHERE id = ?1 AND job_id = ?2 AND node_id = ?3 AND taken_back = 0",
            params![task, job, node_id],
            |r| r.get(0),
        )
        .optional()?;
    let Some(yielding) = yielding else {
        let what = format!("{:?}", s.event);
        event(tx, now_ms, Some(node_id), Some(job), "unknown-task", &what)?;
        return Ok(None);
    };
    let others_open: u32 = tx.query_row(
        "SELECT COUNT(*) FROM tasks WHERE job_id = ?1 AND id != ?2 AND state != 'done' AND yield_requested = 0",
        params![job, task],
        |r| r.get(0),
    )?;
    let work_done: bool = tx.query_row(
        "SELECT CASE WHEN reported_iters
                     >= CAST(json_extract(spec, '$.work.iterations') AS DOUBLE PRECISION)
                THEN 1 ELSE 0 END
         FROM jobs WHERE id = ?1",
        [job],
        |r| r.get(0),
    )?;
    let ctx = lifecycle::TaskContext {
        node_id,
        yielding,
        others_open,
        work_done,
    };
    let t = lifecycle::on_task_event(ctx, &s.event);
    let task_state = if t.task_running { "running" } else { "done" };
    tx.execute(
        "UPDATE tasks SET state = ?2 WHERE id = ?1",
        params![task, task_state],
    )?;
    if t.settle_progress {
        tidal::settle_progress(tx, job, s.t_ms)?;
    }
    if let Some(ck) = &s.checkpoint {
        record_checkpoint(tx, node_id, s.task_id, job, ck, now_ms)?;
    }
    if t.stop_other_ranks {
        tidal::stop_tasks(tx, job)?;
    }
    let tail = serde_json::to_string(&s.output_tail).expect("strings serialise");
    let live = "WHERE id = ?1 AND state IN ('queued', 'running')";
    let changed = match t.phase {
        None => 0,
        Some(JobPhase::Running) => {
            let window = start_window(tx, node_id, s.t_ms)?
                .map(|w| serde_json::to_string(&w).expect("a window serialises"));
            tx.execute(
                "UPDATE jobs SET state = 'running', started_ms = COALESCE(started_ms, ?2),
                        last_started_ms = ?2, progress_ms = COALESCE(progress_ms, ?2), reason = ?3, start_window = ?4
                 WHERE id = ?1 AND state = 'queued'",
                params![job, s.t_ms, t.reason, window],
            )?
        }
        Some(JobPhase::Queued) => tx.execute(
            &format!("UPDATE jobs SET state = 'queued', progress_ms = NULL, reason = ?2 {live}"),
            params![job, t.reason],
        )?,
        // An ended job's reported count is what it did: the estimate
        // credited since its last report (`settle_progress`) is dropped.
        Some(phase) => tx.execute(
            &format!(
                "UPDATE jobs SET state = ?2, exit_code = ?3, output_tail = ?4, reason = ?5, finished_ms = ?6,
                        done_iters = COALESCE(reported_iters, done_iters) {live}"
            ),
            params![job, phase.as_str(), t.exit_code, tail, t.reason, s.t_ms],
        )?,
    };
    event(tx, now_ms, Some(node_id), Some(job), "task", &t.reason)?;
    Ok(t.phase.filter(|_| changed > 0).map(|p| (s.job_id, p)))
}

/// Keeps what an ended task left in its job's checkpoint dir on the job,
/// for `jobs show`, and puts it in the job's event log. The error line,
/// which the edge takes from the task's output, is cut to
/// [`CheckpointState::MAX_ERROR_LEN`]: an edge is not trusted to bound it.
fn record_checkpoint(
    tx: &Transaction<'_>,
    node_id: &str,
    task_id: u64,
    job: i64,
    ck: &CheckpointState,
    now_ms: i64,
) -> db::Result<()> {
    let ck = ck.clone().bounded();
    let json = serde_json::to_string(&ck).expect("a checkpoint state serialises");
    tx.execute(
        "UPDATE jobs SET checkpoint = ?2 WHERE id = ?1",
        params![job, json],
    )?;
    let held = format!("{} files, {} bytes", ck.files, ck.bytes);
    let (kind, detail) = if ck.saved_by_task {
        (
            "checkpoint",
            format!("task {task_id} saved a checkpoint: {held}"),
        )
    } else {
        tracing::warn!(
            node_id,
            job_id = job,
            task_id,
            "the task ended having saved no checkpoint"
        );
        let error = ck
            .last_error
            .as_deref()
            .map_or_else(String::new, |e| format!("; last error: {e}"));
        (
            "checkpoint-missing",
            format!("task {task_id} saved no checkpoint (its dir holds {held}){error}"),
        )
    };
    event(tx, now_ms, Some(node_id), Some(job), kind, &detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Owed;
    use crate::store::testkit::on_both_backends;
    use crate::store::testkit::{hello, samples, spec, task};
    use tidemill_proto::TaskEvent;
    use tidemill_sched::{Placement, first_fit};

    on_both_backends! {
        fn a_job_runs_through_its_life(db) {
            let mut store = db.open();
            store.register(&hello("n1"), 0).unwrap();
            store.apply_report("n1", &samples(1, 5.0), 1).unwrap();
            let id = store.submit(&spec(), 2).unwrap();
            let policy = FirstFitLimits {
                idle_cpu_threshold_pct: 30.0,
                max_tasks_per_node: 1,
            };
            let plan = first_fit(&store.snapshot(3, false).unwrap(), &policy);
            assert_eq!(store.apply_plan(&plan, &policy, 3).unwrap(), 1);
            assert_eq!(
                store.apply_plan(&plan, &policy, 3).unwrap(),
                0,
                "re-check refuses a second placement"
            );
            let owed = store.owed("n1", 29500).unwrap();
            let [Owed::Assign(a)] = &owed[..] else {
                panic!("{owed:?}")
            };
            store.acknowledged(&owed[0], 0).unwrap();
            assert!(store.owed("n1", 29500).unwrap().is_empty());
            store
                .apply_report(
                    "n1",
                    &task(2, a.task_id, id, TaskEvent::Started { pid: 7 }),
                    4,
                )
                .unwrap();
            let running = store.job(id).unwrap().unwrap();
            assert_eq!(running.state, JobPhase::Running);
            assert!(running.started_at.is_some());
            assert_eq!(running.last_started_at, running.started_at);
            let exit = TaskEvent::Exited {
                exit_code: Some(3),
                signal: None,
                cancelled: false,
            };
            let applied = store
                .apply_report("n1", &task(3, a.task_id, id, exit), 5)
                .unwrap();
            assert_eq!(applied.jobs, vec![(id, JobPhase::Failed)]);
            let job = store.job(id).unwrap().unwrap();
            assert_eq!(
                (job.state, job.exit_code, job.node.as_deref()),
                (JobPhase::Failed, Some(3), Some("n1"))
            );
            assert_eq!(job.output_tail, vec!["hi".to_string()]);
            assert_eq!(job.reason.as_deref(), Some("exited with code 3"));
        }
    }

    on_both_backends! {
        /// An end report's checkpoint state lands on the job and in its event
        /// log; an error line longer than the bound (an edge's bad input) is cut.
        fn a_task_that_saved_no_checkpoint_is_recorded_with_its_error(db) {
            let mut store = db.open();
            store.register(&hello("n1"), 0).unwrap();
            store.apply_report("n1", &samples(1, 5.0), 1).unwrap();
            let id = store.submit(&spec(), 2).unwrap();
            let policy = FirstFitLimits {
                idle_cpu_threshold_pct: 30.0,
                max_tasks_per_node: 1,
            };
            let plan = first_fit(&store.snapshot(3, false).unwrap(), &policy);
            store.apply_plan(&plan, &policy, 3).unwrap();
            let owed = store.owed("n1", 29500).unwrap();
            let [Owed::Assign(a)] = &owed[..] else {
                panic!("{owed:?}")
            };
            let exit = TaskEvent::Exited {
                exit_code: Some(0),
                signal: None,
                cancelled: false,
            };
            let mut report = task(2, a.task_id, id, exit);
            let long = format!(
                "sh: 1: cannot create /d/job-1/step: Permission denied{}",
                "!".repeat(4000)
            );
            let tidemill_proto::ReportBody::Task(status) = &mut report.body else {
                unreachable!()
            };
            status.checkpoint = Some(CheckpointState {
                files: 0,
                bytes: 0,
                saved_by_task: false,
                last_error: Some(long.clone()),
            });
            store.apply_report("n1", &report, 4).unwrap();
            let job = store.job(id).unwrap().unwrap();
            let ck = job.checkpoint.expect("recorded");
            assert_eq!(
                ck.last_error.as_deref(),
                Some(&long[..CheckpointState::MAX_ERROR_LEN])
            );
            let detail: String = store
                .conn
                .query_row(
                    "SELECT detail FROM events WHERE job_id = ?1 AND kind = 'checkpoint-missing'",
                    [id as i64],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(
                detail.contains("saved no checkpoint") && detail.contains("Permission denied"),
                "{detail}"
            );
        }
    }

    on_both_backends! {
        fn a_placement_on_a_node_that_went_offline_since_the_snapshot_is_refused(db) {
            let mut store = db.open();
            store.register(&hello("e3"), 0).unwrap();
            store.apply_report("e3", &samples(1, 5.0), 1).unwrap();
            let id = store.submit(&spec(), 2).unwrap();
            let policy = FirstFitLimits {
                idle_cpu_threshold_pct: 30.0,
                max_tasks_per_node: 1,
            };
            let plan = first_fit(&store.snapshot(3, false).unwrap(), &policy);
            assert_eq!(plan.placements.len(), 1);
            store
                .expire(&std::collections::HashSet::new(), 10, None, 10)
                .unwrap();

            assert_eq!(store.apply_plan(&plan, &policy, 10).unwrap(), 0);
            assert!(store.open_tasks(id).is_empty());
            let job = store.job(id).unwrap().unwrap();
            assert_eq!(job.state, JobPhase::Queued);
            assert_eq!(
                job.reason.as_deref(),
                Some("not started: node e3 went offline before the plan was applied")
            );
        }
    }

    on_both_backends! {
        fn placements_past_a_nodes_free_slots_are_refused(db) {
            let mut store = db.open();
            store.register(&hello("e1"), 0).unwrap();
            let ids = [
                store.submit(&spec(), 1).unwrap(),
                store.submit(&spec(), 1).unwrap(),
            ];
            let policy = FirstFitLimits {
                idle_cpu_threshold_pct: 30.0,
                max_tasks_per_node: 1,
            };
            // A plan that puts both jobs in e1's one slot.
            let plan = Plan {
                placements: ids
                    .iter()
                    .map(|&job_id| Placement {
                        job_id,
                        node_id: "e1".into(),
                    })
                    .collect(),
                waiting: Vec::new(),
            };

            assert_eq!(store.apply_plan(&plan, &policy, 2).unwrap(), 1);
            assert_eq!(store.open_tasks(ids[0]), vec![("e1".to_string(), 1)]);
            assert!(store.open_tasks(ids[1]).is_empty());
            assert_eq!(
                store.job(ids[1]).unwrap().unwrap().reason.as_deref(),
                Some("not started: node e1 has 0 free task slots, the plan wanted 1")
            );
        }
    }

    on_both_backends! {
        fn cancel_withdraws_undelivered_work_and_stops_delivered_work(db) {
            let mut store = db.open();
            store.register(&hello("n1"), 0).unwrap();
            store.apply_report("n1", &samples(1, 5.0), 1).unwrap();
            let queued = store.submit(&spec(), 2).unwrap();
            assert_eq!(
                store.request_cancel(queued, 3).unwrap().unwrap().state,
                JobPhase::Cancelled
            );
            assert!(store.request_cancel(999, 3).unwrap().is_none());

            let id = store.submit(&spec(), 4).unwrap();
            let policy = FirstFitLimits {
                idle_cpu_threshold_pct: 30.0,
                max_tasks_per_node: 1,
            };
            store
                .apply_plan(
                    &first_fit(&store.snapshot(5, false).unwrap(), &policy),
                    &policy,
                    5,
                )
                .unwrap();
            // Only the nodes owed a command are asked for them.
            let owed_nodes = |s: &Store| Vec::from_iter(s.owed_nodes().unwrap());
            assert_eq!(owed_nodes(&store), ["n1"]);
            let assign = store.owed("n1", 29500).unwrap().remove(0);
            store.acknowledged(&assign, 0).unwrap();
            assert!(owed_nodes(&store).is_empty());
            let job = store.request_cancel(id, 6).unwrap().unwrap();
            assert_eq!(owed_nodes(&store), ["n1"]);
            assert_eq!((job.state, job.cancel_requested), (JobPhase::Queued, true));
            let Owed::Assign(a) = assign else {
                unreachable!()
            };
            assert_eq!(
                store.owed("n1", 29500).unwrap(),
                vec![Owed::Cancel(a.task_id)]
            );
            store.acknowledged(&Owed::Cancel(a.task_id), 7).unwrap();
            assert!(owed_nodes(&store).is_empty());
            let exit = TaskEvent::Exited {
                exit_code: None,
                signal: Some(15),
                cancelled: true,
            };
            store
                .apply_report("n1", &task(2, a.task_id, id, exit), 7)
                .unwrap();
            assert_eq!(store.job(id).unwrap().unwrap().state, JobPhase::Cancelled);
        }
    }
}
