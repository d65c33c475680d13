//! When the live coordinator asks a baseline again. The coordinator plans on
//! its own timer (every minute), but the simulator's engine asks a baseline
//! only when something it reacts to happens: a job arrives or ends, a node
//! comes or goes, an edge box it watches flips between idle and busy
//! ([`EdgeInterest`]), or the time it asked to be woken at comes. A baseline
//! asked every minute re-plans far more often than its paper's scheduler:
//! ElasticFlow-style shares computed afresh each minute resize and swap
//! running jobs back and forth, each move a checkpoint, a stop and a restart
//! (EdgeFlow's live 3-day MEC run planned 15 358 rounds where the engine
//! asked it 1 015 times, and moved each job 5.9 times against 1.9). Between
//! those events the driver re-issues the baseline's last decision, which also
//! lets a swap finish: a start refused while the job it replaces still holds
//! the devices is tried again, not re-planned.

use super::{Decision, EdgeInterest, JobRun};

/// Rounds a job the decision runs may spend off its planned placement (its
/// start refused, or its move not carried out) before the baseline is asked
/// again: a move takes one round to stop the job and the next to start it,
/// and a start waits at most a round for the devices a stopping task frees.
pub(super) const PLACEMENT_PATIENCE_ROUNDS: u32 = 3;

/// A baseline's last decision and what it was made on.
pub(super) struct Asked {
    /// The decision; its places index `nodes`.
    pub(super) decision: Decision,
    /// The cost model's node ids, in its order.
    nodes: Vec<String>,
    /// The active job slots, in the snapshot's order.
    jobs: Vec<usize>,
    /// Per edge index: whether the box reported idle.
    idle: Vec<bool>,
    /// Per entry of the decision's `run`: consecutive rounds its job was not
    /// on its planned placement.
    off_plan: Vec<u32>,
}

/// What a round sees, for [`Asked::still_holds`].
pub(super) struct Seen<'a> {
    /// Now, ms.
    pub(super) now_ms: i64,
    /// The cost model's node ids, in its order.
    pub(super) nodes: &'a [String],
    /// Per node of the model: its edge index, if an edge box.
    pub(super) edge_of: &'a [Option<usize>],
    /// Every job the driver knows, by slot.
    pub(super) jobs: &'a [JobRun],
    /// The active job slots, in the snapshot's order.
    pub(super) active: &'a [usize],
    /// Slots seen for the first time this round.
    pub(super) arrived: &'a [usize],
    /// Per edge index: whether the box reports idle now.
    pub(super) idle: &'a [bool],
}

impl Asked {
    /// Remembers `decision`, made on what `seen` shows.
    pub(super) fn new(decision: Decision, seen: &Seen) -> Asked {
        let off_plan = vec![0; decision.run.len()];
        Asked {
            decision,
            nodes: seen.nodes.to_vec(),
            jobs: seen.active.to_vec(),
            idle: seen.idle.to_vec(),
            off_plan,
        }
    }

    /// Whether the decision still stands this round: nothing happened that
    /// would make the engine ask a baseline with `interest` again. Counts the
    /// rounds each planned job spends off its placement.
    pub(super) fn still_holds(&mut self, seen: &Seen, interest: EdgeInterest) -> bool {
        if !seen.arrived.is_empty()
            || seen.active != self.jobs
            || seen.nodes != self.nodes
            || self.decision.wake_ms.is_some_and(|w| w <= seen.now_ms)
            || self.watched_box_flipped(seen, interest)
        {
            return false;
        }
        for ((j, planned), rounds) in self.decision.run.iter().zip(&mut self.off_plan) {
            *rounds = if seen.jobs[*j].place == *planned {
                0
            } else {
                *rounds + 1
            };
        }
        self.off_plan
            .iter()
            .all(|&rounds| rounds <= PLACEMENT_PATIENCE_ROUNDS)
    }

