//! `tidemill-sim twin`: a scenario's world run live. A real `tidemill-cloud
//! serve` ([`cloud`]) on the accelerated clock, one emulated edge per node
//! of the scenario ([`edge`]) that replays its box's load, forecasts with
//! the real forecaster and runs its tasks in emulation ([`tasks`]), and the
//! trace's jobs submitted through the HTTP API at their submission times.
//! At the end the coordinator's jobs are summarised as `simulate` summarises
//! its own ([`report`]), and with `--compare` set beside the simulator's run
//! of the same slice.

pub mod chart;
pub mod cloud;
pub mod edge;
pub mod lag;
mod live;
mod probes;
use live::run_in;
pub mod report;
pub mod tasks;

use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;
use tidemill_cloud::client::ClientError;
use tidemill_runtime::{clock, quic};

use crate::simulate::policies::JobRun;
use crate::simulate::policies::PolicyName;
use crate::simulate::variants::Variant;
use crate::simulate::{self, SimError, policy_parser};
use report::TwinReport;

/// Options of `twin`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The scenario (TOML), as `simulate --topology` takes it.
    #[arg(long)]
    pub topology: PathBuf,
    /// Job trace (overrides the scenario's `jobs`).
    #[arg(long)]
    pub jobs: Option<PathBuf>,
    /// Run only the first N jobs (by submission).
    #[arg(long, conflicts_with = "days")]
    pub max_jobs: Option<usize>,
    /// Run only the jobs submitted in the first N days of the trace.
    #[arg(long)]
    pub days: Option<f64>,
    /// Boxes per site of the first `[[edge]]` group (overrides the
    /// scenario's; `simulate --edge-boxes`, the sweep's `edge.nodes`): how a
    /// scenario is scaled to a larger fleet.
    #[arg(long)]
    pub edge_boxes: Option<u32>,
    /// Accelerated seconds per wall second, for the coordinator and the edges.
    #[arg(long, default_value_t = 600.0)]
    pub speed: f64,
    /// `H:X`: from H hours after the slice's first submission, the clock
    /// runs at X instead, so a run spends its wall time where deadlines
    /// crowd and hurries through a quiet tail. Repeat for more phases, in
    /// order of H.
    #[arg(long, value_name = "H:X", value_parser = parse_speed_from)]
    pub speed_from: Vec<SpeedFrom>,
    /// The policy the coordinator runs.
    #[arg(long, default_value = "tidemill", value_parser = policy_parser())]
    pub policy: PolicyName,
    /// The coordinator binary (default: the `tidemill-cloud` beside this one).
    #[arg(long)]
    pub cloud_bin: Option<PathBuf>,
    /// Seed of the deadline generator and the per-box load variation, as
    /// for `simulate`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also run the simulator on the same slice and list the jobs whose
    /// outcome differs.
    #[arg(long)]
    pub compare: bool,
    /// Skip the second live run, on the same world with no edge boxes, that
    /// `edge_gain` needs: about half the wall time, and the live row's
    /// `edge_gain` is then not measured (null in JSON).
    #[arg(long)]
    pub no_edge_gain: bool,
    /// Write an SVG chart of the deadline satisfaction ratio over the
    /// slice here: one line per live run, and the simulator's with
    /// `--compare`.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Keep the coordinator's data dir, config and log here (default: a
    /// temporary dir, removed after a run that succeeded).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// One `--speed-from`: the clock's speed from some hours into the slice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeedFrom {
    /// Hours after the slice's first submission.
    pub hours: f64,
    /// Accelerated seconds per wall second from then on.
    pub speed: f64,
}

impl SpeedFrom {
    /// Tide ms after the slice's first submission at which it starts.
    pub fn offset_ms(&self) -> i64 {
        (self.hours * 3_600_000.0) as i64
    }
}

/// Parses `H:X` (hours, speed) for `--speed-from`.
fn parse_speed_from(s: &str) -> Result<SpeedFrom, String> {
    let (h, x) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected H:X, hours and a speed, as in 78:3600"))?;
    let number = |v: &str, what: &str| {
        v.trim()
            .parse::<f64>()
            .map_err(|e| format!("{s:?}: the {what} {v:?} is not a number ({e})"))
    };
    Ok(SpeedFrom {
        hours: number(h, "hours")?,
        speed: number(x, "speed")?,
    })
}

