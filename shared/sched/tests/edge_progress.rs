//! Issue 29's rules for turning edge hours into met deadlines, each on a
//! small hand-built world: two grades of edge capacity, segments that end
//! when their window does, running jobs first, and a waiting job that gains
//! ground on a free box with its cloud tail past the horizon.

#[allow(dead_code)]
mod common;

use common::*;
use tidemill_sched::*;

/// 18:00 on day 0, on a slot boundary.
const NOW: i64 = 18 * H;

fn on_e1() -> Vec<Assignment> {
    vec![Assignment {
        node_id: "e1".into(),
        workers: 1,
    }]
}

/// Queue admission, shortest remaining time first, no running ahead.
fn queue() -> Policy {
    Policy {
        admission: AdmissionMode::Queue,
        best_effort_order: BestEffortOrder::ShortestRemainingTime,
        run_ahead: false,
        ..Policy::default()
    }
}

/// e1 has no P90 window, but its P50 forecast sees it idle for 8 h from
/// now: a best-effort job runs there, and no promise rests on it.
#[test]
fn plans_without_a_promise_use_the_likely_grade_and_promises_do_not() {
    let mut e1 = edge("e1", 1, &[], 10.0);
    if let NodeKind::Edge(av) = &mut e1.kind {
        av.likely = vec![Window {
            start_ms: NOW,
            end_ms: NOW + 8 * H,
            confidence: 0.6,
        }];
    }
    let best_effort = job(1, JobClass::BestEffort, NOW, NOW + 40 * H, 1e6);
    let d = schedule(&world(vec![e1.clone()], vec![best_effort]), NOW, &queue())
        .decision(1)
        .unwrap()
        .clone();
    assert_eq!(
        d.action,
        Action::Start { on: on_e1() },
        "{}",
        d.explanation.reason
    );
    // The last segment ends at the P50 window's end less the grace.
    let p = queue();
    assert_eq!(d.segments.last().unwrap().end_ms, NOW + 8 * H - p.grace_ms);
    // 3 600 it need 1 h on the T4: a reservation would rest on the P50
    // window alone, so reserve admission turns the job away.
    let reserve = Policy {
        admission: AdmissionMode::Reserve,
        ..queue()
    };
    let slo = job(2, JobClass::Slo, NOW, NOW + 4 * H, 3_600.0);
    let d = schedule(&world(vec![e1], vec![slo]), NOW, &reserve)
        .decision(2)
        .unwrap()
        .clone();
    assert_eq!(d.verdict, Verdict::Rejected, "{}", d.explanation.reason);
}

/// A certain window from 18:00 to 20:07 with a 2-minute grace: edge work may
/// go on to 20:05, inside the 20:00–20:15 slot, not only to 20:00.
#[test]
fn a_segment_ends_when_its_window_ends_not_at_the_last_whole_slot() {
    let end = NOW + 2 * H + 7 * 60_000;
    let p = queue();
    let w = world(
        vec![edge("e1", 1, &[(NOW, end)], 10.0)],
        vec![job(1, JobClass::BestEffort, NOW, NOW + 40 * H, 1e6)],
    );
    let d = schedule(&w, NOW, &p).decision(1).unwrap().clone();
    assert_eq!(d.segments.len(), 1, "{:?}", d.segments);
    assert_eq!(d.segments[0].end_ms, end - p.grace_ms);
}

