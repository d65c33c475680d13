//! The scheduler round by round on hand-built worlds: running ahead on free
//! capacity, each-round and queue admission, and elastic plans that change a
//! job's worker count.

#[allow(dead_code)]
mod common;

use common::*;
use tidemill_sched::*;

/// With `run_ahead`, a guaranteed job idle now runs on capacity nothing
/// holds now, and keeps its reservation as the guarantee; a job reserved on
/// one GPU widens for the slot in progress to where it does more work.
#[test]
fn run_ahead_uses_free_capacity_now_and_keeps_the_reservation() {
    let ahead = Policy {
        run_ahead: true,
        ..policy()
    };
    // The edge job of the first test waits for its night window; the free
    // A100s run it now, and the night window stays its reservation.
    let w = world(
        vec![cloud("c1", 8), edge("e1", 1, &[NIGHT], 90.0)],
        vec![job(1, JobClass::Slo, NOW, 32 * H, 20_000.0)],
    );
    let off = schedule(&w, NOW, &policy()).decision(1).unwrap().clone();
    let on = schedule(&w, NOW, &ahead).decision(1).unwrap().clone();
    assert_eq!(off.action, Action::Wait);
    assert!(
        matches!(&on.action, Action::Start { on } if on[0].node_id == "c1"),
        "{:?}",
        on.action
    );
    assert_eq!(on.segments, off.segments, "the reservation is unchanged");
    assert!(
        matches!(on.explanation.why.last(), Some(Reason::RunsAhead { .. })),
        "{}",
        on.explanation.reason
    );
    // A cloud job reserved on 1 of 8 free GPUs (the cheapest: 1/6.8 GPU-s
    // per iteration against 8/21.3) runs on all 8 now: 21.3 it/s, not 6.8.
    let mut wide = job(2, JobClass::Slo, NOW, 32 * H, 200_000.0);
    wide.spec.max_workers = 8;
    let w = world(vec![cloud("c1", 8)], vec![wide]);
    let off = schedule(&w, NOW, &policy()).decision(2).unwrap().clone();
    let on = schedule(&w, NOW, &ahead).decision(2).unwrap().clone();
    assert!(
        matches!(&off.action, Action::Start { on } if on[0].workers == 1),
        "{:?}",
        off.action
    );
    assert!(
        matches!(&on.action, Action::Start { on } if on[0].workers == 8),
        "{:?}",
        on.action
    );
    assert_eq!(on.segments, off.segments);
    // The stretch run ahead carries the step time to credit progress at.
    let ahead = on.ahead.as_ref().expect("a stretch run ahead");
    assert!((ahead.step.total_s - 1.0 / 21.3).abs() < 1e-12, "{ahead:?}");
    assert_eq!(ahead.on[0].workers, 8);
    assert!(off.ahead.is_none());
}

/// One A100 and one T4 idle for 8 h from `now`; two SLO jobs due in 3 h:
/// 20 000 and 40 000 iterations.
fn busy_cloud_idle_edge(now: i64) -> WorldSnapshot {
    world(
        vec![cloud("c1", 1), edge("e1", 1, &[(now, now + 8 * H)], 10.0)],
        vec![
            job(1, JobClass::Slo, now, now + 3 * H, 20_000.0),
            job(2, JobClass::Slo, now, now + 3 * H, 40_000.0),
        ],
    )
}

