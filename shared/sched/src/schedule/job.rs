//! What one job brings to a round ([`JobCtx`]) and what running it on a
//! placement costs in time: the step time and the start-up (staging data and
//! checkpoint), priced by [`crate::placement::PlacementCost`].

use std::cell::RefCell;

use crate::cost::{StepTime, class_compute_s};
use crate::throughput::{ModelTable, Throughput};
use crate::world::{JobState, NodeKind};

use super::DONE_EPS_ITERS;
use super::grid::{Grade, Place, Round};
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
    /// The LAN groups a running job is counted on ([`super::lan::Lans::shared`]).
    pub(super) lans_counted: Vec<u32>,
    /// Throughputs looked up so far: (class index, workers, answer).
    rates: RefCell<Vec<(usize, u32, Option<Throughput>)>>,
}

impl JobCtx<'_> {
    /// The job's throughput on `workers` devices of class `class`, looked up
    /// once a round: a plan asks for the same few a hundred times, and a
    /// batch size its table lacks costs a search for the nearest row each
    /// time ([`ModelTable::lookup`]). `None` where the class cannot run it.
    pub(super) fn rate(&self, class: usize, workers: u32) -> Option<Throughput> {
        let known = self
            .rates
            .borrow()
            .iter()
            .find_map(|&(c, w, t)| (c == class && w == workers).then_some(t));
        if let Some(t) = known {
            return t;
        }
        let t = self.tables[class]?.lookup(self.job.spec.global_batch, workers);
        self.rates.borrow_mut().push((class, workers, t));
        t
    }
}