/// Checks `--speed` and `--speed-from`: speeds within the coordinator's
/// clock range, hours not negative and in order, a millisecond apart at
/// least (the clock's phases are in ms).
fn check_speeds(args: &Args) -> Result<(), TwinError> {
    let in_range = |x: f64| clock::SPEEDS.contains(&x);
    if !in_range(args.speed) {
        return Err(TwinError::BadOption {
            flag: "speed",
            value: args.speed.to_string(),
            rule: "must be between 1 and 100000 (the coordinator's clock.speed range)",
        });
    }
    let mut last = None;
    for p in &args.speed_from {
        let value = format!("{}:{}", p.hours, p.speed);
        if !in_range(p.speed) {
            return Err(TwinError::BadOption {
                flag: "speed-from",
                value,
                rule: "its speed must be between 1 and 100000 (the coordinator's clock.speed range)",
            });
        }
        if !(p.hours.is_finite() && p.hours >= 0.0 && last.is_none_or(|l| p.offset_ms() > l)) {
            return Err(TwinError::BadOption {
                flag: "speed-from",
                value,
                rule: "its hours must be 0 or more and later than the phase before it: list the phases in order",
            });
        }
        last = Some(p.offset_ms());
    }
    Ok(())
}

/// Why `twin` could not run.
#[derive(Debug, Error)]
pub enum TwinError {
    /// The scenario could not be loaded or simulated.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A flag is out of range.
    #[error("--{flag} {value}: {rule}")]
    BadOption {
        /// The flag, without dashes.
        flag: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
    /// A file or process could not be handled.
    #[error("twin: {0}")]
    Io(std::io::Error),
    /// The coordinator's config could not be made.
    #[error("cannot make the coordinator's config: {0}")]
    Config(String),
    /// The coordinator binary could not run.
    #[error(
        "cannot run the coordinator {0}: {1}; build it (cargo build -p tidemill-cloud) or pass --cloud-bin"
    )]
    CloudBin(PathBuf, std::io::Error),
    /// The coordinator exited.
    #[error("the coordinator exited ({0}); its log is {1}")]
    CloudExited(String, PathBuf),
    /// The coordinator did not start serving in time.
    #[error("the coordinator did not serve within {0:?}; its log is {1}")]
    CloudSlow(Duration, PathBuf),
    /// The API refused a call.
    #[error("the coordinator's API: {0}")]
    Api(#[from] ClientError),
    /// The QUIC client could not be made.
    #[error("cannot make the QUIC client: {0}")]
    Endpoint(#[from] quic::EndpointError),
    /// The join token the coordinator gave is malformed.
    #[error(transparent)]
    Token(#[from] tidemill_runtime::identity::TokenError),
    /// The chart could not be drawn or written.
    #[error("--svg {0}: cannot write the chart: {1}")]
    Svg(PathBuf, String),
    /// Writing the report failed.
    #[error("cannot write the report to stdout: {0}")]
    Stdout(std::io::Error),
}

/// The options `simulate` takes for the same slice.
fn sim_args(args: &Args, max_jobs: Option<usize>) -> simulate::Args {
    simulate::Args {
        topology: args.topology.clone(),
        jobs: args.jobs.clone(),
        jobs_format: None,
        throughputs: Vec::new(),
        utilization: None,
        mapping: Default::default(),
        policies: vec![args.policy],
        oracle_forecast: false,
        seed: args.seed,
        json: false,
        plot: None,
        max_jobs,
        edge_boxes: args.edge_boxes,
        cloud_nodes: None,
        arrival_scale: None,
        upper_bound: false,
        lp_bound: false,
        jobs_out: None,
        usage_out: None,
    }
}

/// The scenario, cut to the slice asked for.
fn load(args: &Args) -> Result<simulate::Setup, TwinError> {
    let Some(days) = args.days else {
        return Ok(simulate::setup(&sim_args(args, args.max_jobs))?);
    };
    if !(days.is_finite() && days > 0.0) {
        return Err(TwinError::BadOption {
            flag: "days",
            value: days.to_string(),
            rule: "must be a positive number of days",
        });
    }
    let whole = simulate::setup(&sim_args(args, None))?;
    let first = whole.world.window.0;
    let n = whole
        .world
        .jobs
        .iter()
        .take_while(|j| j.spec.submitted_ms < first + (days * 86_400_000.0) as i64)
        .count();
    Ok(simulate::setup(&sim_args(args, Some(n)))?)
}

/// The coordinator binary: `--cloud-bin`, else `tidemill-cloud` beside this program.
fn cloud_bin(args: &Args) -> Result<PathBuf, TwinError> {
    if let Some(b) = &args.cloud_bin {
        return Ok(b.clone());
    }
    let me = std::env::current_exe().map_err(TwinError::Io)?;
    Ok(me.with_file_name("tidemill-cloud"))
}

/// Runs the twin and returns its report.
pub fn twin(args: &Args) -> Result<TwinReport, TwinError> {
    check_speeds(args)?;
    if let Some(svg) = &args.svg {
        let parent = svg.parent().filter(|p| !p.as_os_str().is_empty());
        if parent.is_some_and(|p| !p.is_dir()) {
            return Err(TwinError::BadOption {
                flag: "svg",
                value: svg.display().to_string(),
                rule: "its directory must exist (the chart is written after the runs)",
            });
        }
    }
    let setup = load(args)?;
    let bin = cloud_bin(args)?;
    let dir = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tidemill-twin-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).map_err(TwinError::Io)?;
    let result = run_all(args, &setup, &bin, &dir);
    if result.is_ok() && args.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// The live run, the live run with no edge boxes that `edge_gain` needs
/// (unless `--no-edge-gain`, or the policy never uses the edge, or there is
/// none: then, as in `simulate`, the gain is 0 without a run), and with
/// `--compare` the simulator's runs of both worlds; then the chart.
fn run_all(
    args: &Args,
    setup: &simulate::Setup,
    bin: &Path,
    dir: &Path,
) -> Result<TwinReport, TwinError> {
    let policy = args.policy.as_str();
    let mut live = run_in(
        args,
        setup,
        &setup.world,
        &format!("{policy} (live)"),
        bin,
        dir,
    )?;
    let runs = setup.runs()?;
    let without = if args.no_edge_gain || !runs.contains(&(args.policy, Variant::NoEdge)) {
        None
    } else {
        let label = format!("{policy} (live, no edge)");
        Some(run_in(
            args,
            setup,
            &setup.no_edge,
            &label,
            bin,
            &dir.join("no-edge"),
        )?)
    };
    if !args.no_edge_gain {
        live.row
            .metrics
            .set_edge_gain(without.as_ref().map(|w| &w.row.metrics));
        live.row.no_edge_wall_s = without.as_ref().map(|w| w.row.wall_s);
    }
    let (simulated, outcomes) = if args.compare {
        let results = runs
            .iter()
            .map(|&(p, v)| setup.run_one(p, v, false, &mut |_| {}))
            .collect::<Result<Vec<_>, _>>()?;
        setup.rows(&runs, results)
    } else {
        (Vec::new(), Vec::new())
    };
    let differing_jobs = outcomes.first().map_or_else(Vec::new, |o| {
        report::differing(&setup.world.jobs, &live.records, &live.runs, &o.jobs)
    });
    if let Some(path) = &args.svg {
        let mut lines: Vec<(&str, &[JobRun])> = vec![("live", &live.runs)];
        if let Some(w) = &without {
            lines.push(("live, no edge", &w.runs));
        }
        if let Some(o) = outcomes.first() {
            lines.push(("simulated", &o.jobs));
        }
        let (start, end) = (setup.world.window.0, setup.world.end_ms);
        chart::write_svg(path, policy, &lines, start, end)?;
    }
    Ok(TwinReport {
        live: vec![live.row],
        simulated,
        differing_jobs,
    })
}

/// Runs `twin` and prints its report.
pub fn run(args: &Args) -> Result<(), TwinError> {
    tidemill_runtime::lifecycle::init_logging("warn");
    let report = twin(args)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).map_err(|e| TwinError::Stdout(e.into()))?;
        writeln(&mut out)
    } else {
        report.write_table(&mut out).map_err(TwinError::Stdout)
    }
}

fn writeln(out: &mut impl std::io::Write) -> Result<(), TwinError> {
    writeln!(out).map_err(TwinError::Stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speed_phase_reads_hours_then_speed_and_names_what_is_wrong() {
        assert_eq!(
            parse_speed_from("78:3600"),
            Ok(SpeedFrom {
                hours: 78.0,
                speed: 3600.0
            })
        );
        let no_colon = parse_speed_from("78").unwrap_err();
        assert!(no_colon.contains("expected H:X"), "{no_colon}");
        let bad_hours = parse_speed_from("soon:3600").unwrap_err();
        assert!(bad_hours.contains("the hours \"soon\""), "{bad_hours}");
        let bad_speed = parse_speed_from("78:fast").unwrap_err();
        assert!(bad_speed.contains("the speed \"fast\""), "{bad_speed}");
    }
}