#[test]
fn each_round_gains_ground_on_the_edge_while_the_cloud_is_busy() {
    // One A100, taken now by the shorter job 1 (20 000 it ≈ 49 min). Job 2
    // (40 000 it, due in 3 h) cannot finish on the T4 alone (≈ 11 h), and the
    // cloud is not free now: it runs on e1 now and plans the cloud after job 1.
    let now = NOW;
    let w = busy_cloud_idle_edge(now);
    let plan = schedule(&w, now, &each_round());
    let d1 = plan.decision(1).unwrap();
    assert_eq!(
        d1.segments[0].on[0].node_id, "c1",
        "{}",
        d1.explanation.reason
    );
    let d2 = plan.decision(2).unwrap();
    assert!(
        matches!(&d2.action, Action::Start { on } if on[0].node_id == "e1"),
        "{d2:?}"
    );
    assert_eq!(
        d2.explanation.shape,
        Shape::EdgeThenCloud,
        "{}",
        d2.explanation.reason
    );
    assert!(
        matches!(d2.explanation.why.as_slice(), [.., Reason::EdgeThenCloud { edge_pct, .. }] if *edge_pct > 0.0),
        "{:?}",
        d2.explanation.why
    );
    let tail = d2.segments.last().unwrap();
    assert_eq!(tail.on[0].node_id, "c1");
    assert!(
        tail.start_ms >= d1.segments[0].end_ms,
        "the tail waits for job 1"
    );
    assert!(tail.end_ms <= now + 3 * H);
    // Without the edge, job 2 waits for the cloud.
    let plan = schedule(&world(vec![cloud("c1", 1)], w.jobs), now, &each_round());
    assert!(plan.decision(2).unwrap().segments.is_empty());
}

#[test]
fn a_running_job_stays_where_it_still_meets_its_deadline() {
    // Job 1 runs on c1; e1 is idle and could finish it for free, but moving
    // pays a checkpoint and a restart for nothing the job needs.
    let now = NOW;
    let mut j = job(1, JobClass::Slo, now - H, now + 14 * H, 20_000.0);
    j.progress = Progress {
        done_iters: 3_000.0,
        attained_s: 3_600.0,
        location: vec![Assignment {
            node_id: "c1".into(),
            workers: 1,
        }],
        running: true,
        startup_left_s: 0.0,
    };
    let nodes = vec![cloud("c1", 1), edge("e1", 1, &[(now, now + 8 * H)], 10.0)];
    let d = schedule(&world(nodes.clone(), vec![j.clone()]), now, &each_round())
        .decision(1)
        .unwrap()
        .clone();
    assert_eq!(d.action, Action::Continue, "{}", d.explanation.reason);
    assert!(
        matches!(d.explanation.why.as_slice(), [.., Reason::Stays { place, finish_ms: Some(f) }]
            if place[0].node == "c1" && *f <= now + 14 * H),
        "{:?}",
        d.explanation.why
    );
    // A deadline c1 can no longer meet alone (17 000 it at 6.8 it/s ≈ 42 min): it moves on.
    j.spec.deadline_ms = now + 30 * 60_000;
    let d = schedule(&world(nodes, vec![j]), now, &each_round())
        .decision(1)
        .unwrap()
        .clone();
    assert!(
        !matches!(d.explanation.why.as_slice(), [.., Reason::Stays { .. }]),
        "{:?}",
        d.explanation.why
    );
}

#[test]
fn a_multi_edge_placement_stays_inside_one_site() {
    // Sites {e1, e2} and {f1, f2}: 10 Gb/s inside a site, 10 Mb/s between
    // sites. 32 400 it need 9 h on one T4 but the window has 8 h; a pair
    // inside one site syncs fast enough, a pair across sites does not.
    let mut j = job(1, JobClass::Slo, NOW, NOW + 14 * H, 32_400.0);
    j.spec.max_workers = 2;
    let nodes = vec![
        edge("e1", 1, &[NIGHT], 90.0),
        edge("f1", 1, &[NIGHT], 90.0),
        edge("e2", 1, &[NIGHT], 90.0),
        edge("f2", 1, &[NIGHT], 90.0),
    ];
    let lan = link(1.25e9, 0.0002);
    let mut w = world(nodes, vec![j]);
    w.links.edge_edge = link(1.25e6, 0.01);
    let across = schedule(&w, NOW, &policy()).decision(1).unwrap().clone();
    assert_eq!(
        across.verdict,
        Verdict::Rejected,
        "{}",
        across.explanation.reason
    );
    for (a, b) in [("e1", "e2"), ("f1", "f2")] {
        w.links.measured.push(MeasuredLink {
            a: a.into(),
            b: b.into(),
            link: lan,
        });
    }
    let d = schedule(&w, NOW, &policy()).decision(1).unwrap().clone();
    assert!(
        matches!(d.verdict, Verdict::Guaranteed { .. }),
        "{}",
        d.explanation.reason
    );
    assert_eq!(d.explanation.shape, Shape::MultiEdge);
    let mut on: Vec<&str> = d.segments[0]
        .on
        .iter()
        .map(|a| a.node_id.as_str())
        .collect();
    on.sort_unstable();
    assert!(on == ["e1", "e2"] || on == ["f1", "f2"], "{on:?}");
}

