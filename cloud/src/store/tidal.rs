//! What the tidal scheduler reads from and writes to the store: each planned
//! job's admission, reservation, progress and plan, and the tasks a round's
//! decisions start or stop.
//!
//! Progress is estimated: a running job is credited `Δt / step_s` iterations
//! for the time since its placement's staging ended, at the step time its plan
//! predicted. Jobs do not report their own iterations.

use std::collections::HashMap;

use rusqlite::{Transaction, params};
use tidemill_proto::NodeForecast;
use tidemill_sched::{Action, Admission, Assignment, RoundPlan, Segment};

use super::capacity::{self, Capacity};
use super::{Store, StoreError, event, json_column};
use crate::job::{JobFile, PlanView};
use crate::lifecycle;

/// A job the tidal scheduler plans: one with a `[work]` section, not over.
#[derive(Debug, Clone)]
pub struct PlannedJob {
    /// The job id.
    pub id: u64,
    /// The job as submitted.
    pub spec: JobFile,
    /// When it was submitted, ms of the coordinator's clock.
    pub submitted_ms: i64,
    /// The verdict so far; `Pending` before the first round.
    pub admission: Admission,
    /// The segments the last round planned.
    pub reservation: Vec<Segment>,
    /// Iterations done (estimated).
    pub done_iters: f64,
    /// Seconds run.
    pub attained_s: f64,
    /// Its current or last placement.
    pub location: Vec<Assignment>,
    /// Running on `location` now: it has tasks, none being stopped.
    pub running: bool,
    /// Seconds of staging left before its steps begin.
    pub startup_left_s: f64,
    /// It has tasks still open (running, or stopping).
    pub busy: bool,
}

/// Where the nodes that may become rank 0 can be reached, by node id.
pub type Addresses = HashMap<String, String>;

