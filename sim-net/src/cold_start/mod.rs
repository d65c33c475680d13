//! `tidemill-sim forecast-eval --cold-start`: how well a new box is forecast in
//! its first day and first week, from nothing against from its site's peers
//! (issue 31), on a trace whose boxes carry a site (C2TM's `rrh_<site>_<box>`).
//!
//! Each box joins at several times J (see [`eval::joins`]); from J on, every
//! arm is fed only the box's own samples, and at each origin (every `--step`
//! over the box's first 7 days) forecasts 48 h ahead. The peers' arm takes a
//! prior rebuilt at every origin from the other boxes' tidemill forecasts,
//! each made from all that box's history before the origin.

pub mod eval;

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use tidemill_forecast::ForecastConfig;
use tidemill_forecast::metrics::Figures;

use crate::forecast_eval::EvalError;
use crate::trace::Series;
use eval::{Arm, ColdStart, PERIODS, Tally, Totals};

/// How the joins are chosen, as printed in the report.
pub const JOIN_RULE: &str = "every UTC midnight from the site's 3rd day on whose previous 48 h the other boxes' samples cover for at least 36 h, and after which the box has a sample within 24 h; the first 7 days score the slots the trace holds (its gaps are not scored)";
/// The MASE reference, as printed in the report.
pub const REFERENCE: &str = "same-slot-yesterday from the box's true slot means (the slot 24 h back, 48 h for leads past 24 h), read from the whole trace, before J too, so both arms share one denominator from the first hour";
/// How a slot without a forecast counts, as printed in the report.
pub const NO_FORECAST: &str = "a scorable slot an arm did not forecast is not predicted idle (idle recall counts it as missed) and is left out of MAE, MASE, pinball and coverage, which `answered_share` qualifies; `paired` scores the peers' arms on the slots from-nothing also forecast";

/// One period's figures of one arm.
#[derive(Debug, Serialize)]
pub struct PeriodReport {
    /// `first_24h` or `first_7d`: origins in the box's first day or week.
    pub period: &'static str,
    /// Slots with a truth and a reference.
    pub scorable_points: u64,
    /// Share of them the arm forecast.
    pub answered_share: f64,
    /// Figures over the slots the arm forecast.
    pub answered: Option<Figures>,
    /// Figures over the slots from-nothing also forecast (like for like).
    pub paired: Option<Figures>,
    /// Node-hours predicted idle that were idle, over node-hours predicted idle.
    pub idle_precision: Option<f64>,
    /// Node-hours idle and predicted idle, over every idle scorable node-hour.
    pub idle_recall: Option<f64>,
}

/// One arm's report.
#[derive(Debug, Serialize)]
pub struct ArmReport {
    /// `from_nothing`, `from_peers`, or `from_peers_unshifted` (the prior
    /// not shifted to the box's level).
    pub arm: &'static str,
    /// The prior's blend-out hours (`None` without a prior).
    pub prior_blend_h: Option<f64>,
    /// `first_24h` then `first_7d`.
    pub periods: Vec<PeriodReport>,
}

/// The cold-start report, as printed by `--json`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The trace read.
    pub trace: String,
    /// Sites with at least two boxes.
    pub sites: usize,
    /// Boxes that joined at least once.
    pub boxes: u64,
    /// Joins scored.
    pub joins: u64,
    /// Joins with samples on each of their first 7 days.
    pub full_week_joins: u64,
    /// How the joins were chosen.
    pub join_rule: &'static str,
    /// The MASE reference.
    pub reference: &'static str,
    /// How slots without a forecast count.
    pub no_forecast: &'static str,
    /// When the prior is rebuilt.
    pub prior_rebuilt: &'static str,
    /// Slot length, seconds.
    pub slot_len_s: u32,
    /// Horizon, seconds.
    pub horizon_s: u32,
    /// Time between origins, seconds.
    pub step_s: u32,
    /// Idle threshold, percent.
    pub idle_threshold_pct: f64,
    /// Idle confidence.
    pub idle_confidence: f64,
    /// Wall time, seconds.
    pub elapsed_s: f64,
    /// Every arm.
    pub arms: Vec<ArmReport>,
}

