//! Cloud plans: every (cloud group, worker count) a job could use, a cloud
//! tail that finishes the work by the deadline from a given slot, and a
//! best-effort run on cloud capacity free now.

use crate::cost::gpu_cost;

use super::DONE_EPS_ITERS;
use super::grid::{CloudGroup, Grade, Place, Round};
use super::job::JobCtx;
use super::plan::Candidate;
use super::reason::Reason;
use super::walk::Seg;

/// One way to run a job on a cloud group.
pub(super) struct CloudConfig {
    /// Money, currency units.
    pub(super) cost: f64,
    /// Start-up plus work, seconds.
    pub(super) secs: f64,
    /// Index into the round's cloud groups.
    pub(super) group: usize,
    /// Workers.
    pub(super) workers: u32,
}

impl<'a> Round<'a> {
    /// The cloud tail that does `work` by `deadline_ms` starting soonest at or
    /// after slot `x`, the cheapest among those starting then. Later starts are
    /// tried only at slots where a cloud reservation ends, so a job that finds
    /// the cloud booked now can take capacity that frees before its deadline.
    pub(super) fn cloud_tail(
        &self,
        ctx: &JobCtx,
        x: usize,
        work: f64,
        from: &[(usize, u32)],
        owed: f64,
        deadline_ms: i64,
    ) -> Option<Vec<Seg>> {
        let configs = self.cloud_configs(ctx, work, from, owed);
        for start in x..self.n_slots {
            let start_ms = self.slot_start(start);
            if start_ms >= deadline_ms {
                break;
            }
            if start > x && !self.cloud_frees[start] {
                continue;
            }
            let fits = |c: &&CloudConfig| start_ms + (c.secs * 1000.0).ceil() as i64 <= deadline_ms;
            if !configs.iter().any(|c| fits(&c)) {
                break;
            }
            for c in configs.iter().filter(fits).take(4) {
                if let Some(segs) = self.cloud_run(ctx, c, start, work, from, owed, deadline_ms) {
                    return Some(segs);
                }
            }
        }
        None
    }

    /// A cloud tail past the grid's end, priced but not booked: the cheapest
    /// configuration that does `work` between the horizon and `deadline_ms`,
    /// ending at the deadline. Nobody has booked capacity past the horizon
    /// yet, so a plan that promises nothing may count on it; later rounds,
    /// with the tail in view, book it or find the job another way.
    pub(super) fn tail_past_horizon(
        &self,
        ctx: &JobCtx,
        work: f64,
        from: &[(usize, u32)],
        owed: f64,
        deadline_ms: i64,
    ) -> Option<Vec<Seg>> {
        let horizon_ms = self.slot_end(self.n_slots.checked_sub(1)?);
        let configs = self.cloud_configs(ctx, work, from, owed);
        let c = configs
            .iter()
            .find(|c| horizon_ms + (c.secs * 1000.0).ceil() as i64 <= deadline_ms)?;
        let g = &self.cloud_groups[c.group];
        let k = c.workers.div_ceil(g.devices) as usize;
        let place = spread(&g.nodes[..k], c.workers, g.devices);
        let step = self.step(ctx, &place)?;
        Some(vec![Seg {
            first_slot: self.n_slots,
            end_slot: self.n_slots,
            start_ms: deadline_ms - (c.secs * 1000.0).ceil() as i64,
            end_ms: deadline_ms,
            startup_s: self.startup(ctx, &place, from, owed, false),
            place,
            step,
            iters: work,
            cost: c.cost,
        }])
    }

    /// Every (cloud group, worker count) for `work`, with its duration, cheapest first.
    pub(super) fn cloud_configs(
        &self,
        ctx: &JobCtx,
        work: f64,
        from: &[(usize, u32)],
        owed: f64,
    ) -> Vec<CloudConfig> {
        let spec = &ctx.job.spec;
        let mut configs: Vec<CloudConfig> = Vec::new();
        for (gi, g) in self.cloud_groups.iter().enumerate() {
            if !self.runs_on(ctx, g) {
                continue;
            }
            for w in Self::worker_options(spec.min_workers, spec.max_workers, g.devices) {
                let k = w.div_ceil(g.devices) as usize;
                if k > g.nodes.len() {
                    continue;
                }
                let place = spread(&g.nodes[..k], w, g.devices);
                let Some(step) = self.step(ctx, &place) else {
                    continue;
                };
                let su = self.startup(ctx, &place, from, owed, false);
                let secs = su + work * step.total_s;
                configs.push(CloudConfig {
                    cost: gpu_cost(g.price, w, secs),
                    secs,
                    group: gi,
                    workers: w,
                });
            }
        }
        configs.sort_by(|a, b| a.cost.total_cmp(&b.cost));
        configs
    }

