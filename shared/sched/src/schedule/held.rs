//! Which nodes running jobs hold at the start of a round, so that a plan
//! takes capacity nobody runs on before capacity it would have to clear.
//!
//! Jobs are planned one after another, and a running job is planned in its
//! turn, like any other: capacity it holds looks free to the jobs before it.
//! Among nodes alike for the plan, a job takes first its own (staying moves
//! nothing), then nodes no job of its rank holds, and only then nodes it
//! would take from a running job of its rank, which must then checkpoint and
//! move or stop. A deadline job ranks above a best-effort one: a node only
//! best-effort work holds counts as free to it. Taking a held node when an
//! idle twin is free gains nothing and costs the holder a restart: in the
//! MEC scenario most of tidemill's migrations were such displacements, of
//! best-effort jobs by each other on the edge and of running jobs between
//! alike cloud GPUs.

use crate::world::{JobClass, WorldSnapshot};

use super::grid::Round;
use super::job::JobCtx;

/// Fitting nodes a pass of [`Round::pick`] looks at.
const SCAN: usize = 512;

/// Devices held by running jobs, per node, at the start of the round: by
/// jobs with a deadline, and by best-effort ones.
pub(super) struct Held(Vec<[u32; 2]>);

impl Held {
    /// The running jobs' devices of `world` per node; `index_of` maps a node
    /// id to its index.
    pub(super) fn new(world: &WorldSnapshot, index_of: impl Fn(&str) -> Option<usize>) -> Held {
        let mut held = vec![[0u32; 2]; world.nodes.len()];
        for j in world.jobs.iter().filter(|j| j.progress.running) {
            let plain = usize::from(j.spec.class != JobClass::Slo);
            for a in &j.progress.location {
                if let Some(q) = index_of(&a.node_id) {
                    held[q][plain] += a.workers;
                }
            }
        }
        Held(held)
    }
}

impl Round<'_> {
    /// How a job should rank node `q`: 0 its own, 1 held by no running job
    /// of its rank, 2 held by one (taking it displaces that job).
    pub(super) fn claim(&self, ctx: &JobCtx, q: usize) -> u8 {
        let own: u32 = ctx.location.iter().filter(|p| p.0 == q).map(|p| p.1).sum();
        let [slo, plain] = self.held.0[q];
        let takes_plain = ctx.job.spec.class == JobClass::Slo;
        if own > 0 {
            0
        } else if slo > 0 || (plain > 0 && !takes_plain) {
            2
        } else {
            1
        }
    }

    /// Up to `k` nodes of `nodes` (a cloud group's, in index order) that
    /// pass `fits`, taken in [`Round::claim`] order and otherwise in the order
    /// given; each pass looks at no more than [`SCAN`] fitting nodes, so a
    /// large group costs a round little.
    pub(super) fn pick(
        &self,
        ctx: &JobCtx,
        nodes: &[usize],
        k: usize,
        fits: impl Fn(usize) -> bool,
    ) -> Vec<usize> {
        let mut chosen: Vec<usize> = ctx
            .location
            .iter()
            .map(|p| p.0)
            .filter(|q| nodes.binary_search(q).is_ok() && fits(*q))
            .take(k)
            .collect();
        for rank in 1..=2 {
            let scan = nodes.iter().copied().filter(|&q| fits(q)).take(SCAN);
            for q in scan {
                if chosen.len() == k {
                    return chosen;
                }
                if self.claim(ctx, q) == rank {
                    chosen.push(q);
                }
            }
        }
        chosen
    }
}
