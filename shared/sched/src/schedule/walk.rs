//! Plan walking: how far a job gets on one placement over the slots where
//! the placement is free and open in the plan's [`Grade`], cut into
//! segments, each with its start-up, step time, iterations and cloud cost. A
//! segment ends where the placement's window does
//! ([`Round::open_until`]), inside a slot if need be.

use crate::cost::StepTime;

use super::DONE_EPS_ITERS;
use super::grid::{Grade, Place, Round};
use super::job::JobCtx;

/// A planned segment in slot terms.
#[derive(Clone)]
pub(super) struct Seg {
    pub(super) first_slot: usize,
    /// One past the last slot used.
    pub(super) end_slot: usize,
    pub(super) start_ms: i64,
    pub(super) end_ms: i64,
    pub(super) place: Place,
    pub(super) startup_s: f64,
    pub(super) step: StepTime,
    pub(super) iters: f64,
    pub(super) cost: f64,
}

/// Progress of an edge placement over the slots, for choosing a cloud switch point.
pub(super) struct EdgeRun {
    pub(super) place: Place,
    pub(super) segs: Vec<Seg>,
    /// `prog[x]`: iterations done by the start of slot x.
    pub(super) prog: Vec<f64>,
    pub(super) finished: Option<i64>,
    /// `ran_before[x]`: the job ran on `place` before slot x (its checkpoint is there).
    pub(super) ran_before: Vec<bool>,
}

impl<'a> Round<'a> {
    /// Walks `place` over slots `[from_slot, limit)` while it is free and
    /// open in `grade`, from checkpoint location `from`, until `work`
    /// iterations are done.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn walk(
        &self,
        ctx: &JobCtx,
        place: &[(usize, u32)],
        from: &[(usize, u32)],
        owed0: f64,
        from_slot: usize,
        limit: usize,
        work: f64,
        want_prog: bool,
        grade: Grade,
    ) -> Option<EdgeRun> {
        let step = self.step(ctx, place)?;
        let t = step.total_s;
        let price = self.price(place);
        let mut segs: Vec<Seg> = Vec::new();
        let mut prog = Vec::with_capacity(if want_prog { limit + 1 } else { 0 });
        let mut ran_before = Vec::with_capacity(prog.capacity());
        let mut done = 0.0;
        let mut owed = owed0;
        let mut on_place = false;
        let mut s = from_slot;
        if want_prog {
            prog.resize(from_slot + 1, 0.0);
            ran_before.resize(from_slot + 1, false);
        }
        let mut finished = None;
        while s < limit && finished.is_none() {
            let next = self.next_free(place, s, limit);
            if want_prog {
                for _ in s..next {
                    prog.push(done);
                    ran_before.push(on_place);
                }
            }
            s = next;
            if s >= limit {
                break;
            }
            if !self.usable(place, s, grade) {
                s += 1;
                if want_prog {
                    prog.push(done);
                    ran_before.push(on_place);
                }
                continue;
            }
            let start_ms = self.slot_start(s);
            let startup = if on_place {
                self.startup(ctx, place, place, owed, false)
            } else {
                let continuing = s == 0 && ctx.job.progress.running;
                self.startup(ctx, place, from, owed, continuing)
            };
            let first = s;
            let mut elapsed = 0.0;
            let mut iters = 0.0;
            let mut end_ms = start_ms;
            while s < limit && self.usable(place, s, grade) {
                let until = self.open_until(place, s, grade).min(self.slot_end(s));
                let dur = (until - self.slot_start(s)) as f64 / 1000.0;
                let before = elapsed;
                elapsed += dur;
                let productive = (elapsed - startup).max(0.0) - (before - startup).max(0.0);
                let can = productive / t;
                if done + iters + can >= work - DONE_EPS_ITERS {
                    let need = (work - done - iters).max(0.0);
                    let into = (before.max(startup) - before) + need * t;
                    end_ms = self.slot_start(s) + (into * 1000.0).ceil() as i64;
                    iters += need;
                    s += 1;
                    finished = Some(end_ms);
                    break;
                }
                iters += can;
                end_ms = until;
                s += 1;
                if want_prog {
                    prog.push(done + iters);
                    ran_before.push(true);
                }
                // The window ends inside this slot: so does the segment.
                if until < self.slot_end(s - 1) {
                    break;
                }
            }
            owed = (startup - elapsed).max(0.0);
            on_place = true;
            done += iters;
            let secs = (end_ms - start_ms) as f64 / 1000.0;
            segs.push(Seg {
                first_slot: first,
                end_slot: s,
                start_ms,
                end_ms,
                place: place.to_vec(),
                startup_s: startup,
                step,
                iters,
                cost: price * secs / 3600.0,
            });
        }
        if want_prog {
            while prog.len() <= limit {
                prog.push(done);
                ran_before.push(on_place);
            }
        }
        Some(EdgeRun {
            place: place.to_vec(),
            segs,
            prog,
            finished,
            ran_before,
        })
    }
}
