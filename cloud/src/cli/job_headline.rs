//! The first line of `jobs show`: the job's state in one plain sentence, with
//! no admission terms, before the labelled detail.

use chrono::{DateTime, Utc};

use crate::job::{JobPhase, JobRecord};

/// One plain sentence for where `job` is now: where it runs and since when,
/// when it should finish against its deadline, why it waits, or how it ended.
pub(super) fn headline(job: &JobRecord) -> String {
    let end = job.finished_at.unwrap_or(job.deadline);
    match job.state {
        JobPhase::Queued => waiting(job),
        JobPhase::Running => running(job),
        JobPhase::Succeeded => format!("succeeded at {}, {}", at(end), against(job, end)),
        JobPhase::Failed => match job.exit_code {
            Some(code) => format!("failed at {} with exit code {code}", at(end)),
            None => format!("failed at {}: it could not run", at(end)),
        },
        JobPhase::Cancelled => format!("cancelled at {}", at(end)),
        JobPhase::Rejected => format!("turned away at {}: the reason follows", at(end)),
    }
}

fn running(job: &JobRecord) -> String {
    let since = job.last_started_at.or(job.started_at);
    let on = match (job.node.as_deref(), job.plan.as_ref()) {
        (_, Some(p)) if p.nodes.len() > 1 => p.nodes.join(", "),
        (Some(node), _) => node.to_string(),
        (None, _) => "its nodes".to_string(),
    };
    let mut line = match since {
        Some(t) => format!("running on {on} since {}", at(t)),
        None => format!("running on {on}"),
    };
    if let (Some(first), Some(last)) = (job.started_at, since)
        && last > first
    {
        let how = match job.checkpoint_transfers.last() {
            Some(t) if Some(t.to.as_str()) == job.node.as_deref() => {
                format!("moved here with its checkpoint of step {}", t.step)
            }
            _ => "restarted".to_string(),
        };
        line += &format!(" ({how}; first started {})", at(first));
    }
    match job.plan.as_ref().and_then(|p| p.expected_finish) {
        Some(f) => line + &format!(", expected to finish at {}, {}", at(f), against(job, f)),
        None => line + &format!("; its deadline is {}", at(job.deadline)),
    }
}

fn waiting(job: &JobRecord) -> String {
    let paused = job.started_at.is_some();
    let what = if paused { "paused" } else { "waiting" };
    if let Some(node) = &job.node {
        return format!("{what}: assigned to {node}, which has not started it yet");
    }
    let Some(plan) = &job.plan else {
        return format!("{what}: no node fits it yet; it is tried again each round");
    };
    match (plan.expected_start, plan.expected_finish) {
        (Some(s), Some(f)) => format!(
            "{what}: planned to {} on {} at {}, to finish at {}, {}",
            if paused { "resume" } else { "start" },
            plan.nodes.join(", "),
            at(s),
            at(f),
            against(job, f)
        ),
        _ => {
            format!("{what}: no free capacity meets its deadline yet; it is tried again each round")
        }
    }
}

/// How far `t` is from the job's deadline, in words.
fn against(job: &JobRecord, t: DateTime<Utc>) -> String {
    let ms = (job.deadline - t).num_milliseconds();
    if ms >= 0 {
        format!("{} before its deadline", span(ms))
    } else {
        format!("{} after its deadline", span(-ms))
    }
}

