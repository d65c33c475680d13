//! Elastic cloud plans: when no fixed worker count finishes a job by its
//! deadline on the cloud capacity left, the job may still fit by changing
//! shape between slots, as ElasticFlow's minimum satisfactory share does:
//! fewer workers while capacity is scarce, more when it frees up. Admission
//! then reasons over the share the job needs over time, not over one shape.
//!
//! The plan stays on one cloud group, under the smallest cap on its worker
//! count that meets the deadline (the job's minimum share; the rest is left
//! to other jobs). In each slot it runs on the most workers under the cap
//! the group has free, keeping its placement while that stays free. Every
//! change of placement is a resize, charged as checkpoint plus restart
//! through [`Round::startup`]: the checkpoint's transfer where the new
//! placement adds nodes, plus `restart_s`. A larger placement replaces a smaller one that is still free
//! only when the resize pays within the stretch the larger one stays free:
//!
//! `min(W, max(0, D_b − s_b) / t_b) > min(W, D_a / t_a)`
//!
//! with `W` the iterations left, `D_b` the seconds the larger placement `b`
//! stays free from that slot, `D_a` the seconds the current placement `a`
//! stays free within the same stretch, `s_b` the resize (seconds) and `t_a`,
//! `t_b` the step times (seconds per iteration).

use crate::cost::class_compute_s;

use super::DONE_EPS_ITERS;
use super::cloud::spread;
use super::grid::{CloudGroup, Grade, Place, Round};
use super::job::JobCtx;
use super::plan::Candidate;
use super::reason::Reason;
use super::walk::Seg;

impl<'a> Round<'a> {
    /// The cheapest elastic cloud plan that does the job's remaining work by
    /// `deadline_ms` from slot 0, on one cloud group; with `now`, only one
    /// that runs in the slot in progress. `None` when no group has enough
    /// capacity over time.
    pub(super) fn elastic(&self, ctx: &JobCtx, deadline_ms: i64, now: bool) -> Option<Candidate> {
        if !self.policy.elastic || (now && !self.cloud_free_now()) {
            return None;
        }
        let limit = self.slots_before(deadline_ms);
        let spec = &ctx.job.spec;
        let secs = (deadline_ms - self.now_ms) as f64 / 1000.0;
        let mut best: Option<(f64, Vec<Seg>)> = None;
        for g in self.cloud_groups.iter().filter(|g| self.runs_on(ctx, g)) {
            // The smallest cap on the worker count that meets the deadline:
            // the job's minimum share, which leaves the rest to other jobs.
            let options = Self::worker_options(spec.min_workers, spec.max_workers, g.devices);
            // No cap below the first whose compute alone (no start-up, no
            // sync: [`class_compute_s`] with its measured sync taken out),
            // held from now to the deadline, does the work.
            let table = ctx.tables[g.class];
            let Some(least) = options.iter().position(|&w| {
                table
                    .and_then(|t| t.lookup(spec.global_batch, w))
                    .is_some_and(|t| secs / class_compute_s(&t, 2) >= ctx.remaining)
            }) else {
                continue;
            };
            let Some(segs) = (least + 1..=options.len()).find_map(|cap| {
                let segs = self.elastic_on(ctx, g, &options[..cap], limit, now)?;
                segs.last()
                    .is_some_and(|s| s.end_ms <= deadline_ms)
                    .then_some(segs)
            }) else {
                continue;
            };
            let cost: f64 = segs.iter().map(|s| s.cost).sum();
            if best.as_ref().is_none_or(|b| cost < b.0) {
                best = Some((cost, segs));
            }
        }
        let (cost, segs) = best?;
        let why = Reason::Elastic {
            stretches: self.stretches(&segs),
            resizes: segs.windows(2).filter(|w| w[0].place != w[1].place).count(),
            cost,
        };
        Some(Candidate {
            finish_ms: segs.last().map(|s| s.end_ms),
            segs,
            cost,
            why,
        })
    }

    /// The job on group `g` over slots `[0, limit)`, stretch by stretch, on
    /// worker counts among `options`, until its work is done; `None` if it
    /// is not done by then, or, with `now`, if it cannot run in slot 0.
    fn elastic_on(
        &self,
        ctx: &JobCtx,
        g: &CloudGroup,
        options: &[u32],
        limit: usize,
        now: bool,
    ) -> Option<Vec<Seg>> {
        let mut segs: Vec<Seg> = Vec::new();
        let mut owed = ctx.job.progress.startup_left_s;
        // The placement of the last stretch, where the checkpoint is.
        let mut cur: Option<Place> = None;
        let mut done = 0.0;
        let mut s = 0;
        while s < limit {
            let kept = cur.clone().filter(|c| self.usable(c, s, Grade::Sure));
            // Where the checkpoint is; a running job keeps its own nodes
            // where it can.
            let from = cur.as_deref().unwrap_or(&ctx.location);
            let place = match (kept, self.widest(ctx, g, options, s, from)) {
                (Some(c), Some(b)) if self.grows(ctx, &c, &b, s, limit, ctx.remaining - done) => b,
                (Some(c), _) => c,
                (None, Some(b)) => b,
                // With `now` the plan must run in the slot in progress.
                (None, None) if now && s == 0 => return None,
                (None, None) => {
                    s += 1;
                    continue;
                }
            };
            // The stretch ends where the placement stops being free, or
            // where capacity frees up and a larger placement pays.
            let mut end = s + 1;
            while end < limit
                && self.usable(&place, end, Grade::Sure)
                && !(self.cloud_frees[end]
                    && self.widest(ctx, g, options, end, &place).is_some_and(|b| {
                        self.grows(ctx, &place, &b, end, limit, ctx.remaining - done)
                    }))
            {
                end += 1;
            }
            let run = self.walk(
                ctx,
                &place,
                from,
                owed,
                s,
                end,
                ctx.remaining - done,
                false,
                Grade::Sure,
            )?;
            for seg in run.segs {
                done += seg.iters;
                owed = (seg.startup_s - (seg.end_ms - seg.start_ms) as f64 / 1000.0).max(0.0);
                segs.push(seg);
            }
            if done >= ctx.remaining - DONE_EPS_ITERS {
                return Some(segs);
            }
            cur = Some(place);
            s = end;
        }
        None
    }

