//! The worlds a policy is measured against besides the one described: the
//! same world with no edge box (for `edge_gain`), and the cloud grown by the
//! edge's idle capacity in cloud-GPU equivalents (an upper bound on what the
//! edge could add); and how many jobs one edge device could finish in time.

use serde::Serialize;

use super::engine::World;
use super::placement::CostNode;

/// Which world a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The world as described.
    Full,
    /// The same world with every edge box taken away.
    NoEdge,
    /// No edge box, and the cloud grown by [`EdgeEquivalent::gpus`] GPUs.
    EdgeAsCloud,
}

/// The same world without its edge boxes (cloud nodes keep their indices:
/// they come first).
pub fn without_edge(world: &World) -> World {
    let mut w = world.clone();
    w.model = w.model.with_nodes(|n| n.retain(CostNode::is_cloud));
    w
}

/// The edge's idle capacity as cloud GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EdgeEquivalent {
    /// Cloud GPUs added, rounded to the nearest whole GPU.
    pub gpus: u32,
    /// The same before rounding.
    pub exact_gpus: f64,
    /// Truly idle edge device-hours in the measurement window.
    pub idle_device_hours: f64,
    /// The mean edge/cloud speed ratio λ over the trace's jobs.
    pub lambda: f64,
}

/// How many cloud GPUs the edge's idle time is worth.
///
/// `G = Σ_c I_c × λ_c / W`, where `I_c` is the truly idle device-seconds of
/// edge class `c` in the measurement window, `W` the window's length in
/// seconds, and `λ_c` the mean over the trace's jobs of
/// `it/s(c, model, batch, 1) / it/s(cloud, model, batch, 1)`: one edge device's
/// speed as a share of one cloud GPU's, from the throughput tables (for a
/// lambda-scaled class, exactly its documented λ of each job's model). `G` is
/// the constant number of cloud GPUs that does the work the edge's idle
/// device-hours could do if they were always there, unfragmented, which is why
/// it bounds the edge's contribution from above. `None` when the world has no
/// edge box or no cloud class, or an edge class shares no model with the cloud.
pub fn edge_equivalent(world: &World) -> Option<EdgeEquivalent> {
    let model = &world.model;
    let cloud = model.nodes().iter().find(|n| n.is_cloud())?;
    let (t0, t1) = world.window;
    let window_s = (t1 - t0) as f64 / 1000.0;
    if window_s <= 0.0 {
        return None;
    }
    let lambda_of = |class: &str| {
        let ratios: Vec<f64> = world
            .jobs
            .iter()
            .filter_map(|j| {
                let edge = model.iters_per_s(class, &j.spec, 1)?;
                let cloud = model.iters_per_s(&cloud.class, &j.spec, 1)?;
                (cloud > 0.0).then_some(edge / cloud)
            })
            .collect();
        (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64)
    };
    let lambdas = edge_classes(world)
        .into_iter()
        .map(|c| Some((c, lambda_of(c)?)))
        .collect::<Option<Vec<_>>>()?;
    if lambdas.is_empty() {
        return None;
    }
    let (mut idle_s, mut work_s) = (0.0, 0.0);
    for n in model.nodes() {
        let Some(e) = n.edge else { continue };
        let lambda = lambdas.iter().find(|l| l.0 == n.class).map_or(0.0, |l| l.1);
        let (idle_ms, _) = world.edges.split_idle(e, t0, t1);
        let idle = f64::from(n.devices) * idle_ms as f64 / 1000.0;
        idle_s += idle;
        work_s += idle * lambda;
    }
    let exact = work_s / window_s;
    Some(EdgeEquivalent {
        gpus: exact.round() as u32,
        exact_gpus: exact,
        idle_device_hours: idle_s / 3600.0,
        lambda: if idle_s > 0.0 { work_s / idle_s } else { 0.0 },
    })
}

/// How many deadline jobs one edge device of the fastest edge class could
/// finish by their deadline, idle from their submission on and with no
/// staging: `iterations / it/s(class, model, batch, 1) ≤ deadline − submit`
/// (seconds). A job that fails it cannot meet its deadline on one edge
/// device whatever a policy does; `None` when the world has no edge box.
pub fn edge_feasible_jobs(world: &World) -> Option<usize> {
    let classes = edge_classes(world);
    if classes.is_empty() {
        return None;
    }
    let feasible = world
        .jobs
        .iter()
        .filter(|j| j.spec.class == tidemill_sched::JobClass::Slo)
        .filter(|j| {
            let s = &j.spec;
            let have_s = (s.deadline_ms - s.submitted_ms) as f64 / 1000.0;
            classes.iter().any(|c| {
                world
                    .model
                    .iters_per_s(c, s, 1)
                    .is_some_and(|r| r > 0.0 && s.iterations / r <= have_s)
            })
        })
        .count();
    Some(feasible)
}