/// Job 1 runs on e1 (10 000 it ≈ 2.8 h on the T4, due in 6 h). Job 2
/// arrives shorter (2 000 it ≈ 35 min with staging, due in 1 h) and would
/// come first in shortest-remaining-time order; e1 is the only box. Job 1's
/// stay still meets its deadline, so it keeps e1 and job 2 waits.
#[test]
fn a_running_job_whose_stay_meets_its_deadline_keeps_its_box_from_a_shorter_arrival() {
    let nodes = vec![edge("e1", 1, &[(NOW, NOW + 8 * H)], 10.0)];
    let mut running = job(1, JobClass::Slo, NOW - H, NOW + 6 * H, 13_600.0);
    running.progress = Progress {
        done_iters: 3_600.0,
        attained_s: 3_600.0,
        location: on_e1(),
        running: true,
        startup_left_s: 0.0,
    };
    let arrival = job(2, JobClass::Slo, NOW, NOW + H, 2_000.0);
    let plan = schedule(&world(nodes, vec![running, arrival]), NOW, &queue());
    let d1 = plan.decision(1).unwrap();
    assert_eq!(d1.action, Action::Continue, "{}", d1.explanation.reason);
    let d2 = plan.decision(2).unwrap();
    assert!(d2.segments.is_empty(), "{}", d2.explanation.reason);
}

/// One A100, taken now by job 1 (20 000 it ≈ 49 min). Job 2 (40 000 it, due
/// in 3 h) cannot finish on the T4 alone, and with a 1-hour horizon no cloud
/// tail fits this round's grid (it needs about 1.5 h of the A100). Priced
/// past the horizon, the tail still meets the deadline, so job 2 gains
/// ground on e1 now instead of waiting.
#[test]
fn a_waiting_job_gains_ground_on_a_free_box_with_its_tail_past_the_horizon() {
    let p = Policy {
        horizon_ms: H,
        ..queue()
    };
    let w = world(
        vec![cloud("c1", 1), edge("e1", 1, &[(NOW, NOW + 8 * H)], 10.0)],
        vec![
            job(1, JobClass::Slo, NOW, NOW + 3 * H, 20_000.0),
            job(2, JobClass::Slo, NOW, NOW + 3 * H, 40_000.0),
        ],
    );
    let plan = schedule(&w, NOW, &p);
    let d2 = plan.decision(2).unwrap();
    assert_eq!(
        d2.action,
        Action::Start { on: on_e1() },
        "{}",
        d2.explanation.reason
    );
    assert_eq!(d2.explanation.shape, Shape::EdgeThenCloud);
    let tail = d2.segments.last().unwrap();
    assert_eq!(tail.on[0].node_id, "c1");
    assert!(tail.start_ms >= NOW + H, "the tail is past the horizon");
    assert_eq!(tail.end_ms, NOW + 3 * H);
}

/// e1's P50 forecast sees it idle for 8 h from now, and it turned idle
/// `ago` before now after a busy spell: the likely grade opens only once it
/// has stayed idle for the 30-minute dwell. A box never seen busy has no
/// flip to wait out, and a P90 (sure) window needs no dwell.
#[test]
fn the_likely_grade_waits_out_the_dwell_after_a_box_turns_idle() {
    let p = queue();
    assert_eq!(p.likely_dwell_ms, 30 * 60_000);
    let run = |idle_since: Option<i64>, sure: &[(i64, i64)]| {
        let mut e1 = edge("e1", 1, sure, 10.0);
        if let NodeKind::Edge(av) = &mut e1.kind {
            av.likely = vec![Window {
                start_ms: NOW,
                end_ms: NOW + 8 * H,
                confidence: 0.6,
            }];
            av.idle_since_ms = idle_since;
        }
        let best_effort = job(1, JobClass::BestEffort, NOW, NOW + 40 * H, 1e6);
        schedule(&world(vec![e1], vec![best_effort]), NOW, &p)
            .decision(1)
            .unwrap()
            .clone()
    };
    let ten_min = 10 * 60_000;
    let d = run(Some(NOW - ten_min), &[]);
    assert_eq!(d.action, Action::Wait, "{}", d.explanation.reason);
    // The plan starts when the dwell ends, 20 minutes on: at the next slot
    // that starts after it (18:30).
    assert_eq!(
        d.segments.first().map(|s| s.start_ms),
        Some(NOW + 30 * 60_000)
    );
    let d = run(Some(NOW - 40 * 60_000), &[]);
    assert_eq!(
        d.action,
        Action::Start { on: on_e1() },
        "{}",
        d.explanation.reason
    );
    let d = run(None, &[]);
    assert_eq!(
        d.action,
        Action::Start { on: on_e1() },
        "{}",
        d.explanation.reason
    );
    let d = run(Some(NOW - ten_min), &[(NOW, NOW + 8 * H)]);
    assert_eq!(
        d.action,
        Action::Start { on: on_e1() },
        "{}",
        d.explanation.reason
    );
}

