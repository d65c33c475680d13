//! Which nodes a plan takes: its own first, then nodes no running job of
//! its rank holds, before one it would have to clear; and what a job that
//! must leave a box still idle is told.

#[allow(dead_code)]
mod common;

use common::*;
use tidemill_sched::*;

/// `job` running on `node` (one worker) since before now.
fn running_on(mut job: JobState, node: &str) -> JobState {
    job.progress.location = vec![Assignment {
        node_id: node.into(),
        workers: 1,
    }];
    job.progress.running = true;
    job
}

/// The node `d` starts or moves the job to now (`None` when it does neither).
fn starts_on(d: &JobDecision) -> Option<&str> {
    match &d.action {
        Action::Start { on } | Action::Migrate { to: on, .. } => Some(&on[0].node_id),
        _ => None,
    }
}

#[test]
fn a_job_takes_a_free_node_before_one_a_running_job_holds() {
    // Two alike one-GPU cloud nodes. Job 1 (200 000 it, 8.2 h on one A100)
    // runs on c1; job 2 (20 000 it, 49 min) arrives, shorter, so it is
    // planned first. c1 looks free to it (job 1 has not had its turn), but
    // taking it would move job 1 for nothing: it starts on c2, and job 1
    // continues where it is.
    let long = running_on(job(1, JobClass::Slo, NOW, NOW + 12 * H, 200_000.0), "c1");
    let short = job(2, JobClass::Slo, NOW, NOW + 3 * H, 20_000.0);
    let w = world(vec![cloud("c1", 1), cloud("c2", 1)], vec![long, short]);
    let plan = schedule(&w, NOW, &Policy::default());
    let (d1, d2) = (plan.decision(1).unwrap(), plan.decision(2).unwrap());
    assert_eq!(d1.action, Action::Continue, "{}", d1.explanation.reason);
    assert_eq!(starts_on(d2), Some("c2"), "{}", d2.explanation.reason);
    // Alone, a running job on the second node stays there, though the first is free.
    let alone = running_on(job(1, JobClass::Slo, NOW, NOW + 12 * H, 200_000.0), "c2");
    let w = world(vec![cloud("c1", 1), cloud("c2", 1)], vec![alone]);
    let d = schedule(&w, NOW, &Policy::default())
        .decision(1)
        .unwrap()
        .clone();
    assert_eq!(d.action, Action::Continue, "{}", d.explanation.reason);
}

#[test]
fn a_job_takes_an_idle_box_before_one_a_job_of_its_rank_runs_on() {
    // Two alike T4 boxes idle all night. A job runs on e1; a shorter one of
    // the same class arrives and is planned first. It takes e2, and the
    // running job keeps e1: best-effort beside best-effort, and a deadline
    // job beside a deadline job.
    let night = [(NOW, NOW + 12 * H)];
    for class in [JobClass::BestEffort, JobClass::Slo] {
        let old = running_on(job(1, class, NOW, NOW + 40 * H, 30_000.0), "e1");
        let new = job(2, class, NOW, NOW + 10 * H, 20_000.0);
        let w = world(
            vec![edge("e1", 1, &night, 10.0), edge("e2", 1, &night, 10.0)],
            vec![old.clone(), new],
        );
        let plan = schedule(&w, NOW, &Policy::default());
        let (d1, d2) = (plan.decision(1).unwrap(), plan.decision(2).unwrap());
        assert_eq!(
            starts_on(d2),
            Some("e2"),
            "{class:?}: {}",
            d2.explanation.reason
        );
        assert_eq!(
            d1.action,
            Action::Continue,
            "{class:?}: {}",
            d1.explanation.reason
        );
    }
}

#[test]
fn a_best_effort_job_displaced_by_a_deadline_job_is_told_so() {
    // One T4 box idle all night, a best-effort job on it; a deadline job
    // that needs the box now takes it. The best-effort job stops, and its
    // reason says the box is still idle and who took it, not that its
    // window ends.
    let night = [(NOW, NOW + 12 * H)];
    let be = running_on(
        job(1, JobClass::BestEffort, NOW, NOW + 40 * H, 30_000.0),
        "e1",
    );
    let slo = job(2, JobClass::Slo, NOW, NOW + 10 * H, 20_000.0);
    let w = world(vec![edge("e1", 1, &night, 10.0)], vec![be, slo]);
    let plan = schedule(&w, NOW, &Policy::default());
    let (d1, d2) = (plan.decision(1).unwrap(), plan.decision(2).unwrap());
    assert_eq!(starts_on(d2), Some("e1"), "{}", d2.explanation.reason);
    assert_eq!(d1.action, Action::Pause, "{}", d1.explanation.reason);
    assert_eq!(
        d1.explanation.why.first(),
        Some(&Reason::Displaced { node: "e1".into() }),
        "{}",
        d1.explanation.reason
    );
    assert!(
        d1.explanation
            .reason
            .starts_with("e1 is still idle, but a job planned before this one took it"),
        "{}",
        d1.explanation.reason
    );
}
