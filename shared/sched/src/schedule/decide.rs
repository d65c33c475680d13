//! Turning a chosen plan into a [`JobDecision`]: it is reserved on the grid,
//! given an action against where the job runs now, and explained in words
//! operators read.

use crate::decision::{Action, Explanation, JobDecision, Segment, Shape, Verdict};

use crate::world::OnInfeasible;

use super::explain::{Entry, Story};
use super::grid::Round;
use super::job::JobCtx;
use super::plan::Candidate;
use super::reason::{Reason, Share, Stretch};
use super::walk::Seg;
use super::{DONE_EPS_ITERS, Words};

impl<'a> Round<'a> {
    /// Reserves `segs` and writes the decision with its explanation: the
    /// one place a [`Story`] and its [`Reason`]s are put into words.
    pub(super) fn decide(
        &mut self,
        ctx: &JobCtx,
        verdict: Verdict,
        segs: Vec<Seg>,
        story: Story,
    ) -> JobDecision {
        self.reserve(&segs);
        let segments: Vec<Segment> = segs
            .iter()
            .map(|s| Segment {
                start_ms: s.start_ms,
                end_ms: s.end_ms,
                on: self.assignments(&s.place),
                startup_s: s.startup_s,
                step: s.step,
                iters: s.iters,
                cloud_cost: s.cost,
            })
            .collect();
        let running = ctx.job.progress.running;
        let now_seg = segs.first().filter(|s| s.first_slot == 0);
        let action = match verdict {
            Verdict::Rejected => Action::Reject,
            _ => Action::toward(
                running,
                &self.assignments(&ctx.location),
                now_seg.map(|s| self.assignments(&s.place)),
            ),
        };
        let words = self.words == Words::Explain;
        let mut reason = if words {
            story.to_string()
        } else {
            String::new()
        };
        let mut why = Vec::new();
        if let (Some(note), Action::Migrate { .. } | Action::Pause) = (&ctx.tide_note, &action) {
            if words {
                let then = match note {
                    Reason::Displaced { .. } => "checkpointing and moving",
                    _ => "checkpointing and moving before it interferes",
                };
                reason = format!("{note}: {then}; {reason}");
            }
            why.push(note.clone());
        }
        why.extend(story.into_reasons());
        let nodes = if words {
            let mut nodes: Vec<String> = segments
                .iter()
                .flat_map(|s| s.on.iter().map(|a| a.node_id.clone()))
                .collect();
            nodes.sort();
            nodes.dedup();
            nodes
        } else {
            Vec::new()
        };
        let done: f64 = segs.iter().map(|s| s.iters).sum();
        let paid = segs.iter().any(|s| self.price(&s.place) > 0.0);
        let unpaid = segs.iter().any(|s| self.price(&s.place) == 0.0);
        let shape = if segs.is_empty() {
            Shape::None
        } else if paid && unpaid {
            Shape::EdgeThenCloud
        } else if paid {
            Shape::Cloud
        } else if segs.iter().any(|s| s.place.len() > 1) {
            Shape::MultiEdge
        } else {
            Shape::Edge
        };
        JobDecision {
            job_id: ctx.job.spec.id,
            verdict,
            action,
            ahead: None,
            explanation: Explanation {
                shape,
                nodes,
                expected_start_ms: segments.first().map(|s| s.start_ms),
                expected_finish_ms: (done >= ctx.remaining - DONE_EPS_ITERS && !segs.is_empty())
                    .then(|| segments.last().map(|s| s.end_ms))
                    .flatten(),
                step: segments.first().map(|s| s.step),
                staging_s: segments.first().map_or(0.0, |s| s.startup_s),
                cloud_cost: segs.iter().map(|s| s.cost).sum(),
                reason,
                why,
            },
            segments,
        }
    }

    /// A new SLO job admitted as guaranteed from now, on plan `c`.
    pub(super) fn admit(&mut self, ctx: &JobCtx, c: Candidate) -> JobDecision {
        let verdict = Verdict::Guaranteed {
            since_ms: self.now_ms,
        };
        self.decide(ctx, verdict, c.segs, Story::Admitted(c.why))
    }

    /// A job guaranteed since `since_ms` on a new plan `c`, and why it has one.
    pub(super) fn replan(
        &mut self,
        ctx: &JobCtx,
        since_ms: i64,
        broke: Reason,
        c: Candidate,
    ) -> JobDecision {
        let story = Story::Replanned { broke, plan: c.why };
        self.decide(ctx, Verdict::Guaranteed { since_ms }, c.segs, story)
    }

    /// A new SLO job no plan can guarantee, for `fail`: its rejection, or
    /// (`Err`) the entry under which it runs best-effort, as it asked.
    pub(super) fn refuse(&mut self, ctx: &JobCtx, fail: Reason) -> Result<JobDecision, Entry> {
        match self.policy.on_infeasible_for(&ctx.job.spec) {
            OnInfeasible::Reject => {
                Ok(self.decide(ctx, Verdict::Rejected, Vec::new(), Story::Rejected(fail)))
            }
            OnInfeasible::BestEffort => Err(Entry::Downgraded(fail)),
        }
    }

    /// A placement as explanations name it.
    pub(super) fn shares(&self, place: &[(usize, u32)]) -> Vec<Share> {
        place
            .iter()
            .map(|&(q, w)| Share {
                node: self.world.nodes[q].id.clone(),
                workers: w,
                class: self.world.nodes[q].class.clone(),
            })
            .collect()
    }

    /// A reservation as explanations name it: where each stretch runs and
    /// when it ends.
    pub(super) fn reserved(&self, segs: &[Seg]) -> Reason {
        Reason::Reserved {
            stretches: self.stretches(segs),
        }
    }

    /// Where each of `segs` runs and when it ends, as explanations name them.
    pub(super) fn stretches(&self, segs: &[Seg]) -> Vec<Stretch> {
        segs.iter()
            .map(|s| Stretch {
                place: self.shares(&s.place),
                until_ms: s.end_ms,
            })
            .collect()
    }
}
