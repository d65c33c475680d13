//! What the engine charges for stops and for a shared LAN, checked by hand
//! through whole runs of a scripted policy.

use tidemill_sched::policies::{Decision, EdgeInterest, Scheduler, View};
use tidemill_sched::{DataSite, JobSpec, LinkDefault, ThroughputTables};

use super::edges::EdgeWorld;
use super::engine::{self, Outcome, World};
use super::jobs::TraceJob;
use super::placement::{CostModel, CostNode, Place};
use super::signals::RunSignals;
use super::testkit;
use super::topology::LinkTiers;
use crate::trace::Series;

/// Runs each job `j` on `places[j]` until `stop_ms`, then nowhere.
struct Script {
    places: Vec<Place>,
    stop_ms: i64,
}

impl Scheduler for Script {
    fn edge_interest(&self) -> EdgeInterest {
        EdgeInterest::None
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let run = if v.now_ms < self.stop_ms {
            v.active
                .iter()
                .map(|&j| (j, self.places[j].clone()))
                .collect()
        } else {
            Vec::new()
        };
        Decision {
            run,
            wake_ms: Some(self.stop_ms),
            ..Decision::default()
        }
    }
}

/// Class `E` running model `m` at batch 64: 1 it/s on one device, 1 it/s on two.
fn tables() -> ThroughputTables {
    let mut t = ThroughputTables::default();
    t.insert_csv("E", "m", "m.csv", "global_batch_size,1,2\n64,1.0,1.0\n")
        .unwrap();
    t
}

/// A long job of model `m` (id `id`) whose data sits on box `e0`, so that its
/// first start-up is the 30-s restart alone.
fn job(id: u64) -> TraceJob {
    let base = testkit::job("m");
    TraceJob {
        spec: JobSpec {
            id,
            iterations: 1e6,
            deadline_ms: 1_000_000_000,
            dataset_site: DataSite::Node("e0".into()),
            max_workers: 2,
            ..base.spec
        },
        ..base
    }
}

/// Box load, one 30-s bin per point: idle (0 %) until `busy_from_ms`, then busy.
fn load(busy_from_ms: i64, boxes: usize) -> EdgeWorld {
    let points = (0..200)
        .map(|b| {
            let t = b * 30_000;
            (t, if t >= busy_from_ms { 100.0 } else { 0.0 })
        })
        .collect();
    let series = [Series {
        node: "s".into(),
        points,
    }];
    EdgeWorld::new(&series, &vec![(30.0, 1); boxes], 0, 30_000, 0, 0)
}

fn run(world: &World, script: &mut Script) -> Outcome {
    let signals = RunSignals::oracle(&world.edges);
    engine::run(world, script, &signals, true, &mut |_| {}).unwrap()
}

/// One box `e0`; the job runs from 0 to 3030 s: 30 s of restart, then
/// 3000 s (50 min) of training at 1 s per iteration, a checkpoint every 30 min.
fn fifty_minutes(busy_from_ms: i64) -> Outcome {
    let mut w = testkit::world(
        vec![job(0)],
        vec![testkit::edge_node("e0", "E", 0)],
        tables(),
        load(busy_from_ms, 1),
        4_000_000,
    );
    w.slot_ms = 30_000;
    run(
        &w,
        &mut Script {
            places: vec![vec![(0, 1)]],
            stop_ms: 3_030_000,
        },
    )
}

#[test]
fn an_eviction_fifty_minutes_into_training_loses_twenty() {
    // The box turns busy at 3030 s, as the job is taken off: an eviction. It
    // saved at 30 min of training (1800 iterations) and loses 20 min: 1200
    // iterations, 1200 device-seconds.
    let o = fifty_minutes(3_030_000);
    assert_eq!(o.jobs[0].done_iters, 1800.0);
    assert_eq!(o.acc.evictions, 1);
    assert_eq!(o.acc.lost_iters, 1200.0);
    assert!((o.acc.lost_device_s - 1200.0).abs() < 1e-9);
    assert_eq!(o.evictions.len(), 1);
    assert_eq!(
        (o.evictions[0].before_iters, o.evictions[0].after_iters),
        (3000.0, 1800.0)
    );
    let stop = o.jobs[0].first_stop.unwrap();
    assert_eq!((stop.at_ms, stop.evicted), (3_030_000, true));
}

#[test]
fn a_planned_stop_keeps_all_its_progress() {
    // The box is still idle when the job leaves: it checkpoints on the way out.
    let o = fifty_minutes(3_060_000);
    assert_eq!(o.jobs[0].done_iters, 3000.0);
    assert_eq!((o.acc.evictions, o.acc.lost_iters), (0, 0.0));
    let stop = o.jobs[0].first_stop.unwrap();
    assert_eq!((stop.at_ms, stop.evicted), (3_030_000, false));
}

#[test]
fn jobs_on_one_site_lan_share_its_bandwidth() {
    // Four boxes of site `a` on a 10 Gb/s, 0.2 ms, loss-free LAN; jobs 0 and
    // 1 (M = 1e8 B of gradients) each on two of them: k = 2.
    let nodes: Vec<CostNode> = (0..4)
        .map(|i| CostNode {
            site: Some("a".into()),
            ..testkit::edge_node(&format!("e{i}"), "E", i)
        })
        .collect();
    let link = |mbps| LinkDefault {
        bandwidth_mbps: mbps,
        latency_ms: 0.2,
        loss: 0.0,
        congestion: Default::default(),
    };
    let tiers = LinkTiers {
        edge_edge: link(1000.0),
        cloud_edge: link(1000.0),
        cloud_cloud: link(1000.0),
        same_site: Some(link(10_000.0)),
    };
    let links = tiers.table(&nodes);
    let big = |id| {
        let mut j = job(id);
        j.spec.model_bytes = 100_000_000;
        j
    };
    let mut w = testkit::world(
        vec![big(0), big(1)],
        nodes.clone(),
        tables(),
        load(i64::MAX, 4),
        600_000,
    );
    w.model = CostModel::new(nodes, tables(), links, 2.0, 30.0);
    let places = vec![vec![(0, 1), (1, 1)], vec![(2, 1), (3, 1)]];
    let o = run(
        &w,
        &mut Script {
            places: places.clone(),
            stop_ms: i64::MAX,
        },
    );
    // By hand: compute T_c = 1 s (1 it/s on two devices); the ring of 2 over
    // B / k = 1.25e9 / 2 B/s: T_n = 2(n−1)/n × M / (B / k) + 2(n−1) ×
    // (latency + 1.25 × RTT) = 1e8 / 6.25e8 + 2 × (0.0002 + 1.25 × 0.0004)
    // = 0.1614 s; T = (T_c² + T_n²)^½ with γ = 2. Alone, T_n = 0.0814 s.
    let hand = |sync: f64| (1.0 + sync * sync).sqrt();
    for (j, place) in places.iter().enumerate() {
        let step = o.jobs[j].step_s;
        assert!((step - hand(0.1614)).abs() < 1e-12, "{step}");
        let alone = w.model.step(&o.jobs[j].spec, place).unwrap().0;
        assert!((alone - hand(0.0814)).abs() < 1e-12, "{alone}");
    }
}
