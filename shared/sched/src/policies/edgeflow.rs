//! `edgeflow`: the seed paper's cloud-edge method (EdgeFlow, Journal of
//! Software, 2025), as the issue specifies it:
//! - cloud GPUs go to jobs in powers of two, ElasticFlow-style (minimum
//!   satisfactory share, admission control, leftover by marginal gain; see
//!   `elasticflow`);
//! - a job runs in the cloud or on at most one edge box, never both;
//! - its speed on an edge box is estimated as λ × its single-GPU cloud speed,
//!   λ measured per model (here: the ratio of the edge class's single-device
//!   throughput to the cloud class's, from the tables);
//! - it re-plans on arrivals, completions and changes in the set of idle edge
//!   boxes (the engine asks it on every reported change);
//! - it first offloads to idle edge boxes the jobs that can still meet their
//!   deadline there, closest to missing it first; after the cloud is planned,
//!   boxes still free go to the jobs left without GPUs, closest to missing first;
//! - it has no forecast: a box is idle when its latest report is under its
//!   threshold, and a job leaves a box when the box reports busy.
//!
//! Admission: none; the description of EdgeFlow names no admission
//! control (ElasticFlow's does), so every job is taken and one whose deadline
//! passes is given up on. Best-effort jobs are never admitted: they share the
//! cloud GPUs the deadlines leave and the boxes still free. A variant with
//! ElasticFlow's admission test on the cloud part measured lower deadline
//! satisfaction on every ITP cluster (see the README). Simplifications: the
//! paper's exact offloading score and its handling of jobs evicted from a box
//! that turns busy are not public in a form this reimplementation could check;
//! evicted jobs simply rejoin the cloud plan.

use std::collections::BTreeSet;

use super::cloud_pool::{cloud_class, cloud_rate};
use super::elasticflow::{allocate, next_change};
use super::{
    Decision, EdgeInterest, JobRun, Scheduler, View, by_deadline, forget_ended_and_abandon_late,
};
use crate::placement::Place;

/// The EdgeFlow policy.
#[derive(Debug, Default)]
pub struct EdgeFlow {
    admitted: BTreeSet<usize>,
}

/// Free, reported-idle edge boxes: (node index, devices).
fn idle_boxes(v: &View, taken: &BTreeSet<u32>) -> Vec<(u32, u32)> {
    v.model
        .nodes()
        .iter()
        .enumerate()
        .filter_map(|(q, n)| {
            let e = n.edge?;
            (!taken.contains(&(q as u32)) && v.edges.reported_idle(e, v.now_ms))
                .then_some((q as u32, n.devices))
        })
        .collect()
}

/// EdgeFlow's estimate of `job`'s iterations/s on one edge box of `class`
/// with `devices` devices: λ × single-GPU cloud speed × devices' scaling.
fn edge_rate(v: &View, job: &JobRun, class: &str, devices: u32) -> f64 {
    let cloud1 = cloud_rate(v.model, job, 1);
    let lambda = match (
        v.model.iters_per_s(class, &job.spec, 1),
        cloud_class(v.model).and_then(|c| v.model.iters_per_s(c, &job.spec, 1)),
    ) {
        (Some(e), Some(c)) if c > 0.0 => e / c,
        _ => 0.0,
    };
    let scale = v
        .model
        .iters_per_s(class, &job.spec, devices)
        .zip(v.model.iters_per_s(class, &job.spec, 1))
        .map_or(1.0, |(n, one)| n / one);
    lambda * cloud1 * scale
}

/// Seconds `job` needs on the box `q`, start-up included.
fn edge_secs(v: &View, job: &JobRun, q: u32) -> f64 {
    let n = &v.model.nodes()[q as usize];
    let r = edge_rate(v, job, &n.class, n.devices);
    if r <= 0.0 {
        return f64::INFINITY;
    }
    let su = if job.place.first().is_some_and(|p| p.0 == q) {
        job.startup_left_s
    } else {
        v.model
            .startup(&job.spec, &job.location, &[(q, n.devices)])
            .secs
    };
    su + job.remaining() / r
}