#[test]
fn each_round_leaves_the_edge_alone_when_the_move_back_costs_more_than_it_gains() {
    // The world of the test above over a 0.5 MB/s uplink: staging 1 GB on e1
    // takes 2 000 s, and bringing the 200 MB checkpoint back 400 s, worth
    // 400 × 6.8 = 2 720 iterations on c1. The T4 gains less before job 2's
    // tail must start, so job 2 waits for the cloud instead.
    let now = NOW;
    let mut w = busy_cloud_idle_edge(now);
    w.links.cloud_edge = link(0.5e6, 0.03);
    let d2 = schedule(&w, now, &each_round())
        .decision(2)
        .unwrap()
        .clone();
    assert!(d2.segments.is_empty(), "{}", d2.explanation.reason);
    assert_eq!(
        d2.explanation.why,
        [Reason::NoCapacityNow {
            deadline_ms: now + 3 * H
        }]
    );
}

fn queue() -> Policy {
    Policy {
        admission: AdmissionMode::Queue,
        ..each_round()
    }
}

/// Progress of a job that has run `minutes` on the one A100 "c1" at 6.8 it/s.
fn ran_on_c1(minutes: f64) -> Progress {
    Progress {
        done_iters: minutes * 60.0 * 6.8,
        attained_s: minutes * 60.0,
        location: vec![Assignment {
            node_id: "c1".into(),
            workers: 1,
        }],
        running: true,
        startup_left_s: 0.0,
    }
}

#[test]
fn a_waiting_job_with_time_to_spare_lets_one_due_soon_go_first() {
    // One A100 (6.8 it/s). Job 1: 20 000 it (49 min), due in 10 h, so it can
    // wait 9.2 h. Job 2: 40 000 it (98 min), due in 2 h, so it can wait 22
    // min. Shortest first alone starts job 1, and job 2 can then no longer
    // finish by its deadline (49 + 98 min > 2 h); job 1's laxity is over
    // the default 3 hours, so job 2 goes first, and job 1 still fits after it.
    let now = NOW;
    let jobs = vec![
        job(1, JobClass::Slo, now, now + 10 * H, 20_000.0),
        job(2, JobClass::Slo, now, now + 2 * H, 40_000.0),
    ];
    let w = world(vec![cloud("c1", 1)], jobs);
    let plan = schedule(&w, now, &queue());
    let (d1, d2) = (plan.decision(1).unwrap(), plan.decision(2).unwrap());
    assert!(
        matches!(&d2.action, Action::Start { on } if on[0].node_id == "c1"),
        "{}",
        d2.explanation.reason
    );
    assert_eq!(d1.action, Action::Wait, "{}", d1.explanation.reason);

    // With no laxity rule (every job urgent), shortest first starts job 1.
    let srtf = Policy {
        urgent_laxity_ms: i64::MAX,
        ..queue()
    };
    let plan = schedule(&w, now, &srtf);
    let (d1, d2) = (plan.decision(1).unwrap(), plan.decision(2).unwrap());
    assert!(
        matches!(d1.action, Action::Start { .. }),
        "{}",
        d1.explanation.reason
    );
    assert_eq!(d2.action, Action::Wait, "{}", d2.explanation.reason);

    // A job that already runs keeps its turn: job 1, 10 minutes in, goes on.
    let mut running = w.clone();
    running.jobs[0].progress = ran_on_c1(10.0);
    let plan = schedule(&running, now + 10 * 60_000, &queue());
    let (d1, d2) = (plan.decision(1).unwrap(), plan.decision(2).unwrap());
    assert_eq!(d1.action, Action::Continue, "{}", d1.explanation.reason);
    assert_eq!(d2.action, Action::Wait, "{}", d2.explanation.reason);
}

