//! `tidemill-sim sweep`: one scenario over a grid of settings, every policy at
//! every point, on all cores, with a progress bar; one row per (point,
//! policy, trace) in `DIR/results.csv` and `DIR/results.json`, and line charts
//! against each varied key in `DIR/*.svg`.
//!
//! - [`grid`]: the `--vary` keys, the grid, and how a point changes the world;
//! - [`charts`]: the SVG line charts.

pub mod charts;
pub mod grid;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::Args as ClapArgs;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use thiserror::Error;

use crate::simulate::batch::parallel_map;
use crate::simulate::metrics::PolicyMetrics;
use crate::simulate::topology::Topology;
use crate::simulate::variants::EdgeEquivalent;
use crate::simulate::{self, SimError, setup_with};
use grid::{Axis, GridError, Point};

/// Options of `sweep`: every option of `simulate` (the scenario and its data),
/// the grid, and where to write.
#[derive(Debug, Clone, ClapArgs)]
#[group(id = "sweep")]
pub struct Args {
    /// The scenario and its data, as for `simulate` (`--json`, `--plot`,
    /// `--jobs-out` and `--usage-out` do not apply).
    #[command(flatten)]
    pub sim: simulate::Args,
    /// A key and its values, `KEY=V1,V2,...` (repeatable; the grid is their product).
    #[arg(long = "vary", value_name = "KEY=V1,V2,...")]
    pub vary: Vec<String>,
    /// Job traces to run every point on, comma-separated (default: --jobs, or the topology's).
    #[arg(long, value_delimiter = ',')]
    pub traces: Vec<PathBuf>,
    /// Directory for results.csv, results.json and the charts.
    #[arg(long)]
    pub out: PathBuf,
}

/// Why a sweep failed.
#[derive(Debug, Error)]
pub enum SweepError {
    /// A `--vary` flag is unusable.
    #[error(transparent)]
    Grid(#[from] GridError),
    /// A point's simulation failed.
    #[error("{point}: {source}")]
    Point {
        /// The trace and the point's values.
        point: String,
        /// The error (boxed: a `SimError` is large and the other variants are small).
        source: Box<SimError>,
    },
    /// The scenario cannot be read.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A flag that the sweep does not take.
    #[error("{0} does not apply to sweep: it writes DIR/results.json and DIR/*.svg under --out")]
    Flag(&'static str),
    /// The output could not be written.
    #[error("{path}: cannot write: {reason}; check --out")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        reason: String,
    },
}

/// One result row: a policy on one trace at one point.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The job trace.
    pub trace: String,
    /// The point: each varied key and its value.
    pub point: serde_json::Map<String, serde_json::Value>,
    /// Cloud GPUs at this point.
    pub cloud_gpus: u32,
    /// Edge boxes at this point.
    pub edge_boxes: usize,
    /// The edge as cloud GPUs (the `edge-as-cloud` row's), with `--upper-bound`.
    pub edge_equivalent: Option<EdgeEquivalent>,
    /// The policy's figures.
    #[serde(flatten)]
    pub metrics: PolicyMetrics,
}

/// Runs the sweep and writes its results; prints a summary to stderr.
pub fn run(args: &Args) -> Result<(), SweepError> {
    if args.sim.json {
        return Err(SweepError::Flag("--json"));
    }
    if args.sim.plot.is_some() {
        return Err(SweepError::Flag("--plot"));
    }
    if args.sim.jobs_out.is_some() {
        return Err(SweepError::Flag("--jobs-out"));
    }
    if args.sim.usage_out.is_some() {
        return Err(SweepError::Flag("--usage-out"));
    }
    let started = Instant::now();
    let axes = grid::parse_axes(&args.vary)?;
    let topology = Topology::load(&args.sim.topology).map_err(SimError::from)?;
    let traces: Vec<Option<PathBuf>> = if args.traces.is_empty() {
        vec![args.sim.jobs.clone()]
    } else {
        args.traces.iter().cloned().map(Some).collect()
    };
    let points = grid::points(&axes);
    let tasks: Vec<(Option<PathBuf>, Point)> = traces
        .iter()
        .flat_map(|t| points.iter().map(move |p| (t.clone(), p.clone())))
        .collect();
    let bar = ProgressBar::new(tasks.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "sweep [{bar:30}] {pos}/{len} points {elapsed} (eta {eta}) {msg}",
        )
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    let runs = AtomicUsize::new(0);
    let results = parallel_map(&tasks, |_, (trace, point)| {
        let r = run_point(args, &axes, trace.as_ref(), point);
        if let Ok(rows) = &r {
            runs.fetch_add(rows.len(), Ordering::Relaxed);
        }
        bar.inc(1);
        r
    });
    bar.finish_and_clear();
    let rows: Vec<Row> = results
        .into_iter()
        .collect::<Result<Vec<Vec<Row>>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    std::fs::create_dir_all(&args.out).map_err(|e| write_err(&args.out, e))?;
    write_csv(&args.out.join("results.csv"), &axes, &rows)?;
    let json = args.out.join("results.json");
    let text = serde_json::to_string_pretty(&rows).expect("rows serialise");
    std::fs::write(&json, text + "\n").map_err(|e| write_err(&json, e))?;
    let bases: Vec<f64> = axes
        .iter()
        .map(|a| {
            a.key
                .base(&topology, args.sim.arrival_scale)
                .unwrap_or(a.values[0])
        })
        .collect();
    let charts =
        charts::write_all(&args.out, &axes, &bases, &rows).map_err(|e| SweepError::Write {
            path: args.out.clone(),
            reason: e.to_string(),
        })?;
    eprintln!(
        "sweep: {} points × {} trace(s), {} runs in {:.1} s; wrote {}/results.csv, results.json and {} charts",
        points.len(),
        traces.len(),
        runs.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        args.out.display(),
        charts
    );
    Ok(())
}