/// The edge boxes' device classes, each once, in node order.
fn edge_classes(world: &World) -> Vec<&str> {
    let mut classes: Vec<&str> = Vec::new();
    for n in world.model.nodes().iter().filter(|n| n.edge.is_some()) {
        if !classes.contains(&n.class.as_str()) {
            classes.push(&n.class);
        }
    }
    classes
}

/// The world without its edge (`no_edge`, from [`without_edge`]), with one
/// more cloud node of `gpus` GPUs of the first cloud node's class and price
/// (one node: the bound assumes no network cost for the added capacity).
pub fn edge_as_cloud(no_edge: &World, gpus: u32) -> World {
    let mut w = no_edge.clone();
    if gpus == 0 {
        return w;
    }
    if let Some(first) = w.model.nodes().iter().find(|n| n.is_cloud()).cloned() {
        w.model = w.model.with_nodes(|n| {
            n.push(CostNode {
                id: "edge-equivalent-000".into(),
                devices: gpus,
                edge: None,
                ..first
            })
        });
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::edges::EdgeWorld;
    use crate::simulate::testkit::{self, cloud_node, edge_node, job};
    use crate::trace::Series;
    use tidemill_sched::ThroughputTables;

    /// Two models with edge/cloud ratios 0.5 and 0.25; two edge boxes of one
    /// device, idle 6 h and 12 h of a 24-h window.
    fn world() -> World {
        let mut tables = ThroughputTables::default();
        // One GPU at batch 64, it/s.
        for (class, model, rate) in [
            ("A", "m1", 4.0),
            ("A", "m2", 8.0),
            ("E", "m1", 2.0),
            ("E", "m2", 2.0),
        ] {
            let csv = format!("global_batch_size,1\n64,{rate:.1}\n");
            tables
                .insert_csv(class, model, &format!("{class}-{model}"), &csv)
                .unwrap();
        }
        let hour = 3_600_000;
        // Hourly loads: series 0 idle (10 %) 6 h of 24, series 1 idle 12 h of 24.
        let series = |idle_h: i64| Series {
            node: format!("s{idle_h}"),
            points: (0..48)
                .map(|h| (h * hour, if h % 24 < idle_h { 10.0 } else { 90.0 }))
                .collect(),
        };
        let edges = EdgeWorld::new(
            &[series(6), series(12)],
            &[(30.0, 1), (30.0, 1)],
            0,
            hour,
            0,
            0,
        );
        testkit::world(
            vec![job("m1"), job("m2")],
            vec![
                cloud_node("c", "A", 8),
                edge_node("e0", "E", 0),
                edge_node("e1", "E", 1),
            ],
            tables,
            edges,
            24 * hour,
        )
    }

    #[test]
    fn edge_equivalent_matches_a_hand_calculation() {
        let eq = edge_equivalent(&world()).unwrap();
        // λ = mean(2/4, 2/8) = 0.375; idle = 6 + 12 = 18 device-hours over 24 h:
        // G = 18 × 0.375 / 24 = 0.28125 GPUs.
        assert!((eq.lambda - 0.375).abs() < 1e-12, "{eq:?}");
        assert!((eq.idle_device_hours - 18.0).abs() < 1e-9, "{eq:?}");
        assert!((eq.exact_gpus - 0.28125).abs() < 1e-9, "{eq:?}");
        assert_eq!(eq.gpus, 0);
    }

    #[test]
    fn a_job_is_edge_feasible_when_one_device_finishes_it_in_time() {
        let mut w = world();
        // m1 runs at 2 it/s on one E device: 7200 iterations take 3600 s.
        w.jobs[0].spec.iterations = 7200.0;
        w.jobs[0].spec.deadline_ms = 3_600_000;
        // m2 also runs at 2 it/s: 7202 iterations need 3601 s of its 3600.
        w.jobs[1].spec.iterations = 7202.0;
        w.jobs[1].spec.deadline_ms = 3_600_000;
        assert_eq!(edge_feasible_jobs(&w), Some(1));
        assert_eq!(edge_feasible_jobs(&without_edge(&w)), None);
    }

    #[test]
    fn variant_worlds_drop_the_edge_and_grow_the_cloud() {
        let w = world();
        let bare = without_edge(&w);
        assert_eq!(bare.model.nodes().len(), 1);
        assert_eq!(bare.model.cloud_gpus(), 8);
        let grown = edge_as_cloud(&bare, 5);
        assert_eq!(grown.model.cloud_gpus(), 13);
        assert!(grown.model.nodes().iter().all(CostNode::is_cloud));
        assert!(edge_equivalent(&bare).is_none());
    }
}