#[test]
fn queue_admits_on_start_and_lets_a_short_arrival_run_first() {
    // One A100. Job 1 (20 000 it ≈ 49 min, due in 10 h) is admitted when it
    // starts. Job 2 (5 000 it ≈ 12 min, due in 30 min) arrives 10 min later:
    // it takes the GPU now, and job 1 keeps its guarantee on a plan that
    // resumes once job 2 is done and still meets its deadline.
    let now = NOW;
    let w = world(
        vec![cloud("c1", 1)],
        vec![job(1, JobClass::Slo, now, now + 10 * H, 20_000.0)],
    );
    let d1 = schedule(&w, now, &queue()).decision(1).unwrap().clone();
    assert_eq!(
        d1.verdict,
        Verdict::Guaranteed { since_ms: now },
        "{}",
        d1.explanation.reason
    );
    assert!(matches!(d1.action, Action::Start { .. }));
    assert!(d1.explanation.reason.starts_with("admitted as guaranteed"));

    let later = now + 10 * 60_000;
    let mut j1 = w.jobs[0].clone();
    j1.admission = d1.verdict.admission().unwrap();
    j1.reservation = d1.segments.clone();
    j1.progress = ran_on_c1(10.0);
    let j2 = job(2, JobClass::Slo, later, later + 30 * 60_000, 5_000.0);
    let plan = schedule(
        &world(vec![cloud("c1", 1)], vec![j1.clone(), j2.clone()]),
        later,
        &queue(),
    );
    let (d1, d2) = (plan.decision(1).unwrap(), plan.decision(2).unwrap());
    assert!(
        matches!(d2.action, Action::Start { .. }),
        "{}",
        d2.explanation.reason
    );
    assert_eq!(d2.verdict, Verdict::Guaranteed { since_ms: later });
    assert_eq!(
        d1.verdict,
        Verdict::Guaranteed { since_ms: now },
        "{}",
        d1.explanation.reason
    );
    assert_eq!(d1.action, Action::Pause, "{}", d1.explanation.reason);
    assert_eq!(d1.explanation.why.first(), Some(&Reason::InTurn));
    let resume = d1.segments.first().unwrap();
    assert!(resume.start_ms >= d2.segments[0].end_ms, "{resume:?}");
    assert!(d1.explanation.expected_finish_ms.unwrap() <= now + 10 * H);

    // Under reserve admission job 2 cannot take job 1's GPU and is turned away.
    let reserve = Policy {
        admission: AdmissionMode::Reserve,
        ..each_round()
    };
    let plan = schedule(&world(vec![cloud("c1", 1)], vec![j1, j2]), later, &reserve);
    assert_eq!(plan.decision(2).unwrap().verdict, Verdict::Rejected);
}