fn write_err(path: &Path, e: impl std::fmt::Display) -> SweepError {
    SweepError::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Every run of one point on one trace, in the order `simulate` reports them.
fn run_point(
    args: &Args,
    axes: &[Axis],
    trace: Option<&PathBuf>,
    point: &[f64],
) -> Result<Vec<Row>, SweepError> {
    let mut sim = args.sim.clone();
    if let Some(t) = trace {
        sim.jobs = Some(t.clone());
    }
    if let Some(s) = grid::arrival_scale(axes, point) {
        sim.arrival_scale = Some(s);
    }
    let label = || {
        let values: Vec<String> = axes
            .iter()
            .zip(point)
            .map(|(a, v)| format!("{}={v}", a.key.name()))
            .collect();
        format!(
            "{} at {}",
            trace.map_or("the topology's jobs".into(), |t| t.display().to_string()),
            values.join(" ")
        )
    };
    let fail = |source| SweepError::Point {
        point: label(),
        source: Box::new(source),
    };
    let path = sim.topology.clone();
    let setup = setup_with(&sim, &|t| grid::apply(axes, point, t, &path)).map_err(fail)?;
    let runs = setup.runs().map_err(fail)?;
    let mut results = Vec::with_capacity(runs.len());
    for &(name, variant) in &runs {
        results.push(
            setup
                .run_one(name, variant, false, &mut |_| {})
                .map_err(fail)?,
        );
    }
    let (metrics, _) = setup.rows(&runs, results);
    let map: serde_json::Map<String, serde_json::Value> = axes
        .iter()
        .zip(point)
        .map(|(a, &v)| (a.key.name().to_string(), serde_json::json!(v)))
        .collect();
    Ok(metrics
        .into_iter()
        .map(|m| Row {
            trace: setup.jobs_path.display().to_string(),
            point: map.clone(),
            cloud_gpus: setup.world.model.cloud_gpus(),
            edge_boxes: setup.world.edges.boxes.len(),
            edge_equivalent: setup.edge_equivalent,
            metrics: m,
        })
        .collect())
}

/// The CSV's columns after the varied keys.
const COLUMNS: [&str; 21] = [
    "policy",
    "cloud_gpus",
    "edge_boxes",
    "jobs",
    "dsr",
    "edge_gain",
    "dsr_without_edge",
    "slo_dsr",
    "guaranteed_jobs",
    "guaranteed_missed",
    "rejected",
    "cloud_gpu_hours",
    "cloud_cost",
    "harvested_idle_share",
    "edge_training_h",
    "edge_startup_h",
    "edge_idle_unused_h",
    "interference_share",
    "migrations_per_job",
    "wan_gb",
    "elapsed_s",
];

fn write_csv(path: &Path, axes: &[Axis], rows: &[Row]) -> Result<(), SweepError> {
    let fail = |e: csv::Error| write_err(path, e);
    let mut w = csv::Writer::from_path(path).map_err(fail)?;
    let mut header = vec!["trace".to_string()];
    header.extend(axes.iter().map(|a| a.key.name().to_string()));
    header.extend(COLUMNS.iter().map(|c| c.to_string()));
    w.write_record(&header).map_err(fail)?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    for r in rows {
        let m = &r.metrics;
        let mut cells = vec![r.trace.clone()];
        cells.extend(axes.iter().map(|a| {
            r.point
                .get(a.key.name())
                .map_or(String::new(), |v| v.to_string())
        }));
        cells.extend([
            m.policy.clone(),
            r.cloud_gpus.to_string(),
            r.edge_boxes.to_string(),
            m.jobs.to_string(),
            format!("{:.6}", m.deadline_satisfaction_ratio),
            opt(m.edge_gain),
            opt(m.dsr_without_edge),
            format!("{:.6}", m.slo_deadline_satisfaction_ratio),
            m.guaranteed_jobs.to_string(),
            m.guaranteed_missed.to_string(),
            m.rejected.to_string(),
            format!("{:.3}", m.cloud_gpu_hours),
            format!("{:.3}", m.cloud_cost),
            format!("{:.6}", m.harvested_idle_share),
            format!("{:.3}", m.edge_hours.training),
            format!("{:.3}", m.edge_hours.startup),
            format!("{:.3}", m.edge_hours.idle_unused),
            format!("{:.6}", m.interference_share),
            format!("{:.4}", m.migrations_per_job),
            format!("{:.3}", m.wan_gb),
            format!("{:.3}", m.elapsed_s),
        ]);
        w.write_record(&cells).map_err(fail)?;
    }
    w.flush().map_err(|e| write_err(path, e))
}