    /// `c` from slot `x` on free nodes of its group, if it finishes by the deadline.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cloud_run(
        &self,
        ctx: &JobCtx,
        c: &CloudConfig,
        x: usize,
        work: f64,
        from: &[(usize, u32)],
        owed: f64,
        deadline_ms: i64,
    ) -> Option<Vec<Seg>> {
        let g = &self.cloud_groups[c.group];
        let w = c.workers;
        let k = w.div_ceil(g.devices) as usize;
        let per = w.div_ceil(k as u32);
        // Rough span to look for free nodes; checked exactly below.
        let end_guess = self.slot_start(x) + (c.secs * 1000.0).ceil() as i64;
        let last = self
            .slot_of(end_guess - 1)
            .min(self.n_slots.saturating_sub(1));
        let chosen = self.pick(ctx, &g.nodes, k, |q| {
            self.free_slot_count[q] > 0
                && (x..=last).all(|s| self.free[q * self.n_slots + s] >= per)
        });
        if chosen.len() < k {
            return None;
        }
        let place = spread(&chosen, w, g.devices);
        let run = self.walk(
            ctx,
            &place,
            from,
            owed,
            x,
            last + 1,
            work,
            false,
            Grade::Sure,
        )?;
        (run.segs.len() == 1 && run.finished.is_some_and(|f| f <= deadline_ms)).then_some(run.segs)
    }

    /// A best-effort run on cloud capacity free now: the cheapest configuration
    /// that would still finish by the job's deadline (any time for a job without
    /// one), on nodes free in the first slot, for as long as they stay free.
    pub(super) fn cloud_now(&self, ctx: &JobCtx, owed0: f64) -> Option<Candidate> {
        if !self.cloud_free_now() {
            return None;
        }
        let spec = &ctx.job.spec;
        let configs = self.cloud_configs(ctx, ctx.remaining, &ctx.location, owed0);
        for c in &configs {
            if self.now_ms.saturating_add((c.secs * 1000.0).ceil() as i64) > spec.deadline_ms {
                continue;
            }
            let Some(place) = self.free_now(ctx, c) else {
                continue;
            };
            let run = self.walk(
                ctx,
                &place,
                &ctx.location,
                owed0,
                0,
                self.n_slots,
                ctx.remaining,
                false,
                Grade::Sure,
            )?;
            let Some(first) = run.segs.into_iter().next().filter(|s| s.first_slot == 0) else {
                continue;
            };
            let finish_ms = (first.iters >= ctx.remaining - DONE_EPS_ITERS).then_some(first.end_ms);
            let why = Reason::CloudNow {
                place: self.shares(&place),
                cost: first.cost,
            };
            return Some(Candidate {
                cost: first.cost,
                finish_ms,
                segs: vec![first],
                why,
            });
        }
        None
    }
}

impl Round<'_> {
    /// Whether the job can run on group `g` at all: its class has the job's
    /// throughput table, its devices the memory a worker needs, and each of
    /// its nodes every label the job requires.
    pub(super) fn runs_on(&self, ctx: &JobCtx, g: &CloudGroup) -> bool {
        let spec = &ctx.job.spec;
        ctx.tables[g.class].is_some()
            && self.world.nodes[g.nodes[0]].memory_per_device_bytes >= spec.memory_per_worker_bytes
            && (!self.world.constraints.requires.contains_key(&spec.id)
                || g.nodes.iter().all(|&q| {
                    self.world
                        .constraints
                        .allows(spec.id, &self.world.nodes[q].id)
                }))
    }

    /// `c`'s workers on nodes of its group free in the slot in progress, if
    /// enough of them are, taken in [`Round::claim`] order.
    pub(super) fn free_now(&self, ctx: &JobCtx, c: &CloudConfig) -> Option<Place> {
        let g = &self.cloud_groups[c.group];
        let k = c.workers.div_ceil(g.devices) as usize;
        let per = c.workers.div_ceil(k as u32);
        let chosen = self.pick(ctx, &g.nodes, k, |q| self.free[q * self.n_slots] >= per);
        (chosen.len() == k).then(|| spread(&chosen, c.workers, g.devices))
    }
}

/// `w` workers over `nodes`, as evenly as the node size allows.
pub(super) fn spread(nodes: &[usize], w: u32, devices: u32) -> Place {
    let k = nodes.len() as u32;
    let per = w.div_ceil(k).min(devices);
    let mut left = w;
    let mut p: Place = nodes
        .iter()
        .map(|&q| {
            let take = per.min(left);
            left -= take;
            (q, take)
        })
        .filter(|p| p.1 > 0)
        .collect();
    p.sort_unstable();
    p
}
