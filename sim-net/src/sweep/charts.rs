//! The sweep's SVG line charts, in the style of EdgeFlow's sensitivity
//! figures: for each varied key and each figure (deadline satisfaction,
//! `edge_gain`, harvested idle share, cloud GPU-hours), the figure against the
//! key's values, one line per policy. The other keys are held at the
//! scenario's own value when the grid has it, else at their first value; the
//! caption says which.

use std::path::Path;

use plotters::prelude::*;

use super::Row;
use super::grid::Axis;

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// One charted figure: file stem, axis label, and how to read it off a row.
struct Figure {
    stem: &'static str,
    label: &'static str,
    value: fn(&Row) -> Option<f64>,
}

const FIGURES: [Figure; 4] = [
    Figure {
        stem: "dsr",
        label: "deadline satisfaction ratio",
        value: |r| Some(r.metrics.deadline_satisfaction_ratio),
    },
    Figure {
        stem: "edge-gain",
        label: "edge_gain (DSR with edge − without)",
        value: |r| r.metrics.edge_gain,
    },
    Figure {
        stem: "harvested",
        label: "harvested idle edge share",
        value: |r| Some(r.metrics.harvested_idle_share),
    },
    Figure {
        stem: "cloud-gpu-hours",
        label: "cloud GPU-hours",
        value: |r| Some(r.metrics.cloud_gpu_hours),
    },
];

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Writes every chart into `dir`; `bases` are the values the other keys are
/// held at. Returns how many charts were written.
pub fn write_all(
    dir: &Path,
    axes: &[Axis],
    bases: &[f64],
    rows: &[Row],
) -> Result<usize, Box<dyn std::error::Error>> {
    let mut traces: Vec<&str> = rows.iter().map(|r| r.trace.as_str()).collect();
    traces.dedup();
    let mut written = 0;
    for trace in &traces {
        let suffix = if traces.len() > 1 {
            let stem = Path::new(trace)
                .file_stem()
                .map_or(String::new(), |s| s.to_string_lossy().into_owned());
            format!("-{stem}")
        } else {
            String::new()
        };
        for (k, axis) in axes.iter().enumerate() {
            let held: Vec<(usize, f64)> = axes
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != k)
                .map(|(i, a)| {
                    let b = if a.values.contains(&bases[i]) {
                        bases[i]
                    } else {
                        a.values[0]
                    };
                    (i, b)
                })
                .collect();
            let slice: Vec<&Row> = rows
                .iter()
                .filter(|r| r.trace == *trace)
                .filter(|r| held.iter().all(|&(i, b)| value_of(r, &axes[i]) == Some(b)))
                .collect();
            let held_text: Vec<String> = held
                .iter()
                .map(|&(i, b)| format!("{}={b}", axes[i].key.name()))
                .collect();
            for f in &FIGURES {
                let path = dir.join(format!("{}-vs-{}{suffix}.svg", f.stem, axis.key.name()));
                draw(&path, axis, f, &slice, &held_text.join(", "), trace)?;
                written += 1;
            }
        }
    }
    Ok(written)
}

fn value_of(r: &Row, a: &Axis) -> Option<f64> {
    r.point
        .get(a.key.name())
        .and_then(serde_json::Value::as_f64)
}

fn draw(
    path: &Path,
    axis: &Axis,
    f: &Figure,
    rows: &[&Row],
    held: &str,
    trace: &str,
) -> DrawResult {
    let mut policies: Vec<&str> = Vec::new();
    for r in rows {
        if !policies.contains(&r.metrics.policy.as_str()) {
            policies.push(&r.metrics.policy);
        }
    }
    let mut xs = axis.values.clone();
    xs.sort_by(f64::total_cmp);
    let (x0, x1) = (xs[0], xs[xs.len() - 1]);
    let ys: Vec<f64> = rows.iter().filter_map(|r| (f.value)(r)).collect();
    let y_lo = ys.iter().copied().fold(0.0, f64::min);
    let y_hi = ys.iter().copied().fold(0.0, f64::max);
    let pad = ((y_hi - y_lo) * 0.08).max(1e-3);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let trace_name = Path::new(trace)
        .file_name()
        .map_or(String::new(), |s| s.to_string_lossy().into_owned());
    let caption = if held.is_empty() {
        format!("{} vs {} ({trace_name})", f.label, axis.key.name())
    } else {
        format!("{} vs {} ({trace_name}; {held})", f.label, axis.key.name())
    };
    let log = x0 > 0.0 && x1 / x0 >= 8.0;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(caption, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60);
    let y_range = (y_lo - if y_lo < 0.0 { pad } else { 0.0 })..(y_hi + pad);
    let series = |p: &str| -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.metrics.policy == p)
            .filter_map(|r| Some((value_of(r, axis)?, (f.value)(r)?)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    };
    macro_rules! plot {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(axis.key.name())
                .y_desc(f.label)
                .draw()?;
            for (i, p) in policies.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                let pts = series(p);
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                    .label(*p)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart.draw_series(
                    pts.into_iter()
                        .map(move |(x, y)| Circle::new((x, y), 3, color.filled())),
                )?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }};
    }
    if log {
        plot!(builder.build_cartesian_2d((x0..x1).log_scale(), y_range)?);
    } else {
        let span = (x1 - x0).max(1e-9);
        plot!(builder.build_cartesian_2d((x0 - span * 0.02)..(x1 + span * 0.02), y_range)?);
    }
    root.present()?;
    Ok(())
}
