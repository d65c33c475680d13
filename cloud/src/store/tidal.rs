//! What the tidal scheduler reads from and writes to the store: each planned
//! job's admission, reservation, progress and plan, and the tasks a round's
//! decisions start or stop.
//!
//! Progress is estimated: a running job is credited `Δt / step_s` iterations
//! for the time since its placement's staging ended, at the step time its plan
//! predicted. A job that prints `TIDEMILL_PROGRESS iter=N` lines reports its
//! own count instead ([`report_progress`]): the count replaces the estimate,
//! and the rate measured between reports ([`corrected_rate`]) replaces the
//! predicted one, both for the estimate until the next report and for the
//! planner ([`PlannedJob::measured_ips`]).

use std::collections::HashMap;
use std::sync::Arc;

use super::db;
use super::db::{OptionalExtension, Query, Transaction, params};
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
    /// Iterations done: the job's latest report, plus an estimate for the
    /// time since.
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
    /// Iterations per second its plan predicted on `location`, if planned.
    pub predicted_ips: Option<f64>,
    /// Iterations per second measured from its own reports on `location`
    /// ([`corrected_rate`]), once two reports were far enough apart.
    pub measured_ips: Option<f64>,
    /// Bytes of the latest checkpoint kept for it, as measured when its
    /// edge sent it; `None` before the first.
    pub checkpoint_bytes: Option<u64>,
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
                        j.attained_s, j.location, j.steps_from_ms, j.rate_ips, j.measured_ips,
                        j.checkpoint_bytes,
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
                let open: i64 = r.get(12)?;
                let stopping: i64 = r.get(13)?;
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
                    predicted_ips: r.get(9)?,
                    measured_ips: r.get(10)?,
                    checkpoint_bytes: r.get::<_, Option<i64>>(11)?.map(|b| b as u64),
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// Every node's latest forecast (parsed once per issue: [`super::forecast_cache`]).
    pub fn forecasts(&self) -> Result<HashMap<String, Arc<NodeForecast>>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare_cached("SELECT node_id, issued_ms, forecast FROM forecasts")
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| {
                let node: String = r.get(0)?;
                let f = self.forecasts.get(&node, r.get(1)?, || r.get(2))?;
                let f = f.map_err(|e| db::Error::decode(2, e))?;
                Ok((node, f))
            })
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
                    Action::Reject => Some(turn_away(tx, job, reason, now).map_err(&err)?),
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
                            "UPDATE jobs SET reason = ?2 WHERE id = ?1 AND state = 'queued' AND reason IS DISTINCT FROM ?2",
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

/// Rejects `job` for `reason`. A job that had started (an SLO job under
/// queue admission runs before it is promised, and may then fall behind its
/// deadline) is cancelled on its nodes: left running, its tasks would hold
/// devices for a job that is over, out of every drain's reach. Returns what
/// was done.
fn turn_away(tx: &Transaction<'_>, job: i64, reason: &str, now_ms: i64) -> db::Result<String> {
    let started: bool = tx.query_row(
        "SELECT started_ms IS NOT NULL FROM jobs WHERE id = ?1",
        [job],
        |r| r.get(0),
    )?;
    let open = stop_tasks(tx, job)?;
    let why = if started {
        format!("turned away after it started, its tasks cancelled: {reason}")
    } else {
        format!("rejected at admission: {reason}")
    };
    tx.execute(
        "UPDATE jobs SET state = 'rejected', cancel_requested = ?4, reason = ?2, finished_ms = ?3 WHERE id = ?1",
        params![job, why, now_ms, open > 0],
    )?;
    let what = if open > 0 {
        "rejected; cancelling its tasks"
    } else {
        "rejected"
    };
    Ok(what.to_string())
}

