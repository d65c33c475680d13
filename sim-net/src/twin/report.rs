//! The twin's report: the live jobs, as the coordinator's API gives them,
//! summarised with the same function as `simulate`'s rows, the live run's
//! own costs, and the jobs whose outcome differs from the simulator's.

use serde::Serialize;
use tidemill_cloud::job::{JobPhase, JobRecord};
use tidemill_sched::Verdict;

use super::lag::LivePath;
use super::tasks::History;
use crate::simulate::jobs::TraceJob;
use crate::simulate::metrics::{self, Accumulators, EdgeTotals, PolicyMetrics};
use crate::simulate::policies::{FirstStart, FirstStop, JobRun, JobStatus};

/// One live row: `simulate`'s fields, then what only a live run has.
#[derive(Debug, Clone, Serialize)]
pub struct LiveRow {
    /// The same fields as a row of `simulate --json`'s `policies`. The job
    /// outcomes are live (DSR, met, guaranteed, rejected, unfinished,
    /// best-effort times); traffic by tier and evictions, with what they
    /// lost, are the emulated tasks' own, priced by the same link model as
    /// the simulator's; device-hours and rounds are not measured live yet
    /// and read 0.
    #[serde(flatten)]
    pub metrics: PolicyMetrics,
    /// CPU seconds the coordinator used over the run.
    pub coordinator_cpu_s: f64,
    /// The coordinator's resident memory at the end, MiB.
    pub coordinator_rss_mib: f64,
    /// Reports the emulated edges journaled, per job.
    pub reports_per_job: f64,
    /// The most tide seconds a job was sent after its trace time (its
    /// deadline moved by as much, so it keeps its trace window).
    pub submit_late_max_s: f64,
    /// Wall seconds the live run took.
    pub wall_s: f64,
    /// Wall seconds the live run with no edge box took (`None` where it did
    /// not run: `--no-edge-gain`, or a policy that never uses the edge).
    pub no_edge_wall_s: Option<f64>,
    /// How well the live path kept up with the clock.
    pub live_path: LivePath,
}

/// A job met in one run and missed in the other.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DifferingJob {
    /// Its row in the trace (the simulator's job id).
    pub job: usize,
    /// The trace's job id.
    pub name: String,
    /// Whether it met its deadline live.
    pub live_met: bool,
    /// Whether it met it in the simulator.
    pub simulated_met: bool,
    /// Its state at the coordinator at the end, and why (`None` where the
    /// API refused the job).
    pub live_state: Option<String>,
    /// The coordinator's reason for that state.
    pub live_reason: Option<String>,
    /// The first milestone where the two histories diverge: turned away in
    /// one only, guaranteed in one only or a round apart, first started in
    /// one only, at other times or on other nodes, first stopped in one
    /// only, at other times or evicted in one only, finished in one only or
    /// at other times ([`divergence`]).
    pub divergence: Option<String>,
}

/// What `twin --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct TwinReport {
    /// One row per policy run live.
    pub live: Vec<LiveRow>,
    /// The simulator's rows on the same slice and seed (`--compare`).
    pub simulated: Vec<PolicyMetrics>,
    /// Jobs whose outcome differs (`--compare`).
    pub differing_jobs: Vec<DifferingJob>,
}

/// The trace's job `j` as the engine would have left it, from the
/// coordinator's record of it, on the trace's clock (`offset_ms` is tide
/// minus trace time for this job, its late submission included). A job that succeeded is done at its end; a rejected
/// one is rejected; anything else (failed, queued, running) is unfinished.
/// Its guarantee time is that of its latest plan, if that plan guaranteed it;
/// its first start, first stop (tide ms), migrations and preemptions are
/// `history`'s, as the emulated edges saw them; a job they never saw run
/// takes its first start from the record, on [`first_node`].
pub fn job_run(
    j: &TraceJob,
    record: Option<&JobRecord>,
    offset_ms: i64,
    history: History,
) -> JobRun {
    let mut run = JobRun::new(j.spec.clone(), j.requested_gpus);
    run.first_stop = history.first_stop.map(|f| FirstStop {
        at_ms: f.at_ms - offset_ms,
        ..f
    });
    run.first_start = history.first_start.map(|f| FirstStart {
        at_ms: f.at_ms - offset_ms,
        ..f
    });
    run.migrations = history.migrations;
    run.preemptions = history.preemptions;
    let Some(r) = record else {
        return run;
    };
    match r.state {
        JobPhase::Succeeded => {
            run.status = JobStatus::Done;
            run.done_iters = j.spec.iterations;
            run.finish_ms = r.finished_at.map(|t| t.timestamp_millis() - offset_ms);
        }
        JobPhase::Rejected => run.status = JobStatus::Rejected,
        _ => run.done_iters = r.done_iters,
    }
    if let Some(Verdict::Guaranteed { since_ms }) = r.plan.as_ref().map(|p| p.verdict) {
        run.guaranteed_ms = Some(since_ms - offset_ms);
    }
    if run.first_start.is_none() {
        run.first_start = r.started_at.map(|t| FirstStart {
            at_ms: t.timestamp_millis() - offset_ms,
            nodes: first_node(r).into_iter().collect(),
        });
    }
    run
}

