//! The SVG of one node: history before an origin, the forecast band (P10-P90 and
//! P50) after it, the true values, the idle threshold, and the slots the
//! forecast calls idle, so a person can judge both the band and the windows.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use thiserror::Error;
use tidemill_forecast::{Method, Resource, SeriesForecaster, is_idle};

use crate::backtest::{Backtest, SlotMeans, origins};
use crate::trace::Series;

/// Hours of history drawn before the origin.
const HISTORY_H: i64 = 72;

/// Why the plot could not be drawn.
#[derive(Debug, Error)]
pub enum PlotError {
    /// The node is not in the trace.
    #[error("--plot-node {node}: no such node in the trace; it has e.g. {examples}")]
    UnknownNode {
        /// The node asked for.
        node: String,
        /// A few node ids that exist.
        examples: String,
    },
    /// The node has no origin with a day of history before it.
    #[error(
        "--plot-node {node}: fewer than 24 h of data, so there is no origin to plot; pick a node with more history"
    )]
    TooShort {
        /// The node.
        node: String,
    },
    /// Drawing or writing failed.
    #[error("{path}: cannot draw the plot: {reason}")]
    Draw {
        /// The SVG file.
        path: PathBuf,
        /// The cause.
        reason: String,
    },
}

/// Draws `node`'s forecast by `method` at `origin_s` (trace seconds; default the
/// last origin followed by a full horizon of data) into `path`.
pub fn plot_node(
    series: &[Series],
    node: &str,
    backtest: &Backtest,
    method: Method,
    origin_s: Option<f64>,
    path: &Path,
) -> Result<(), PlotError> {
    let s = series
        .iter()
        .find(|s| s.node == node)
        .ok_or_else(|| PlotError::UnknownNode {
            node: node.to_string(),
            examples: series
                .iter()
                .take(5)
                .map(|s| s.node.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let too_short = || PlotError::TooShort {
        node: node.to_string(),
    };
    let (first, last) = (
        s.points.first().ok_or_else(too_short)?.0,
        s.points.last().ok_or_else(too_short)?.0,
    );
    let config = &backtest.config;
    let horizon_ms = i64::from(config.horizon_s) * 1_000;
    let origin = match origin_s {
        Some(o) => (o * 1_000.0).round() as i64,
        None => origins(first, last, backtest.step_ms)
            .take_while(|o| o + horizon_ms <= last)
            .last()
            .or_else(|| origins(first, last, backtest.step_ms).last())
            .ok_or_else(too_short)?,
    };
    let mut model = SeriesForecaster::new(Resource::Cpu, config.clone()).expect("validated config");
    for (t, v) in s.points.iter().filter(|p| p.0 < origin) {
        let _ = model.update(*t, *v);
    }
    let forecast = model.forecast(method, origin);
    let slot_ms = config.slot_len_ms();
    let start = model.forecast_start_ms(origin);
    let hours = |t: i64| (t - origin) as f64 / 3.6e6;
    let actual = SlotMeans::new(&s.points, slot_ms);
    let truth: Vec<(f64, f64)> = ((origin - HISTORY_H * 3_600_000) / slot_ms
        ..(origin + horizon_ms) / slot_ms)
        .filter_map(|slot| actual.get(slot).map(|v| (hours(slot * slot_ms), v)))
        .collect();
    let band: Vec<(f64, f64, f64, f64)> = forecast
        .slots
        .iter()
        .enumerate()
        .filter_map(|(i, q)| q.map(|q| (hours(start + i as i64 * slot_ms), q.p10, q.p50, q.p90)))
        .collect();
    let slot_h = slot_ms as f64 / 3.6e6;
    let idle: Vec<f64> = forecast
        .slots
        .iter()
        .enumerate()
        .filter(|(_, q)| {
            q.is_some_and(|q| is_idle(&q, config.idle_threshold_pct, config.idle_confidence))
        })
        .map(|(i, _)| hours(start + i as i64 * slot_ms))
        .collect();
    let idle = Idle {
        starts_h: &idle,
        slot_h,
        threshold_pct: config.idle_threshold_pct,
    };
    draw(
        path,
        node,
        method,
        &truth,
        &band,
        &idle,
        hours(origin + horizon_ms),
    )
    .map_err(|e| PlotError::Draw {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The slots forecast idle (their start, hours from the origin) and the
/// threshold they are judged against.
struct Idle<'a> {
    starts_h: &'a [f64],
    slot_h: f64,
    threshold_pct: f64,
}

fn draw(
    path: &Path,
    node: &str,
    method: Method,
    truth: &[(f64, f64)],
    band: &[(f64, f64, f64, f64)],
    idle: &Idle<'_>,
    end_h: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1200, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{node}: {method} forecast (P10-P90 band, P50) and truth"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-(HISTORY_H as f64)..end_h, 0.0..100.0)?;
    chart
        .configure_mesh()
        .x_desc("hours from forecast origin")
        .y_desc("utilisation %")
        .draw()?;
    let idle_fill = GREEN.mix(0.12);
    chart
        .draw_series(
            idle.starts_h
                .iter()
                .map(|&h| Rectangle::new([(h, 0.0), (h + idle.slot_h, 100.0)], idle_fill.filled())),
        )?
        .label("forecast idle")
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], idle_fill.filled()));
    let threshold = idle.threshold_pct;
    chart
        .draw_series(DashedLineSeries::new(
            [(-(HISTORY_H as f64), threshold), (end_h, threshold)],
            6,
            4,
            RGBColor(0, 120, 0).stroke_width(1),
        ))?
        .label(format!("idle threshold {threshold:.0}%"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(0, 120, 0)));
    let upper = band.iter().map(|b| (b.0, b.3));
    let lower = band.iter().rev().map(|b| (b.0, b.1));
    chart.draw_series(std::iter::once(Polygon::new(
        upper.chain(lower).collect::<Vec<_>>(),
        BLUE.mix(0.2),
    )))?;
    chart
        .draw_series(LineSeries::new(
            band.iter().map(|b| (b.0, b.2)),
            BLUE.stroke_width(2),
        ))?
        .label("P50")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(truth.iter().copied(), BLACK))?
        .label("truth")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, 0.0), (0.0, 100.0)],
        RED,
    )))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