/// A node went offline: the jobs with tasks on it, planned or first-fit,
/// cannot go on, so those tasks are to stop (they are cancelled if the node
/// comes back), the jobs' other ranks too, and each job is queued to resume
/// from its checkpoint, on that node once it is back or elsewhere.
pub(super) fn lose_node(tx: &Transaction<'_>, node_id: &str, now_ms: i64) -> db::Result<()> {
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
fn jobs_on(tx: &Transaction<'_>, node_id: &str) -> db::Result<Vec<i64>> {
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
) -> db::Result<Vec<i64>> {
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
pub(super) fn stop_tasks(tx: &Transaction<'_>, job: i64) -> db::Result<usize> {
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
fn checkpoint(tx: &Transaction<'_>, job: i64, reason: &str) -> db::Result<Option<String>> {
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
) -> db::Result<Option<String>> {
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
                reason = ?6, measured_ips = NULL, rate_base_ms = NULL, rate_base_iters = NULL
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
/// `now_ms` at its placement's measured rate, else its predicted one,
/// counting only time after its staging ended.
pub(super) fn settle_progress(tx: &Transaction<'_>, job: i64, now_ms: i64) -> db::Result<()> {
    tx.execute(
        "UPDATE jobs SET
            done_iters = done_iters + COALESCE(measured_ips, rate_ips, 0)
                * MAX(0, ?2 - MAX(progress_ms, COALESCE(steps_from_ms, progress_ms))) / 1000.0,
            attained_s = attained_s + MAX(0, ?2 - progress_ms) / 1000.0,
            progress_ms = ?2
         WHERE id = ?1 AND progress_ms IS NOT NULL AND ?2 > progress_ms",
        params![job, now_ms],
    )?;
    Ok(())
}

/// Weight of the newest measurement in [`corrected_rate`].
const RATE_WEIGHT: f64 = 0.5;

/// The least time between the two reports a rate is measured over, ms of
/// the edge's clock: shorter spans are dominated by when lines happened to
/// be printed.
const MIN_RATE_SPAN_MS: i64 = 60_000;

/// A job's throughput corrected by one measurement, in iterations per second,
/// as EdgeFlow corrects its λ online (an exponentially weighted average):
///
/// `r' = α · ΔN / Δt + (1 − α) · r`, with α = [`RATE_WEIGHT`],
///
/// where `ΔN` is the iterations between two reports of the job's rank 0 on
/// one placement, `Δt` the seconds between them on its edge's clock (the
/// difference of two readings of one clock, so an offset between that clock
/// and the coordinator's cancels, and a batch of reports delayed by an
/// outage still measures the time they were seen), and `r` the previous
/// measured rate or, before the first, the rate the plan predicted; without
/// either the measurement stands alone.
pub(super) fn corrected_rate(previous: Option<f64>, delta_iters: f64, delta_s: f64) -> f64 {
    let measured = delta_iters / delta_s;
    previous.map_or(measured, |r| {
        RATE_WEIGHT * measured + (1.0 - RATE_WEIGHT) * r
    })
}

/// Stores a task's own count of its job's iterations: the job's progress
/// becomes the highest count reported (a task resumed from a checkpoint
/// reports from there, and the count never goes back), credited up to
/// `now_ms` of the coordinator's clock, and a report of rank 0 corrects the
/// job's rate ([`corrected_rate`]) against the last one on its placement.
/// A task asked to stop measures nothing: its last span holds its
/// checkpoint, and a lost node's backlog may arrive after the job started
/// elsewhere, against that placement's base.
/// A report of a task the coordinator does not know is logged as an event.
pub(super) fn report_progress(
    tx: &Transaction<'_>,
    node_id: &str,
    p: &tidemill_proto::TaskProgress,
    now_ms: i64,
) -> db::Result<()> {
    let job = p.job_id as i64;
    let task: Option<(i64, bool)> = tx
        .query_row(
            "SELECT rank, state != 'done' AND yield_requested = 0 FROM tasks
             WHERE id = ?1 AND job_id = ?2 AND node_id = ?3",
            params![p.task_id as i64, job, node_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((rank, current)) = task else {
        let what = format!("progress of {} iterations", p.iterations);
        return event(tx, now_ms, Some(node_id), Some(job), "unknown-task", &what);
    };
    let iters = p.iterations as f64;
    settle_progress(tx, job, now_ms)?;
    tx.execute(
        "UPDATE jobs SET reported_iters = MAX(COALESCE(reported_iters, 0), ?2),
                done_iters = MAX(COALESCE(reported_iters, 0), ?2),
                steps_from_ms = MIN(COALESCE(steps_from_ms, ?3), ?3)
         WHERE id = ?1 AND state IN ('queued', 'running')",
        params![job, iters, now_ms],
    )?;
    if rank != 0 || !current {
        return Ok(());
    }
    let (base_ms, base_iters, predicted, measured): (
        Option<i64>,
        Option<f64>,
        Option<f64>,
        Option<f64>,
    ) = tx.query_row(
        "SELECT rate_base_ms, rate_base_iters, rate_ips, measured_ips FROM jobs WHERE id = ?1",
        [job],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )?;
    match base_ms.zip(base_iters) {
        Some((t0, n0)) if t0 <= p.t_ms && n0 <= iters => {
            if p.t_ms - t0 < MIN_RATE_SPAN_MS || iters == n0 {
                return Ok(());
            }
            let rate = corrected_rate(
                measured.or(predicted),
                iters - n0,
                (p.t_ms - t0) as f64 / 1000.0,
            );
            tracing::debug!(
                job_id = p.job_id,
                node_id,
                rate,
                "job rate corrected from its reports"
            );
            tx.execute(
                "UPDATE jobs SET measured_ips = ?2, rate_base_ms = ?3, rate_base_iters = ?4 WHERE id = ?1",
                params![job, rate, p.t_ms, iters],
            )?;
        }
        // The first report on this placement, or one from a restarted task.
        _ => {
            tx.execute(
                "UPDATE jobs SET rate_base_ms = ?2, rate_base_iters = ?3 WHERE id = ?1",
                params![job, p.t_ms, iters],
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::store::testkit::{TestDb, on_both_backends};
    use std::collections::HashSet;

    use tidemill_sched::Verdict;

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
    fn the_rate_correction_matches_a_hand_calculation() {
        // Planned at 0.1 it/s; 30 iterations in 600 s measure 0.05 it/s;
        // α = 0.5: 0.5 × 0.05 + 0.5 × 0.1 = 0.075 it/s.
        assert!((corrected_rate(Some(0.1), 30.0, 600.0) - 0.075).abs() < 1e-12);
        // Then 60 in 1200 s (0.05 again): 0.5 × 0.05 + 0.5 × 0.075 = 0.0625.
        assert!((corrected_rate(Some(0.075), 60.0, 1200.0) - 0.0625).abs() < 1e-12);
        assert!((corrected_rate(None, 30.0, 600.0) - 0.05).abs() < 1e-12);
    }

    fn progress(
        seq: u64,
        task_id: u64,
        job_id: u64,
        t_ms: i64,
        iterations: u64,
    ) -> tidemill_proto::Report {
        tidemill_proto::Report {
            seq,
            body: tidemill_proto::ReportBody::Progress(tidemill_proto::TaskProgress {
                task_id,
                job_id,
                t_ms,
                iterations,
            }),
        }
    }

    /// A store on `db` with a job of 1000 iterations started on `e1`,
    /// its plan predicting 0.1 it/s; returns the store, the job and its task.
    fn running_job(db: &crate::store::testkit::TestDb) -> (Store, u64, u64) {
        let mut store = db.open();
        store.register(&hello("e1"), 0).unwrap();
        let job_file = JobFile::from_toml(
            "name = \"j\"\ncommand = [\"true\"]\ndeadline = \"2030-01-01T00:00:00Z\"\n\
             [work]\nmodel = \"m\"\niterations = 1000\nglobal_batch = 32\nmodel_bytes = 1000\n",
            "j",
        )
        .unwrap();
        let job = store.submit(&job_file, 1).unwrap();
        let plan = RoundPlan {
            now_ms: 2,
            decisions: vec![start_on(job, &[("e1", 1)])],
        };
        store.apply_round(&plan, &addrs(&["e1"])).unwrap();
        // The plan predicted 0.1 it/s.
        store
            .conn
            .execute("UPDATE jobs SET rate_ips = 0.1 WHERE id = ?1", [job as i64])
            .unwrap();
        let task: u64 = store
            .conn
            .query_row(
                "SELECT id FROM tasks WHERE job_id = ?1",
                [job as i64],
                |r| r.get::<_, i64>(0),
            )
            .unwrap() as u64;
        let started = crate::store::testkit::task(
            1,
            task,
            job,
            tidemill_proto::TaskEvent::Started { pid: 7 },
        );
        store.apply_report("e1", &started, 5).unwrap();
        (store, job, task)
    }

    on_both_backends! {
        fn reported_progress_replaces_the_estimate_and_corrects_the_rate(db) {
            use crate::job::ProgressSource;
            let (mut store, job, task) = running_job(&db);
            store.advance_progress(100_005).unwrap();
            let shown = store.job(job).unwrap().unwrap();
            assert!(
                (shown.done_iters - 10.0).abs() < 1e-9,
                "estimated: {shown:?}"
            );
            assert_eq!(shown.progress, ProgressSource::Estimated);

            // The job says 5, not the 10 estimated: the first report is the rate's base.
            store
                .apply_report("e1", &progress(2, task, job, 100_000, 5), 100_005)
                .unwrap();
            let shown = store.job(job).unwrap().unwrap();
            assert_eq!(
                (shown.done_iters, shown.progress),
                (5.0, ProgressSource::Reported)
            );
            assert_eq!(shown.measured_ips, None);
            // 30 more in 600 s of the edge's clock: 0.5 × 30/600 + 0.5 × 0.1 = 0.075 it/s.
            store
                .apply_report("e1", &progress(3, task, job, 700_000, 35), 700_005)
                .unwrap();
            let shown = store.job(job).unwrap().unwrap();
            assert_eq!(shown.done_iters, 35.0);
            assert!(
                (shown.measured_ips.unwrap() - 0.075).abs() < 1e-12,
                "{shown:?}"
            );
            // Until the next report the estimate goes on at the measured rate.
            store.advance_progress(800_005).unwrap();
            let shown = store.job(job).unwrap().unwrap();
            assert!((shown.done_iters - 42.5).abs() < 1e-9, "{shown:?}");
            // A task restarted from an older checkpoint does not take the count back.
            store
                .apply_report("e1", &progress(4, task, job, 810_000, 20), 810_005)
                .unwrap();
            assert_eq!(store.job(job).unwrap().unwrap().done_iters, 35.0);
            let planned = store.planned_jobs(810_005).unwrap();
            assert_eq!(planned[0].predicted_ips, Some(0.1));
            assert!((planned[0].measured_ips.unwrap() - 0.075).abs() < 1e-12);
            // A report of a task the coordinator never assigned changes nothing.
            store
                .apply_report("e1", &progress(5, task + 1, job, 900_000, 999), 900_005)
                .unwrap();
            assert_eq!(store.job(job).unwrap().unwrap().done_iters, 35.0);
            // A task asked to stop measures nothing, though its count stands.
            ask_to_stop(&store, job);
            store
                .apply_report("e1", &progress(6, task, job, 1_400_000, 45), 1_400_005)
                .unwrap();
            let shown = store.job(job).unwrap().unwrap();
            assert_eq!(shown.done_iters, 45.0);
            assert!(
                (shown.measured_ips.unwrap() - 0.075).abs() < 1e-12,
                "{shown:?}"
            );
            // A new placement measures afresh.
            store
                .conn
                .execute(
                    "UPDATE tasks SET state = 'done' WHERE job_id = ?1",
                    [job as i64],
                )
                .unwrap();
            store
                .apply_round(
                    &RoundPlan {
                        now_ms: 900_010,
                        decisions: vec![start_on(job, &[("e1", 1)])],
                    },
                    &addrs(&["e1"]),
                )
                .unwrap();
            assert_eq!(store.job(job).unwrap().unwrap().measured_ips, None);
        }
    }

    /// Marks `job`'s tasks as asked to checkpoint and stop, as a round does.
    fn ask_to_stop(store: &Store, job: u64) {
        store
            .conn
            .execute(
                "UPDATE tasks SET yield_requested = 1 WHERE job_id = ?1",
                [job as i64],
            )
            .unwrap();
    }

    /// `job` on the store of [`running_job`] after the plan asked its task
    /// to stop and the task reported `iterations` done, then exited 0.
    fn stopped_after(
        store: &mut Store,
        job: u64,
        task: u64,
        iterations: u64,
    ) -> crate::job::JobRecord {
        ask_to_stop(store, job);
        store
            .apply_report("e1", &progress(2, task, job, 100_000, iterations), 100_005)
            .unwrap();
        let exit = tidemill_proto::TaskEvent::Exited {
            exit_code: Some(0),
            signal: None,
            cancelled: false,
        };
        let ended = crate::store::testkit::task(3, task, job, exit);
        store.apply_report("e1", &ended, 100_010).unwrap();
        store.job(job).unwrap().unwrap()
    }

    #[test]
    fn a_job_that_finished_its_work_as_it_was_asked_to_stop_succeeds_and_is_not_resumed() {
        use crate::job::JobPhase;
        let db = TestDb::sqlite();
        let (mut store, job, task) = running_job(&db);
        let shown = stopped_after(&mut store, job, task, 1000);
        assert_eq!(shown.state, JobPhase::Succeeded, "{:?}", shown.reason);
        assert!(store.planned_jobs(100_020).unwrap().is_empty());
        // Short of its iterations, the same exit is the checkpoint asked for.
        let db = TestDb::sqlite();
        let (mut store, job, task) = running_job(&db);
        let shown = stopped_after(&mut store, job, task, 600);
        assert_eq!(shown.state, JobPhase::Queued, "{:?}", shown.reason);
    }

    on_both_backends! {
        fn an_ended_job_counts_what_it_reported_not_the_estimate_since(db) {
            use crate::job::{JobPhase, ProgressSource};
            let (mut store, job, task) = running_job(&db);
            store
                .apply_report("e1", &progress(2, task, job, 100_000, 60), 100_005)
                .unwrap();
            // The estimate goes on past the last report (0.1 it/s for 100 s).
            store.advance_progress(200_005).unwrap();
            assert!((store.job(job).unwrap().unwrap().done_iters - 70.0).abs() < 1e-9);
            let exit = tidemill_proto::TaskEvent::Exited {
                exit_code: Some(0),
                signal: None,
                cancelled: false,
            };
            let ended = crate::store::testkit::task(3, task, job, exit);
            store.apply_report("e1", &ended, 200_010).unwrap();
            let shown = store.job(job).unwrap().unwrap();
            assert_eq!(
                (shown.state, shown.done_iters, shown.progress),
                (JobPhase::Succeeded, 60.0, ProgressSource::Reported)
            );
        }
    }

    on_both_backends! {
        fn a_job_turned_away_after_it_started_has_its_tasks_cancelled(db) {
            let mut store = db.open();
            store.register(&hello("e1"), 0).unwrap();
            let never_ran = store.submit(&spec(), 1).unwrap();
            let ran = store.submit(&spec(), 1).unwrap();
            let started = RoundPlan {
                now_ms: 2,
                decisions: vec![start_on(ran, &[("e1", 1)])],
            };
            store.apply_round(&started, &addrs(&["e1"])).unwrap();
            let owed = store.owed("e1", 29500).unwrap();
            let [crate::store::Owed::Assign(a)] = owed.as_slice() else {
                panic!("one assignment: {owed:?}")
            };
            store.acknowledged(&owed[0], 0).unwrap();
            let task = a.task_id;
            let running = crate::store::testkit::task(
                1,
                task,
                ran,
                tidemill_proto::TaskEvent::Started { pid: 7 },
            );
            store.apply_report("e1", &running, 5).unwrap();

            let reject = |job| {
                let mut d = start_on(job, &[]);
                d.verdict = Verdict::Rejected;
                d.action = Action::Reject;
                d.explanation.reason = "too slow".into();
                d
            };
            let done = store
                .apply_round(
                    &RoundPlan {
                        now_ms: 10,
                        decisions: vec![reject(never_ran), reject(ran)],
                    },
                    &addrs(&["e1"]),
                )
                .unwrap();
            assert_eq!(
                done,
                vec![
                    (never_ran, "rejected".to_string()),
                    (ran, "rejected; cancelling its tasks".to_string())
                ]
            );
            assert_eq!(reason(&store, never_ran), "rejected at admission: too slow");
            assert_eq!(
                reason(&store, ran),
                "turned away after it started, its tasks cancelled: too slow"
            );
            assert_eq!(
                store.owed("e1", 29500).unwrap(),
                vec![crate::store::Owed::Cancel(task)]
            );
            // The task's exit leaves the job rejected.
            let exited = crate::store::testkit::task(
                2,
                task,
                ran,
                tidemill_proto::TaskEvent::Exited {
                    exit_code: Some(0),
                    signal: None,
                    cancelled: true,
                },
            );
            store.apply_report("e1", &exited, 20).unwrap();
            let shown = store.job(ran).unwrap().unwrap();
            assert_eq!(shown.state, crate::job::JobPhase::Rejected, "{shown:?}");
            assert!(store.open_tasks(ran).is_empty());
        }
    }

    on_both_backends! {
        fn a_start_on_a_node_that_went_offline_since_the_snapshot_is_refused(db) {
            let mut store = db.open();
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
    }

    on_both_backends! {
        fn two_starts_wanting_the_last_device_start_only_one(db) {
            let mut store = db.open();
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
    }

    on_both_backends! {
        fn a_multi_node_start_that_fits_creates_one_task_per_node(db) {
            let mut store = db.open();
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
    }

    on_both_backends! {
        fn a_move_to_an_unknown_node_leaves_the_job_running(db) {
            let mut store = db.open();
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
}