/// A time as the first line shows it, to the minute.
fn at(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A non-negative span in days, hours and minutes: `2 h 05 m`, `1 d 3 h`,
/// `12 m` (rounded down to the minute).
fn span(ms: i64) -> String {
    let minutes = ms.max(0) / 60_000;
    let (d, h, m) = (minutes / 1_440, minutes / 60 % 24, minutes % 60);
    match (d, h) {
        (0, 0) => format!("{m} m"),
        (0, _) => format!("{h} h {m:02} m"),
        _ => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::PlanView;
    use crate::store::TransferRecord;
    use tidemill_sched::{Action, Shape, Verdict};

    fn t(h: i64, m: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_767_225_600_000 + (h * 60 + m) * 60_000).unwrap()
    }

    fn job(state: &str) -> JobRecord {
        serde_json::from_value(serde_json::json!({
            "id": 7, "name": "j", "state": state, "node": null, "exit_code": null,
            "output_tail": [], "reason": "queued until a plan (admission = queue)",
            "command": ["true"], "env": {}, "deadline": t(6, 15),
            "submitted_at": t(0, 0), "started_at": null, "finished_at": null,
            "cancel_requested": false, "class": "slo", "work": null, "done_iters": 0.0,
            "attained_s": 0.0, "plan": null
        }))
        .unwrap()
    }

    fn plan(nodes: &[&str], start: Option<DateTime<Utc>>, finish: DateTime<Utc>) -> PlanView {
        PlanView {
            decided_at: t(0, 0),
            verdict: Verdict::Guaranteed { since_ms: 0 },
            action: Action::Wait,
            shape: Shape::Edge,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            expected_start: start,
            expected_finish: Some(finish),
            step: None,
            staging_s: 0.0,
            cloud_cost: -0.0,
            reason: "guaranteed (admission = queue, promise_lead_h)".into(),
            segments: Vec::new(),
        }
    }

    #[test]
    fn a_waiting_job_says_why_in_plain_words() {
        let mut j = job("queued");
        assert_eq!(
            headline(&j),
            "waiting: no node fits it yet; it is tried again each round"
        );
        j.plan = Some(plan(&[], None, t(9, 0)));
        j.plan.as_mut().unwrap().expected_finish = None;
        assert_eq!(
            headline(&j),
            "waiting: no free capacity meets its deadline yet; it is tried again each round"
        );
        j.plan = Some(plan(&["e2"], Some(t(1, 50)), t(4, 10)));
        assert_eq!(
            headline(&j),
            "waiting: planned to start on e2 at 2026-01-01 01:50 UTC, to finish at 2026-01-01 04:10 UTC, 2 h 05 m before its deadline"
        );
        j.started_at = Some(t(0, 30));
        assert!(headline(&j).starts_with("paused: planned to resume on e2"));
        j.node = Some("e3".into());
        assert_eq!(
            headline(&j),
            "paused: assigned to e3, which has not started it yet"
        );
    }

    #[test]
    fn a_running_job_says_where_since_when_and_its_finish_against_the_deadline() {
        let mut j = job("running");
        j.node = Some("e2".into());
        j.started_at = Some(t(1, 50));
        j.last_started_at = j.started_at;
        j.plan = Some(plan(&["e2"], Some(t(1, 50)), t(7, 0)));
        assert_eq!(
            headline(&j),
            "running on e2 since 2026-01-01 01:50 UTC, expected to finish at 2026-01-01 07:00 UTC, 45 m after its deadline"
        );
        j.plan = None;
        assert_eq!(
            headline(&j),
            "running on e2 since 2026-01-01 01:50 UTC; its deadline is 2026-01-01 06:15 UTC"
        );
    }

    #[test]
    fn a_moved_job_says_it_came_with_its_checkpoint_and_when_it_first_started() {
        let mut j = job("running");
        j.node = Some("e3".into());
        j.started_at = Some(t(0, 27));
        j.last_started_at = Some(t(2, 10));
        j.checkpoint_transfers = vec![TransferRecord {
            t_ms: 0,
            from: "e2".into(),
            to: "e3".into(),
            step: 1200,
            bytes: 10,
            moved_bytes: 10,
            seconds: 1.0,
            resent_chunks: 0,
        }];
        j.plan = Some(plan(&["e3"], Some(t(2, 10)), t(4, 10)));
        assert_eq!(
            headline(&j),
            "running on e3 since 2026-01-01 02:10 UTC (moved here with its checkpoint of step 1200; first started 2026-01-01 00:27 UTC), expected to finish at 2026-01-01 04:10 UTC, 2 h 05 m before its deadline"
        );
        j.checkpoint_transfers.clear();
        assert!(headline(&j).contains("(restarted; first started"));
    }

    #[test]
    fn an_ended_job_says_how_and_when_it_ended() {
        let mut j = job("succeeded");
        j.finished_at = Some(t(3, 0));
        assert_eq!(
            headline(&j),
            "succeeded at 2026-01-01 03:00 UTC, 3 h 15 m before its deadline"
        );
        j.finished_at = Some(t(32, 0));
        assert_eq!(
            headline(&j),
            "succeeded at 2026-01-02 08:00 UTC, 1 d 1 h after its deadline"
        );
        let mut f = job("failed");
        f.finished_at = Some(t(3, 0));
        f.exit_code = Some(2);
        assert_eq!(
            headline(&f),
            "failed at 2026-01-01 03:00 UTC with exit code 2"
        );
        for state in [
            "queued",
            "running",
            "succeeded",
            "failed",
            "cancelled",
            "rejected",
        ] {
            let line = headline(&job(state));
            for jargon in ["None", "-0.00", "admission", "promise_lead_h"] {
                assert!(!line.contains(jargon), "{state}: {line}");
            }
        }
    }
}
