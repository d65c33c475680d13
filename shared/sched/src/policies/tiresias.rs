//! `tiresias`: two-dimensional least-attained-service (2D-LAS) with
//! discretised queues. A job's service is GPUs × seconds it has held; queue k
//! holds jobs whose service lies between the (k−1)th and kth threshold; lower
//! queues go first, first-come-first-served inside a queue, each job on exactly
//! the GPUs it asked for, preemptively. Deadlines are ignored.
//!
//! Source: Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep
//! Learning", NSDI '19 (Discretized 2D-LAS), as ElasticFlow's `dlas-gpu`
//! baseline. Simplifications: cloud only; two thresholds (1 and 10 GPU-hours,
//! so three queues) instead of tuned ones; no starvation guard (Tiresias'
//! promotion after long waits) and no placement-consolidation profiling.

use super::cloud_pool::{CloudPool, requested_in_order};
use super::{Decision, EdgeInterest, Scheduler, View};

/// Queue thresholds, GPU-seconds.
const THRESHOLDS_GPU_S: [f64; 2] = [3_600.0, 36_000.0];

/// The Tiresias policy.
#[derive(Debug, Default)]
pub struct Tiresias;

impl Scheduler for Tiresias {
    fn edge_interest(&self) -> EdgeInterest {
        EdgeInterest::None
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let queue = |s: f64| THRESHOLDS_GPU_S.iter().filter(|&&t| s >= t).count();
        let mut order: Vec<usize> = v.active.to_vec();
        order.sort_by_key(|&j| {
            let job = &v.jobs[j];
            (queue(job.attained_gpu_s), job.spec.submitted_ms, j)
        });
        let mut d = Decision::default();
        requested_in_order(v, &order, &mut CloudPool::new(v.model), &mut d);
        // A job's queue changes when its service crosses a threshold: ask again then.
        d.wake_ms = d
            .run
            .iter()
            .filter_map(|&(j, ref p)| {
                let job = &v.jobs[j];
                let g: u32 = p.iter().map(|x| x.1).sum();
                let next = THRESHOLDS_GPU_S.iter().find(|&&t| t > job.attained_gpu_s)?;
                let secs = (next - job.attained_gpu_s) / f64::from(g.max(1));
                Some(v.now_ms + (secs * 1000.0).ceil() as i64)
            })
            .min();
        d
    }
}