impl Store {
    /// Credits every running planned job with the iterations it did up to `now_ms`.
    pub fn advance_progress(&mut self, now_ms: i64) -> Result<(), StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let ids: Vec<i64> = tx
                .prepare("SELECT id FROM jobs WHERE state = 'running' AND progress_ms IS NOT NULL")
                .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                .map_err(&err)?;
            for id in ids {
                settle_progress(tx, id, now_ms).map_err(&err)?;
            }
            Ok(())
        })
    }

    /// The jobs the tidal scheduler plans, in id order.
    pub fn planned_jobs(&self, now_ms: i64) -> Result<Vec<PlannedJob>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare(
                "SELECT j.id, j.spec, j.submitted_ms, j.admission, j.reservation, j.done_iters,
                        j.attained_s, j.location, j.steps_from_ms,
                        (SELECT COUNT(*) FROM tasks t JOIN nodes n ON n.id = t.node_id
                         WHERE t.job_id = j.id AND t.state != 'done' AND n.online = 1),
                        (SELECT COUNT(*) FROM tasks t JOIN nodes n ON n.id = t.node_id
                         WHERE t.job_id = j.id AND t.state != 'done' AND n.online = 1
                           AND t.yield_requested = 1)
                 FROM jobs j
                 WHERE j.state IN ('queued', 'running') AND j.cancel_requested = 0
                   AND json_extract(j.spec, '$.work') IS NOT NULL
                 ORDER BY j.id",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| {
                let open: i64 = r.get(9)?;
                let stopping: i64 = r.get(10)?;
                let steps_from: Option<i64> = r.get(8)?;
                let running = open > 0 && stopping == 0;
                Ok(PlannedJob {
                    id: r.get::<_, i64>(0)? as u64,
                    spec: json_column(r, 1)?,
                    submitted_ms: r.get(2)?,
                    admission: json_column::<Option<Admission>>(r, 3)?
                        .unwrap_or(Admission::Pending),
                    reservation: json_column(r, 4)?,
                    done_iters: r.get(5)?,
                    attained_s: r.get(6)?,
                    location: json_column(r, 7)?,
                    running,
                    startup_left_s: match (running, steps_from) {
                        (true, Some(t)) => ((t - now_ms) as f64 / 1000.0).max(0.0),
                        _ => 0.0,
                    },
                    busy: open > 0,
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// Every node's latest forecast.
    pub fn forecasts(&self) -> Result<HashMap<String, NodeForecast>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare("SELECT node_id, forecast FROM forecasts")
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, json_column(r, 1)?)))
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// Commits a tidal round: stores each job's verdict, reservation and plan,
    /// and carries out its action now. A start needs the job to have no open
    /// task, every node it names known, online and with the devices it wants
    /// free (counting tasks this round started before it), and rank 0's node
    /// reachable (`addrs`); a move or pause asks the job's tasks to checkpoint
    /// and stop, after which the job is queued for the plan to resume it. A
    /// move needs every node it goes to known and online; their devices are
    /// checked when it restarts there, because the tasks it would replace
    /// (its own, or a job's it swaps places with) free them only once they
    /// stop. A start or move that no
    /// longer fits is not carried out, and the job's reason names the node.
    /// Returns what was done, per job, for the log.
    pub fn apply_round(
        &mut self,
        plan: &RoundPlan,
        addrs: &Addresses,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        let err = self.sql_err();
        let now = plan.now_ms;
        self.write(|tx| {
            let mut done = Vec::new();
            for d in &plan.decisions {
                let job = d.job_id as i64;
                let (open, live): (i64, bool) = tx
                    .query_row(
                        "SELECT (SELECT COUNT(*) FROM tasks t JOIN nodes n ON n.id = t.node_id
                                 WHERE t.job_id = ?1 AND t.state != 'done' AND n.online = 1),
                                state IN ('queued', 'running') AND cancel_requested = 0
                         FROM jobs WHERE id = ?1",
                        [job],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .map_err(&err)?;
                if !live {
                    continue;
                }
                let view = serde_json::to_string(&PlanView::of(d, now)).expect("plans serialise");
                let admission = d
                    .verdict
                    .admission()
                    .map(|a| serde_json::to_string(&a).expect("admissions serialise"));
                let reservation = serde_json::to_string(&d.segments).expect("segments serialise");
                tx.execute(
                    "UPDATE jobs SET admission = ?2, reservation = ?3, plan = ?4 WHERE id = ?1",
                    params![job, admission, reservation, view],
                )
                .map_err(&err)?;
                let reason = &d.explanation.reason;
                let what = match &d.action {
                    Action::Reject => {
                        tx.execute(
                            "UPDATE jobs SET state = 'rejected', reason = ?2, finished_ms = ?3 WHERE id = ?1",
                            params![job, format!("rejected at admission: {reason}"), now],
                        )
                        .map_err(&err)?;
                        Some("rejected".to_string())
                    }
                    Action::Start { on } if open == 0 => {
                        let wants: Vec<(&str, u32)> = on.iter().map(|a| (a.node_id.as_str(), a.workers)).collect();
                        match capacity::check(tx, job, &wants, Capacity::Devices).map_err(&err)? {
                            Ok(()) => start(tx, d.job_id, on, d.ahead.as_ref().or(d.segments.first()), addrs, now, reason).map_err(&err)?,
                            Err(m) => {
                                capacity::refuse(tx, job, now, &m, &format!("not started: {m}")).map_err(&err)?;
                                None
                            }
                        }
                    }
                    Action::Migrate { to, .. } if open > 0 => {
                        let wants: Vec<(&str, u32)> = to.iter().map(|a| (a.node_id.as_str(), a.workers)).collect();
                        match capacity::check(tx, job, &wants, Capacity::Online).map_err(&err)? {
                            Ok(()) => checkpoint(tx, job, reason).map_err(&err)?,
                            Err(m) => {
                                let why = format!("not moved: {m}; it keeps running where it is");
                                capacity::refuse(tx, job, now, &m, &why).map_err(&err)?;
                                None
                            }
                        }
                    }
                    Action::Pause if open > 0 => checkpoint(tx, job, reason).map_err(&err)?,
                    _ => {
                        tx.execute(
                            "UPDATE jobs SET reason = ?2 WHERE id = ?1 AND state = 'queued' AND reason IS NOT ?2",
                            params![job, reason],
                        )
                        .map_err(&err)?;
                        None
                    }
                };
                if let Some(what) = what {
                    event(tx, now, None, Some(job), "plan", &format!("{what}: {reason}")).map_err(&err)?;
                    done.push((d.job_id, what));
                }
            }
            Ok(done)
        })
    }
}

/// A node went offline: the jobs with tasks on it, planned or first-fit,
/// cannot go on, so those tasks are to stop (they are cancelled if the node
/// comes back), the jobs' other ranks too, and each job is queued to resume
/// from its checkpoint, on that node once it is back or elsewhere.
pub(super) fn lose_node(tx: &Transaction<'_>, node_id: &str, now_ms: i64) -> rusqlite::Result<()> {
    let jobs = jobs_on(tx, node_id)?;
    let t = lifecycle::on_node_lost(node_id);
    for job in jobs {
        if t.settle_progress {
            settle_progress(tx, job, now_ms)?;
        }
        if t.stop_other_ranks {
            stop_tasks(tx, job)?;
        }
        tx.execute(
            "UPDATE jobs SET state = 'queued', progress_ms = NULL, reason = ?2 WHERE id = ?1",
            params![job, t.reason],
        )?;
        event(tx, now_ms, Some(node_id), Some(job), "plan", &t.reason)?;
    }
    Ok(())
}

