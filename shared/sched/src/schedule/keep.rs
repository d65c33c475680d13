//! Keeping a guaranteed job's standing reservation: it is re-walked against
//! this round's capacity, and kept only if it still finishes by the deadline.

use crate::world::NodeKind;

use super::DONE_EPS_ITERS;
use super::grid::{Grade, Place, Round};
use super::job::JobCtx;
use super::reason::Reason;
use super::walk::Seg;

impl<'a> Round<'a> {
    /// Re-validates a guaranteed job's standing reservation against today's capacity.
    pub(super) fn keep(&self, ctx: &JobCtx) -> Result<Vec<Seg>, Reason> {
        let res = &ctx.job.reservation;
        if res.is_empty() {
            return Err(Reason::NoReservation);
        }
        let mut segs = Vec::new();
        let mut done = 0.0;
        let mut from = ctx.location.clone();
        let mut owed = ctx.job.progress.startup_left_s;
        for r in res.iter().filter(|r| r.end_ms > self.now_ms) {
            let mut place: Place = Vec::with_capacity(r.on.len());
            for a in &r.on {
                let q = *self
                    .id_of
                    .get(a.node_id.as_str())
                    .ok_or_else(|| Reason::NodeGone {
                        node: a.node_id.clone(),
                    })?;
                place.push((q, a.workers));
            }
            place.sort_unstable();
            let start = r.start_ms.max(self.now_ms);
            let first = self.slot_of(start);
            let last = self.slot_of(r.end_ms - 1);
            if last >= self.n_slots {
                return Err(Reason::PastHorizon);
            }
            if let Some(&(q, _)) = place
                .iter()
                .find(|&&(q, w)| (first..=last).any(|s| !self.usable(&[(q, w)], s, Grade::Sure)))
            {
                let n = &self.world.nodes[q];
                return Err(match &n.kind {
                    NodeKind::Edge(av) if av.tide_in() => Reason::TideBrokeReservation {
                        node: n.id.clone(),
                        load_pct: av.util_now_pct.unwrap_or(0.0),
                        threshold_pct: av.idle_threshold_pct,
                    },
                    _ => Reason::LostCapacity { node: n.id.clone() },
                });
            }
            let run = self
                .walk(
                    ctx,
                    &place,
                    &from,
                    owed,
                    first,
                    last + 1,
                    ctx.remaining - done,
                    false,
                    Grade::Sure,
                )
                .ok_or(Reason::TableGone)?;
            for s in run.segs {
                done += s.iters;
                owed = (s.startup_s - (s.end_ms - s.start_ms) as f64 / 1000.0).max(0.0);
                segs.push(s);
            }
            from = place;
            if done >= ctx.remaining - DONE_EPS_ITERS {
                break;
            }
        }
        let finish = segs.last().map(|s| s.end_ms);
        if done < ctx.remaining - DONE_EPS_ITERS
            || finish.is_none_or(|f| f > ctx.job.spec.deadline_ms)
        {
            return Err(Reason::ReservationLate);
        }
        Ok(segs)
    }
}