/// The node a live job first ran on: the node it runs or ran on, unless it
/// started again since, in which case the node its first checkpoint left
/// (a yield sends it to the coordinator or the shared store first).
pub fn first_node(r: &JobRecord) -> Option<String> {
    if r.last_started_at.is_none_or(|t| Some(t) == r.started_at) {
        return r.node.clone();
    }
    let peers = [
        tidemill_proto::CLOUD_PEER,
        tidemill_proto::SHARED_STORE_PEER,
    ];
    r.checkpoint_transfers
        .iter()
        .filter(|t| !peers.contains(&t.from.as_str()))
        .min_by_key(|t| t.t_ms)
        .map(|t| t.from.clone())
        .or_else(|| r.node.clone())
}

/// `policy`'s live row from its jobs, what its emulated tasks held, moved
/// and lost (`ledger`: device time, traffic by tier, evictions), and the
/// edge's idle and box time over the window (`edge`, as `simulate` has it).
pub fn live_row(
    policy: &str,
    runs: &[JobRun],
    ledger: &Accumulators,
    edge: EdgeTotals,
    elapsed_s: f64,
) -> PolicyMetrics {
    metrics::summarise(policy, runs, ledger, edge, None, elapsed_s)
}

/// Whether `run` met its deadline, as `simulate` counts it: an SLO job
/// finished by its deadline, a best-effort job finished at all.
pub fn met(run: &JobRun) -> bool {
    match run.finish_ms {
        Some(f) => !run.slo() || f <= run.spec.deadline_ms,
        None => false,
    }
}

/// The jobs met in one of `live` and `simulated` and missed in the other.
/// `records` are the coordinator's, by trace row.
pub fn differing(
    trace: &[TraceJob],
    records: &[Option<JobRecord>],
    live: &[JobRun],
    simulated: &[JobRun],
) -> Vec<DifferingJob> {
    trace
        .iter()
        .zip(live.iter().zip(simulated))
        .enumerate()
        .filter(|(_, (_, (l, s)))| met(l) != met(s))
        .map(|(k, (j, (l, s)))| {
            let record = records.get(k).and_then(Option::as_ref);
            DifferingJob {
                job: k,
                name: j.name.clone(),
                live_met: met(l),
                simulated_met: met(s),
                live_state: record.map(|r| r.state.as_str().to_string()),
                live_reason: record.and_then(|r| r.reason.clone()),
                divergence: divergence(l, s),
            }
        })
        .collect()
}

/// Milestone times closer than this are the same (one engine slot).
const SAME_MS: i64 = 60_000;

/// Where the live and simulated runs of one job first part, milestone by
/// milestone in the order a job meets them: admission, the promise of its
/// deadline, its first start (when, and on which nodes: the same where the
/// two share one, since a live job names the node of its rank 0), its first
/// stop while running (when, and whether an eviction), its end.
/// Times are hours after its submission, on the trace's clock. `None` when
/// no milestone differs.
pub fn divergence(live: &JobRun, sim: &JobRun) -> Option<String> {
    let h = |t: i64| (t - live.spec.submitted_ms) as f64 / 3.6e6;
    let rejected = |r: &JobRun| r.status == JobStatus::Rejected;
    if rejected(live) != rejected(sim) {
        let (turned, took) = if rejected(live) {
            ("live", "simulated")
        } else {
            ("simulated", "live")
        };
        return Some(format!("admission: turned away {turned}, taken {took}"));
    }
    let at = |t: &i64| format!("+{:.2} h", h(*t));
    let apart = |l: &i64, s: &i64| (l - s).abs() >= SAME_MS;
    if let Some(d) = milestone(
        "guarantee",
        &live.guaranteed_ms,
        &sim.guaranteed_ms,
        apart,
        at,
    ) {
        return Some(d);
    }
    let elsewhere = |l: &FirstStart, s: &FirstStart| {
        apart(&l.at_ms, &s.at_ms) || !l.nodes.iter().any(|n| s.nodes.contains(n))
    };
    let on = |f: &FirstStart| format!("{} on {}", at(&f.at_ms), f.nodes.join("+"));
    if let Some(d) = milestone(
        "first start",
        &live.first_start,
        &sim.first_start,
        elsewhere,
        on,
    ) {
        return Some(d);
    }
    let stopped =
        |l: &FirstStop, s: &FirstStop| apart(&l.at_ms, &s.at_ms) || l.evicted != s.evicted;
    let how = |f: &FirstStop| {
        let what = if f.evicted { "evicted" } else { "stopped" };
        format!("{} ({what})", at(&f.at_ms))
    };
    if let Some(d) = milestone(
        "first stop",
        &live.first_stop,
        &sim.first_stop,
        stopped,
        how,
    ) {
        return Some(d);
    }
    let end = |r: &JobRun| {
        r.finish_ms.map_or("not finished".to_string(), |t| {
            format!("finished at +{:.2} h", h(t))
        })
    };
    match (live.finish_ms, sim.finish_ms) {
        (Some(l), Some(s)) if (l - s).abs() < SAME_MS => None,
        (None, None) => None,
        _ => Some(format!(
            "end: {} live, {} simulated; deadline +{:.2} h",
            end(live),
            end(sim),
            h(live.spec.deadline_ms)
        )),
    }
}

