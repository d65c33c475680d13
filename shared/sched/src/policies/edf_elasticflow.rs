//! `edf-elasticflow`: earliest deadline first with the semantics of the EDF
//! baseline in ElasticFlow's own simulator, so that its deadline satisfaction
//! ratio can be set against that simulator's published runs
//! (`../shared/data/elasticflow/REFERENCE-RESULTS.md`). `edf` is the
//! textbook variant (each job on the GPUs it asked for).
//!
//! Every round, all unfinished jobs are taken in deadline order (best-effort
//! jobs last, by submission) and each takes the largest GPU count with a
//! measured throughput that the GPUs still free allow, up to its maximum:
//! the largest measured count of its batch-size row, capped at its batch size
//! and the scheduler's per-job limit (at most 64 and the cluster's size).
//! So the earliest deadline gets the whole cluster when its model has a
//! column that wide, whether or not it scales there, and what it leaves goes
//! down the list. There is no admission control and no job is given up on:
//! a job past its deadline keeps its place at the head of the list and runs
//! to the end. A job meets its deadline when it finishes by it.
//!
//! Source: pkusys/ElasticFlow at 04a0109a6acdd7d89f4cb31b6a6a7a128bee6bb0,
//! `ElasticFlow/scheduler/`: `scheduler.py` (`one_queue_edf_sim_jobs`,
//! `EDF_estimate_all_jobs`, `edf_sim_allocation`: the allocation at the
//! current time is the one applied each round), `jobs.py` (`add_job`: the
//! maximum of a job under a schedule other than `ef` is its table's widest
//! measured column, at most 64 and its batch size; `remove_from_pending` and
//! the end-of-job check count accepted and declined jobs) and `cluster.py`
//! (`elastic_placement`: power-of-two GPU sets on nodes). Simplifications:
//! - the reference plans every job's future allocations to estimate its end
//!   and places its end event there; only the allocation for the current
//!   round is ever applied, so the plan is not kept: jobs advance by the
//!   engine's model instead, and a job ends when its work is done;
//! - the reference's EDF charges no reschedule overhead (the call of its
//!   2 s + 2·(log2 n + 1) s model, plus 27 s every 60th round, is commented
//!   out in `one_queue_edf_sim_jobs`); the engine charges its restart cost on
//!   every start, resize and migration for every policy, which this policy
//!   cannot waive; it keeps a job on its nodes while its GPU count holds, so
//!   only starts, preemptions and resizes pay (on both reference settings the
//!   ratio is the same with `restart_s = 0`);
//! - GPU counts are packed onto nodes, largest first (a running job keeps its
//!   nodes while they have room), and the engine charges the real placement,
//!   where the reference assumes a flat pool;
//! - rounds fall on the engine's 60-s slot boundaries rather than on the
//!   reference's event times (at least one slot apart there too).

use crate::TableData;

use super::cloud_pool::{CloudPool, cloud_class, pow2_upto};
use super::{Decision, EdgeInterest, JobRun, Scheduler, View, by_deadline};

/// The EDF policy of ElasticFlow's simulator.
#[derive(Debug, Default)]
pub struct EdfElasticFlow;

/// The GPU counts `job` may run on, ascending, capped at its batch size and
/// `max_workers`: with an ElasticFlow grid for the cloud class, the columns
/// measured in its batch-size row (every column when the batch has no row of
/// its own); with a table of another format (which answers any count), every
/// power of two.
fn gpu_counts(v: &View, job: &JobRun) -> Vec<u32> {
    let spec = &job.spec;
    let cap = spec.max_workers.min(spec.global_batch);
    let table = cloud_class(v.model).and_then(|c| v.model.tables.model(c, &spec.model));
    let Some(TableData::Grid(grid)) = table.map(|t| &t.data) else {
        return pow2_upto(cap).collect();
    };
    let row = grid
        .batches
        .iter()
        .position(|&b| b == spec.global_batch)
        .map(|r| &grid.iters_per_s[r]);
    grid.gpus
        .iter()
        .enumerate()
        .filter(|&(i, &g)| g <= cap && row.is_none_or(|r| r[i].is_some()))
        .map(|(_, &g)| g)
        .collect()
}

impl Scheduler for EdfElasticFlow {
    fn edge_interest(&self) -> EdgeInterest {
        EdgeInterest::None
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let mut free = v.model.cloud_gpus();
        let mut alloc: Vec<(usize, u32)> = Vec::new();
        for j in by_deadline(v, v.active.iter().copied()) {
            if free == 0 {
                break;
            }
            let counts = gpu_counts(v, &v.jobs[j]);
            if let Some(&g) = counts.iter().rev().find(|&&g| g <= free) {
                alloc.push((j, g));
                free -= g;
            }
        }
        alloc.sort_by_key(|&(j, g)| (std::cmp::Reverse(g), j));
        let mut pool = CloudPool::new(v.model);
        let mut d = Decision::default();
        for (j, g) in alloc {
            if let Some(p) = pool.take(&v.jobs[j], g) {
                d.run.push((j, p));
            }
        }
        d
    }
}
