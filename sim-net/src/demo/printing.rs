//! What the demo prints: the tide clock every time is on, nodes and forecasts
//! as they first appear, each job's changes as they happen, and the final
//! table that judges each job against its deadline.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, NaiveDateTime, Utc};
use tidemill_cloud::config::SchedulerConfig;
use tidemill_cloud::job::{JobPhase, JobRecord, signed_span};
use tidemill_cloud::store::NodeRecord;
use tidemill_forecast::NodeForecast;
use tidemill_sched::EXPLANATION_TIME_FORMAT;

use super::{DemoError, DemoJob, UNPLANNED};

/// The demo's one clock: tide time, `dN HH:MM` from the anchor at which the
/// coordinator's and the edges' accelerated clocks start (`d1 00:00`, the
/// start of the trace). Every time the demo prints is on it.
#[derive(Debug, Clone, Copy)]
pub(super) struct TideClock {
    pub(super) anchor_ms: i64,
}

impl TideClock {
    /// `t_ms` (Unix ms on the accelerated clock) as `dN HH:MM`.
    pub(super) fn at(&self, t_ms: i64) -> String {
        let minutes = (t_ms - self.anchor_ms).div_euclid(60_000);
        format!(
            "d{} {:02}:{:02}",
            minutes.div_euclid(1440) + 1,
            minutes.rem_euclid(1440) / 60,
            minutes.rem_euclid(60)
        )
    }

    /// A time of day in a plan's or a coordinator's words.
    pub(super) fn at_time(&self, t: DateTime<Utc>) -> String {
        self.at(t.timestamp_millis())
    }

