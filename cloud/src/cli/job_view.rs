//! What `jobs show` prints: a plain sentence for the job's state
//! ([`super::job_headline`]), then the job, its checkpoint, its transfers and
//! its plan, one stretch of the plan a line with why it starts, resizes or
//! moves.

use super::job_headline::headline;
use super::{Outcome, print_json};
use crate::job::JobRecord;

pub(super) fn show(job: &JobRecord, json: bool) -> Outcome {
    if json {
        return print_json(job);
    }
    println!("{}", headline(job));
    println!();
    println!("id:         {}", job.id);
    println!("name:       {}", job.name);
    println!("state:      {}", job.state.as_str());
    println!("node:       {}", job.node.as_deref().unwrap_or("-"));
    println!(
        "exit code:  {}",
        job.exit_code.map_or("-".to_string(), |c| c.to_string())
    );
    println!("reason:     {}", job.reason.as_deref().unwrap_or("-"));
    println!("command:    {:?}", job.command);
    println!("deadline:   {}", job.deadline.to_rfc3339());
    println!("submitted:  {}", job.submitted_at.to_rfc3339());
    if let Some(t) = job.started_at {
        println!("started:    {}", t.to_rfc3339());
    }
    if let Some(t) = job.last_started_at.filter(|&t| Some(t) != job.started_at) {
        println!("last start: {}", t.to_rfc3339());
    }
    if let Some(w) = &job.start_window {
        // The window holds the latest start, the line above it.
        println!(
            "            in {}'s forecast idle window {} – {} (confidence {:.2}; forecast of {})",
            w.node,
            w.window.start.to_rfc3339(),
            w.window.end.to_rfc3339(),
            w.window.confidence,
            w.forecast_issued_at.to_rfc3339()
        );
    }
    if let Some(t) = job.finished_at {
        let slack = crate::job::signed_span((job.deadline - t).num_milliseconds());
        println!("finished:   {} (slack {slack})", t.to_rfc3339());
    }
    if let Some(ck) = &job.checkpoint {
        println!("checkpoint: {}", checkpoint_line(ck));
    }
    if let Some(p) = &job.plan {
        print_plan(job, p);
    }
    print_transfers(&job.checkpoint_transfers);
    if !job.output_tail.is_empty() {
        println!("output (last {} lines):", job.output_tail.len());
        for line in &job.output_tail {
            println!("  {line}");
        }
    }
    if let Some(why) = &job.output_hidden {
        println!("output:     {why}");
    }
    Ok(())
}

/// What a job's latest ended task left in its checkpoint dir, for `jobs show`.
fn checkpoint_line(ck: &tidemill_proto::CheckpointState) -> String {
    let error = ck
        .last_error
        .as_deref()
        .map_or_else(String::new, |e| format!(" (last error: {e})"));
    let held = format!("{} files, {:.1} MB", ck.files, ck.bytes as f64 / 1e6);
    match (ck.saved_by_task, ck.files) {
        (true, _) => format!("{held}, saved by its last task"),
        (false, 0) => format!("none saved{error}"),
        (false, _) => format!("none saved by its last task{error}; {held} kept from before"),
    }
}

/// A job's checkpoint transfers, for `jobs show`: each leg's size, rate,
/// time and the step it carried, which a task resumed from.
fn print_transfers(transfers: &[crate::store::TransferRecord]) {
    if transfers.is_empty() {
        return;
    }
    println!("checkpoint transfers:");
    for t in transfers {
        let resent = match t.resent_chunks {
            0 => String::new(),
            n => format!(", {n} chunks sent again after a bad hash"),
        };
        let resumed = if t.moved_bytes < t.bytes {
            format!(
                " ({} moved, the rest held from a cut transfer)",
                t.moved_bytes
            )
        } else {
            String::new()
        };
        println!(
            "  {} → {}: step {}, {} bytes{resumed} in {:.2} s at {:.2} Mb/s{resent}",
            t.from,
            t.to,
            t.step,
            t.bytes,
            t.seconds,
            t.rate_bps() * 8.0 / 1e6
        );
    }
}