/// The live jobs with an open task on `node_id`.
fn jobs_on(tx: &Transaction<'_>, node_id: &str) -> rusqlite::Result<Vec<i64>> {
    tx.prepare(
        "SELECT DISTINCT t.job_id FROM tasks t JOIN jobs j ON j.id = t.job_id
         WHERE t.node_id = ?1 AND t.state != 'done' AND j.state IN ('queued', 'running')",
    )?
    .query_map([node_id], |r| r.get(0))?
    .collect()
}

/// Asks every job with a task on `node_id` to checkpoint and stop, all its
/// ranks, so that it resumes elsewhere (`why` says why it leaves); returns
/// those jobs.
pub(super) fn move_off(
    tx: &Transaction<'_>,
    node_id: &str,
    now_ms: i64,
    why: &str,
) -> rusqlite::Result<Vec<i64>> {
    let jobs = jobs_on(tx, node_id)?;
    for &job in &jobs {
        if let Some(what) = checkpoint(tx, job, why)? {
            event(
                tx,
                now_ms,
                Some(node_id),
                Some(job),
                "plan",
                &format!("{what}: {why}"),
            )?;
        }
    }
    Ok(jobs)
}

/// Asks every open task of `job` to checkpoint and stop; tasks its node has
/// not received are withdrawn at once. Returns how many were newly asked.
pub(super) fn stop_tasks(tx: &Transaction<'_>, job: i64) -> rusqlite::Result<usize> {
    tx.execute(
        "UPDATE tasks SET state = 'done' WHERE job_id = ?1 AND state = 'assigned' AND dispatched = 0",
        [job],
    )?;
    tx.execute(
        "UPDATE tasks SET yield_requested = 1 WHERE job_id = ?1 AND state != 'done' AND yield_requested = 0",
        [job],
    )
}

/// Asks `job`'s tasks to checkpoint and stop so that it can follow the plan
/// (`reason`) elsewhere or later; returns what was done, or `None` when every
/// task was already asked.
fn checkpoint(tx: &Transaction<'_>, job: i64, reason: &str) -> rusqlite::Result<Option<String>> {
    let n = stop_tasks(tx, job)?;
    tx.execute(
        "UPDATE jobs SET reason = ?2 WHERE id = ?1",
        params![job, format!("checkpointing to follow the plan: {reason}")],
    )?;
    Ok((n > 0).then(|| "asked to checkpoint and stop".to_string()))
}

/// Creates one task per node of `on`, ranked in order, with rank 0's address as
/// the rendezvous; returns what was done, or `None` when rank 0 is unreachable.
fn start(
    tx: &Transaction<'_>,
    job_id: u64,
    on: &[Assignment],
    first: Option<&Segment>,
    addrs: &Addresses,
    now_ms: i64,
    reason: &str,
) -> rusqlite::Result<Option<String>> {
    let Some(master) = on.first().and_then(|a| addrs.get(&a.node_id)) else {
        return Ok(None);
    };
    let job = job_id as i64;
    for (rank, a) in on.iter().enumerate() {
        tx.execute(
            "INSERT INTO tasks (job_id, node_id, state, created_ms, rank, world, workers, master_addr)
             VALUES (?1, ?2, 'assigned', ?3, ?4, ?5, ?6, ?7)",
            params![job, a.node_id, now_ms, rank as i64, on.len() as i64, a.workers, master],
        )?;
    }
    let nodes: Vec<&str> = on.iter().map(|a| a.node_id.as_str()).collect();
    let (rate, steps_from) = match first {
        Some(s) if s.step.total_s > 0.0 => (
            Some(1.0 / s.step.total_s),
            Some(now_ms + (s.startup_s * 1000.0) as i64),
        ),
        _ => (None, None),
    };
    tx.execute(
        "UPDATE jobs SET node = ?2, location = ?3, rate_ips = ?4, steps_from_ms = ?5, progress_ms = NULL,
                reason = ?6
         WHERE id = ?1",
        params![
            job,
            nodes.join(","),
            serde_json::to_string(on).expect("assignments serialise"),
            rate,
            steps_from,
            format!("placed on {}; waiting for it to start. {reason}", nodes.join(", "))
        ],
    )?;
    Ok(Some(format!("started on {}", nodes.join(", "))))
}

