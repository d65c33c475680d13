//! `chronus`: lease-based admission of SLO jobs, SRTF for the rest.
//!
//! Source: Gao et al., "Chronus: A Novel Deadline-aware Scheduler for Deep
//! Learning Training Jobs", SoCC '21. As there: an arriving SLO job is
//! admitted if a lease plan exists in which it and every admitted SLO job,
//! each on exactly the GPUs it asked for, finish by their deadlines; admitted
//! jobs hold their leases first (earliest deadline first, renewed every round),
//! and everything else (best-effort jobs and SLO jobs that were not admitted,
//! which Chronus runs as best-effort) shares what is left in
//! shortest-remaining-time-first order.
//!
//! Simplifications: cloud only; the lease plan is a greedy earliest-deadline
//! walk through free GPUs over time (shared with `elasticflow`'s planner)
//! rather than Chronus' MILP with fixed 10-minute leases; placement-aware
//! throughput (`chronus_model_info.json`) is not used, the engine's link model
//! charges spread placements instead.

use std::collections::BTreeSet;

use super::cloud_pool::{CloudPool, cloud_rate, requested_in_order};
use super::elasticflow::startup_guess;
use super::profile::{Profile, Share};
use super::{Decision, EdgeInterest, Scheduler, View, by_deadline};

/// The Chronus policy.
#[derive(Debug, Default)]
pub struct Chronus {
    admitted: BTreeSet<usize>,
}

impl Chronus {
    fn leases_hold(&self, v: &View, extra: Option<usize>, capacity: u32) -> bool {
        let mut profile = Profile::new(v.now_ms, capacity);
        for j in by_deadline(v, self.admitted.iter().copied().chain(extra)) {
            let job = &v.jobs[j];
            let g = job.requested_gpus;
            match profile.fill(
                Share::Fixed(g),
                job.remaining(),
                startup_guess(v, job),
                job.spec.deadline_ms,
                |n| cloud_rate(v.model, job, n),
            ) {
                Some(f) => profile.reserve(&f),
                None if Some(j) == extra => return false,
                None => {}
            }
        }
        true
    }
}

impl Scheduler for Chronus {
    fn edge_interest(&self) -> EdgeInterest {
        EdgeInterest::None
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let capacity = v.model.cloud_gpus();
        // A lease ends with its job, or at its deadline (the job then runs best-effort).
        let mut live = vec![false; v.jobs.len()];
        for &j in v.active {
            live[j] = v.jobs[j].spec.deadline_ms > v.now_ms;
        }
        self.admitted.retain(|&j| live[j]);
        let mut d = Decision::default();
        for &j in v.arrived.iter().filter(|&&j| v.jobs[j].slo()) {
            if self.leases_hold(v, Some(j), capacity) {
                self.admitted.insert(j);
                d.guarantee.push(j);
            }
        }
        let mut pool = CloudPool::new(v.model);
        for j in by_deadline(v, self.admitted.iter().copied()) {
            let job = &v.jobs[j];
            if let Some(p) = pool.take(job, job.requested_gpus) {
                d.run.push((j, p));
            }
        }
        let mut rest: Vec<(f64, usize)> = v
            .active
            .iter()
            .filter(|j| !self.admitted.contains(j))
            .map(|&j| {
                let job = &v.jobs[j];
                let r = cloud_rate(v.model, job, job.requested_gpus);
                let left = if r > 0.0 {
                    job.remaining() / r
                } else {
                    f64::MAX
                };
                (left, j)
            })
            .collect();
        rest.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let rest: Vec<usize> = rest.into_iter().map(|r| r.1).collect();
        requested_in_order(v, &rest, &mut pool, &mut d);
        d
    }
}