impl<'a> Round<'a> {
    pub(super) fn job_ctx(&self, job: &'a JobState) -> JobCtx<'a> {
        let location = self.indices(&job.progress.location);
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
                    NodeKind::Edge(_)
                        if self.free[q * self.n_slots] == 0
                            && self.open_until(&[(q, 1)], 0, Grade::Likely)
                                > self.slot_start(0) =>
                    {
                        Some(Reason::Displaced {
                            node: self.world.nodes[q].id.clone(),
                        })
                    }
                    NodeKind::Edge(av) if self.free[q * self.n_slots] == 0 => {
                        let grace = self.policy.grace_ms;
                        Some(Reason::WindowEnds {
                            node: self.world.nodes[q].id.clone(),
                            margin_ms: av
                                .windows
                                .iter()
                                .find(|w| w.start_ms <= self.now_ms && self.now_ms < w.end_ms)
                                .map_or(grace, |w| {
                                    w.end_ms - w.usable_until_ms(self.now_ms, grace)
                                }),
                        })
                    }
                    _ => None,
                })
        });
        let lans_counted = if job.progress.running {
            let own: Vec<usize> = location.iter().map(|p| p.0).collect();
            self.lans.shared(&own)
        } else {
            Vec::new()
        };
        JobCtx {
            job,
            remaining: (job.spec.iterations - job.progress.done_iters).max(0.0),
            lans_counted,
            location,
            tables,
            tide_note: tide_note.flatten(),
            rates: RefCell::new(Vec::new()),
        }
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
                let t = ctx.rate(class, n)?;
                slowest = slowest.max(class_compute_s(&t, place.len() as u32));
            }
        }
        Some(slowest)
    }

    /// Step time of `place` per the cost model; `None` if a class lacks a throughput table.
    pub(super) fn step(&self, ctx: &JobCtx, place: &[(usize, u32)]) -> Option<StepTime> {
        let compute = [self.compute_s(ctx, place)?];
        let bytes = ctx.job.spec.model_bytes as f64;
        let gamma = self.policy.gamma;
        let load = |g: u32| self.lans.load(g, ctx.lans_counted.contains(&g));
        Some(self.links.step_shared(compute, place, bytes, gamma, load).0)
    }

    /// Whether `place` could do the job's remaining work within slots
    /// `[0, limit)`: at most every slot with a device free on each of its
    /// nodes, at its compute time alone, `n_free × slot_s / compute_s ≥
    /// remaining` (slots, s, s/iteration, iterations), with `n_free` its
    /// node's fewest free slots before `limit`. An upper bound: a walk's
    /// step time includes the sync on top of compute, and its start-up and
    /// partial slots only take time away.
    pub(super) fn may_finish(&self, ctx: &JobCtx, place: &[(usize, u32)], limit: usize) -> bool {
        let Some(compute_s) = self.compute_s(ctx, place) else {
            return false;
        };
        let n_free = place
            .iter()
            .map(|&(q, _)| self.free_slot_count[q].min(self.free_slots_before(q, limit)))
            .min()
            .unwrap_or(0);
        let open_s = f64::from(n_free) * self.policy.slot_ms as f64 / 1000.0;
        open_s >= (ctx.remaining - DONE_EPS_ITERS) * compute_s
    }

    /// The earliest a walk of `place` over slots `[0, limit)` could finish
    /// the job, Unix ms: from the start `t₀` of the first slot in which
    /// every node of `place` has a device free, each remaining iteration at
    /// the placement's compute time alone, `t₀ + 1000 × remaining ×
    /// compute_s` (ms, iterations, s/iteration). A lower bound: start-up,
    /// sync and slots not open only add time. `None` when `place` has no
    /// such slot before `limit` or no throughput table.
    pub(super) fn finish_floor_ms(
        &self,
        ctx: &JobCtx,
        place: &[(usize, u32)],
        limit: usize,
    ) -> Option<f64> {
        let s0 = self.next_free(place, 0, limit);
        if s0 >= limit {
            return None;
        }
        let compute_s = self.compute_s(ctx, place)?;
        Some(self.slot_start(s0) as f64 + 1000.0 * ctx.remaining * compute_s)
    }

    /// Whether any edge placement could finish the job's remaining work
    /// by `deadline_ms` within slots `[0, limit)`, judged for every
    /// placement at once: it must pass both of a placement's cheap bounds
    /// (a step's compute alone from now on, and [`Round::may_finish`]) with
    /// the least compute time any edge placement may have,
    /// [`Round::edge_compute_floor`], and the most free slots any edge
    /// node has. `false` spares a plan that holds the job to its deadline
    /// without a reservation from listing edge placements that all fail
    /// those bounds.
    pub(super) fn edge_may_finish(&self, ctx: &JobCtx<'a>, limit: usize, deadline_ms: i64) -> bool {
        let c = self.edge_compute_floor(ctx);
        if self.now_ms as f64 + 1000.0 * ctx.remaining * c > deadline_ms as f64 {
            return false;
        }
        let n_free = self.edge_most_free.min(limit as u32);
        let open_s = f64::from(n_free) * self.policy.slot_ms as f64 / 1000.0;
        open_s >= (ctx.remaining - DONE_EPS_ITERS) * c
    }

    /// The least [`Round::compute_s`] any edge placement of the job may
    /// have, seconds per iteration: over the edge classes that can run its
    /// model and every worker count up to its most,
    /// `min(1 / iters_per_s, 1 / iters_per_s − T_sync)` ([`class_compute_s`]
    /// on one node and on several); infinite when none can.
    pub(super) fn edge_compute_floor(&self, ctx: &JobCtx<'a>) -> f64 {
        let spec = &ctx.job.spec;
        let key = (spec.model.as_str(), spec.global_batch, spec.max_workers);
        if let Some(&c) = self.compute_floors.borrow().get(&key) {
            return c;
        }
        let c = self
            .edge_classes
            .iter()
            .filter_map(|&class| ctx.tables[class])
            .flat_map(|t| (1..=spec.max_workers).filter_map(|n| t.lookup(spec.global_batch, n)))
            .map(|t| class_compute_s(&t, 1).min(class_compute_s(&t, 2)))
            .fold(f64::INFINITY, f64::min);
        self.compute_floors.borrow_mut().insert(key, c);
        c
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
        self.links.staging(&ctx.job.spec, from, place).secs + self.policy.restart_s
    }
}