#[test]
fn a_promise_lead_defers_the_guarantee_until_the_finish_is_that_close() {
    // One A100, job 1: 20 000 it ≈ 49 min at 6.8 it/s, due in 10 h. With a
    // 30-minute promise lead it runs at once but unpromised; 30 minutes later
    // (12 240 it done, about 19 min left) its plan finishes within the lead
    // and it is guaranteed from then.
    let lead = Policy {
        promise_lead_ms: 30 * 60_000,
        ..queue()
    };
    let now = NOW;
    let w = world(
        vec![cloud("c1", 1)],
        vec![job(1, JobClass::Slo, now, now + 10 * H, 20_000.0)],
    );
    let d = schedule(&w, now, &lead).decision(1).unwrap().clone();
    assert_eq!(d.verdict, Verdict::BestEffort, "{}", d.explanation.reason);
    assert!(matches!(d.action, Action::Start { .. }));
    assert!(
        d.explanation.reason.contains("finishes within 0.50 h"),
        "{}",
        d.explanation.reason
    );

    let later = now + 30 * 60_000;
    let mut j1 = w.jobs[0].clone();
    j1.admission = d.verdict.admission().unwrap();
    j1.progress = ran_on_c1(30.0);
    let d = schedule(&world(vec![cloud("c1", 1)], vec![j1]), later, &lead)
        .decision(1)
        .unwrap()
        .clone();
    assert_eq!(
        d.verdict,
        Verdict::Guaranteed { since_ms: later },
        "{}",
        d.explanation.reason
    );
    assert_eq!(d.action, Action::Continue);
    assert!(d.explanation.expected_finish_ms.unwrap() <= later + 30 * 60_000);
}

#[test]
fn a_box_taken_at_its_first_free_slot_yields_to_a_free_one() {
    // One candidate per job: after job 1 takes e1 tonight, job 2 must be
    // offered e2, which is free from the same slot, rather than e1 again.
    let policy = Policy {
        edge_candidates: 1,
        ..policy()
    };
    let w = world(
        vec![edge("e1", 1, &[NIGHT], 90.0), edge("e2", 1, &[NIGHT], 90.0)],
        vec![
            job(1, JobClass::Slo, NOW, 32 * H, 20_000.0),
            job(2, JobClass::Slo, NOW, 32 * H, 20_000.0),
        ],
    );
    let plan = schedule(&w, NOW, &policy);
    let on = |id: u64| {
        let d = plan.decision(id).unwrap();
        assert!(
            matches!(d.verdict, Verdict::Guaranteed { .. }),
            "{}",
            d.explanation.reason
        );
        d.explanation.nodes.clone()
    };
    assert_eq!(
        (on(1), on(2)),
        (vec!["e1".to_string()], vec!["e2".to_string()])
    );
}

/// One 4-GPU A100 node; job 1 (82 600 it, 2 workers at 11.8 it/s: about
/// 1 h 57 min) is due at 21:00, job 2 (240 000 it, up to 4 workers) at 23:00.
/// No data to stage, no checkpoint to move, so every start-up is the 30 s
/// restart (plus a link latency on the first).
fn elastic_world() -> WorldSnapshot {
    let mut j1 = job(1, JobClass::Slo, NOW, NOW + 3 * H, 82_600.0);
    j1.spec.max_workers = 2;
    let mut j2 = job(2, JobClass::Slo, NOW, NOW + 5 * H, 240_000.0);
    j2.spec.max_workers = 4;
    for j in [&mut j1, &mut j2] {
        j.spec.dataset_bytes = 0;
        j.spec.checkpoint_bytes = 0;
    }
    world(vec![cloud("c1", 4)], vec![j1, j2])
}