/// Two idle boxes, a job of 3 600 iterations on one or two workers, a model
/// small enough that syncing costs nothing: one box takes 1 h (1 it/s), two
/// take 3 600 / 1.9 = 1 895 s (1.9 it/s together, T4_M) but hold 3 789
/// device-seconds. Due at 22:00, one box finishes near 19:00, before
/// 22:00 − 0.2 × 4 h = 21:12: the fewest device-seconds win, one box. Due at
/// 19:09, one box would end after 19:09 − 0.2 × 1.15 h = 18:55:12: the
/// earliest finish wins, two boxes.
#[test]
fn a_plan_with_time_to_spare_takes_the_fewest_device_seconds() {
    let boxes = || {
        vec![
            edge("e1", 1, &[(NOW, NOW + 12 * H)], 10.0),
            edge("e2", 1, &[(NOW, NOW + 12 * H)], 10.0),
        ]
    };
    let workers = |due_ms: i64| {
        let mut j = job(1, JobClass::Slo, NOW, due_ms, 3_600.0);
        j.spec.max_workers = 2;
        j.spec.model_bytes = 1_000;
        let d = schedule(&world(boxes(), vec![j]), NOW, &queue())
            .decision(1)
            .unwrap()
            .clone();
        match &d.action {
            Action::Start { on } => on.len(),
            other => panic!("{other:?}: {}", d.explanation.reason),
        }
    };
    assert_eq!(workers(NOW + 4 * H), 1);
    assert_eq!(workers(NOW + H + 9 * 60_000), 2);
}

/// Four boxes on one measured LAN (1e9 B/s, no latency), a job of 1e8 B of
/// gradients planned on two of them: alone on the LAN its ring syncs in
/// 2(n − 1)/n × M / B = 0.1 s a step; with a running job syncing on the
/// other two, the LAN is shared by k = 2 and the sync takes 0.2 s.
#[test]
fn a_plan_on_a_busy_lan_prices_it_shared() {
    let boxes: Vec<NodeSpec> = ["e1", "e2", "e3", "e4"]
        .iter()
        .map(|id| edge(id, 1, &[(NOW, NOW + 12 * H)], 10.0))
        .collect();
    let mut links = LinkTable::default();
    for (i, a) in boxes.iter().enumerate() {
        for b in &boxes[i + 1..] {
            links.measured.push(MeasuredLink {
                a: a.id.clone(),
                b: b.id.clone(),
                link: link(1e9, 0.0),
            });
        }
    }
    let mut new = job(1, JobClass::Slo, NOW, NOW + H + 9 * 60_000, 3_600.0);
    new.spec.max_workers = 2;
    let mut running = job(2, JobClass::BestEffort, NOW - H, NOW + 40 * H, 1e6);
    running.spec.max_workers = 2;
    running.progress.running = true;
    running.progress.location = ["e3", "e4"]
        .iter()
        .map(|id| Assignment {
            node_id: id.to_string(),
            workers: 1,
        })
        .collect();
    let sync_s = |jobs: Vec<JobState>| {
        let mut w = world(boxes.clone(), jobs);
        w.links = links.clone();
        let d = schedule(&w, NOW, &queue()).decision(1).unwrap().clone();
        assert_eq!(d.segments[0].on.len(), 2, "{}", d.explanation.reason);
        d.segments[0].step.sync_s
    };
    let alone = sync_s(vec![new.clone()]);
    let shared = sync_s(vec![new, running]);
    assert!((alone - 0.1).abs() < 1e-9, "{alone}");
    assert!((shared - 0.2).abs() < 1e-9, "{shared}");
}
