//! Running ahead: once every job has its plan, each guaranteed job, earliest
//! deadline first, may run in the slot in progress wherever it does the most
//! work, on its own reserved devices plus capacity nothing holds now (idle
//! edge devices; unreserved cloud GPUs), as ElasticFlow gives leftover
//! capacity to admitted jobs. Its reservation stays as it was, so the
//! guarantee never rests on the leftover; the ground gained shrinks the
//! reservation the next round re-walks ([`Round::keep`] stops once the work
//! is done), and the capacity freed admits later jobs.
//!
//! The work a placement does in the slot in progress, iterations:
//! `max(0, T − s_p) / t_p`, with `T` the seconds left in the slot, `s_p` the
//! placement's start-up (none where the job runs now; staging and restart
//! elsewhere) and `t_p` its step time. A move must beat staying by that
//! measure, so a move pays for its checkpoint and restart within the slot.

use crate::decision::{Action, JobDecision, Segment};

use super::grid::{Grade, Place, Round};
use super::job::JobCtx;
use super::plan::Want;
use super::reason::Reason;
use super::{DONE_EPS_ITERS, Words};

impl<'a> Round<'a> {
    /// Moves decision `d`'s job, for the slot in progress, to where it does
    /// the most work.
    pub(super) fn run_ahead(&mut self, ctx: &JobCtx<'a>, d: &mut JobDecision) {
        let reserved: Place = match &d.action {
            Action::Start { on } | Action::Migrate { to: on, .. } => self.indices(on),
            Action::Continue => ctx.location.clone(),
            _ => Place::new(),
        };
        // The job's own devices now are its to use.
        self.give_back(&reserved, 1);
        let running = ctx.job.progress.running;
        let work = |round: &Self, place: &Place| -> f64 {
            if place.is_empty() {
                return 0.0;
            }
            let (Some(step), true) = (round.step(ctx, place), round.fits_now(place)) else {
                return 0.0;
            };
            let slot_s = (round.now_until(place) - round.now_ms) as f64 / 1000.0;
            let here = running && *place == ctx.location;
            let owed = ctx.job.progress.startup_left_s;
            let startup = round.startup(ctx, place, &ctx.location, owed, here);
            ((slot_s - startup).max(0.0) / step.total_s).min(ctx.remaining)
        };
        let mut options: Vec<Place> = vec![reserved.clone()];
        if running {
            options.push(ctx.location.clone());
        }
        options.extend(self.cloud_now_places(ctx));
        if let Ok(c) = self.plan(ctx, Want::Leftover)
            && let Some(s) = c.segs.first().filter(|s| s.first_slot == 0)
        {
            options.push(s.place.clone());
        }
        let mut best = (work(self, &reserved), reserved.clone());
        for p in options.into_iter().filter(|p| !p.is_empty()) {
            let w = work(self, &p);
            if w > best.0 * (1.0 + 1e-9) && self.still_guaranteed_from(ctx, d, &p, w / 2.0) {
                best = (w, p);
            }
        }
        self.give_back(&best.1, -1);
        let (best_work, chosen) = best;
        if chosen == reserved || chosen.is_empty() {
            return;
        }
        d.action = Action::toward(
            running,
            &self.assignments(&ctx.location),
            Some(self.assignments(&chosen)),
        );
        let owed = ctx.job.progress.startup_left_s;
        let here = running && chosen == ctx.location;
        let until_ms = self.now_until(&chosen);
        let slot_s = (until_ms - self.now_ms) as f64 / 1000.0;
        if let Some(step) = self.step(ctx, &chosen) {
            let startup_s = self.startup(ctx, &chosen, &ctx.location, owed, here);
            d.ahead = Some(Segment {
                start_ms: self.now_ms,
                end_ms: until_ms,
                on: self.assignments(&chosen),
                startup_s,
                step,
                iters: best_work,
                cloud_cost: self.price(&chosen) * slot_s / 3600.0,
            });
        }
        let why = Reason::RunsAhead {
            place: self.shares(&chosen),
            until_ms,
        };
        if self.words == Words::Explain {
            d.explanation.reason = format!("{}; {why}", d.explanation.reason);
        }
        d.explanation.why.push(why);
    }

    /// Whether `d`'s reservation, from the end of the slot in progress,
    /// still finishes the job by its deadline if it ran in this slot on
    /// `place` and gained nothing there: its first reserved stretch then pays
    /// the start-up from `place`. The guarantee never rests on the leftover.
    fn still_guaranteed_from(
        &self,
        ctx: &JobCtx,
        d: &JobDecision,
        place: &Place,
        gained: f64,
    ) -> bool {
        let t1 = self.slot_end(0);
        let mut left = ctx.remaining - gained;
        if left <= DONE_EPS_ITERS {
            return true;
        }
        let mut from = place.clone();
        for seg in &d.segments {
            let start = seg.start_ms.max(t1);
            if seg.end_ms <= start {
                continue;
            }
            let here = self.indices(&seg.on);
            let Some(step) = self.step(ctx, &here) else {
                return false;
            };
            let startup = if here == from {
                0.0
            } else {
                self.startup(ctx, &here, &from, 0.0, false)
            };
            let secs = (seg.end_ms - start) as f64 / 1000.0 - startup;
            let need = left * step.total_s;
            if need <= secs {
                let finish = start as f64 + 1000.0 * (startup + need);
                return finish <= ctx.job.spec.deadline_ms as f64;
            }
            left -= secs.max(0.0) / step.total_s;
            from = here;
        }
        false
    }

    /// Adds `sign × workers` of `place` to the free devices of the slot in progress.
    fn give_back(&mut self, place: &[(usize, u32)], sign: i64) {
        for &(q, w) in place {
            let f = i64::from(self.free[q * self.n_slots]) + sign * i64::from(w);
            self.set_free(q, 0, f.max(0) as u32);
        }
    }

    /// Whether every node of `place` has its workers free in the slot in
    /// progress, and is open now in the likely grade: running ahead
    /// promises nothing.
    fn fits_now(&self, place: &[(usize, u32)]) -> bool {
        self.usable(place, 0, Grade::Likely)
    }

    /// Until when (Unix ms) `place` is open in the slot in progress.
    fn now_until(&self, place: &[(usize, u32)]) -> i64 {
        self.open_until(place, 0, Grade::Likely)
            .min(self.slot_end(0))
    }

    /// Every cloud placement, one per group and worker count, on devices free
    /// in the slot in progress.
    fn cloud_now_places(&self, ctx: &JobCtx) -> Vec<Place> {
        let owed = ctx.job.progress.startup_left_s;
        self.cloud_configs(ctx, ctx.remaining, &ctx.location, owed)
            .iter()
            .filter_map(|c| self.free_now(ctx, c))
            .collect()
    }
}
