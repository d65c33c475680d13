use super::*;
use crate::simulate::edges::EdgeWorld;
use crate::simulate::testkit::{self, edge_node, job};
use crate::trace::Series;
use tidemill_sched::ThroughputTables;

const H: i64 = 3_600_000;

/// Class E runs model m at 2 it/s on one device and 4 it/s on two.
fn tables() -> ThroughputTables {
    let mut t = ThroughputTables::default();
    t.insert_csv("E", "m", "E-m", "global_batch_size,1,2\n64,2.0,4.0\n")
        .unwrap();
    t
}

/// A job of `iterations` submitted at 0, due at `deadline_h`.
fn due(iterations: f64, deadline_ms: i64) -> crate::simulate::jobs::TraceJob {
    let mut j = job("m");
    j.spec.iterations = iterations;
    j.spec.deadline_ms = deadline_ms;
    j
}

/// `boxes` edge boxes of one E device, idle (10 %) the first 2 h of every
/// 3 h and busy (90 %) the third, with no detection delay; 3 h simulated.
fn world(jobs: Vec<crate::simulate::jobs::TraceJob>, boxes: usize) -> World {
    let series = Series {
        node: "s".into(),
        points: (0..3)
            .map(|h| (h * H, if h < 2 { 10.0 } else { 90.0 }))
            .collect(),
    };
    let edges = EdgeWorld::new(&[series], &vec![(30.0, 1); boxes], 0, H, 0, 0);
    let nodes = (0..boxes)
        .map(|e| edge_node(&format!("e{e}"), "E", e))
        .collect();
    testkit::world(jobs, nodes, tables(), edges, 3 * H)
}

#[test]
fn two_jobs_on_one_box_match_a_hand_calculation() {
    // The box gives 2 device-hours (hours 0-2). Job A needs 7200 it / 2 it/s
    // = 1 h, job B 10 800 / 2 = 1.5 h; both may run from 30 s (the restart)
    // to 3 h. The LP finishes A (1 h) and gives B the other hour: 2/3 of it.
    // Jobs done 1 + 2/3; DSR bound (5/3) / 2 = 5/6.
    let b = lp_bound(&world(vec![due(7200.0, 3 * H), due(10_800.0, 3 * H)], 1))
        .unwrap()
        .unwrap();
    assert!((b.jobs_done - 5.0 / 3.0).abs() < 1e-6, "{b:?}");
    assert!((b.dsr - 5.0 / 6.0).abs() < 1e-6, "{b:?}");
    assert_eq!(b.jobs_possible, 2);
}

#[test]
fn a_job_that_cannot_finish_alone_gets_nothing() {
    // Job C needs 1 h at 2 it/s but may step only from 30 s to 1 h: it is
    // left out, and the bound is A's 1 plus B's 2/3 over three jobs.
    let b = lp_bound(&world(
        vec![due(7200.0, 3 * H), due(10_800.0, 3 * H), due(7200.0, H)],
        1,
    ))
    .unwrap()
    .unwrap();
    assert_eq!(b.jobs_possible, 2);
    assert!((b.dsr - 5.0 / 9.0).abs() < 1e-6, "{b:?}");
}

#[test]
fn a_job_cannot_go_faster_than_its_peak_speed() {
    // Two boxes give 4 device-hours in hours 0-2, but the job has one
    // worker at 2 it/s: from 30 s to 2 h it makes at most 2 × 7170 = 14 340
    // of its 20 000 iterations (the busy third hour gives nothing), a share
    // of 0.717 although the device-hours would cover it all.
    let b = lp_bound(&world(vec![due(20_000.0, 3 * H)], 2))
        .unwrap()
        .unwrap();
    assert!((b.jobs_done - 14_340.0 / 20_000.0).abs() < 1e-6, "{b:?}");
}

#[test]
fn sync_across_boxes_is_charged_to_the_peak_speed() {
    // Two workers run at 4 it/s on one node of two devices, but every box
    // has one device: across boxes the ring of a 1 GB model over the default
    // 1 Gb/s, 5 ms edge-edge link takes at least 1e9 / 1.25e8 + 0.005
    // = 8.005 s, so a step of 2 workers takes overlap(0.25, 8.005) ≈ 8.009 s
    // and the best is one worker at 2 it/s.
    let mut j = due(7200.0, 3 * H);
    j.spec.max_workers = 2;
    j.spec.model_bytes = 1_000_000_000;
    let rates = inputs::job_rates(&world(vec![j], 2));
    assert!((rates[0].peak - 2.0).abs() < 1e-12, "{:?}", rates[0]);
    assert!((rates[0].per_device[0] - 2.0).abs() < 1e-12);
    assert_eq!((rates[0].start_ms, rates[0].end_ms), (30_000, 3 * H));
}

#[test]
fn tree_intervals_cover_a_range_exactly() {
    // 16 leaves: buckets [0, 12) = [0, 8) (node 2) + [8, 12) (node 6).
    let mut v = cover(16, 0, 12);
    v.sort();
    assert_eq!(v, vec![2, 6]);
    assert_eq!(
        (span(16, 2), span(16, 6), span(16, 19)),
        ((0, 8), (8, 12), (3, 4))
    );
}

