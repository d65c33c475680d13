//! `elasticflow`: minimum satisfactory share with admission control, cloud only.
//!
//! Source: Gu et al., "ElasticFlow: An Elastic Serverless Training Platform
//! for Distributed Deep Learning", ASPLOS '23, §4. As there:
//! - a job's *minimum satisfactory share* is the fewest GPUs (a power of two)
//!   that finish it by its deadline; admission walks every admitted job plus
//!   the newcomer forward in deadline order through the free GPUs over time
//!   (each at its minimum satisfactory share, taking what a step has left,
//!   rounded down to a power of two) and admits the newcomer only if all
//!   still finish; otherwise it is dropped at once;
//! - each round admitted jobs get their planned share now, and the GPUs left
//!   are handed out greedily by marginal throughput gain, doubling a job's
//!   GPUs at a time (best-effort jobs take part in this step only).
//!
//! Simplifications: throughput from the class tables with no network effect
//! (ElasticFlow's flat pool) while planning, though the engine charges real
//! placements; the engine's restart cost replaces ElasticFlow's
//! 2 s + 2(log2 n + 1) s scaling overhead; plans are continuous in time rather
//! than in 60-s slots; a job that has missed its deadline is dropped.

use std::collections::BTreeSet;

use super::cloud_pool::{CloudPool, cloud_rate};
use super::profile::{Fill, Profile};
use super::{
    Decision, EdgeInterest, JobRun, Scheduler, View, by_deadline, forget_ended_and_abandon_late,
};

/// The ElasticFlow policy.
#[derive(Debug, Default)]
pub struct ElasticFlow {
    admitted: BTreeSet<usize>,
}

/// Start-up a planner assumes for `job`: what is left, or a restart.
pub(super) fn startup_guess(v: &View, job: &JobRun) -> f64 {
    if job.running() {
        job.startup_left_s
    } else {
        v.model.restart_s
    }
}

/// Plans `jobs` (deadline order) at their minimum satisfactory shares on
/// `capacity` cloud GPUs; `None` in a slot means the job no longer fits.
pub(super) fn plan_shares(
    v: &View,
    jobs: &[usize],
    capacity: u32,
) -> (Profile, Vec<Option<(u32, Fill)>>) {
    let mut profile = Profile::new(v.now_ms, capacity);
    let mut fills = Vec::with_capacity(jobs.len());
    for &j in jobs {
        let job = &v.jobs[j];
        let fill = profile.min_share(
            capacity,
            true,
            job.remaining(),
            startup_guess(v, job),
            job.spec.deadline_ms,
            |g| cloud_rate(v.model, job, g),
        );
        if let Some((_, f)) = &fill {
            profile.reserve(f);
        }
        fills.push(fill);
    }
    (profile, fills)
}

/// True when `extra` can join `admitted` with every job still meeting its deadline.
pub(super) fn admits(v: &View, admitted: &BTreeSet<usize>, extra: usize, capacity: u32) -> bool {
    let order = by_deadline(v, admitted.iter().copied().chain([extra]));
    plan_shares(v, &order, capacity)
        .1
        .iter()
        .all(Option::is_some)
}

/// Hands `free` GPUs out greedily by marginal throughput gain over `alloc`,
/// doubling a job's share each time (from 0 to 1 for a job without GPUs).
fn hand_out_leftover(v: &View, alloc: &mut [(usize, u32)], mut free: u32) {
    loop {
        let mut best: Option<(f64, usize, u32)> = None;
        for (i, &(j, a)) in alloc.iter().enumerate() {
            let job = &v.jobs[j];
            let extra = a.max(1);
            let to = a + extra;
            if extra > free || to > job.spec.max_workers {
                continue;
            }
            let gain =
                (cloud_rate(v.model, job, to) - cloud_rate(v.model, job, a)) / f64::from(extra);
            if gain > 0.0 && best.is_none_or(|b| gain > b.0) {
                best = Some((gain, i, extra));
            }
        }
        let Some((_, i, extra)) = best else { break };
        alloc[i].1 += extra;
        free -= extra;
    }
}

/// Packs GPU counts onto cloud nodes, largest first; a count that does not fit
/// whole is halved until it does.
fn pack(v: &View, pool: &mut CloudPool, alloc: &[(usize, u32)], d: &mut Decision) {
    let mut order: Vec<(usize, u32)> = alloc.iter().copied().filter(|a| a.1 > 0).collect();
    order.sort_by_key(|&(j, g)| (std::cmp::Reverse(g), j));
    for (j, mut g) in order {
        while g > 0 {
            if let Some(p) = pool.take(&v.jobs[j], g) {
                d.run.push((j, p));
                break;
            }
            g /= 2;
        }
    }
}

/// Plans `order` (deadline order) at minimum satisfactory shares, gives each
/// its share for now, hands the leftover to them and to the best-effort jobs
/// that `best_effort` lets in, and packs the result into `d`; returns the plans.
pub(super) fn allocate(
    v: &View,
    order: &[usize],
    best_effort: impl Fn(usize) -> bool,
    capacity: u32,
    d: &mut Decision,
) -> Vec<Option<(u32, Fill)>> {
    let (_, fills) = plan_shares(v, order, capacity);
    let mut alloc: Vec<(usize, u32)> = order
        .iter()
        .zip(&fills)
        .map(|(&j, f)| {
            let now = f
                .as_ref()
                .and_then(|(_, f)| f.pieces.first())
                .filter(|p| p.0 <= v.now_ms)
                .map_or(0, |p| p.2);
            (j, now)
        })
        .collect();
    alloc.extend(
        v.active
            .iter()
            .filter(|&&j| !v.jobs[j].slo() && best_effort(j))
            .map(|&j| (j, 0)),
    );
    let used: u32 = alloc.iter().map(|a| a.1).sum();
    hand_out_leftover(v, &mut alloc, capacity.saturating_sub(used));
    let mut pool = CloudPool::new(v.model);
    pack(v, &mut pool, &alloc, d);
    fills
}

/// The first time after now at which a planned share changes.
pub(super) fn next_change(v: &View, fills: &[Option<(u32, Fill)>]) -> Option<i64> {
    fills
        .iter()
        .flatten()
        .filter_map(|(_, f)| f.pieces.iter().map(|p| p.1).find(|&t| t > v.now_ms))
        .min()
}

impl Scheduler for ElasticFlow {
    fn edge_interest(&self) -> EdgeInterest {
        EdgeInterest::None
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let capacity = v.model.cloud_gpus();
        let mut d = Decision::default();
        forget_ended_and_abandon_late(&mut self.admitted, v, &mut d);
        for &j in v.arrived.iter().filter(|&&j| v.jobs[j].slo()) {
            if admits(v, &self.admitted, j, capacity) {
                self.admitted.insert(j);
                d.guarantee.push(j);
            } else {
                d.reject.push(j);
            }
        }
        let order = by_deadline(v, self.admitted.iter().copied());
        let fills = allocate(v, &order, |_| true, capacity, &mut d);
        d.wake_ms = next_change(v, &fills);
        d
    }
}
