//! Keeping a guaranteed job's standing reservation: it is re-walked against
//! this round's capacity, and kept only if it still finishes by the deadline.

use crate::world::NodeKind;

use super::DONE_EPS_ITERS;
use super::grid::{Place, Round};
use super::job::JobCtx;
use super::walk::Seg;

impl<'a> Round<'a> {
    /// Re-validates a guaranteed job's standing reservation against today's capacity.
    pub(super) fn keep(&self, ctx: &JobCtx) -> Result<Vec<Seg>, String> {
        let res = &ctx.job.reservation;
        if res.is_empty() {
            return Err("it had no reservation".to_string());
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
                    .ok_or_else(|| format!("node {} is gone", a.node_id))?;
                place.push((q, a.workers));
            }
            place.sort_unstable();
            let start = r.start_ms.max(self.now_ms);
            let first = self.slot_of(start);
            let last = self.slot_of(r.end_ms - 1);
            if last >= self.n_slots {
                return Err("its reservation reaches past the horizon".to_string());
            }
            if let Some(&(q, _)) = place
                .iter()
                .find(|&&(q, w)| (first..=last).any(|s| self.free[q * self.n_slots + s] < w))
            {
                let n = &self.world.nodes[q];
                return Err(match &n.kind {
                    NodeKind::Edge(av) if av.tide_in() => format!(
                        "the tide came in on {} (primary load {:.0}% > {:.0}%)",
                        n.id,
                        av.util_now_pct.unwrap_or(0.0),
                        av.idle_threshold_pct
                    ),
                    _ => format!("{} no longer has the reserved capacity", n.id),
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
                )
                .ok_or("a throughput table it relied on is gone")?;
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
            return Err("its reservation no longer finishes by the deadline".to_string());
        }
        Ok(segs)
    }
}
