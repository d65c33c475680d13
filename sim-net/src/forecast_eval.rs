//! `tidemill-sim forecast-eval`: rolling-origin backtest of every forecast method
//! on a trace, printed as a table or JSON, with an optional SVG plot of one node.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args as ClapArgs;
use serde::Serialize;
use thiserror::Error;
use tidemill_forecast::metrics::{Figures, Scoreboard};
use tidemill_forecast::{ConfigError, ForecastConfig, HorizonBucket, Method};

use crate::backtest::{Backtest, Boards, history_band_name};
use crate::cold_start;
use crate::plot::{PlotError, plot_node};
use crate::trace::{MappingFlags, TraceError, read_trace};

/// Options of `forecast-eval`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Trace file: CSV, optionally gzip (detected by `.gz` or the magic bytes).
    #[arg(long)]
    pub trace: PathBuf,
    /// Which columns hold what.
    #[command(flatten)]
    pub mapping: MappingFlags,
    /// Forecast horizon, e.g. 24h, 90m, 3600s (at most 48h).
    #[arg(long, default_value = "48h", value_parser = parse_duration_s)]
    pub horizon: u32,
    /// Time between forecast origins, e.g. 1h.
    #[arg(long, default_value = "1h", value_parser = parse_duration_s)]
    pub step: u32,
    /// Forecast slot length, e.g. 15m (5m to 15m).
    #[arg(long, default_value = "15m", value_parser = parse_duration_s)]
    pub slot: u32,
    /// Utilisation (percent) under which a node counts as idle.
    #[arg(long, default_value_t = 30.0)]
    pub idle_threshold: f64,
    /// Forecast probability of staying under the idle threshold that a slot
    /// needs to count as predicted idle (0.5 to 0.99).
    #[arg(long, default_value_t = tidemill_forecast::DEFAULT_IDLE_CONFIDENCE)]
    pub idle_confidence: f64,
    /// Days of history each forecaster keeps.
    #[arg(long, default_value_t = 14)]
    pub history_days: u32,
    /// Evaluate only every k-th node, k = ⌈nodes / N⌉, for a quicker sample
    /// spread over the whole trace (default: every node).
    #[arg(long)]
    pub max_nodes: Option<usize>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG of one node's history, forecast band and truth (needs --plot-node).
    #[arg(long, requires = "plot_node")]
    pub plot: Option<PathBuf>,
    /// Node to plot.
    #[arg(long, requires = "plot")]
    pub plot_node: Option<String>,
    /// Origin of the plotted forecast, seconds in the trace's time column
    /// (default: the last origin with a full horizon of data after it).
    #[arg(long)]
    pub plot_origin: Option<f64>,
    /// Method whose forecast is plotted.
    #[arg(long, default_value = "tidemill")]
    pub plot_method: Method,
    /// Score a new box's first 24 h and first 7 days instead: forecast from
    /// its own samples alone against from its site peers' prior (boxes named
    /// rrh_<site>_<box>, as in C2TM); --max-nodes then samples the joining boxes.
    #[arg(long, conflicts_with = "plot")]
    pub cold_start: bool,
    /// With --cold-start: the prior's blend-out hours to compare,
    /// comma-separated (e.g. 24,48,96,168).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "48",
        requires = "cold_start"
    )]
    pub prior_blend_h: Vec<f64>,
}

/// Why `forecast-eval` failed.
#[derive(Debug, Error)]
pub enum EvalError {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The forecast settings are invalid.
    #[error(
        "{0} (set by --slot, --horizon, --idle-threshold, --idle-confidence or --history-days)"
    )]
    Config(#[from] ConfigError),
    /// `--step` is zero.
    #[error("--step 0: the time between origins must be positive")]
    ZeroStep,
    /// The plot failed.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// `--cold-start` found no site with two boxes.
    #[error(
        "{0}: no box has a site peer: --cold-start groups the series named rrh_<site>_<box> (C2TM's layout) by site and needs two boxes in one site; run it on the C2TM trace with --format c2tm"
    )]
    NoPeers(PathBuf),
    /// A `--prior-blend-h` value is not positive.
    #[error("--prior-blend-h {0}: the prior's blend-out hours must be positive, e.g. 24,48,96,168")]
    BlendHours(f64),
    /// Writing the report failed.
    #[error("cannot write the report to stdout: {0}")]
    Stdout(std::io::Error),
}

