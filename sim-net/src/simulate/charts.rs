//! `--plot DIR`: `dsr.svg`, deadline satisfaction across policies, and per
//! policy `timeline-POLICY.svg`: hourly device use (cloud GPUs, edge devices)
//! against the edge's truly idle devices, with the schedule of the first jobs
//! underneath (one row per job, cloud and edge stints in their own colours).

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use thiserror::Error;

use super::Setup;
use super::engine::Outcome;
use super::metrics::PolicyMetrics;
use super::usage::HOUR_MS;

/// Jobs drawn in the schedule panel.
const GANTT_JOBS: usize = 60;

/// A chart that could not be written.
#[derive(Debug, Error)]
pub enum ChartError {
    /// The directory or a file could not be written.
    #[error("{path}: cannot write the chart: {reason}; check --plot")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        reason: String,
    },
}

use crate::line_chart::DrawResult;

/// Writes every chart into `dir`; `idle` is the edge's truly idle devices
/// by hour ([`idle_by_hour`](super::usage::idle_by_hour)).
pub fn write_all(
    dir: &Path,
    setup: &Setup,
    idle: &[f64],
    metrics: &[PolicyMetrics],
    outcomes: &[Outcome],
) -> Result<(), ChartError> {
    let fail = |path: &Path, reason: String| ChartError::Write {
        path: path.to_path_buf(),
        reason,
    };
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e.to_string()))?;
    let path = dir.join("dsr.svg");
    dsr_bars(&path, metrics).map_err(|e| fail(&path, e.to_string()))?;
    for (m, o) in metrics.iter().zip(outcomes) {
        let path = dir.join(format!("timeline-{}.svg", m.policy));
        timeline(&path, setup, idle, &m.policy, o).map_err(|e| fail(&path, e.to_string()))?;
    }
    Ok(())
}

fn dsr_bars(path: &Path, metrics: &[PolicyMetrics]) -> DrawResult {
    let root = SVGBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = metrics.len();
    let mut chart = ChartBuilder::on(&root)
        .caption("deadline satisfaction ratio by policy", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..1.0)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => {
                metrics.get(*i).map_or(String::new(), |m| m.policy.clone())
            }
            _ => String::new(),
        })
        .y_desc("met deadlines / jobs")
        .draw()?;
    chart.draw_series(metrics.iter().enumerate().map(|(i, m)| {
        let color = if m.policy == "tidemill" {
            BLUE
        } else {
            RGBColor(120, 120, 120)
        };
        Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), m.deadline_satisfaction_ratio),
            ],
            color.mix(0.8).filled(),
        )
    }))?;
    chart.draw_series(metrics.iter().enumerate().map(|(i, m)| {
        Text::new(
            format!("{:.3}", m.deadline_satisfaction_ratio),
            (
                SegmentValue::CenterOf(i),
                m.deadline_satisfaction_ratio + 0.03,
            ),
            ("sans-serif", 14).into_font(),
        )
    }))?;
    root.present()?;
    Ok(())
}

/// `idle`: the edge's truly idle devices by hour
/// ([`idle_by_hour`](super::usage::idle_by_hour)).
fn timeline(path: &Path, setup: &Setup, idle: &[f64], policy: &str, o: &Outcome) -> DrawResult {
    let root = SVGBackend::new(path, (1200, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(420);
    let (t0, _) = setup.world.window;
    let end = setup.world.end_ms;
    let hours = |t: i64| (t - t0) as f64 / 3.6e6;
    usage_panel(&top, setup, idle, policy, o, end, &hours)?;
    schedule_panel(&bottom, setup, o, hours(end), &hours)?;
    root.present()?;
    Ok(())
}

fn usage_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    setup: &Setup,
    idle_by_hour: &[f64],
    policy: &str,
    o: &Outcome,
    end: i64,
    hours: &dyn Fn(i64) -> f64,
) -> DrawResult {
    let model = &setup.world.model;
    let edge_total: u32 = model
        .nodes()
        .iter()
        .filter(|n| !n.is_cloud())
        .map(|n| n.devices)
        .sum();
    let top = f64::from(model.cloud_gpus().max(edge_total).max(1)) * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{policy}: devices in use, and edge devices truly idle"),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..hours(end), 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("hours")
        .y_desc("devices")
        .draw()?;
    let t0 = setup.world.window.0;
    let idle: Vec<(f64, f64)> = idle_by_hour
        .iter()
        .enumerate()
        .map(|(h, &n)| (hours(t0 + h as i64 * HOUR_MS), n))
        .collect();
    chart
        .draw_series(std::iter::once(Polygon::new(
            idle.iter()
                .copied()
                .chain(idle.last().map(|l| (l.0, 0.0)))
                .chain(idle.first().map(|f| (f.0, 0.0)))
                .collect::<Vec<_>>(),
            GREEN.mix(0.15),
        )))?
        .label("edge devices truly idle")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], GREEN.mix(0.3).filled()));
    let steps = |f: fn(&super::engine::UsageSample) -> u32| {
        let mut pts = Vec::with_capacity(o.usage.len() * 2);
        let mut last = 0.0;
        for u in &o.usage {
            pts.push((hours(u.t_ms), last));
            last = f64::from(f(u));
            pts.push((hours(u.t_ms), last));
        }
        pts
    };
    chart
        .draw_series(LineSeries::new(steps(|u| u.cloud), BLUE))?
        .label("cloud GPUs in use")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(steps(|u| u.edge), RGBColor(0, 130, 0)))?
        .label("edge devices in use")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RGBColor(0, 130, 0)));
    crate::line_chart::legend(&mut chart)
}

fn schedule_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    setup: &Setup,
    o: &Outcome,
    end_h: f64,
    hours: &dyn Fn(i64) -> f64,
) -> DrawResult {
    let n = o.jobs.len().min(GANTT_JOBS);
    let last_h = o
        .stints
        .iter()
        .filter(|s| s.job < n)
        .map(|s| hours(s.end_ms))
        .fold(1.0, f64::max)
        .min(end_h);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "schedule of the first {n} jobs (blue: cloud, green: edge, red mark: deadline)"
            ),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..last_h, 0.0..n as f64)?;
    chart
        .configure_mesh()
        .x_desc("hours")
        .y_desc("job")
        .draw()?;
    let model = &setup.world.model;
    chart.draw_series(o.stints.iter().filter(|s| s.job < n).map(|s| {
        let on_cloud = s
            .place
            .iter()
            .any(|p| model.nodes()[p.0 as usize].is_cloud());
        let color = if on_cloud { BLUE } else { RGBColor(0, 130, 0) };
        let y = s.job as f64;
        Rectangle::new(
            [(hours(s.start_ms), y + 0.15), (hours(s.end_ms), y + 0.85)],
            color.mix(0.7).filled(),
        )
    }))?;
    chart.draw_series(
        o.jobs
            .iter()
            .take(n)
            .enumerate()
            .filter(|(_, j)| j.slo())
            .map(|(i, j)| {
                let x = hours(j.spec.deadline_ms).min(last_h);
                PathElement::new(
                    vec![(x, i as f64), (x, i as f64 + 1.0)],
                    RED.stroke_width(2),
                )
            }),
    )?;
    Ok(())
}
