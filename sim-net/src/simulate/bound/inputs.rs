//! What the LP bound knows of the world: each job's best speeds on each
//! device class (an upper bound over every placement the job may get), its
//! window, and each class's usable device-seconds in each time bucket.

use std::collections::HashMap;

use tidemill_sched::JobClass;
use tidemill_sched::cost::{LinkSpec, class_compute_s, overlap_s};

use super::super::engine::World;

/// One job's side of the LP: where and how fast it could possibly run.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JobRates {
    /// Iterations to do.
    pub work: f64,
    /// The earliest a step can run, ms: the first round at or after its
    /// submission (rounds fall on slot boundaries) plus the restart every
    /// start pays.
    pub start_ms: i64,
    /// The latest a step still counts, ms: its deadline (SLO jobs) or the
    /// end of the simulation (best-effort jobs), whichever is first.
    pub end_ms: i64,
    /// Per class (in [`classes`] order): an upper bound on the iterations one
    /// device of the class adds per second it is held, `r_{j,c}`; 0 where the
    /// class has no table for the job's model.
    pub per_device: Vec<f64>,
    /// Per class: the corners `(ρ, n)` of `D_{j,c}`, the fewest devices of
    /// the class that make `ρ` iterations per second (time-sharing between
    /// worker counts allowed): the lower convex hull of `(0, 0)` and
    /// `(1 / T_lb(c, n), n)`, origin left out, `ρ` increasing; empty where
    /// the class cannot run the job.
    pub curve: Vec<Vec<(f64, f64)>>,
    /// An upper bound on the job's iterations per second on any placement, `P_j`.
    pub peak: f64,
}

/// The world's device classes, each once, in node order.
pub(super) fn classes(world: &World) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for n in world.model.nodes() {
        if !out.contains(&n.class.as_str()) {
            out.push(&n.class);
        }
    }
    out
}

/// Each job's [`JobRates`], in trace order.
///
/// For `n` workers (`min_workers ≤ n ≤ max_workers`) a device of class `c`
/// steps no faster than `T_lb(c, n)` seconds per iteration:
/// - on one node (only if some node of class `c` has `n` devices):
///   `1 / it/s(c, n)`, the measured step;
/// - across nodes (`n ≥ 2` and at least two nodes):
///   `overlap(T_c, S_c)` with `T_c` the class's compute alone
///   ([`class_compute_s`]) and `S_c = min transfer_s(model_bytes)` over the
///   links that touch a node of class `c`. The step's ring all-reduce runs
///   over the placement's slowest link `L*` and takes at least
///   `model_bytes / B_eff(L*) + 2 × latency(L*) ≥ transfer_s(L*)`, and `L*`
///   is no faster than any link of the placement, one of which touches the
///   device's node: so `S_c` is a lower bound on the sync of any placement
///   that holds a class-`c` device, mixed classes included (their step waits
///   for the slowest class).
///
/// `T_lb` is the smaller of the two. Then `r_{j,c} = max_n 1 / (n × T_lb(c, n))`
/// iterations per device-second and `P_j = max_{n,c} 1 / T_lb(c, n)`
/// iterations per second: no placement does better.
pub(super) fn job_rates(world: &World) -> Vec<JobRates> {
    let model = &world.model;
    let classes = classes(world);
    let links = candidate_links(world, &classes);
    let max_devices: Vec<u32> = classes
        .iter()
        .map(|c| {
            model
                .nodes()
                .iter()
                .filter(|n| n.class == *c)
                .map(|n| n.devices)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let multi_node = model.nodes().len() >= 2;
    let slot = world.slot_ms.max(1);
    let restart_ms = (model.restart_s * 1000.0).ceil() as i64;
    world
        .jobs
        .iter()
        .map(|j| {
            let s = &j.spec;
            let mut per_device = vec![0.0_f64; classes.len()];
            let mut points: Vec<Vec<(f64, f64)>> = vec![Vec::new(); classes.len()];
            let mut peak = 0.0_f64;
            let bytes = (s.model_bytes as f64).max(1.0);
            let sync_lb: Vec<Option<f64>> = links
                .iter()
                .map(|l| l.iter().map(|l| l.transfer_s(bytes)).reduce(f64::min))
                .collect();
            for n in s.min_workers.max(1)..=s.max_workers.max(s.min_workers.max(1)) {
                for (c, class) in classes.iter().enumerate() {
                    let Some(t) = model.tables.lookup(class, &s.model, s.global_batch, n) else {
                        continue;
                    };
                    if t.iters_per_s <= 0.0 {
                        continue;
                    }
                    let one_node = (n <= max_devices[c]).then(|| 1.0 / t.iters_per_s);
                    let across = (multi_node && n >= 2)
                        .then_some(sync_lb[c])
                        .flatten()
                        .map(|sync| overlap_s(class_compute_s(&t, 2).max(0.0), sync, model.gamma));
                    let step_s = match (one_node, across) {
                        (Some(a), Some(b)) => a.min(b),
                        (Some(a), None) | (None, Some(a)) => a,
                        (None, None) => continue,
                    };
                    if step_s <= 0.0 {
                        continue;
                    }
                    per_device[c] = per_device[c].max(1.0 / (f64::from(n) * step_s));
                    points[c].push((1.0 / step_s, f64::from(n)));
                    peak = peak.max(1.0 / step_s);
                }
            }
            let deadline = match s.class {
                JobClass::Slo => s.deadline_ms.min(world.end_ms),
                JobClass::BestEffort => world.end_ms,
            };
            JobRates {
                work: s.iterations,
                start_ms: s.submitted_ms.div_euclid(slot) * slot
                    + if s.submitted_ms.rem_euclid(slot) > 0 {
                        slot
                    } else {
                        0
                    }
                    + restart_ms,
                end_ms: deadline,
                per_device,
                curve: points.into_iter().map(lower_hull).collect(),
                peak,
            }
        })
        .collect()
}

/// The lower convex hull of `(0, 0)` and `points` (`(ρ, n)`), from the
/// origin to the fastest point, origin left out: the least devices that make
/// each rate, mixing worker counts over time.
fn lower_hull(mut points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut hull: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    for p in points {
        while let [.., a, b] = hull[..] {
            // Drop b when it lies on or above the segment from a to p.
            let cross = (b.0 - a.0) * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0);
            if cross <= 0.0 {
                hull.pop();
            } else {
                break;
            }
        }
        if hull.last().is_some_and(|l| l.0 == p.0) {
            continue;
        }
        hull.push(p);
    }
    hull.remove(0);
    hull
}

/// Per class, every link spec a placement holding a device of that class may
/// use (class defaults where such a pair exists, measured links with an end
/// on the class), each once.
fn candidate_links(world: &World, classes: &[&str]) -> Vec<Vec<LinkSpec>> {
    let nodes = world.model.nodes();
    let links = world.model.links();
    let class_of: HashMap<&str, &str> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.class.as_str()))
        .collect();
    let (clouds, edges) = (
        nodes.iter().filter(|n| n.is_cloud()).count(),
        nodes.iter().filter(|n| !n.is_cloud()).count(),
    );
    classes
        .iter()
        .map(|c| {
            let cloud_c = nodes
                .iter()
                .filter(|n| n.class == *c && n.is_cloud())
                .count();
            let edge_c = nodes
                .iter()
                .filter(|n| n.class == *c && !n.is_cloud())
                .count();
            let mut out = Vec::new();
            if cloud_c > 0 && clouds >= 2 {
                out.push(links.cloud_cloud);
            }
            if (cloud_c > 0 && edges > 0) || (edge_c > 0 && clouds > 0) {
                out.push(links.cloud_edge);
            }
            if edge_c > 0 && edges >= 2 {
                out.push(links.edge_edge);
            }
            for m in &links.measured {
                let touches = [&m.a, &m.b]
                    .iter()
                    .any(|id| class_of.get(id.as_str()) == Some(c));
                if touches && !out.contains(&m.link) {
                    out.push(m.link);
                }
            }
            out
        })
        .collect()
}