#[test]
fn a_job_that_must_go_fast_pays_for_sublinear_scaling() {
    // One node of two E devices; model n runs at 2 it/s on one device and
    // 2.5 it/s on two: the hull D is 0.5 device per it/s up to 2 it/s, then
    // (2 − 1) / (2.5 − 2) = 2 devices per it/s. Two jobs of 2.5 × 3570
    // iterations may step from 30 s to 1 h (L = 3570 s = 0.991 67 h) in the
    // node's 2 device-hours. Both at 2 it/s (z = 0.8) hold 2 × 0.991 67 × 1
    // = 1.983 33 h; the last 0.016 67 h buys 0.016 67 / (0.991 67 × 2)
    // = 0.008 40 it/s more: Δz = 0.008 40 / 2.5 = 0.003 36. Jobs done
    // 1.603 36 (at one worker's efficiency throughout: 2 / 1.239 58 = 1.613 45).
    let mut t = ThroughputTables::default();
    t.insert_csv("E", "n", "E-n", "global_batch_size,1,2\n64,2.0,2.5\n")
        .unwrap();
    let jobs = (0..2)
        .map(|_| {
            let mut j = job("n");
            j.spec.iterations = 2.5 * 3570.0;
            j.spec.deadline_ms = H;
            j.spec.max_workers = 2;
            j
        })
        .collect();
    let edges = EdgeWorld::new(&[], &[], 0, H, 0, 0);
    let w = testkit::world(
        jobs,
        vec![testkit::cloud_node("c", "E", 2)],
        t,
        edges,
        3 * H,
    );
    assert_eq!(
        inputs::job_rates(&w)[0].curve,
        vec![vec![(2.0, 1.0), (2.5, 2.0)]]
    );
    let b = lp_bound(&w).unwrap().unwrap();
    let l_h = 3570.0 / 3600.0;
    let want = 1.6 + (2.0 - 2.0 * l_h) / (2.0 * l_h) / 2.5;
    assert!((b.jobs_done - want).abs() < 1e-6, "{b:?} vs {want}");
}

#[test]
fn a_job_on_a_slow_class_has_less_time_for_a_fast_one() {
    // A cloud node of one F device (4 it/s) and an always-idle box of one E
    // device (1 it/s). Two jobs of W = 3 × 3570 = 10 710 iterations may step
    // from 30 s to 1 h (L = 3570 s). F gives Σ z_F ≤ 4 × 3600 / 10 710 and E
    // Σ z_E ≤ 3600 / 10 710. A job runs on one placement at a time:
    // 10 710 z_F / 4 + 10 710 z_E / 1 ≤ 3570, or 0.75 z_F + 3 z_E ≤ 1, so
    // Σ z_E ≤ (2 − 0.75 Σ z_F) / 3. F full: jobs done 2/3 + 0.75 × 14 400 /
    // 10 710 = 1.675 070, where running on both classes at once would give
    // 18 000 / 10 710 = 1.680 672.
    let mut t = ThroughputTables::default();
    t.insert_csv("F", "m", "F-m", "global_batch_size,1\n64,4.0\n")
        .unwrap();
    t.insert_csv("E", "m", "E-m", "global_batch_size,1\n64,1.0\n")
        .unwrap();
    let series = Series {
        node: "s".into(),
        points: (0..3).map(|h| (h * H, 10.0)).collect(),
    };
    let edges = EdgeWorld::new(&[series], &[(30.0, 1)], 0, H, 0, 0);
    let nodes = vec![testkit::cloud_node("c", "F", 1), edge_node("e", "E", 0)];
    let jobs = vec![due(10_710.0, H), due(10_710.0, H)];
    let b = lp_bound(&testkit::world(jobs, nodes, t, edges, 3 * H))
        .unwrap()
        .unwrap();
    let want = 2.0 / 3.0 + 0.75 * 14_400.0 / 10_710.0;
    assert!((b.jobs_done - want).abs() < 1e-6, "{b:?} vs {want}");
}

#[test]
fn the_edge_peak_is_the_fastest_edge_class_alone() {
    // The world of the two-box test: class E runs 2 it/s on one box and,
    // across two boxes of one device each, no faster (the ring of a 1 GB
    // model takes 8 s a step), so the edge's peak is 2 it/s. With no edge
    // box there is none.
    let mut j = due(7200.0, 3 * H);
    j.spec.max_workers = 2;
    j.spec.model_bytes = 1_000_000_000;
    assert_eq!(edge_peaks(&world(vec![j.clone()], 2)), vec![Some(2.0)]);
    let edges = EdgeWorld::new(&[], &[], 0, H, 0, 0);
    let cloud = vec![testkit::cloud_node("c", "E", 2)];
    let w = testkit::world(vec![j], cloud, tables(), edges, 3 * H);
    assert_eq!(edge_peaks(&w), vec![None]);
}