fn print_plan(job: &JobRecord, p: &crate::job::PlanView) {
    let time = |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or("-".into(), |t| t.to_rfc3339());
    if job.state.is_terminal() {
        println!(
            "last plan before the job ended ({}):",
            p.decided_at.to_rfc3339()
        );
    } else {
        println!("plan ({}):", p.decided_at.to_rfc3339());
    }
    println!("  verdict:  {}", p.verdict.as_str());
    println!("  shape:    {}", shape_line(p));
    println!("  start:    {}", time(p.expected_start));
    println!("  finish:   {}", time(p.expected_finish));
    if let Some(s) = p.step {
        println!(
            "  step:     {:.3} s (compute {:.3} s, sync {:.3} s); staging {:.1} s",
            s.total_s, s.compute_s, s.sync_s, p.staging_s
        );
    }
    println!("  cloud:    {:.2}", unsigned_zero(p.cloud_cost));
    println!("  reason:   {}", p.reason);
    for (k, seg) in p.segments.iter().enumerate() {
        let why = stretch_why(k.checked_sub(1).map(|j| &p.segments[j]), seg);
        println!("  stretch {}: {}; {why}", k + 1, stretch_line(seg));
    }
    if let Some(w) = &job.work {
        println!(
            "  progress: {:.0} of {:.0} iterations ({}), {:.0} s run",
            job.done_iters,
            w.iterations,
            job.progress.as_str(),
            job.attained_s
        );
        if let Some(r) = job.measured_ips {
            println!("  rate:     {r:.4} iterations/s, measured from the job's reports");
        }
    }
}

/// The kind of placement and its nodes, in words.
fn shape_line(p: &crate::job::PlanView) -> String {
    use tidemill_sched::Shape;
    let kind = match p.shape {
        Shape::None => return "nothing planned".into(),
        Shape::Cloud => "the cloud",
        Shape::Edge => "one edge node",
        Shape::MultiEdge => "several edge nodes",
        Shape::EdgeThenCloud => "edge windows, then the cloud",
    };
    format!("{kind}: {}", p.nodes.join(", "))
}

/// `x`, with a negative zero (a sum of nothing but `-0.0`s) shown as zero.
fn unsigned_zero(x: f64) -> f64 {
    if x == 0.0 { 0.0 } else { x }
}

/// One stretch of a plan for `jobs show`: from when to when, where and on
/// how many workers, and what it costs and does.
fn stretch_line(s: &tidemill_sched::Segment) -> String {
    let time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms).map_or_else(
            || format!("{ms} ms"),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
    };
    let on: Vec<String> =
        s.on.iter()
            .map(|a| format!("{}×{}", a.node_id, a.workers))
            .collect();
    format!(
        "{} → {} UTC on {}: {:.0} iterations at {:.3} s a step after {:.1} s of start-up, cost {:.2}",
        time(s.start_ms),
        time(s.end_ms),
        on.join(", "),
        s.iters,
        s.step.total_s,
        s.startup_s,
        unsigned_zero(s.cloud_cost)
    )
}