/// What [`run`] needs from `forecast-eval`'s options.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    /// The trace's path, for the report.
    pub trace: &'a Path,
    /// Validated settings.
    pub config: ForecastConfig,
    /// Time between origins, seconds.
    pub step_s: u32,
    /// The prior blend-out hours to sweep.
    pub blend_h: &'a [f64],
    /// Evaluate every k-th box only, k = ⌈boxes / N⌉ (all stay peers).
    pub max_boxes: Option<usize>,
}

impl PeriodReport {
    fn new(period: &'static str, t: &Tally) -> Self {
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        let answered = t.answered.figures();
        Self {
            period,
            scorable_points: t.scorable,
            answered_share: ratio(answered.map_or(0, |f| f.points) as f64, t.scorable as f64)
                .unwrap_or(0.0),
            answered,
            paired: t.paired.figures(),
            idle_precision: ratio(t.idle.both_h, t.idle.predicted_h),
            idle_recall: ratio(t.idle.both_h, t.idle.actual_h),
        }
    }
}

/// The arms for a sweep of blend-out hours: from nothing, then for each the
/// peers' prior with and without the level shift.
pub fn arms(blend_h: &[f64]) -> Vec<Arm> {
    std::iter::once(Arm::Nothing)
        .chain(blend_h.iter().map(|&blend_h| Arm::Peers { blend_h }))
        .chain(blend_h.iter().map(|&blend_h| Arm::PeersNoShift { blend_h }))
        .collect()
}

/// Runs the cold-start backtest on `series` (progress on stderr).
pub fn evaluate(
    series: &[Series],
    options: &Options<'_>,
    started: Instant,
) -> Result<Report, EvalError> {
    if options.step_s == 0 {
        return Err(EvalError::ZeroStep);
    }
    if let Some(bad) = options.blend_h.iter().find(|h| h.is_nan() || **h <= 0.0) {
        return Err(EvalError::BlendHours(*bad));
    }
    let mut sites = eval::sites(series);
    if sites.is_empty() {
        return Err(EvalError::NoPeers(options.trace.to_path_buf()));
    }
    if let Some(max) = options.max_boxes {
        let all: Vec<(usize, usize)> = sites
            .iter()
            .enumerate()
            .flat_map(|(s, site)| (0..site.boxes.len()).map(move |b| (s, b)))
            .collect();
        let every = all.len().div_ceil(max.max(1)).max(1);
        for site in &mut sites {
            site.joining.clear();
        }
        for (s, b) in all.into_iter().step_by(every) {
            sites[s].joining.push(b);
        }
        sites.retain(|s| !s.joining.is_empty());
    }
    eprintln!(
        "cold start: {} sites, {} joining boxes",
        sites.len(),
        sites.iter().map(|s| s.joining.len()).sum::<usize>()
    );
    let arms = arms(options.blend_h);
    let backtest = ColdStart {
        config: options.config.clone(),
        step_ms: i64::from(options.step_s) * 1_000,
        arms: arms.clone(),
    };
    let totals: Totals = backtest.run(&sites, |done, total| {
        eprintln!(
            "evaluated {done}/{total} sites ({:.1}s)",
            started.elapsed().as_secs_f64()
        );
    });
    let config = &options.config;
    Ok(Report {
        trace: options.trace.display().to_string(),
        sites: sites.len(),
        boxes: totals.boxes,
        joins: totals.joins,
        full_week_joins: totals.full_week_joins,
        join_rule: JOIN_RULE,
        reference: REFERENCE,
        no_forecast: NO_FORECAST,
        prior_rebuilt: "at every origin, from the other boxes' forecasts at that origin",
        slot_len_s: config.slot_len_s,
        horizon_s: config.horizon_s,
        step_s: options.step_s,
        idle_threshold_pct: config.idle_threshold_pct,
        idle_confidence: config.idle_confidence,
        elapsed_s: started.elapsed().as_secs_f64(),
        arms: arms
            .iter()
            .zip(&totals.tallies)
            .map(|(arm, t)| {
                let (name, blend) = match arm {
                    Arm::Nothing => ("from_nothing", None),
                    Arm::Peers { blend_h } => ("from_peers", Some(*blend_h)),
                    Arm::PeersNoShift { blend_h } => ("from_peers_unshifted", Some(*blend_h)),
                };
                ArmReport {
                    arm: name,
                    prior_blend_h: blend,
                    periods: PERIODS
                        .iter()
                        .zip(t)
                        .map(|((period, _), t)| PeriodReport::new(period, t))
                        .collect(),
                }
            })
            .collect(),
    })
}