#[cfg(test)]
mod tests {
    use super::super::Words;
    use super::super::testkit::{H, world};
    use crate::settings::Policy;
    use crate::world::{EdgeAvailability, WorldSnapshot};

    use super::*;

    /// From 18:00 sharp, the default 48 h of 15-minute slots are 192, all
    /// free on c1: 192 × 900 s = 172 800 s, at one worker's 1 / 6.8 s per
    /// iteration, is 1 175 040 iterations at most, whatever the sync adds.
    /// Within the first 100 slots: 90 000 s, 612 000 iterations.
    #[test]
    fn a_place_may_finish_only_work_its_free_slots_can_hold() {
        let policy = Policy::default();
        for (iterations, limit, may) in [
            (1_175_040.0, 192, true),
            (1_175_050.0, 192, false),
            (612_000.0, 100, true),
            (612_010.0, 100, false),
        ] {
            let mut w = world();
            w.jobs[0].spec.iterations = iterations;
            let round = Round::new(&w, 18 * H, &policy, Words::Explain);
            let ctx = round.job_ctx(&w.jobs[0]);
            assert_eq!(
                round.may_finish(&ctx, &[(0, 1)], limit),
                may,
                "{iterations}"
            );
        }
    }

    /// The testkit's world with c1 an edge box idle from 18:00 for 100 h:
    /// every slot of the 48-h grid is free.
    fn edge_world() -> WorldSnapshot {
        let mut w = world();
        w.nodes[0].kind = NodeKind::Edge(EdgeAvailability {
            windows: vec![crate::Window {
                start_ms: 18 * H,
                end_ms: 118 * H,
                confidence: 1.0,
            }],
            likely: Vec::new(),
            idle_since_ms: None,
            util_now_pct: Some(0.0),
            idle_threshold_pct: 50.0,
        });
        w
    }

    /// The fastest edge compute is four workers at 18.3 it/s (a table
    /// without a measured split: `1 / iters_per_s`). Due 21:00 from 18:00,
    /// 10 800 s at 18.3 it/s is 197 640 iterations at most; within 8 free
    /// slots, 7 200 s, 131 760.
    #[test]
    fn no_edge_placement_may_finish_more_than_its_fastest_compute_allows() {
        let policy = Policy::default();
        for (iterations, limit, may) in [
            (197_640.0, 192, true),
            (197_650.0, 192, false),
            (131_760.0, 8, true),
            (131_770.0, 8, false),
        ] {
            let mut w = edge_world();
            w.jobs[0].spec.iterations = iterations;
            let round = Round::new(&w, 18 * H, &policy, Words::Skip);
            let ctx = round.job_ctx(&w.jobs[0]);
            assert!((round.edge_compute_floor(&ctx) - 1.0 / 18.3).abs() < 1e-12);
            assert_eq!(
                round.edge_may_finish(&ctx, limit, 21 * H),
                may,
                "{iterations} within {limit} slots"
            );
        }
    }

    /// c1 taken in slots 0-2: one worker (6.8 it/s) starts at 18:45 at the
    /// earliest, and 6 800 iterations take 1 000 s more: 19:01:40.
    #[test]
    fn a_finish_is_no_earlier_than_the_first_free_slot_plus_the_compute() {
        let w = {
            let mut w = edge_world();
            w.jobs[0].spec.iterations = 6_800.0;
            w
        };
        let policy = Policy::default();
        let mut round = Round::new(&w, 18 * H, &policy, Words::Skip);
        for s in 0..3 {
            round.set_free(0, s, 0);
        }
        let ctx = round.job_ctx(&w.jobs[0]);
        let floor = round.finish_floor_ms(&ctx, &[(0, 1)], 192).unwrap();
        assert!((floor - (18 * H + 45 * 60_000 + 1_000_000) as f64).abs() < 1e-3);
        assert_eq!(round.finish_floor_ms(&ctx, &[(0, 1)], 3), None);
    }
}
