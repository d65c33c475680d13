//! The sweep's SVG line charts, in the style of EdgeFlow's sensitivity
//! figures: for each varied key and each figure (deadline satisfaction,
//! `edge_gain`, harvested idle share, cloud GPU-hours), the figure against the
//! key's values, one line per policy. The other keys are held at the
//! scenario's own value when the grid has it, else at their first value; the
//! caption says which.

use std::path::Path;

use super::Row;
use super::grid::Axis;
use crate::line_chart::{self, DrawResult, Frame, Line};

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
    let ys: Vec<f64> = rows.iter().filter_map(|r| (f.value)(r)).collect();
    let y_lo = ys.iter().copied().fold(0.0, f64::min);
    let y_hi = ys.iter().copied().fold(0.0, f64::max);
    let pad = ((y_hi - y_lo) * 0.08).max(1e-3);
    let trace_name = Path::new(trace)
        .file_name()
        .map_or(String::new(), |s| s.to_string_lossy().into_owned());
    let caption = if held.is_empty() {
        format!("{} vs {} ({trace_name})", f.label, axis.key.name())
    } else {
        format!("{} vs {} ({trace_name}; {held})", f.label, axis.key.name())
    };
    let lines: Vec<Line<'_>> = policies
        .iter()
        .map(|&p| {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.metrics.policy == p)
                .filter_map(|r| Some((value_of(r, axis)?, (f.value)(r)?)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Line { label: p, points }
        })
        .collect();
    let frame = Frame {
        caption: &caption,
        x_desc: axis.key.name(),
        y_desc: f.label,
        x: (xs[0], xs[xs.len() - 1]),
        y: (y_lo - if y_lo < 0.0 { pad } else { 0.0 })..(y_hi + pad),
        dots: true,
    };
    line_chart::draw(path, &frame, &lines)
}