/// Parses `90`, `90s`, `15m`, `24h` or `2d` into seconds.
pub fn parse_duration_s(text: &str) -> Result<u32, String> {
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u32 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; write e.g. 900s, 15m, 24h or 2d"))?;
    let factor = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("`{text}`: unknown unit `{unit}`; use s, m, h or d")),
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// One method's figures over every lead, and per horizon bucket.
#[derive(Debug, Serialize)]
struct MethodReport {
    method: Method,
    #[serde(flatten)]
    figures: Option<Figures>,
    by_bucket: Vec<BucketReport>,
    /// The same figures per band of the node's own history at the origin:
    /// how the score grows with a box's history.
    by_history: Vec<HistoryReport>,
    /// tidemill on this method's points (absent for tidemill itself): a
    /// baseline that cannot forecast a young box's first week is compared
    /// with tidemill on the same origins and slots.
    #[serde(skip_serializing_if = "Option::is_none")]
    tidemill_on_same_points: Option<Figures>,
}

/// One method's figures over the leads of one horizon bucket.
#[derive(Debug, Serialize)]
struct BucketReport {
    bucket: HorizonBucket,
    #[serde(flatten)]
    figures: Option<Figures>,
}

/// One method's figures over the origins of one band of history
/// ([`crate::backtest::HISTORY_BANDS`]), every lead and per horizon bucket.
#[derive(Debug, Serialize)]
struct HistoryReport {
    /// `1 d`, `4-6 d`, `14+ d`: whole days of the node's own samples before the origin.
    history: String,
    #[serde(flatten)]
    figures: Option<Figures>,
    by_bucket: Vec<BucketReport>,
}

/// Figures per horizon bucket of `boards` (indexed as [`HorizonBucket::ALL`]).
fn buckets(boards: &[Scoreboard; 3]) -> Vec<BucketReport> {
    HorizonBucket::ALL
        .iter()
        .zip(boards)
        .map(|(bucket, board)| BucketReport {
            bucket: *bucket,
            figures: board.figures(),
        })
        .collect()
}

impl MethodReport {
    fn new(method: Method, boards: &Boards) -> Self {
        Self {
            method,
            figures: boards.all.figures(),
            by_bucket: buckets(&boards.by_bucket),
            by_history: boards
                .by_history
                .iter()
                .enumerate()
                .map(|(band, per_bucket)| {
                    let mut all = Scoreboard::default();
                    for b in per_bucket {
                        all.merge(b);
                    }
                    HistoryReport {
                        history: history_band_name(band),
                        figures: all.figures(),
                        by_bucket: buckets(per_bucket),
                    }
                })
                .collect(),
            tidemill_on_same_points: (method != Method::Tidemill)
                .then(|| boards.tidemill_here.figures())
                .flatten(),
        }
    }
}

/// The whole report, as printed by `--json`.
#[derive(Debug, Serialize)]
struct Report {
    trace: PathBuf,
    nodes: usize,
    slot_len_s: u32,
    horizon_s: u32,
    step_s: u32,
    idle_threshold_pct: f64,
    idle_confidence: f64,
    elapsed_s: f64,
    methods: Vec<MethodReport>,
}

impl Args {
    fn config(&self) -> Result<ForecastConfig, EvalError> {
        let config = ForecastConfig {
            slot_len_s: self.slot,
            horizon_s: self.horizon,
            idle_threshold_pct: self.idle_threshold,
            history_days: self.history_days,
            idle_confidence: self.idle_confidence,
            ..ForecastConfig::default()
        };
        config.validate()?;
        Ok(config)
    }
}

/// Runs the backtest and prints the report (progress goes to stderr).
pub fn run(args: &Args) -> Result<(), EvalError> {
    let started = Instant::now();
    let config = args.config()?;
    if args.step == 0 {
        return Err(EvalError::ZeroStep);
    }
    let mut series = read_trace(&args.trace, &args.mapping.resolve(&args.trace, None)?)?;
    if args.cold_start {
        return cold_start(args, config, &series, started);
    }
    if let Some(max) = args.max_nodes {
        let every = series.len().div_ceil(max.max(1)).max(1);
        series = series.into_iter().step_by(every).collect();
    }
    eprintln!(
        "read {} series ({} samples) from {} in {:.1}s",
        series.len(),
        series.iter().map(|s| s.points.len()).sum::<usize>(),
        args.trace.display(),
        started.elapsed().as_secs_f64()
    );
    let backtest = Backtest {
        config,
        step_ms: i64::from(args.step) * 1_000,
        methods: Method::ALL.to_vec(),
    };
    let every = (series.len() / 10).max(1);
    let boards = backtest.run(&series, |done, total| {
        if done % every == 0 || done == total {
            eprintln!(
                "evaluated {done}/{total} nodes ({:.1}s)",
                started.elapsed().as_secs_f64()
            );
        }
    });
    if let (Some(path), Some(node)) = (&args.plot, &args.plot_node) {
        plot_node(
            &series,
            node,
            &backtest,
            args.plot_method,
            args.plot_origin,
            path,
        )?;
        eprintln!("wrote {}", path.display());
    }
    let report = Report {
        trace: args.trace.clone(),
        nodes: series.len(),
        slot_len_s: args.slot,
        horizon_s: args.horizon,
        step_s: args.step,
        idle_threshold_pct: args.idle_threshold,
        idle_confidence: args.idle_confidence,
        elapsed_s: started.elapsed().as_secs_f64(),
        methods: boards
            .iter()
            .map(|(method, boards)| MethodReport::new(*method, boards))
            .collect(),
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = serde_json::to_string_pretty(&report).expect("the report serialises");
        writeln!(out, "{json}").map_err(EvalError::Stdout)?;
    } else {
        write_table(&mut out, &report).map_err(EvalError::Stdout)?;
    }
    Ok(())
}