/// A row's `edge_gain` as the table shows it: signed, or "not run" where
/// it was not measured (never 0 for that).
fn edge_gain(m: &PolicyMetrics) -> String {
    m.edge_gain
        .map_or_else(|| "not run".to_string(), |g| format!("{g:+.3}"))
}

impl TwinReport {
    /// The table `twin` prints without `--json`.
    pub fn write_table(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{:<10} {:<14} {:>5} {:>6} {:>9} {:>9} {:>10} {:>11} {:>8} {:>8}",
            "run",
            "policy",
            "jobs",
            "DSR",
            "edge_gain",
            "SLO met",
            "guaranteed",
            "guar.missed",
            "cpu_s",
            "rss_MiB"
        )?;
        let row = |out: &mut dyn std::io::Write,
                   run: &str,
                   m: &PolicyMetrics,
                   cost: Option<(f64, f64)>| {
            let (cpu, rss) = cost.map_or(("-".to_string(), "-".to_string()), |(c, r)| {
                (format!("{c:.1}"), format!("{r:.0}"))
            });
            writeln!(
                out,
                "{:<10} {:<14} {:>5} {:>6.3} {:>9} {:>9} {:>10} {:>11} {:>8} {:>8}",
                run,
                m.policy,
                m.jobs,
                m.deadline_satisfaction_ratio,
                edge_gain(m),
                format!("{}/{}", m.deadlines_met, m.slo_jobs),
                m.guaranteed_jobs,
                m.guaranteed_missed,
                cpu,
                rss
            )
        };
        for l in &self.live {
            row(
                out,
                "live",
                &l.metrics,
                Some((l.coordinator_cpu_s, l.coordinator_rss_mib)),
            )?;
        }
        for s in &self.simulated {
            row(out, "simulated", s, None)?;
        }
        let live = self.live.iter().map(|l| ("live", &l.metrics));
        for (run, m) in live.chain(self.simulated.iter().map(|s| ("simulated", s))) {
            let t = &m.traffic_gb;
            writeln!(
                out,
                "{run} {}: traffic {:.1} GB on site LANs, {:.1} GB between sites, {:.1} GB cloud-edge, {:.1} GB cloud-cloud; {} evictions losing {:.1} device-hours",
                m.policy,
                t.site_lan,
                t.between_sites,
                t.cloud_edge,
                t.cloud_cloud,
                m.evictions,
                m.lost_device_hours
            )?;
            writeln!(
                out,
                "{run} {}: {:.1} cloud GPU-hours; edge {:.1} device-hours harvested of {:.1} idle ({:.1} %), start-up {:.1} % of edge time; interference {:.2} box-hours ({:.3} %); {:.2} migrations and {:.2} preemptions per job",
                m.policy,
                m.cloud_gpu_hours,
                m.edge_gpu_hours_harvested,
                m.edge_gpu_hours_idle,
                100.0 * m.harvested_idle_share,
                100.0 * m.startup_share,
                m.interference_node_hours,
                100.0 * m.interference_share,
                m.migrations_per_job,
                m.preemptions_per_job
            )?;
        }
        if self.live.iter().any(|l| l.metrics.edge_gain.is_none()) {
            writeln!(
                out,
                "edge_gain not measured live (--no-edge-gain): run without it for the second live run, with no edge boxes"
            )?;
        }
        for l in &self.live {
            let p = &l.live_path;
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
            let w = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v}"));
            writeln!(
                out,
                "live path: {} of {} rounds due ran (p50 {} s, p99 {} s of wall); report lag p50 {} s, p99 {} s; report to decision p50 {} s, p99 {} s; assignment lag p50 {} s, p99 {} s (tide); {}",
                p.rounds,
                p.rounds_due,
                w(p.round_p50_wall_s),
                w(p.round_p99_wall_s),
                f(p.report_lag_p50_s),
                f(p.report_lag_p99_s),
                f(p.report_to_decision_p50_s),
                f(p.report_to_decision_p99_s),
                f(p.assign_lag_p50_s),
                f(p.assign_lag_p99_s),
                if p.kept_up {
                    "kept up"
                } else {
                    "DID NOT KEEP UP with the clock: lower --speed"
                }
            )?;
        }
        for d in &self.differing_jobs {
            writeln!(
                out,
                "differs: job {} ({}) live {} simulated {}; first parts at {}; live {} ({})",
                d.job,
                d.name,
                if d.live_met { "met" } else { "missed" },
                if d.simulated_met { "met" } else { "missed" },
                d.divergence.as_deref().unwrap_or("no milestone"),
                d.live_state.as_deref().unwrap_or("refused"),
                d.live_reason.as_deref().unwrap_or("-"),
            )?;
        }
        Ok(())
    }
}

