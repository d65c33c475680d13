//! Every registered policy on the live coordinator's path: a snapshot in, a
//! round plan out, through [`SnapshotDriver`].

// The builders only; the plan executor there serves scheduler_guarantee.rs
// and scheduler_rounds.rs.
#[allow(dead_code)]
mod common;

use common::{H, cloud, edge, job, world};
use tidemill_sched::policies::{PolicyName, SnapshotDriver};
use tidemill_sched::*;

fn driver(name: PolicyName) -> SnapshotDriver {
    SnapshotDriver::new(name, Policy::default())
}

fn on(plan: &RoundPlan, job: u64) -> Vec<String> {
    match &plan.decision(job).unwrap().action {
        Action::Start { on } => on.iter().map(|a| a.node_id.clone()).collect(),
        a => panic!("expected a start, got {a:?}"),
    }
}

#[test]
fn every_policy_name_parses_back_and_an_unknown_one_lists_them() {
    for p in PolicyName::ALL {
        assert_eq!(p.as_str().parse::<PolicyName>(), Ok(p));
        assert!(!p.summary().is_empty());
    }
    let err = "tidal".parse::<PolicyName>().unwrap_err().to_string();
    assert!(
        err.starts_with(
            "unknown policy \"tidal\": expected one of tidemill, edgeflow, elasticflow"
        ),
        "{err}"
    );
}

#[test]
fn tidemill_is_the_tidal_scheduler_on_the_snapshot_as_it_is() {
    let w = world(
        vec![cloud("c", 1), edge("e", 1, &[(0, 24 * H)], 10.0)],
        vec![job(1, JobClass::Slo, 0, 10 * H, 1000.0)],
    );
    let plan = driver(PolicyName::Tidemill).plan(&w, 0);
    assert_eq!(plan, schedule(&w, 0, &Policy::default()));
}

/// One idle T4 box `e`, one A100 node `c` (EdgeFlow sizes edge speed against
/// one cloud GPU) behind a 100 Mb/s, 30 ms cloud-edge link, and job 1 of
/// 1000 iterations, due at `deadline_ms`.
fn box_and_cloud(deadline_ms: i64) -> WorldSnapshot {
    let mut w = world(
        vec![cloud("c", 1), edge("e", 1, &[(0, 24 * H)], 10.0)],
        vec![job(1, JobClass::Slo, 0, deadline_ms, 1000.0)],
    );
    w.links.cloud_edge = cost::LinkSpec {
        bandwidth_bps: 12.5e6,
        latency_s: 0.03,
        loss: 0.0,
        congestion: cost::Congestion::LossBased,
    };
    w
}

#[test]
fn edgeflow_starts_a_job_on_an_idle_edge_and_keeps_it_there() {
    // 1000 iterations at 1 it/s on one T4 take 1000 s; the deadline is 10 h.
    let mut w = box_and_cloud(10 * H);
    let mut d = driver(PolicyName::Edgeflow);
    let plan = d.plan(&w, 0);
    assert_eq!(on(&plan, 1), ["e"]);
    let first = plan.decision(1).unwrap();
    assert_eq!(first.explanation.shape, Shape::Edge);
    assert!(
        first
            .explanation
            .reason
            .starts_with("edgeflow starts it on e"),
        "{first:?}"
    );
    // The segment runs the rest at the cost model's step: staging the 1 GB
    // dataset from the cloud over a 100 Mb/s, 30 ms cloud-edge link
    // (80 s + 30 ms), the 30 s restart, then 1000 steps of 1 s; no cloud spend.
    let s = &first.segments[0];
    assert!((s.step.total_s - 1.0).abs() < 1e-12, "{s:?}");
    assert!((s.startup_s - (80.03 + 30.0)).abs() < 1e-9, "{s:?}");
    assert_eq!((s.end_ms, s.cloud_cost), (1_110_030, 0.0));
    // Next round the job runs there: it continues.
    w.jobs[0].progress = Progress {
        done_iters: 100.0,
        attained_s: 200.0,
        location: vec![Assignment {
            node_id: "e".into(),
            workers: 1,
        }],
        running: true,
        startup_left_s: 0.0,
    };
    let plan = d.plan(&w, 200_000);
    assert_eq!(plan.decision(1).unwrap().action, Action::Continue);
    assert_eq!(plan.decision(1).unwrap().segments[0].iters, 900.0);
}