/// `--cold-start`: the new-box backtest, printed as a table or JSON.
fn cold_start(
    args: &Args,
    config: ForecastConfig,
    series: &[crate::trace::Series],
    started: Instant,
) -> Result<(), EvalError> {
    let options = cold_start::Options {
        trace: &args.trace,
        config,
        step_s: args.step,
        blend_h: &args.prior_blend_h,
        max_boxes: args.max_nodes,
    };
    let report = cold_start::evaluate(series, &options, started)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let json = serde_json::to_string_pretty(&report).expect("the report serialises");
        writeln!(out, "{json}").map_err(EvalError::Stdout)
    } else {
        cold_start::write_table(&mut out, &report).map_err(EvalError::Stdout)
    }
}

fn write_table(out: &mut dyn Write, report: &Report) -> std::io::Result<()> {
    writeln!(
        out,
        "{} nodes, slot {} s, horizon {} s, step {} s, idle threshold {}% at confidence {}, {:.1} s",
        report.nodes,
        report.slot_len_s,
        report.horizon_s,
        report.step_s,
        report.idle_threshold_pct,
        report.idle_confidence,
        report.elapsed_s
    )?;
    writeln!(
        out,
        "{:<20} {:<7} {:>9} {:>7} {:>6} {:>11} {:>11} {:>8} {:>9} {:>11}",
        "method",
        "leads",
        "points",
        "mae",
        "mase",
        "pinball_p10",
        "pinball_p90",
        "coverage",
        "idle_prec",
        "idle_recall"
    )?;
    for m in &report.methods {
        write_row(out, m.method.name(), "all", m.figures.as_ref())?;
        for b in &m.by_bucket {
            write_row(out, m.method.name(), b.bucket.name(), b.figures.as_ref())?;
        }
        if let Some(f) = &m.tidemill_on_same_points {
            write_row(out, " tidemill there", "all", Some(f))?;
        }
    }
    writeln!(
        out,
        "tidemill by whole days of the node's own history at the origin (MASE against same-slot-yesterday on the same points):"
    )?;
    let ours = report
        .methods
        .iter()
        .filter(|m| m.method == Method::Tidemill);
    for h in ours.flat_map(|m| &m.by_history) {
        let label = format!("tidemill {}", h.history);
        write_row(out, &label, "all", h.figures.as_ref())?;
        for b in &h.by_bucket {
            write_row(out, &label, b.bucket.name(), b.figures.as_ref())?;
        }
    }
    Ok(())
}

fn write_row(
    out: &mut dyn Write,
    method: &str,
    leads: &str,
    figures: Option<&Figures>,
) -> std::io::Result<()> {
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    match figures {
        Some(f) => writeln!(
            out,
            "{:<20} {:<7} {:>9} {:>7.3} {:>6} {:>11.3} {:>11.3} {:>8.3} {:>9} {:>11}",
            method,
            leads,
            f.points,
            f.mae,
            opt(f.mase),
            f.pinball_p10,
            f.pinball_p90,
            f.coverage_p10_p90,
            opt(f.idle_precision),
            opt(f.idle_recall)
        ),
        None => writeln!(out, "{:<20} {:<7} {:>9}", method, leads, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_s("24h"), Ok(86_400));
        assert_eq!(parse_duration_s("15m"), Ok(900));
        assert_eq!(parse_duration_s("90"), Ok(90));
        assert_eq!(parse_duration_s("2d"), Ok(172_800));
        assert!(parse_duration_s("1w").unwrap_err().contains("unknown unit"));
        assert!(
            parse_duration_s("h")
                .unwrap_err()
                .contains("not a duration")
        );
    }
}
