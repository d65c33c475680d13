//! A property of the honest engine over random small worlds with perfect
//! forecasts (the oracle), running the real `tidemill` policy: no guaranteed
//! job misses its deadline, no node is given more workers than it has
//! devices in any round (the engine would stop with an error), and an
//! eviction never gains progress (EdgeFlow runs the same worlds, as it is
//! the policy that gets evicted).

use proptest::prelude::*;
use tidemill_sched::policies::PolicyName;
use tidemill_sched::{JobClass, JobSpec, Policy};

use super::edges::EdgeWorld;
use super::engine;
use super::jobs::TraceJob;
use super::placement::CostNode;
use super::signals::RunSignals;
use super::testkit;
use crate::trace::Series;

/// The edge's and the forecast's bin, ms: tidemill's planning slot.
const BIN_MS: i64 = 900_000;

/// A random job: (submission, minutes; iterations; slack over its runtime
/// on one cloud GPU, ×; best-effort).
type Job = (i64, f64, f64, bool);

/// A random world: cloud GPUs, each box's busy bins, jobs.
type Instance = (u32, Vec<Vec<bool>>, Vec<Job>);

fn job() -> impl Strategy<Value = Job> {
    (
        0i64..180,
        200.0f64..20_000.0,
        1.5f64..6.0,
        prop::bool::weighted(0.2),
    )
}

/// Cloud GPUs, each box's busy bins over a 4-h period (16 bins), jobs.
fn instance() -> impl Strategy<Value = Instance> {
    (
        1u32..=4,
        prop::collection::vec(prop::collection::vec(prop::bool::ANY, 16), 1..=4),
        prop::collection::vec(job(), 1..=5),
    )
}

fn world(cloud: u32, busy: &[Vec<bool>], jobs: &[Job]) -> engine::World {
    let mut tables = tidemill_sched::ThroughputTables::default();
    let csv = "global_batch_size,1,2,3,4\n64,4.0,7.6,11.0,14.0\n";
    tables.insert_csv("A", "m", "a.csv", csv).unwrap();
    let csv = "global_batch_size,1,2,3,4\n64,1.0,1.9,2.7,3.4\n";
    tables.insert_csv("E", "m", "e.csv", csv).unwrap();
    let mut nodes = vec![testkit::cloud_node("c0", "A", cloud)];
    nodes.extend((0..busy.len()).map(|i| CostNode {
        site: Some("s".into()),
        ..testkit::edge_node(&format!("e{i}"), "E", i)
    }));
    let series: Vec<Series> = busy
        .iter()
        .enumerate()
        .map(|(i, bins)| Series {
            node: format!("e{i}"),
            points: bins
                .iter()
                .enumerate()
                .map(|(b, &on)| (b as i64 * BIN_MS, if on { 100.0 } else { 0.0 }))
                .collect(),
        })
        .collect();
    let edges = EdgeWorld::new(&series, &vec![(30.0, 1); busy.len()], 0, BIN_MS, 0, 0);
    let mut last = 0;
    let jobs: Vec<TraceJob> = jobs
        .iter()
        .enumerate()
        .map(|(id, &(submit_min, iterations, slack, best_effort))| {
            let base = testkit::job("m");
            let submitted_ms = submit_min * 60_000;
            let deadline_ms = if best_effort {
                i64::MAX / 4
            } else {
                submitted_ms + (slack * iterations / 4.0 * 1000.0) as i64
            };
            last = last.max(submitted_ms).max(deadline_ms.min(i64::MAX / 8));
            TraceJob {
                spec: JobSpec {
                    id: id as u64,
                    class: if best_effort {
                        JobClass::BestEffort
                    } else {
                        JobClass::Slo
                    },
                    submitted_ms,
                    deadline_ms,
                    iterations,
                    max_workers: 4,
                    checkpoint_interval_s: 600.0,
                    ..base.spec
                },
                ..base
            }
        })
        .collect();
    let mut jobs = jobs;
    jobs.sort_by_key(|j| (j.spec.submitted_ms, j.spec.id));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.spec.id = i as u64;
    }
    let end = last + 12 * 3_600_000;
    testkit::world(jobs, nodes, tables, edges, end)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn tidemill_keeps_its_promises_and_evictions_never_gain(
        (cloud, busy, jobs) in instance()
    ) {
        let w = world(cloud, &busy, &jobs);
        let signals = RunSignals::oracle(&w.edges);
        // tidemill for its promises; EdgeFlow, which leaves a box only once
        // the tide is reported, for evictions.
        for name in [PolicyName::Tidemill, PolicyName::Edgeflow] {
            let mut policy = name.build(&Policy::default(), &w.model);
            let o = engine::run(&w, policy.as_mut(), &signals, true, &mut |_| {})
                .map_err(|e| TestCaseError::fail(format!("{name:?}: {e}")))?;
            for j in &o.jobs {
                if j.guaranteed_ms.is_some() {
                    prop_assert!(
                        j.finish_ms.is_some_and(|f| f <= j.spec.deadline_ms),
                        "{:?}: guaranteed job {} missed: finish {:?}, deadline {}",
                        name, j.spec.id, j.finish_ms, j.spec.deadline_ms
                    );
                }
            }
            let mut lost = 0.0;
            for e in &o.evictions {
                prop_assert!(e.after_iters <= e.before_iters, "{name:?}: {e:?}");
                lost += e.before_iters - e.after_iters;
            }
            prop_assert_eq!(o.evictions.len() as u64, o.acc.evictions);
            prop_assert!((lost - o.acc.lost_iters).abs() < 1e-6);
        }
    }
}