#[test]
fn elasticflow_uses_the_cloud_only_and_turns_away_what_cannot_finish() {
    // Job 1: 1000 iterations, 10 h; job 2: 10^9 iterations by 1 h, which no
    // share of one A100 node can do.
    let w = world(
        vec![cloud("c", 8), edge("e", 1, &[(0, 24 * H)], 10.0)],
        vec![
            job(1, JobClass::Slo, 0, 10 * H, 1000.0),
            job(2, JobClass::Slo, 0, H, 1e9),
        ],
    );
    let plan = driver(PolicyName::Elasticflow).plan(&w, 0);
    assert_eq!(on(&plan, 1), ["c"]);
    let one = plan.decision(1).unwrap();
    assert!(
        matches!(one.verdict, Verdict::Guaranteed { since_ms: 0 }),
        "{one:?}"
    );
    assert_eq!(one.explanation.shape, Shape::Cloud);
    let two = plan.decision(2).unwrap();
    assert_eq!(
        (&two.action, two.verdict),
        (&Action::Reject, Verdict::Rejected)
    );
    assert!(
        two.explanation
            .reason
            .contains("elasticflow turned it away"),
        "{two:?}"
    );
}

#[test]
fn cloud_only_never_plans_on_an_edge() {
    let w = world(
        vec![edge("e", 1, &[(0, 24 * H)], 10.0)],
        vec![job(1, JobClass::Slo, 0, 10 * H, 1000.0)],
    );
    let plan = driver(PolicyName::CloudOnly).plan(&w, 0);
    assert_eq!(plan.decision(1).unwrap().action, Action::Reject);
}

#[test]
fn edgeflow_without_a_cloud_class_waits_and_a_stale_report_reads_the_forecast() {
    // No cloud node: EdgeFlow cannot size the edge (λ is relative to a cloud
    // GPU), so nothing fits anywhere; the job waits, nothing overflows.
    let lone = world(
        vec![edge("e", 1, &[(0, 24 * H)], 10.0)],
        vec![job(1, JobClass::Slo, 0, 10 * H, 1000.0)],
    );
    let plan = driver(PolicyName::Edgeflow).plan(&lone, 0);
    assert_eq!(plan.decision(1).unwrap().action, Action::Wait);
    // An edge with no load now (its report predates the slot in progress)
    // inside a forecast window counts as idle; outside one it does not.
    let stale = |windows: &[(i64, i64)]| {
        let mut e = edge("e", 1, windows, 0.0);
        if let NodeKind::Edge(av) = &mut e.kind {
            av.util_now_pct = None;
        }
        world(
            vec![cloud("c", 1), e],
            vec![job(1, JobClass::Slo, 0, 10 * H, 1000.0)],
        )
    };
    let inside = driver(PolicyName::Edgeflow).plan(&stale(&[(0, 24 * H)]), 0);
    assert_eq!(on(&inside, 1), ["e"]);
    let outside = driver(PolicyName::Edgeflow).plan(&stale(&[(2 * H, 24 * H)]), 0);
    assert_eq!(on(&outside, 1), ["c"]);
}

#[test]
fn a_baseline_keeps_its_decision_until_something_it_reacts_to_happens() {
    // As in the test above, the job takes 1 110.03 s on the box (staging,
    // restart, 1000 steps of 1 s), but its deadline is 1 200 s away: EdgeFlow
    // puts it on the box at 0 s. Asked again at 120 s, the box could no
    // longer finish it (120 + 1 110.03 > 1 200) and it would go to the cloud.
    let mut w = box_and_cloud(1_200_000);
    let mut d = driver(PolicyName::Edgeflow);
    assert_eq!(on(&d.plan(&w, 0), 1), ["e"]);
    // Its start has not taken yet, and nothing else happened: the decision
    // is issued again, once a minute, for 3 rounds.
    for round in 1..=3 {
        assert_eq!(on(&d.plan(&w, round * 60_000), 1), ["e"], "round {round}");
    }
    // A fourth round off its placement: EdgeFlow is asked again.
    assert_eq!(on(&d.plan(&w, 240_000), 1), ["c"]);
    // A fresh driver, and an arrival at 120 s: asked again at once.
    let mut d = driver(PolicyName::Edgeflow);
    assert_eq!(on(&d.plan(&w, 0), 1), ["e"]);
    w.jobs.push(job(2, JobClass::Slo, 120_000, 10 * H, 1000.0));
    assert_eq!(on(&d.plan(&w, 120_000), 1), ["c"]);
}