    /// Rewrites every time in an explanation, which the scheduler writes in
    /// [`EXPLANATION_TIME_FORMAT`] (UTC), onto this clock.
    pub(super) fn rewrite(&self, text: &str) -> String {
        // "2026-11-25 20:41:56 UTC" in that format is 23 bytes.
        const LEN: usize = 23;
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while !rest.is_empty() {
            let parsed = rest
                .get(..LEN)
                .and_then(|head| NaiveDateTime::parse_from_str(head, EXPLANATION_TIME_FORMAT).ok());
            match parsed {
                Some(t) => {
                    out.push_str(&self.at(t.and_utc().timestamp_millis()));
                    rest = &rest[LEN..];
                }
                None => {
                    let c = rest.chars().next().expect("rest is not empty");
                    out.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        out
    }
}

/// A node as the first line lists it: cores, accelerators and the device
/// class the scheduler plans it as.
pub(super) fn node_text(n: &NodeRecord, scheduler: &SchedulerConfig) -> String {
    let (devices, class) = match n.accelerators.first() {
        Some(a) => {
            let models: Vec<&str> = n.accelerators.iter().map(|a| a.model.as_str()).collect();
            (models.join(" + "), scheduler.class_of(&a.model))
        }
        None => ("no accelerator".to_string(), scheduler.cpu_class.clone()),
    };
    format!("{} ({} cores, {devices}, class {class})", n.id, n.cpu_cores)
}

/// A node's forecast as the demo prints it on arrival: its idle windows on
/// the tide clock, each with its confidence, and how much history it rests on.
pub(super) fn forecast_text(node: &str, f: &NodeForecast, tide: TideClock) -> String {
    let windows: Vec<String> = f
        .idle_windows
        .iter()
        .map(|w| {
            format!(
                "{}–{} (confidence {:.2})",
                tide.at(w.start_ms),
                tide.at(w.end_ms),
                w.confidence
            )
        })
        .collect();
    let history = f
        .history()
        .map_or("history not reported".into(), |h| h.to_string());
    let windows = if windows.is_empty() {
        "no idle window within the horizon".to_string()
    } else {
        format!("idle {}", windows.join(", "))
    };
    format!(
        "{node} forecast ({}, {history}, idle threshold {:.0}%): {windows}",
        f.method, f.idle_threshold_pct
    )
}

/// What the demo has already printed, so each event is printed once.
#[derive(Default)]
pub(super) struct Printed {
    pub(super) nodes: bool,
    pub(super) forecasts: HashSet<String>,
    pub(super) states: HashMap<u64, JobPhase>,
    pub(super) reasons: HashMap<u64, String>,
    /// The admission verdict last said of each running job.
    pub(super) verdicts: HashMap<u64, String>,
}

/// Prints what changed about a job since the last look: a new reason while
/// it waits, its start with the plan's finish, a new admission verdict while
/// it runs, a stop to resume later, or its end against its deadline with the verdict the final table
/// gives it.
pub(super) fn print_change(j: &JobRecord, stamp: &str, tide: TideClock, printed: &mut Printed) {
    let deadline = tide.at_time(j.deadline);
    let plan = || {
        j.plan.as_ref().map_or(UNPLANNED.to_string(), |p| {
            let finish = p
                .expected_finish
                .map_or("beyond the horizon".into(), |t| tide.at_time(t));
            format!("{}, planned finish {finish}", p.verdict.as_str())
        })
    };
    let before = printed.states.insert(j.id, j.state);
    let changed = before != Some(j.state);
    if j.state == JobPhase::Running && !changed && printed.verdicts.get(&j.id) != Some(&admitted(j))
    {
        println!(
            "{stamp} job {} {} is now {} (deadline {deadline})",
            j.id,
            j.name,
            plan()
        );
        printed.verdicts.insert(j.id, admitted(j));
    }
    if changed {
        match j.state {
            JobPhase::Running => {
                printed.verdicts.insert(j.id, admitted(j));
                let plan = plan();
                println!(
                    "{stamp} job {} {} runs on {} ({plan}; deadline {deadline})",
                    j.id,
                    j.name,
                    nodes_of(j)
                );
            }
            JobPhase::Queued if before == Some(JobPhase::Running) => println!(
                "{stamp} job {} {} stops for now, to resume from its checkpoint: {}",
                j.id,
                j.name,
                tide.rewrite(j.why())
            ),
            phase if phase.is_terminal() => {
                let finished = j.finished_at.map_or("-".into(), |t| tide.at_time(t));
                let slack = j
                    .finished_at
                    .map_or(String::new(), |t| format!(", slack {}", slack_of(j, t)));
                println!(
                    "{stamp} job {} {} {} at {finished} (deadline {deadline}{slack}): {}; {}",
                    j.id,
                    j.name,
                    phase.as_str(),
                    admitted(j),
                    j.why()
                );
            }
            _ => {}
        }
    }
    if j.state == JobPhase::Queued && j.node.is_none() {
        let reason = match (&j.plan, &j.work) {
            (None, None) => format!("{UNPLANNED}; {}", j.why()),
            _ => tide.rewrite(j.why()),
        };
        if printed.reasons.get(&j.id) != Some(&reason) {
            println!("{stamp} job {} {} waits: {reason}", j.id, j.name);
            printed.reasons.insert(j.id, reason);
        }
    }
}

/// How the job was admitted, as its latest plan says (the final table's
/// words too): `guaranteed`, `best-effort`, or why it was not planned.
fn admitted(j: &JobRecord) -> String {
    j.plan
        .as_ref()
        .map_or(UNPLANNED.to_string(), |p| p.verdict.as_str().to_string())
}

/// The nodes a job ran or runs on: its plan's, else the one it was placed on.
pub(super) fn nodes_of(j: &JobRecord) -> String {
    match &j.plan {
        Some(p) if !p.nodes.is_empty() => p.nodes.join("+"),
        _ => j.node.clone().unwrap_or_else(|| "-".into()),
    }
}

/// Deadline minus finish.
pub(super) fn slack_of(j: &JobRecord, finished: DateTime<Utc>) -> String {
    signed_span((j.deadline - finished).num_milliseconds())
}

/// How a job ended, judged against its deadline and what the demo meant
/// it to do: `met`, `missed`, `failed as intended`, or what went wrong.
pub(super) fn verdict(j: &JobRecord, expect: JobPhase) -> String {
    match (j.state, j.finished_at) {
        (JobPhase::Succeeded, Some(t)) if t <= j.deadline => "met".into(),
        (JobPhase::Succeeded, _) => "missed".into(),
        (JobPhase::Failed, _) if expect == JobPhase::Failed => "failed as intended".into(),
        (state, _) if !state.is_terminal() => "not ended".into(),
        (state, _) => format!("{} (unexpected)", state.as_str()),
    }
}

/// The final table: each job with its deadline, finish and slack on the tide
/// clock, its verdict against the deadline, and why it ended as it did.
pub(super) fn print_jobs(jobs: &[JobRecord], expected: &[(u64, &DemoJob)], tide: TideClock) {
    println!(
        "\n{:>3} {:<17} {:<10} {:<9} {:<9} {:<9} {:<8} {:<18} REASON / LAST OUTPUT",
        "ID", "JOB", "STATE", "NODE(S)", "DEADLINE", "FINISHED", "SLACK", "VERDICT"
    );
    for j in jobs.iter().rev() {
        let expect = expected
            .iter()
            .find(|(id, _)| *id == j.id)
            .map_or(JobPhase::Succeeded, |(_, d)| d.expect);
        let admitted = admitted(j);
        let tail = j
            .output_tail
            .last()
            .map_or(String::new(), |l| format!(" / {l}"));
        println!(
            "{:>3} {:<17} {:<10} {:<9} {:<9} {:<9} {:<8} {:<18} {admitted}; {}{tail}",
            j.id,
            j.name,
            j.state.as_str(),
            nodes_of(j),
            tide.at_time(j.deadline),
            j.finished_at.map_or("-".into(), |t| tide.at_time(t)),
            j.finished_at.map_or("-".into(), |t| slack_of(j, t)),
            verdict(j, expect),
            tide.rewrite(j.why()),
        );
    }
}

/// Prints the final table and checks that every job ended as the demo meant
/// it to: the training jobs succeeded by their deadlines, the broken one failed.
pub(super) fn report(
    jobs: &[JobRecord],
    expected: &[(u64, &DemoJob)],
    tide: TideClock,
) -> Result<(), DemoError> {
    print_jobs(jobs, expected, tide);
    let wrong: Vec<String> = expected
        .iter()
        .filter_map(|(id, want)| {
            let j = jobs.iter().find(|j| j.id == *id)?;
            let v = verdict(j, want.expect);
            (j.state != want.expect || v == "missed").then(|| {
                format!(
                    "job {id} {} ended {} ({v}) instead of {} by its deadline",
                    j.name,
                    j.state.as_str(),
                    want.expect.as_str()
                )
            })
        })
        .collect();
    if wrong.is_empty() {
        let met = expected
            .iter()
            .filter(|(_, d)| d.expect == JobPhase::Succeeded)
            .count();
        println!(
            "\nall {} jobs ended as expected: {met} met their deadlines, and one failed on purpose, to show failure reporting",
            expected.len()
        );
        Ok(())
    } else {
        Err(DemoError::Outcome(wrong.join("; ")))
    }
}
