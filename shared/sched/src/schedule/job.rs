//! What one job brings to a round ([`JobCtx`]) and what running it on a
//! placement costs in time: the link between two nodes, the step time and
//! the start-up (staging data and checkpoint) per the [`crate::cost`] model.

use crate::cost::{LinkSpec, StepTime, class_compute_s, staging_s, step_time};
use crate::throughput::ModelTable;
use crate::world::{DataSite, JobState, LinkClass, NodeKind};

use super::grid::{Place, Round};
use super::reason::Reason;

/// Per-job facts computed once per round.
pub(super) struct JobCtx<'a> {
    pub(super) job: &'a JobState,
    pub(super) remaining: f64,
    pub(super) location: Place,
    /// The model's table per device class index (`None`: the class cannot run it).
    pub(super) tables: Vec<Option<&'a ModelTable>>,
    /// Why a running job must leave its nodes now, if it must.
    pub(super) tide_note: Option<Reason>,
}

impl<'a> Round<'a> {
    pub(super) fn job_ctx(&self, job: &'a JobState) -> JobCtx<'a> {
        let location: Place = {
            let mut p: Place = job
                .progress
                .location
                .iter()
                .filter_map(|a| Some((*self.id_of.get(a.node_id.as_str())?, a.workers)))
                .collect();
            p.sort_unstable();
            p
        };
        let tables = self
            .classes
            .iter()
            .map(|c| self.world.throughput.model(c, &job.spec.model))
            .collect();
        let tide_note = job.progress.running.then(|| {
            location
                .iter()
                .find_map(|&(q, _)| match &self.world.nodes[q].kind {
                    NodeKind::Edge(av) if av.tide_in() => Some(Reason::TideIn {
                        node: self.world.nodes[q].id.clone(),
                        load_pct: av.util_now_pct.unwrap_or(0.0),
                        threshold_pct: av.idle_threshold_pct,
                    }),
                    NodeKind::Edge(_) if self.free[q * self.n_slots] == 0 => {
                        Some(Reason::WindowEnds {
                            node: self.world.nodes[q].id.clone(),
                            grace_ms: self.policy.grace_ms,
                        })
                    }
                    _ => None,
                })
        });
        JobCtx {
            job,
            remaining: (job.spec.iterations - job.progress.done_iters).max(0.0),
            location,
            tables,
            tide_note: tide_note.flatten(),
        }
    }

    pub(super) fn link(&self, a: usize, b: usize) -> LinkSpec {
        let (ia, ib) = (
            self.world.nodes[a].id.as_str(),
            self.world.nodes[b].id.as_str(),
        );
        let key = if ia <= ib { (ia, ib) } else { (ib, ia) };
        if let Some(l) = self.links.get(&key) {
            return *l;
        }
        let class = match (self.is_cloud(a), self.is_cloud(b)) {
            (true, true) => LinkClass::CloudCloud,
            (false, false) => LinkClass::EdgeEdge,
            _ => LinkClass::CloudEdge,
        };
        *self.world.links.default_for(class)
    }

    /// Compute seconds of one step on `place`, its slowest class's
    /// [`class_compute_s`]; a lower bound on the step time. `None` if a class
    /// lacks a throughput table.
    pub(super) fn compute_s(&self, ctx: &JobCtx, place: &[(usize, u32)]) -> Option<f64> {
        let n: u32 = place.iter().map(|p| p.1).sum();
        let mut slowest = 0.0_f64;
        let mut seen = usize::MAX;
        for &(q, _) in place {
            let class = self.class_of[q];
            if class != seen {
                seen = class;
                let t = ctx.tables[class]?.lookup(ctx.job.spec.global_batch, n)?;
                slowest = slowest.max(class_compute_s(&t, place.len() as u32));
            }
        }
        Some(slowest)
    }

    /// Step time of `place` per the cost model; `None` if a class lacks a throughput table.
    pub(super) fn step(&self, ctx: &JobCtx, place: &[(usize, u32)]) -> Option<StepTime> {
        let spec = &ctx.job.spec;
        let compute = [self.compute_s(ctx, place)?];
        let bytes = spec.model_bytes as f64;
        let mut slowest: Option<LinkSpec> = None;
        for (i, &(a, _)) in place.iter().enumerate() {
            for &(b, _) in &place[i + 1..] {
                let l = self.link(a, b);
                if slowest.is_none_or(|s| l.slower_than(&s, bytes)) {
                    slowest = Some(l);
                }
            }
        }
        Some(step_time(
            compute,
            place.len() as u32,
            bytes,
            slowest.as_ref(),
            self.policy.gamma,
        ))
    }

    /// Startup before the first step on `place`, coming from `from` (where data
    /// and checkpoint are), owing `owed_s` of unfinished startup if `place == from`.
    pub(super) fn startup(
        &self,
        ctx: &JobCtx,
        place: &[(usize, u32)],
        from: &[(usize, u32)],
        owed_s: f64,
        continuing: bool,
    ) -> f64 {
        if place == from {
            return if continuing {
                owed_s
            } else {
                owed_s + self.policy.restart_s
            };
        }
        let spec = &ctx.job.spec;
        let n: u32 = place.iter().map(|p| p.1).sum();
        let shard = spec.dataset_bytes as f64 / f64::from(n.max(1));
        let site = match &spec.dataset_site {
            DataSite::Node(id) => self.id_of.get(id.as_str()).copied(),
            DataSite::Cloud => None,
        };
        let has_ckpt = !from.is_empty();
        let mut worst: f64 = 0.0;
        for &(q, w) in place {
            let held = from.iter().any(|f| f.0 == q);
            let data_link = if held || site == Some(q) {
                None
            } else {
                Some(match site {
                    Some(s) => self.link(s, q),
                    None if self.is_cloud(q) => {
                        *self.world.links.default_for(LinkClass::CloudCloud)
                    }
                    None => *self.world.links.default_for(LinkClass::CloudEdge),
                })
            };
            let ckpt_link = (has_ckpt && !held).then(|| self.link(from[0].0, q));
            let s = staging_s(
                shard * f64::from(w),
                data_link.as_ref(),
                spec.checkpoint_bytes as f64,
                ckpt_link.as_ref(),
            );
            worst = worst.max(s);
        }
        worst + self.policy.restart_s
    }
}