/// A milestone of [`divergence`], if the two runs part there: reached in
/// one only, or reached in both where `differs` says they differ.
fn milestone<T>(
    name: &str,
    live: &Option<T>,
    sim: &Option<T>,
    differs: impl Fn(&T, &T) -> bool,
    show: impl Fn(&T) -> String,
) -> Option<String> {
    match (live, sim) {
        (Some(l), Some(s)) if differs(l, s) => Some(format!(
            "{name}: at {} live, {} simulated",
            show(l),
            show(s)
        )),
        (Some(x), None) => Some(format!("{name}: only live, at {}", show(x))),
        (None, Some(x)) => Some(format!("{name}: only simulated, at {}", show(x))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(guaranteed_h: Option<f64>, finish_h: Option<f64>) -> JobRun {
        let spec = crate::simulate::testkit::job("m").spec;
        let at = |h: f64| spec.submitted_ms + (h * 3.6e6) as i64;
        let mut r = JobRun::new(spec.clone(), 1);
        r.guaranteed_ms = guaranteed_h.map(at);
        r.finish_ms = finish_h.map(at);
        r
    }

    #[test]
    fn edge_gain_not_measured_reads_not_run_never_zero() {
        let mut on_time = run(Some(0.5), Some(2.0));
        on_time.spec.deadline_ms = on_time.spec.submitted_ms + 3 * 3_600_000;
        let none = EdgeTotals::default();
        let mut m = live_row("p", &[on_time], &Accumulators::default(), none, 0.0);
        assert_eq!(edge_gain(&m), "not run");
        m.set_edge_gain(Some(&live_row(
            "p",
            &[run(None, None)],
            &Accumulators::default(),
            none,
            0.0,
        )));
        assert_eq!(edge_gain(&m), "+1.000");
        m.set_edge_gain(None);
        assert_eq!(edge_gain(&m), "+0.000");
    }

    #[test]
    fn the_first_milestone_that_differs_is_named() {
        let sim = run(Some(0.5), Some(2.0));
        assert_eq!(divergence(&run(Some(0.5), Some(2.0)), &sim), None);
        assert_eq!(
            divergence(&run(Some(1.5), Some(9.0)), &sim).unwrap(),
            "guarantee: at +1.50 h live, +0.50 h simulated"
        );
        assert_eq!(
            divergence(&run(None, Some(9.0)), &sim).unwrap(),
            "guarantee: only simulated, at +0.50 h"
        );
        let late = divergence(&run(Some(0.5), None), &sim).unwrap();
        assert!(
            late.starts_with("end: not finished live, finished at +2.00 h simulated"),
            "{late}"
        );
        let mut turned = run(None, None);
        turned.status = JobStatus::Rejected;
        assert_eq!(
            divergence(&turned, &sim).unwrap(),
            "admission: turned away live, taken simulated"
        );
    }

    #[test]
    fn a_live_job_started_again_first_ran_where_its_first_checkpoint_left() {
        let record = |last_started: &str, transfers: serde_json::Value| -> JobRecord {
            serde_json::from_value(serde_json::json!({
                "id": 1, "name": "j", "state": "succeeded", "node": "e2", "exit_code": 0,
                "output_tail": [], "reason": null, "command": ["true"], "env": {},
                "secret_env": [], "deadline": "2026-11-27T13:00:00Z",
                "submitted_at": "2026-11-27T05:00:00Z", "started_at": "2026-11-27T07:00:00Z",
                "last_started_at": last_started, "finished_at": "2026-11-27T09:00:00Z",
                "cancel_requested": false, "class": "slo", "work": null, "done_iters": 0.0,
                "progress": "estimated", "measured_ips": null, "checkpoint": null, "attained_s": 0.0,
                "plan": null, "start_window": null, "checkpoint_transfers": transfers
            }))
            .unwrap()
        };
        let moved = |from: &str, to: &str, t_ms: i64| {
            serde_json::json!({"t_ms": t_ms, "from": from, "to": to, "bytes": 1,
                "moved_bytes": 1, "seconds": 0.1, "step": 3, "resent_chunks": 0})
        };
        // Never started again: it ran where it runs.
        let once = record("2026-11-27T07:00:00Z", serde_json::json!([]));
        assert_eq!(first_node(&once).as_deref(), Some("e2"));
        // Yielded on e1 (its checkpoint went to the coordinator), then moved
        // from e3 to e2 directly: it first ran on e1.
        let transfers = serde_json::json!([moved("e3", "e2", 20), moved("e1", "cloud", 10)]);
        let again = record("2026-11-27T08:00:00Z", transfers);
        assert_eq!(first_node(&again).as_deref(), Some("e1"));
    }

    #[test]
    fn a_first_start_elsewhere_or_later_is_the_divergence() {
        let started = |h: f64, nodes: &[&str]| {
            let mut r = run(Some(0.5), Some(2.0));
            r.first_start = Some(FirstStart {
                at_ms: r.spec.submitted_ms + (h * 3.6e6) as i64,
                nodes: nodes.iter().map(|n| n.to_string()).collect(),
            });
            r
        };
        let sim = started(0.25, &["e1", "e2"]);
        // Live names the node of rank 0: one of the simulated pair is the same start.
        assert_eq!(divergence(&started(0.25, &["e2"]), &sim), None);
        assert_eq!(
            divergence(&started(0.25, &["e7"]), &sim).unwrap(),
            "first start: at +0.25 h on e7 live, +0.25 h on e1+e2 simulated"
        );
        assert_eq!(
            divergence(&started(1.0, &["e1"]), &sim).unwrap(),
            "first start: at +1.00 h on e1 live, +0.25 h on e1+e2 simulated"
        );
        assert_eq!(
            divergence(&run(Some(0.5), Some(2.0)), &sim).unwrap(),
            "first start: only simulated, at +0.25 h on e1+e2"
        );
    }

    #[test]
    fn a_first_stop_at_another_time_or_of_another_kind_is_the_divergence() {
        let stopped = |h: Option<f64>, evicted: bool| {
            let mut r = run(Some(0.5), Some(2.0));
            r.first_stop = h.map(|h| FirstStop {
                at_ms: r.spec.submitted_ms + (h * 3.6e6) as i64,
                evicted,
            });
            r
        };
        let sim = stopped(Some(1.0), false);
        assert_eq!(divergence(&stopped(Some(1.0), false), &sim), None);
        assert_eq!(
            divergence(&stopped(Some(1.0), true), &sim).unwrap(),
            "first stop: at +1.00 h (evicted) live, +1.00 h (stopped) simulated"
        );
        assert_eq!(
            divergence(&stopped(Some(1.5), false), &sim).unwrap(),
            "first stop: at +1.50 h (stopped) live, +1.00 h (stopped) simulated"
        );
        assert_eq!(
            divergence(&stopped(None, false), &sim).unwrap(),
            "first stop: only simulated, at +1.00 h (stopped)"
        );
        // The live time is on the tide's clock until job_run moves it.
        let j = crate::simulate::testkit::job("m");
        let tide = FirstStop {
            at_ms: j.spec.submitted_ms + 5_000,
            evicted: true,
        };
        let history = History {
            first_start: Some(FirstStart {
                at_ms: j.spec.submitted_ms + 2_000,
                nodes: vec!["e7".into()],
            }),
            first_stop: Some(tide),
            migrations: 2,
            preemptions: 1,
        };
        let run = job_run(&j, None, 5_000, history);
        assert_eq!((run.migrations, run.preemptions), (2, 1));
        assert_eq!(run.first_stop.map(|f| f.at_ms), Some(j.spec.submitted_ms));
        // Where the emulated edges first ran it, not where the record last has it.
        let first = run.first_start.unwrap();
        assert_eq!(
            (first.at_ms, first.nodes),
            (j.spec.submitted_ms - 3_000, vec!["e7".to_string()])
        );
    }
}