#[test]
fn an_elastic_plan_admits_a_job_no_fixed_worker_count_fits() {
    // Job 1 holds 2 of the 4 GPUs until about 19:57, so the slot 19:45-20:00
    // still has only 2 free. Job 2 by fixed shape: 2 workers for 5 h do at
    // most 11.8 × 18 000 = 212 400 it, 4 workers from 20:00 at most
    // 18.3 × 10 800 = 197 640 it: neither reaches 240 000. Elastic: 2 workers
    // 18:00-20:00 do (7 200 − 30) × 11.8 = 84 606 it; the resize to 4 on the
    // same node moves nothing and costs the 30 s restart; the remaining
    // 155 394 it take 155 394 / 18.3 = 8 491.5 s, so it finishes at
    // 20:00 + 30 s + 8 491.5 s = 22:22:01.5, before its 23:00 deadline.
    let plan = schedule(&elastic_world(), NOW, &policy());
    let d = plan.decision(2).unwrap();
    assert!(
        matches!(d.verdict, Verdict::Guaranteed { .. }),
        "{}",
        d.explanation.reason
    );
    assert!(
        matches!(
            d.explanation.why.last(),
            Some(Reason::Elastic { resizes: 1, .. })
        ),
        "{:?}",
        d.explanation.why
    );
    assert!(
        d.explanation.reason.contains("1 resize(s)"),
        "{}",
        d.explanation.reason
    );
    let [grow_from, grow_to] = d.segments.as_slice() else {
        panic!("two stretches expected: {:?}", d.segments);
    };
    assert_eq!((grow_from.start_ms, grow_from.end_ms), (NOW, 20 * H));
    assert_eq!(grow_from.on[0].workers, 2);
    assert!(
        (grow_from.iters - (7_200.0 - 30.0) * 11.8).abs() < 1.0,
        "{grow_from:?}"
    );
    assert_eq!(grow_to.start_ms, 20 * H);
    assert_eq!(grow_to.on[0].workers, 4);
    assert_eq!(grow_to.startup_s, 30.0);
    let finish = 20 * H + ((30.0 + (240_000.0 - grow_from.iters) / 18.3) * 1000.0) as i64;
    assert!(
        (grow_to.end_ms - finish).abs() <= 1_000,
        "{} vs {finish}",
        grow_to.end_ms
    );
    assert!((grow_to.end_ms - (22 * H + (22 * 60 + 1) * 1000 + 500)).abs() <= 2_000);

    // Without elastic shapes the same job is turned away.
    let d = without_elastic(policy());
    assert_eq!(d.verdict, Verdict::Rejected, "{}", d.explanation.reason);
}

/// Job 2's decision in [`elastic_world`] under `policy` with elastic shapes off.
fn without_elastic(policy: Policy) -> JobDecision {
    let fixed = Policy {
        elastic: false,
        ..policy
    };
    let plan = schedule(&elastic_world(), NOW, &fixed);
    plan.decision(2).unwrap().clone()
}

#[test]
fn queue_admission_runs_fewer_workers_now_and_grows_when_capacity_frees() {
    // Under the default, job 1 (shorter) runs first on 2 GPUs. Job 2 would
    // meet its deadline alone on 4 workers, but only 2 are free now: it
    // starts on those 2 and its plan grows to 4 once job 1 is done.
    let plan = schedule(&elastic_world(), NOW, &Policy::default());
    let d = plan.decision(2).unwrap();
    let Action::Start { on } = &d.action else {
        panic!("{:?}: {}", d.action, d.explanation.reason);
    };
    assert_eq!(on[0].workers, 2);
    let workers: Vec<u32> = d.segments.iter().map(|s| s.on[0].workers).collect();
    assert_eq!(workers, [2, 4], "{}", d.explanation.reason);
    assert!(d.explanation.expected_finish_ms.unwrap() <= NOW + 5 * H);
    let d = without_elastic(Policy::default());
    assert_eq!(d.action, Action::Wait, "{}", d.explanation.reason);
}

#[test]
fn the_executor_meets_an_elastic_guarantee_through_its_resize() {
    // The world's physics charge the resize as a move: job 2 still finishes
    // by its deadline, and job 1 by its own.
    let w = elastic_world();
    let out = simulate(w.nodes.clone(), w.jobs.clone(), &policy(), NOW, NOW + 6 * H);
    for o in &out {
        assert!(o.ever_guaranteed, "{out:?}");
        assert!(o.finished_ms.is_some_and(|f| f <= o.deadline_ms), "{out:?}");
    }
}
