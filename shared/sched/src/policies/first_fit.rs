//! `first-fit`: jobs in submission order, each on exactly the GPUs it asked
//! for, on the first cloud node (by index) with room, else the first nodes that
//! together have it; a started job runs to the end, a job that does not fit
//! waits and later jobs may pass it (no reservation).
//!
//! Source: the classic bin-packing heuristic; the live coordinator's
//! `crate::first_fit` applies the same rule to whole nodes and task
//! slots, which cannot express GPU counts, so the simulator applies it per GPU.
//! Simplifications: cloud only (the live version also takes an edge box whose
//! CPU is under its threshold; here the edge is left to the edge-aware policies).

use super::cloud_pool::CloudPool;
use super::{Decision, EdgeInterest, Scheduler, View};

/// The first-fit policy.
#[derive(Debug, Default)]
pub struct FirstFit;

impl Scheduler for FirstFit {
    fn edge_interest(&self) -> EdgeInterest {
        EdgeInterest::None
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let mut pool = CloudPool::new(v.model);
        let mut d = Decision::default();
        for &j in v.active.iter().filter(|&&j| v.jobs[j].running()) {
            let job = &v.jobs[j];
            if let Some(p) = pool.take(job, job.requested_gpus) {
                d.run.push((j, p));
            }
        }
        for &j in v.active.iter().filter(|&&j| !v.jobs[j].running()) {
            if let Some(p) = pool.take_first_fit(v.jobs[j].requested_gpus) {
                d.run.push((j, p));
            }
        }
        d
    }
}