/// Credits job `job` with the iterations it did from its last credit up to
/// `now_ms` at its placement's predicted rate, counting only time after its
/// staging ended.
pub(super) fn settle_progress(tx: &Transaction<'_>, job: i64, now_ms: i64) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE jobs SET
            done_iters = done_iters + COALESCE(rate_ips, 0)
                * MAX(0, ?2 - MAX(progress_ms, COALESCE(steps_from_ms, progress_ms))) / 1000.0,
            attained_s = attained_s + MAX(0, ?2 - progress_ms) / 1000.0,
            progress_ms = ?2
         WHERE id = ?1 AND progress_ms IS NOT NULL AND ?2 > progress_ms",
        params![job, now_ms],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::store::testkit::{hello, hello_with_gpus, spec, start_on};

    fn addrs(nodes: &[&str]) -> Addresses {
        nodes
            .iter()
            .map(|n| (n.to_string(), format!("{n}.lan")))
            .collect()
    }

    fn reason(store: &Store, job: u64) -> String {
        store.job(job).unwrap().unwrap().reason.unwrap()
    }

    #[test]
    fn a_start_on_a_node_that_went_offline_since_the_snapshot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.register(&hello("e1"), 0).unwrap();
        store.register(&hello("e3"), 0).unwrap();
        let job = store.submit(&spec(), 1).unwrap();
        let plan = RoundPlan {
            now_ms: 20,
            decisions: vec![start_on(job, &[("e1", 1), ("e3", 1)])],
        };
        // e3 falls silent after the plan was made, before it is applied.
        let gone = store
            .expire(&HashSet::from(["e1".to_string()]), 10, None, 20)
            .unwrap();
        assert_eq!(gone, vec!["e3".to_string()]);

        let done = store.apply_round(&plan, &addrs(&["e1", "e3"])).unwrap();
        assert!(done.is_empty(), "{done:?}");
        assert!(
            store.open_tasks(job).is_empty(),
            "no rank starts, not even on e1"
        );
        assert_eq!(
            reason(&store, job),
            "not started: node e3 went offline before the plan was applied"
        );
        assert_eq!(
            store.job(job).unwrap().unwrap().state,
            crate::job::JobPhase::Queued
        );
    }

    #[test]
    fn two_starts_wanting_the_last_device_start_only_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.register(&hello_with_gpus("e1", 2), 0).unwrap();
        let first = store.submit(&spec(), 1).unwrap();
        let second = store.submit(&spec(), 1).unwrap();
        let third = store.submit(&spec(), 1).unwrap();
        let a = addrs(&["e1"]);
        let earlier = RoundPlan {
            now_ms: 2,
            decisions: vec![start_on(first, &[("e1", 1)])],
        };
        store.apply_round(&earlier, &a).unwrap();
        // Planned on a snapshot from before `first` took one of e1's two devices.
        let plan = RoundPlan {
            now_ms: 3,
            decisions: vec![
                start_on(second, &[("e1", 1)]),
                start_on(third, &[("e1", 1)]),
            ],
        };

        let done = store.apply_round(&plan, &a).unwrap();
        assert_eq!(done, vec![(second, "started on e1".to_string())]);
        assert_eq!(store.open_tasks(second), vec![("e1".to_string(), 1)]);
        assert!(store.open_tasks(third).is_empty());
        assert_eq!(
            reason(&store, third),
            "not started: node e1 has 0 free devices, the plan wanted 1"
        );
    }

    #[test]
    fn a_multi_node_start_that_fits_creates_one_task_per_node() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.register(&hello_with_gpus("e1", 2), 0).unwrap();
        store.register(&hello("e2"), 0).unwrap();
        let job = store.submit(&spec(), 1).unwrap();
        let plan = RoundPlan {
            now_ms: 2,
            decisions: vec![start_on(job, &[("e1", 2), ("e2", 1)])],
        };

        let done = store.apply_round(&plan, &addrs(&["e1", "e2"])).unwrap();
        assert_eq!(done, vec![(job, "started on e1, e2".to_string())]);
        assert_eq!(
            store.open_tasks(job),
            vec![("e1".to_string(), 2), ("e2".to_string(), 1)]
        );
    }

    #[test]
    fn a_move_to_an_unknown_node_leaves_the_job_running() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        store.register(&hello("e1"), 0).unwrap();
        let job = store.submit(&spec(), 1).unwrap();
        let a = addrs(&["e1"]);
        let started = RoundPlan {
            now_ms: 2,
            decisions: vec![start_on(job, &[("e1", 1)])],
        };
        store.apply_round(&started, &a).unwrap();
        let mut moved = start_on(job, &[]);
        moved.action = Action::Migrate {
            from: vec![Assignment {
                node_id: "e1".into(),
                workers: 1,
            }],
            to: vec![Assignment {
                node_id: "e9".into(),
                workers: 1,
            }],
        };
        let plan = RoundPlan {
            now_ms: 3,
            decisions: vec![moved],
        };

        assert!(store.apply_round(&plan, &a).unwrap().is_empty());
        assert_eq!(store.open_tasks(job), vec![("e1".to_string(), 1)]);
        assert_eq!(
            reason(&store, job),
            "not moved: node e9 is not known to the coordinator; it keeps running where it is"
        );
    }
}