/// Whether job `j` is EdgeFlow's to place: admitted, or best-effort.
fn ours(admitted: &BTreeSet<usize>, v: &View, j: usize) -> bool {
    admitted.contains(&j) || !v.jobs[j].slo()
}

/// Slack: seconds to the deadline after the job's best-case cloud run.
fn slack(v: &View, job: &JobRun) -> f64 {
    let best = cloud_rate(v.model, job, v.model.cloud_gpus().max(1));
    let need = if best > 0.0 {
        job.remaining() / best
    } else {
        f64::INFINITY
    };
    (job.spec.deadline_ms - v.now_ms) as f64 / 1000.0 - need
}

impl Scheduler for EdgeFlow {
    fn edge_interest(&self) -> EdgeInterest {
        EdgeInterest::All
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let capacity = v.model.cloud_gpus();
        let mut d = Decision::default();
        forget_ended_and_abandon_late(&mut self.admitted, v, &mut d);
        // Jobs already on a box that still reports idle stay there.
        let mut on_edge: Vec<(usize, Place)> = Vec::new();
        let mut taken: BTreeSet<u32> = BTreeSet::new();
        for &j in v.active.iter().filter(|&&j| ours(&self.admitted, v, j)) {
            let job = &v.jobs[j];
            if let [(q, w)] = job.place[..]
                && let Some(e) = v.model.nodes()[q as usize].edge
                && v.edges.reported_idle(e, v.now_ms)
            {
                on_edge.push((j, vec![(q, w)]));
                taken.insert(q);
            }
        }
        // Best-effort jobs are not admitted: they take what the deadlines leave.
        for &j in v.arrived.iter().filter(|&&j| v.jobs[j].slo()) {
            self.admitted.insert(j);
        }
        // Offload the jobs that meet their deadline on a box, closest to missing first.
        let mut waiting: Vec<usize> = self
            .admitted
            .iter()
            .copied()
            .filter(|j| !on_edge.iter().any(|e| e.0 == *j))
            .collect();
        waiting.sort_by(|&a, &b| {
            slack(v, &v.jobs[a])
                .total_cmp(&slack(v, &v.jobs[b]))
                .then(a.cmp(&b))
        });
        let mut cloud: Vec<usize> = Vec::new();
        for j in waiting {
            let job = &v.jobs[j];
            let fit = idle_boxes(v, &taken).into_iter().find(|&(q, _)| {
                // A box it cannot run on takes forever: `as` saturates, the sum too.
                v.now_ms
                    .saturating_add((edge_secs(v, job, q) * 1000.0) as i64)
                    <= job.spec.deadline_ms
            });
            match fit {
                Some((q, n)) => {
                    taken.insert(q);
                    on_edge.push((j, vec![(q, n)]));
                }
                None => cloud.push(j),
            }
        }
        // The cloud, ElasticFlow-style.
        let order = by_deadline(v, cloud.iter().copied());
        let fills = allocate(
            v,
            &order,
            |j| !on_edge.iter().any(|e| e.0 == j),
            capacity,
            &mut d,
        );
        // Boxes still free go to jobs left without GPUs, closest to missing first.
        let mut idle_left = idle_boxes(v, &taken).into_iter();
        let mut starved: Vec<usize> = v
            .active
            .iter()
            .copied()
            .filter(|&j| !on_edge.iter().any(|e| e.0 == j) && !d.run.iter().any(|r| r.0 == j))
            .filter(|&j| ours(&self.admitted, v, j))
            .collect();
        starved.sort_by(|&a, &b| {
            slack(v, &v.jobs[a])
                .total_cmp(&slack(v, &v.jobs[b]))
                .then(a.cmp(&b))
        });
        for j in starved {
            let Some((q, n)) = idle_left.next() else {
                break;
            };
            if edge_secs(v, &v.jobs[j], q).is_finite() {
                on_edge.push((j, vec![(q, n)]));
            }
        }
        d.run.extend(on_edge);
        d.wake_ms = next_change(v, &fills);
        d
    }
}