/// Prints the report as a table.
pub fn write_table(out: &mut dyn Write, r: &Report) -> std::io::Result<()> {
    writeln!(
        out,
        "cold start: {} sites, {} boxes, {} joins ({} with 7 full days), slot {} s, horizon {} s, step {} s, idle under {}% at confidence {}, {:.1} s",
        r.sites,
        r.boxes,
        r.joins,
        r.full_week_joins,
        r.slot_len_s,
        r.horizon_s,
        r.step_s,
        r.idle_threshold_pct,
        r.idle_confidence,
        r.elapsed_s
    )?;
    writeln!(
        out,
        "{:<22} {:>7} {:<9} {:>9} {:>8} {:>7} {:>6} {:>11} {:>8} {:>9} {:>11}",
        "arm",
        "blend_h",
        "period",
        "scorable",
        "answered",
        "mae",
        "mase",
        "paired_mase",
        "coverage",
        "idle_prec",
        "idle_recall"
    )?;
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    for a in &r.arms {
        for p in &a.periods {
            let f = p.answered.as_ref();
            writeln!(
                out,
                "{:<22} {:>7} {:<9} {:>9} {:>8.3} {:>7} {:>6} {:>11} {:>8} {:>9} {:>11}",
                a.arm,
                a.prior_blend_h.map_or("-".to_string(), |h| format!("{h}")),
                p.period,
                p.scorable_points,
                p.answered_share,
                opt(f.map(|f| f.mae)),
                opt(f.and_then(|f| f.mase)),
                opt(p.paired.as_ref().and_then(|f| f.mase)),
                opt(f.map(|f| f.coverage_p10_p90)),
                opt(p.idle_precision),
                opt(p.idle_recall)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Format, read_trace};

    /// A C2TM-like trace: site 1.0 with three boxes on the same tide (1000
    /// users 08-20 UTC, 100 at night, a little noise; so 100 % and 10 % of
    /// each box's max), its fog aggregate, and five days of hourly samples.
    fn trace(dir: &Path) -> Vec<Series> {
        let mut csv = String::from("fog_id,unix_ts,users\n");
        for hour in 0..5 * 24 {
            let day = (8..20).contains(&(hour % 24));
            let mut fog = 0;
            for b in 0..3 {
                let noise = (hour * 7_919 + b * 104_729) % 41 - 20;
                let users = if day { 1_000 } else { 100 } + noise;
                fog += users;
                csv += &format!("rrh_1.0_{b}.0,{},{users}\n", 1_345_075_200 + hour * 3_600);
            }
            csv += &format!("fog_1.0,{},{fog}\n", 1_345_075_200 + hour * 3_600);
        }
        let path = dir.join("c2tm.csv");
        std::fs::write(&path, csv).unwrap();
        read_trace(&path, &Format::C2tm.mapping()).unwrap()
    }

    fn options<'a>(path: &'a Path, blend_h: &'a [f64]) -> Options<'a> {
        Options {
            trace: path,
            config: ForecastConfig {
                horizon_s: 86_400,
                ..ForecastConfig::default()
            },
            step_s: 3 * 3_600,
            blend_h,
            max_boxes: None,
        }
    }

    #[test]
    fn the_peers_prior_wins_a_new_boxs_first_day() {
        let dir = tempfile::tempdir().unwrap();
        let series = trace(dir.path());
        let report = evaluate(&series, &options(dir.path(), &[48.0]), Instant::now()).unwrap();
        assert_eq!(
            (report.sites, report.boxes),
            (1, 3),
            "the fog aggregate is no box"
        );
        assert!(
            report.joins >= 6,
            "joins from the 3rd day: {}",
            report.joins
        );
        let day_one = |arm: &str| {
            let a = report.arms.iter().find(|a| a.arm == arm).unwrap();
            &a.periods[0]
        };
        let (nothing, peers) = (day_one("from_nothing"), day_one("from_peers"));
        assert_eq!(nothing.period, "first_24h");
        assert_eq!(nothing.scorable_points, peers.scorable_points);
        assert_eq!(
            peers.answered_share, 1.0,
            "the prior answers from the first origin"
        );
        assert!(nothing.answered_share < 1.0, "no history, no forecast");
        // From nothing, a box that has seen a few night hours forecasts a flat
        // night and calls the day idle; the peers know the tide (their bands
        // are still wide after two days, hence a modest recall).
        let (precision, recall) = (
            |p: &PeriodReport| p.idle_precision.unwrap(),
            |p: &PeriodReport| p.idle_recall.unwrap(),
        );
        assert!(
            precision(peers) > precision(nothing) + 0.2 && recall(peers) > recall(nothing),
            "idle precision and recall: peers {} {} against nothing {} {}",
            precision(peers),
            recall(peers),
            precision(nothing),
            recall(nothing)
        );
        let mase = |f: &Option<Figures>| f.as_ref().and_then(|f| f.mase).unwrap();
        assert!(
            mase(&peers.paired) < 0.5 * mase(&nothing.answered),
            "MASE on the same slots: peers {} against nothing {}",
            mase(&peers.paired),
            mase(&nothing.answered)
        );
    }

    #[test]
    fn the_json_names_every_figure() {
        let dir = tempfile::tempdir().unwrap();
        let series = trace(dir.path());
        let mut options = options(dir.path(), &[24.0, 96.0]);
        options.max_boxes = Some(1);
        let report = evaluate(&series, &options, Instant::now()).unwrap();
        let json = serde_json::to_value(&report).unwrap();
        for key in [
            "sites",
            "boxes",
            "joins",
            "full_week_joins",
            "join_rule",
            "reference",
        ] {
            assert!(json.get(key).is_some(), "no `{key}` in {json}");
        }
        let arms = json["arms"].as_array().unwrap();
        let names: Vec<(&str, Option<f64>)> = arms
            .iter()
            .map(|a| (a["arm"].as_str().unwrap(), a["prior_blend_h"].as_f64()))
            .collect();
        assert_eq!(
            names,
            [
                ("from_nothing", None),
                ("from_peers", Some(24.0)),
                ("from_peers", Some(96.0)),
                ("from_peers_unshifted", Some(24.0)),
                ("from_peers_unshifted", Some(96.0)),
            ]
        );
        let p = &arms[1]["periods"][1];
        assert_eq!(p["period"], "first_7d");
        for key in [
            "scorable_points",
            "answered_share",
            "idle_precision",
            "idle_recall",
        ] {
            assert!(p.get(key).is_some(), "no `{key}` in {p}");
        }
        for key in ["mae", "mase", "coverage_p10_p90", "idle_recall"] {
            assert!(
                p["answered"].get(key).is_some(),
                "no answered `{key}` in {p}"
            );
            assert!(p["paired"].get(key).is_some(), "no paired `{key}` in {p}");
        }
    }

    #[test]
    fn sites_come_from_rrh_names_and_bad_input_is_named() {
        assert_eq!(eval::site_of("rrh_11.0_2.0"), Some("11.0"));
        assert_eq!(eval::site_of("fog_11.0"), None);
        assert_eq!(eval::site_of("rrh_3"), None);
        let lone = vec![Series {
            node: "rrh_1.0_0.0".to_string(),
            points: vec![(0, 1.0)],
        }];
        let path = Path::new("lone.csv");
        let err = evaluate(&lone, &options(path, &[48.0]), Instant::now()).unwrap_err();
        assert!(
            err.to_string().contains("lone.csv: no box has a site peer"),
            "{err}"
        );
        let err = evaluate(&lone, &options(path, &[0.0]), Instant::now()).unwrap_err();
        assert!(err.to_string().contains("--prior-blend-h 0"), "{err}");
    }
}
