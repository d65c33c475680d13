//! Each job's outcome in every run (`simulate --jobs-out FILE`): which jobs
//! met their deadline under which policy and world, where each first ran,
//! and how often it moved, so the jobs behind a DSR can be found and
//! compared across policies and bounds.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use super::csv_out::{self, CsvOutError};
use super::engine::{Outcome, World};
use super::metrics::{PolicyMetrics, counts};
use super::policies::{JobRun, JobStatus, PolicyName};
use super::variants::Variant;

/// One line of the file: one job in one run.
#[derive(Debug, Serialize)]
struct Line<'a> {
    /// The policy that ran.
    policy: &'static str,
    /// The world it ran on: `as-described`, `no-edge` (for `edge_gain`) or
    /// `edge-as-cloud` (the upper bound).
    world: &'static str,
    /// The trace's job id.
    job: &'a str,
    /// `slo` or `best-effort`.
    class: &'static str,
    /// The model it trains.
    model: &'a str,
    submitted_ms: i64,
    /// Empty for a best-effort job.
    deadline_ms: Option<i64>,
    iterations: f64,
    done_iters: f64,
    /// `active`, `done`, `rejected` or `abandoned`.
    status: &'static str,
    finish_ms: Option<i64>,
    /// What the DSR counts: an SLO job done by its deadline, or a
    /// best-effort job done.
    met: bool,
    /// When the policy promised the deadline, if it did.
    guaranteed_ms: Option<i64>,
    first_start_ms: Option<i64>,
    /// The nodes of its first start, `|`-separated.
    first_nodes: String,
    migrations: u32,
    preemptions: u32,
    /// Device-hours it held, start-up included.
    device_hours: f64,
    /// Hours its iterations take on the edge's fastest placement for it,
    /// every box idle throughout ([`super::bound::edge_peaks`]); empty where
    /// no edge box runs its model. Against its window, it says whether the
    /// edge could have finished it alone.
    edge_alone_h: Option<f64>,
}

/// The word for `variant` in the `world` column.
fn world_name(variant: Variant) -> &'static str {
    match variant {
        Variant::Full => "as-described",
        Variant::NoEdge => "no-edge",
        Variant::EdgeAsCloud => "edge-as-cloud",
    }
}

/// The word for `status` in the `status` column.
fn status_name(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Active => "active",
        JobStatus::Done => "done",
        JobStatus::Rejected => "rejected",
        JobStatus::Abandoned => "abandoned",
    }
}

/// Writes one line per job per run of `runs` (paired with `results`) to
/// `path` as CSV with a header, whole or not at all ([`csv_out::write`]).
pub fn write(
    path: &Path,
    world: &World,
    runs: &[(PolicyName, Variant)],
    results: &[(PolicyMetrics, Outcome)],
) -> Result<(), CsvOutError> {
    let peaks = super::bound::edge_peaks(world);
    let jobs: HashMap<u64, (&str, Option<f64>)> = world
        .jobs
        .iter()
        .zip(peaks)
        .map(|(j, p)| (j.spec.id, (j.name.as_str(), p)))
        .collect();
    csv_out::write("--jobs-out", path, |out| {
        for (&(policy, variant), (_, outcome)) in runs.iter().zip(results) {
            for j in &outcome.jobs {
                out.serialize(line(policy, variant, &jobs, j))?;
            }
        }
        Ok(())
    })
}

/// The line of job `j` in the run of `policy` on `variant`.
fn line<'a>(
    policy: PolicyName,
    variant: Variant,
    jobs: &HashMap<u64, (&'a str, Option<f64>)>,
    j: &'a JobRun,
) -> Line<'a> {
    let first = j.first_start.as_ref();
    let (name, peak) = jobs.get(&j.spec.id).copied().unwrap_or_default();
    Line {
        policy: policy.as_str(),
        world: world_name(variant),
        job: name,
        class: if j.slo() { "slo" } else { "best-effort" },
        model: &j.spec.model,
        submitted_ms: j.spec.submitted_ms,
        deadline_ms: j.slo().then_some(j.spec.deadline_ms),
        iterations: j.spec.iterations,
        done_iters: j.done_iters,
        status: status_name(j.status),
        finish_ms: j.finish_ms,
        met: counts(j),
        guaranteed_ms: j.guaranteed_ms,
        first_start_ms: first.map(|s| s.at_ms),
        first_nodes: first.map(|s| s.nodes.join("|")).unwrap_or_default(),
        migrations: j.migrations,
        preemptions: j.preemptions,
        device_hours: j.attained_gpu_s / 3600.0,
        edge_alone_h: peak
            .filter(|&p| p > 0.0)
            .map(|p| j.spec.iterations / p / 3600.0),
    }
}
