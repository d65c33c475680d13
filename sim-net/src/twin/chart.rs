//! `twin --svg`: the deadline satisfaction ratio over the slice, live
//! against simulated. At each deadline, the share of the jobs due by then
//! that met theirs, so the line ends at the run's DSR and shows when the
//! two runs parted.

use std::path::Path;

use tidemill_sched::{JobClass, JobSpec};

use super::TwinError;
use super::report::met;
use crate::line_chart::{self, Frame, Line};
use crate::simulate::policies::JobRun;

/// When `spec` is due, as the twin submits it: an SLO job at its deadline;
/// a best-effort job at its deadline if the trace gives one within the run,
/// else at the run's end (`end_ms`).
pub fn due_ms(spec: &JobSpec, end_ms: i64) -> i64 {
    match spec.class {
        JobClass::Slo => spec.deadline_ms,
        JobClass::BestEffort if spec.deadline_ms > spec.submitted_ms => {
            spec.deadline_ms.min(end_ms)
        }
        JobClass::BestEffort => end_ms,
    }
}

/// The cumulative DSR of `runs` over time: one point per distinct due time,
/// at hours after `start_ms`, of (jobs met among those due by then) / (jobs
/// due by then). A job counts as met as `simulate` counts it ([`met`]).
pub fn dsr_over_time(runs: &[JobRun], start_ms: i64, end_ms: i64) -> Vec<(f64, f64)> {
    let mut due: Vec<(i64, bool)> = runs
        .iter()
        .map(|r| (due_ms(&r.spec, end_ms), met(r)))
        .collect();
    due.sort_by_key(|d| d.0);
    let mut points: Vec<(f64, f64)> = Vec::new();
    let mut last_t = None;
    let mut hit = 0usize;
    for (k, &(t, m)) in due.iter().enumerate() {
        hit += usize::from(m);
        let point = ((t - start_ms) as f64 / 3.6e6, hit as f64 / (k + 1) as f64);
        if last_t == Some(t) {
            *points.last_mut().expect("a point at the last time") = point;
        } else {
            points.push(point);
        }
        last_t = Some(t);
    }
    points
}

/// Writes the chart of `lines` (label and job runs each) into `path`.
pub fn write_svg(
    path: &Path,
    policy: &str,
    lines: &[(&str, &[JobRun])],
    start_ms: i64,
    end_ms: i64,
) -> Result<(), TwinError> {
    let lines: Vec<Line<'_>> = lines
        .iter()
        .map(|&(label, runs)| Line {
            label,
            points: dsr_over_time(runs, start_ms, end_ms),
        })
        .collect();
    let last = lines
        .iter()
        .filter_map(|l| l.points.last())
        .map(|p| p.0)
        .fold(0.0, f64::max);
    let caption = format!("{policy}: deadline satisfaction over time, live against simulated");
    let frame = Frame {
        caption: &caption,
        x_desc: "hours from the slice's first submission",
        y_desc: "DSR of the jobs due so far",
        x: (0.0, last.max(1e-3)),
        y: 0.0..1.05,
        dots: false,
    };
    line_chart::draw(path, &frame, &lines)
        .map_err(|e| TwinError::Svg(path.to_path_buf(), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::policies::JobStatus;

    const H: i64 = 3_600_000;

    /// An SLO job due at `deadline_h`, finished at `finish_h` (if ever).
    fn slo(deadline_h: i64, finish_h: Option<i64>) -> JobRun {
        let mut spec = crate::simulate::testkit::job("m").spec;
        spec.class = JobClass::Slo;
        spec.submitted_ms = 0;
        spec.deadline_ms = deadline_h * H;
        let mut r = JobRun::new(spec, 1);
        r.finish_ms = finish_h.map(|h| h * H);
        if r.finish_ms.is_some() {
            r.status = JobStatus::Done;
        }
        r
    }

    #[test]
    fn the_dsr_over_time_counts_the_jobs_due_by_each_deadline() {
        let mut be = slo(0, Some(7));
        be.spec.class = JobClass::BestEffort;
        let runs = [
            slo(4, Some(5)), // late: missed at 4 h
            slo(2, Some(1)), // met at 2 h
            slo(4, Some(3)), // met at 4 h, with the late one
            slo(6, None),    // never finished
            be,              // no deadline: due at the end (8 h), finished
        ];
        assert_eq!(
            dsr_over_time(&runs, H, 9 * H),
            vec![
                (1.0, 1.0),
                (3.0, 2.0 / 3.0),
                (5.0, 2.0 / 4.0),
                (8.0, 3.0 / 5.0)
            ]
        );
        assert!(dsr_over_time(&[], 0, H).is_empty());
    }
}