    /// Whether an edge box that `interest` watches flipped since the decision:
    /// any box (`All`); a box a job runs on or is planned on (`InUse`); those,
    /// or any box turning idle (`InUseAndFreed`).
    fn watched_box_flipped(&self, seen: &Seen, interest: EdgeInterest) -> bool {
        let in_use = |e: usize| {
            let on = |place: &[(u32, u32)]| {
                place
                    .iter()
                    .any(|&(q, _)| seen.edge_of.get(q as usize).copied().flatten() == Some(e))
            };
            seen.active.iter().any(|&j| on(&seen.jobs[j].place))
                || self.decision.run.iter().any(|r| on(&r.1))
        };
        seen.idle
            .iter()
            .zip(&self.idle)
            .enumerate()
            .filter(|(_, (now, then))| now != then)
            .any(|(e, (&now, _))| match interest {
                EdgeInterest::None => false,
                EdgeInterest::All => true,
                EdgeInterest::InUse => in_use(e),
                EdgeInterest::InUseAndFreed => now || in_use(e),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::JobSpec;

    /// The schedule testkit's job, as job `id`.
    fn job(id: u64) -> JobRun {
        let spec = JobSpec {
            id,
            ..crate::schedule::testkit::world().jobs[0].spec.clone()
        };
        JobRun::new(spec, 1)
    }

    /// Two cloud nodes and two edge boxes (indices 2 and 3 are edges 0 and 1);
    /// job 0 planned on node 0, job 1 on edge box 0.
    struct Case {
        nodes: Vec<String>,
        edge_of: Vec<Option<usize>>,
        jobs: Vec<JobRun>,
        active: Vec<usize>,
        idle: Vec<bool>,
    }

    impl Case {
        fn new() -> Case {
            Case {
                nodes: ["c0", "c1", "e0", "e1"].map(String::from).to_vec(),
                edge_of: vec![None, None, Some(0), Some(1)],
                jobs: vec![job(1), job(2)],
                active: vec![0, 1],
                idle: vec![true, true],
            }
        }

        fn seen<'a>(&'a self, now_ms: i64, arrived: &'a [usize]) -> Seen<'a> {
            Seen {
                now_ms,
                nodes: &self.nodes,
                edge_of: &self.edge_of,
                jobs: &self.jobs,
                active: &self.active,
                arrived,
                idle: &self.idle,
            }
        }

        fn asked(&self, wake_ms: Option<i64>) -> Asked {
            let decision = Decision {
                run: vec![(0, vec![(0, 1)]), (1, vec![(2, 1)])],
                wake_ms,
                ..Decision::default()
            };
            Asked::new(decision, &self.seen(0, &[]))
        }

        fn on_plan(&mut self) {
            self.jobs[0].place = vec![(0, 1)];
            self.jobs[1].place = vec![(2, 1)];
        }
    }

    #[test]
    fn a_quiet_round_keeps_the_decision_and_any_event_asks_again() {
        let mut c = Case::new();
        c.on_plan();
        let mut a = c.asked(Some(600_000));
        assert!(a.still_holds(&c.seen(60_000, &[]), EdgeInterest::All));
        // The wake-up time comes.
        assert!(!a.still_holds(&c.seen(600_000, &[]), EdgeInterest::All));
        // A job arrives.
        c.jobs.push(job(3));
        c.active.push(2);
        assert!(
            !c.asked(None)
                .still_holds(&c.seen(60_000, &[2]), EdgeInterest::None)
        );
        // A job ends (the asked decision knew three, the round sees two).
        let mut a = c.asked(None);
        c.active.pop();
        assert!(!a.still_holds(&c.seen(60_000, &[]), EdgeInterest::None));
        // A node goes.
        let mut a = c.asked(None);
        c.nodes.pop();
        c.edge_of.pop();
        assert!(!a.still_holds(&c.seen(60_000, &[]), EdgeInterest::None));
    }

    #[test]
    fn an_edge_flip_asks_again_only_where_the_interest_looks() {
        let mut c = Case::new();
        c.on_plan();
        let a = c.asked(None);
        // Box e1, which no job uses, turns busy.
        c.idle[1] = false;
        let flip = |a: &Asked, c: &Case, i| a.watched_box_flipped(&c.seen(60_000, &[]), i);
        assert!(flip(&a, &c, EdgeInterest::All));
        assert!(!flip(&a, &c, EdgeInterest::InUse));
        assert!(!flip(&a, &c, EdgeInterest::InUseAndFreed));
        assert!(!flip(&a, &c, EdgeInterest::None));
        // Busy when asked, it turns idle: new capacity.
        let a = c.asked(None);
        c.idle[1] = true;
        assert!(flip(&a, &c, EdgeInterest::InUseAndFreed));
        assert!(!flip(&a, &c, EdgeInterest::InUse));
        // Box e0, where job 1 runs, turns busy.
        c.idle[0] = false;
        assert!(flip(&a, &c, EdgeInterest::InUse));
    }

    #[test]
    fn a_job_kept_off_its_planned_placement_asks_again_after_the_patience() {
        let mut c = Case::new();
        let mut a = c.asked(None);
        // Job 0's start is refused round after round; job 1 runs as planned.
        c.jobs[1].place = vec![(2, 1)];
        for _ in 0..PLACEMENT_PATIENCE_ROUNDS {
            assert!(a.still_holds(&c.seen(60_000, &[]), EdgeInterest::None));
        }
        assert!(!a.still_holds(&c.seen(60_000, &[]), EdgeInterest::None));
        // Reaching its placement in time resets the count.
        let mut a = c.asked(None);
        for _ in 0..PLACEMENT_PATIENCE_ROUNDS {
            assert!(a.still_holds(&c.seen(60_000, &[]), EdgeInterest::None));
        }
        c.jobs[0].place = vec![(0, 1)];
        assert!(a.still_holds(&c.seen(60_000, &[]), EdgeInterest::None));
        assert_eq!(a.off_plan, [0, 0]);
    }
}