/// Per class, the device-seconds usable in each bucket `k` of
/// `[origin + k × bucket_ms, origin + (k + 1) × bucket_ms)`, for `buckets`
/// buckets, up to the end of the simulation.
///
/// A cloud node gives its devices all the time. An edge box gives its
/// devices while it is truly idle, and for the detection delay after it
/// turns busy (a policy only learns of the load from the box's report, so
/// it may hold the box that long: the bound counts it, and the interference
/// column shows what a policy took beyond it).
pub(super) fn capacity(
    world: &World,
    classes: &[&str],
    origin: i64,
    bucket_ms: i64,
    buckets: usize,
) -> Vec<Vec<f64>> {
    let mut cap = vec![vec![0.0; buckets]; classes.len()];
    let end = world.end_ms.min(origin + bucket_ms * buckets as i64);
    let edges = &world.edges;
    for n in world.model.nodes() {
        let c = classes
            .iter()
            .position(|k| *k == n.class)
            .expect("every node's class is listed");
        let devices = f64::from(n.devices);
        let usable: Vec<(i64, i64)> = match n.edge {
            None => vec![(origin, end)],
            Some(e) => {
                let bin = edges.bin_ms.max(1);
                let first = (origin - edges.delay_ms - edges.origin_ms).div_euclid(bin);
                let mut spans: Vec<(i64, i64)> = Vec::new();
                let mut k = first;
                loop {
                    let b0 = edges.origin_ms + k * bin;
                    if b0 >= end {
                        break;
                    }
                    if edges.idle(e, b0) {
                        let span = (b0.max(origin), (b0 + bin + edges.delay_ms).min(end));
                        match spans.last_mut() {
                            Some(last) if last.1 >= span.0 => last.1 = last.1.max(span.1),
                            _ if span.0 < span.1 => spans.push(span),
                            _ => {}
                        }
                    }
                    k += 1;
                }
                spans
            }
        };
        for (a, b) in usable {
            let mut t = a;
            while t < b {
                let k = ((t - origin) / bucket_ms) as usize;
                let until = (origin + (k as i64 + 1) * bucket_ms).min(b);
                cap[c][k] += devices * (until - t) as f64 / 1000.0;
                t = until;
            }
        }
    }
    cap
}