    /// The placement with the most workers (one of `options`) free on group
    /// `g` in slot `s`, on the nodes of `prefer` first so a resize moves as
    /// little as it can, then in [`Round::claim`] order.
    fn widest(
        &self,
        ctx: &JobCtx,
        g: &CloudGroup,
        options: &[u32],
        s: usize,
        prefer: &[(usize, u32)],
    ) -> Option<Place> {
        let n = self.n_slots;
        let free = |q: usize| self.free[q * n + s];
        let mut others: Vec<usize> = g
            .nodes
            .iter()
            .copied()
            .filter(|&q| self.free_slot_count[q] > 0 && free(q) > 0)
            .filter(|q| !prefer.iter().any(|p| p.0 == *q))
            .take(512)
            .collect();
        others.sort_by_key(|&q| (self.claim(ctx, q), std::cmp::Reverse(free(q)), q));
        // Group nodes are listed in index order.
        let nodes: Vec<usize> = prefer
            .iter()
            .map(|p| p.0)
            .filter(|&q| free(q) > 0 && g.nodes.binary_search(&q).is_ok())
            .chain(others)
            .collect();
        options.iter().rev().find_map(|&w| {
            let k = w.div_ceil(g.devices) as usize;
            let per = w.div_ceil(k as u32);
            let chosen: Vec<usize> = nodes
                .iter()
                .copied()
                .filter(|&q| free(q) >= per)
                .take(k)
                .collect();
            (chosen.len() == k).then(|| spread(&chosen, w, g.devices))
        })
    }

    /// Whether moving from placement `a` to the larger `b` at slot `s` pays
    /// for its resize within the stretch `b` stays free (the module's
    /// formula), with `work` iterations left.
    fn grows(&self, ctx: &JobCtx, a: &Place, b: &Place, s: usize, limit: usize, work: f64) -> bool {
        let workers = |p: &Place| p.iter().map(|x| x.1).sum::<u32>();
        if workers(b) <= workers(a) {
            return false;
        }
        let (Some(ta), Some(tb)) = (self.step(ctx, a), self.step(ctx, b)) else {
            return false;
        };
        let secs = |x: usize| (self.slot_end(x) - self.slot_start(x)) as f64 / 1000.0;
        let (mut d_a, mut d_b, mut a_free) = (0.0, 0.0, true);
        for x in (s..limit).take_while(|&x| self.usable(b, x, Grade::Sure)) {
            d_b += secs(x);
            a_free &= self.usable(a, x, Grade::Sure);
            if a_free {
                d_a += secs(x);
            }
        }
        let s_b = self.startup(ctx, b, a, 0.0, false);
        let on_b = ((d_b - s_b).max(0.0) / tb.total_s).min(work);
        let on_a = (d_a / ta.total_s).min(work);
        on_b > on_a
    }
}

#[cfg(test)]
mod tests {
    use super::super::Words;
    use super::super::testkit::{H, world};
    use super::*;
    use crate::settings::Policy;

    /// Growing from 2 to 4 workers on the one node, with 3 h (10 800 s) left
    /// and more work than either finishes: it pays when
    /// (10 800 − s_b) × 18.3 > 10 800 × 11.8, that is when the resize
    /// s_b = restart_s (nothing moves) is under 10 800 × (1 − 11.8 / 18.3)
    /// = 3 836.07 s.
    #[test]
    fn a_resize_pays_only_when_the_larger_shape_gains_more_than_it_costs() {
        let w = world();
        for (restart_s, pays) in [(3_830.0, true), (3_840.0, false)] {
            let policy = Policy {
                restart_s,
                ..Policy::default()
            };
            let round = Round::new(&w, 18 * H, &policy, Words::Explain);
            let ctx = round.job_ctx(&w.jobs[0]);
            let limit = round.slots_before(21 * H);
            let grows = round.grows(&ctx, &vec![(0, 2)], &vec![(0, 4)], 0, limit, 1e9);
            assert_eq!(grows, pays, "restart_s {restart_s}");
            assert!(!round.grows(&ctx, &vec![(0, 4)], &vec![(0, 2)], 0, limit, 1e9));
        }
    }
}
