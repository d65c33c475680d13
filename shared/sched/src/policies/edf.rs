//! `edf`: earliest deadline first, preemptive, without admission control.
//! Every round the jobs are sorted by deadline (best-effort jobs last, by
//! submission) and each in turn gets exactly the GPUs it asked for if they are
//! free; a job keeps running past its deadline until it finishes.
//!
//! Source: the EDF baseline of ElasticFlow (Gu et al., ASPLOS '23, §6),
//! non-elastic as there. Simplifications: cloud only; GPU counts are packed
//! onto nodes (a running job keeps its nodes while they have room) instead of
//! a flat pool, and the engine's restart cost replaces ElasticFlow's overhead model.

use super::cloud_pool::{CloudPool, requested_in_order};
use super::{Decision, EdgeInterest, Scheduler, View, by_deadline};

/// The EDF policy.
#[derive(Debug, Default)]
pub struct Edf;

impl Scheduler for Edf {
    fn edge_interest(&self) -> EdgeInterest {
        EdgeInterest::None
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let order = by_deadline(v, v.active.iter().copied());
        let mut d = Decision::default();
        requested_in_order(v, &order, &mut CloudPool::new(v.model), &mut d);
        d
    }
}