/// Why a stretch differs from the one before it: where the plan resizes,
/// moves or pauses, each paid as a checkpoint and a restart.
fn stretch_why(prev: Option<&tidemill_sched::Segment>, s: &tidemill_sched::Segment) -> String {
    let workers = |s: &tidemill_sched::Segment| s.on.iter().map(|a| a.workers).sum::<u32>();
    let within = |a: &tidemill_sched::Segment, b: &tidemill_sched::Segment| {
        a.on.iter()
            .all(|x| b.on.iter().any(|y| y.node_id == x.node_id))
    };
    let site = |s: &tidemill_sched::Segment| {
        if s.cloud_cost > 0.0 {
            "the cloud"
        } else {
            "idle edge capacity"
        }
    };
    match prev {
        None => format!("starts on {}", site(s)),
        Some(p) if p.on == s.on && s.start_ms > p.end_ms => {
            "resumes where it paused (restart)".into()
        }
        Some(p) if p.on == s.on => "continues".into(),
        Some(p) if workers(s) > workers(p) && within(p, s) => format!(
            "grows from {} to {} workers as capacity frees (checkpoint and restart)",
            workers(p),
            workers(s)
        ),
        Some(p) if workers(s) < workers(p) && within(s, p) => format!(
            "shrinks from {} to {} workers as capacity is taken (checkpoint and restart)",
            workers(p),
            workers(s)
        ),
        Some(p) => format!(
            "moves from {} to {} (checkpoint transfer and restart)",
            site(p),
            site(s)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemill_sched::cost::StepTime;
    use tidemill_sched::{Assignment, Segment};

    #[test]
    fn a_stretch_says_when_where_how_wide_and_what_it_does() {
        let seg = Segment {
            start_ms: 1_767_225_600_000,
            end_ms: 1_767_229_200_000,
            on: vec![
                Assignment {
                    node_id: "e1".into(),
                    workers: 1,
                },
                Assignment {
                    node_id: "e2".into(),
                    workers: 2,
                },
            ],
            startup_s: 30.5,
            step: StepTime {
                compute_s: 0.4,
                sync_s: 0.2,
                total_s: 0.5,
            },
            iters: 7139.0,
            cloud_cost: 0.0,
        };
        assert_eq!(
            stretch_line(&seg),
            "2026-01-01 00:00:00 → 2026-01-01 01:00:00 UTC on e1×1, e2×2: 7139 iterations at 0.500 s a step after 30.5 s of start-up, cost 0.00"
        );
        assert_eq!(stretch_why(None, &seg), "starts on idle edge capacity");
    }

    #[test]
    fn a_stretch_says_why_it_resizes_moves_or_resumes() {
        let on = |nodes: &[(&str, u32)], start_ms: i64, cost: f64| Segment {
            start_ms,
            end_ms: start_ms + 1_000,
            on: nodes
                .iter()
                .map(|&(n, w)| Assignment {
                    node_id: n.into(),
                    workers: w,
                })
                .collect(),
            startup_s: 30.0,
            step: StepTime {
                compute_s: 0.1,
                sync_s: 0.0,
                total_s: 0.1,
            },
            iters: 10.0,
            cloud_cost: cost,
        };
        let one = on(&[("c2", 1)], 0, 1.0);
        let two = on(&[("c1", 1), ("c2", 1)], 1_000, 2.0);
        assert_eq!(
            stretch_why(Some(&one), &two),
            "grows from 1 to 2 workers as capacity frees (checkpoint and restart)"
        );
        assert_eq!(
            stretch_why(Some(&two), &on(&[("c1", 1)], 2_000, 1.0)),
            "shrinks from 2 to 1 workers as capacity is taken (checkpoint and restart)"
        );
        assert_eq!(
            stretch_why(Some(&one), &on(&[("c2", 1)], 1_000, 1.0)),
            "continues"
        );
        assert_eq!(
            stretch_why(Some(&one), &on(&[("c2", 1)], 5_000, 1.0)),
            "resumes where it paused (restart)"
        );
        assert_eq!(
            stretch_why(
                Some(&on(&[("e1", 1)], 0, 0.0)),
                &on(&[("c1", 1)], 1_000, 1.0)
            ),
            "moves from idle edge capacity to the cloud (checkpoint transfer and restart)"
        );
    }

    #[test]
    fn no_field_prints_a_rust_none_or_a_negative_zero() {
        let mut p = crate::job::PlanView {
            decided_at: chrono::DateTime::from_timestamp_millis(0).unwrap(),
            verdict: tidemill_sched::Verdict::BestEffort,
            action: tidemill_sched::Action::Wait,
            shape: tidemill_sched::Shape::None,
            nodes: Vec::new(),
            expected_start: None,
            expected_finish: None,
            step: None,
            staging_s: 0.0,
            cloud_cost: -0.0,
            reason: "r".into(),
            segments: Vec::new(),
        };
        assert_eq!(shape_line(&p), "nothing planned");
        assert_eq!(format!("{:.2}", unsigned_zero(p.cloud_cost)), "0.00");
        p.shape = tidemill_sched::Shape::EdgeThenCloud;
        p.nodes = vec!["e1".into(), "c1".into()];
        assert_eq!(shape_line(&p), "edge windows, then the cloud: e1, c1");
    }
}
