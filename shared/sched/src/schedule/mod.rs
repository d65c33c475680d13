//! The deadline-aware scheduler: one pure round from a [`WorldSnapshot`] to a
//! [`RoundPlan`].
//!
//! Time is cut into policy slots from `now` to the horizon; every node has a
//! free-device count per slot and, for edge nodes, how long into the slot it
//! is open in each grade ([`grid::Grade`]: the sure P90 windows for promises,
//! the likely P50 windows too for plans that promise nothing), and not while
//! the tide is in. Jobs reserve capacity in this
//! order, so no later decision can take what an earlier one holds:
//! 1. guaranteed jobs whose standing reservation is still valid keep it, in admission order;
//! 2. guaranteed jobs whose reservation broke (tide in, node lost) are re-planned, earliest deadline first;
//! 3. new SLO jobs are admitted earliest deadline first, only if a plan meets the deadline;
//! 4. running SLO jobs on edge boxes whose stay there still meets their
//!    deadline keep that capacity first, so a shorter arrival does not move them;
//! 5. jobs without a reservation take what is left, in least-attained-service
//!    or shortest-remaining-time order, those with a deadline still ahead
//!    first, and among them a waiting one with more than the policy's
//!    `urgent_laxity_h` to spare after those without: an SLO job
//!    (downgraded, or every SLO job under
//!    [`AdmissionMode::EachRound`]) only capacity free now on which it can
//!    still meet its deadline, a best-effort job any leftover edge capacity;
//!    cloud capacity free now only if the policy allows it. A job running
//!    where it can go on (and still meet its deadline) stays there;
//! 6. SLO jobs still waiting for the cloud may gain ground on idle edge
//!    devices now, before a cloud tail later that meets the deadline (priced
//!    past the horizon when it does not fit the grid), when the progress
//!    pays for moving the checkpoint back.
//!
//! A plan for one job picks, among an edge placement (none, one node, or the
//! top-k candidate nodes together) followed, if needed, by a cloud tail that
//! starts as late as the deadline allows, the one with the least cloud cost;
//! then, for a job due by a deadline, one that leaves a fifth of the time to
//! spare with the fewest device-seconds; then the earliest finish
//! ([`plan::Candidate::rank`]). Step times on several boxes of one LAN price
//! that LAN shared with the jobs running on it ([`lan`]). When no fixed worker count fits the cloud
//! capacity left, an elastic cloud plan may ([`elastic`]): fewer workers while
//! capacity is scarce, more once it frees up, each resize paid for. Edge
//! candidates are found through an index sorted by first free slot, and cloud
//! nodes are grouped by (class, size, price), so a round costs about jobs ×
//! (candidates + groups) × slots, not jobs × nodes.
//!
//! The stages live in submodules: [`grid`] (free capacity), [`job`] (per-job
//! facts and timings), [`lan`] (which boxes share a LAN, and its load),
//! [`held`] (what running jobs hold, so plans take free nodes first),
//! [`walk`] (a placement over the slots), [`options`]
//! (candidates worth trying), [`cloud`] (cloud plans), [`elastic`] (cloud
//! plans whose worker count changes between stretches), [`plan`] (choosing
//! one), [`keep`] (standing reservations), [`reason`] (why, typed),
//! [`explain`] (the path a job took) and [`decide`] (the decision and its
//! explanation); this module runs the round's phases.

mod ahead;
mod cloud;
mod decide;
mod elastic;
mod explain;
mod grid;
mod held;
mod job;
mod keep;
mod lan;
mod options;
mod plan;
mod reason;
#[cfg(test)]
pub(crate) mod testkit;
mod walk;

pub use reason::{EXPLANATION_TIME_FORMAT, Reason, Share, Stretch};

use std::collections::HashMap;

use crate::decision::{JobDecision, RoundPlan, Verdict};
use crate::settings::Policy;
use crate::world::{
    Admission, AdmissionMode, BestEffortOrder, JobClass, JobState, OnInfeasible, WorldSnapshot,
};

use explain::{Entry, Outcome, Story};
use grid::Round;
use plan::Want;

/// Iterations left below this count as done (absorbs floating-point drift).
pub const DONE_EPS_ITERS: f64 = 1e-6;

/// Runs one scheduling round at `now_ms` (Unix ms); see the module docs.
pub fn schedule(world: &WorldSnapshot, now_ms: i64, policy: &Policy) -> RoundPlan {
    schedule_with(world, now_ms, policy, Words::Explain)
}

/// Whether a round puts its decisions into words: the coordinator stores and
/// shows them; the simulator reads only the plans, and the words cost it a
/// tenth of its time on a busy trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Words {
    /// Every decision's [`Explanation`](crate::decision::Explanation) in
    /// full: its `reason` in words and the `nodes` it names.
    Explain,
    /// The same decisions with an empty `reason` and no `nodes`; the typed
    /// reasons (`why`) and everything else are as with [`Words::Explain`].
    Skip,
}

/// [`schedule`], with or without the decisions in words.
pub fn schedule_with(
    world: &WorldSnapshot,
    now_ms: i64,
    policy: &Policy,
    words: Words,
) -> RoundPlan {
    if policy.admission == AdmissionMode::Queue {
        let mut first = Vec::new();
        for _ in 0..=MAX_PROMOTIONS {
            match plan_round(world, now_ms, policy, Some(&first), words) {
                Ok(plan) => return plan,
                Err(Stuck(id)) => first.push(id),
            }
        }
    }
    match plan_round(world, now_ms, policy, None, words) {
        Ok(plan) => plan,
        Err(Stuck(id)) => {
            unreachable!("job {id} was held in order in a round that keeps reservations first")
        }
    }
}

/// How many guaranteed jobs a queue-admission round moves to the front,
/// one per try, before it keeps every reservation first instead.
const MAX_PROMOTIONS: usize = 8;

/// A guaranteed job that found no plan meeting its deadline in its turn.
struct Stuck(u64);

/// One round. With `in_order` (queue admission), guaranteed jobs take their
/// turn with the queued ones, shortest first, so a short arrival may run
/// before a long job that is already guaranteed, which then runs later on a
/// plan that still meets its deadline; the guaranteed jobs listed in it go
/// first, in that order. A guaranteed job that finds no such plan in its turn
/// stops the round (`Stuck`), to be tried again with that job first.
fn plan_round(
    world: &WorldSnapshot,
    now_ms: i64,
    policy: &Policy,
    in_order: Option<&[u64]>,
    words: Words,
) -> Result<RoundPlan, Stuck> {
    let mut round = Round::new(world, now_ms, policy, words);
    let mut decisions = Vec::with_capacity(world.jobs.len());

    let mut guaranteed: Vec<&JobState> = Vec::new();
    let mut pending: Vec<&JobState> = Vec::new();
    let mut best_effort: Vec<(&JobState, Entry)> = Vec::new();
    for j in &world.jobs {
        match (j.admission, j.spec.class, policy.admission) {
            (Admission::Guaranteed { since_ms }, _, _) if in_order.is_some() => {
                best_effort.push((j, Entry::Held { since_ms }));
            }
            (Admission::Guaranteed { .. }, _, _) => guaranteed.push(j),
            (_, JobClass::Slo, AdmissionMode::Queue) => best_effort.push((
                j,
                Entry::Queued {
                    lead_ms: (policy.promise_lead_ms < policy.horizon_ms)
                        .then_some(policy.promise_lead_ms),
                },
            )),
            (Admission::Pending, JobClass::Slo, AdmissionMode::Reserve) => pending.push(j),
            (Admission::Pending, JobClass::Slo, AdmissionMode::EachRound) => {
                best_effort.push((j, Entry::EachRound));
            }
            _ => best_effort.push((j, Entry::BestEffortJob)),
        }
    }
    let reshuffled = (policy.reshuffle && !pending.is_empty())
        .then(|| reshuffle(world, now_ms, policy, words, &guaranteed, &pending))
        .flatten();
    if let Some((r, decs, downgraded)) = reshuffled {
        round = r;
        decisions = decs;
        best_effort.extend(downgraded);
    } else {
        guaranteed.sort_by_key(|j| match j.admission {
            Admission::Guaranteed { since_ms } => (since_ms, j.spec.id),
            _ => (i64::MAX, j.spec.id),
        });
        let mut broken = Vec::new();
        for j in guaranteed {
            let since_ms = match j.admission {
                Admission::Guaranteed { since_ms } => since_ms,
                _ => now_ms,
            };
            let ctx = round.job_ctx(j);
            match round.keep(&ctx) {
                Ok(segs) => {
                    let story = Story::Kept(round.reserved(&segs));
                    decisions.push(round.decide(
                        &ctx,
                        Verdict::Guaranteed { since_ms },
                        segs,
                        story,
                    ));
                }
                Err(why) => broken.push((j, since_ms, why)),
            }
        }
        broken.sort_by_key(|(j, _, _)| (j.spec.deadline_ms, j.spec.id));
        for (j, since_ms, why) in broken {
            let ctx = round.job_ctx(j);
            let verdict = Verdict::Guaranteed { since_ms };
            match round.plan(&ctx, Want::Guarantee) {
                Ok(c) => decisions.push(round.replan(&ctx, since_ms, why, c)),
                Err(fail) => {
                    let c = round
                        .plan(&ctx, Want::MeetDeadline)
                        .or_else(|_| round.plan(&ctx, Want::Leftover))
                        .ok();
                    let story = Story::AtRisk { broke: why, fail };
                    let segs = c.map_or_else(Vec::new, |c| c.segs);
                    decisions.push(round.decide(&ctx, verdict, segs, story));
                }
            }
        }
        pending.sort_by_key(|j| (j.spec.deadline_ms, j.spec.submitted_ms, j.spec.id));
        for j in pending {
            let ctx = round.job_ctx(j);
            match round
                .plan(&ctx, Want::Guarantee)
                .map(|c| round.admit(&ctx, c))
            {
                Ok(d) => decisions.push(d),
                Err(fail) => match round.refuse(&ctx, fail) {
                    Ok(d) => decisions.push(d),
                    Err(entry) => best_effort.push((j, entry)),
                },
            }
        }
    }
    // Jobs with a deadline still ahead go first: capacity now can still save
    // them; among those, a waiting job with time to spare goes after the ones
    // that must start soon.
    let lax_s = policy.urgent_laxity_ms as f64 / 1000.0;
    let key = |j: &JobState| {
        let plain = j.spec.class != JobClass::Slo;
        let work = remaining_work(&round, j);
        let measure = match policy.best_effort_order {
            BestEffortOrder::LeastAttainedService => j.progress.attained_s,
            BestEffortOrder::ShortestRemainingTime => work,
        };
        let spare = !plain && !j.progress.running && laxity_s(now_ms, j, work) > lax_s;
        (plain, spare, measure, j.spec.id)
    };
    let front = |j: &JobState| {
        in_order
            .and_then(|first| first.iter().position(|&id| id == j.spec.id))
            .unwrap_or(usize::MAX)
    };
    // Sorted by index, as the entries are large; job ids make the order total.
    let mut order: Vec<(usize, Turn, usize)> = best_effort
        .iter()
        .enumerate()
        .map(|(i, (j, _))| (front(j), key(j), i))
        .collect();
    order.sort_unstable_by(|a, b| {
        (a.0.cmp(&b.0))
            .then(a.1.0.cmp(&b.1.0))
            .then(a.1.1.cmp(&b.1.1))
            .then(a.1.2.total_cmp(&b.1.2))
            .then(a.1.3.cmp(&b.1.3))
    });
    let mut entries: Vec<Option<(&JobState, Entry)>> = best_effort.into_iter().map(Some).collect();
    // Running jobs first: one whose stay still meets its deadline keeps
    // its capacity before the queue is planned.
    let mut queue = Vec::with_capacity(order.len());
    for (j, entry) in order.iter().filter_map(|o| entries[o.2].take()) {
        let ctx = round.job_ctx(j);
        let grade = match entry {
            Entry::Held { .. } => grid::Grade::Sure,
            _ => grid::Grade::Likely,
        };
        let Some(c) = round.running_first(&ctx, grade) else {
            queue.push((j, entry));
            continue;
        };
        decisions.push(match entry {
            Entry::Held { since_ms } => round.replan(&ctx, since_ms, Reason::RunningFirst, c),
            Entry::Queued { .. } if promised(&round, &c, j.spec.deadline_ms) => {
                round.admit(&ctx, c)
            }
            entry => {
                let story = Story::Leftover {
                    entry,
                    late: None,
                    outcome: Outcome::Runs(c.why),
                };
                round.decide(&ctx, Verdict::BestEffort, c.segs, story)
            }
        });
    }
    let mut waiting = Vec::new();
    for (j, entry) in queue {
        let ctx = round.job_ctx(j);
        if let Entry::Held { since_ms } = entry {
            let c = round
                .plan(&ctx, Want::MeetDeadline)
                .ok()
                .filter(|c| c.finishes_by(j.spec.deadline_ms) && round.on_sure(&c.segs))
                .or_else(|| round.plan(&ctx, Want::Guarantee).ok())
                .ok_or(Stuck(j.spec.id))?;
            decisions.push(round.replan(&ctx, since_ms, Reason::InTurn, c));
            continue;
        }
        let mut want = Want::Leftover;
        let mut late = None;
        if j.spec.class == JobClass::Slo {
            match round.hopeless(&ctx) {
                None => want = Want::MeetDeadline,
                Some(h) if policy.on_infeasible_for(&j.spec) == OnInfeasible::Reject => {
                    let story = Story::Leftover {
                        entry,
                        late,
                        outcome: Outcome::TurnedAway(h),
                    };
                    decisions.push(round.decide(&ctx, Verdict::Rejected, Vec::new(), story));
                    continue;
                }
                Some(h) => late = Some(h),
            }
        }
        let queued = matches!(entry, Entry::Queued { .. });
        let (segs, outcome) = match round.plan(&ctx, want) {
            Ok(c) if queued && promised(&round, &c, j.spec.deadline_ms) => {
                decisions.push(round.admit(&ctx, c));
                continue;
            }
            // A plan on the likely grade that would be promised: the
            // promise needs one on the sure grade.
            Ok(c) if queued && c.finishes_by(j.spec.deadline_ms) && promise_near(&round, &c) => {
                match round.plan(&ctx, Want::Guarantee) {
                    Ok(sure) if promised(&round, &sure, j.spec.deadline_ms) => {
                        decisions.push(round.admit(&ctx, sure));
                        continue;
                    }
                    _ => (c.segs, Outcome::Runs(c.why)),
                }
            }
            Ok(c) => (c.segs, Outcome::Runs(c.why)),
            Err(fail) if want == Want::MeetDeadline => {
                waiting.push((j, entry, fail));
                continue;
            }
            Err(fail) => (Vec::new(), Outcome::Waits(fail)),
        };
        let story = Story::Leftover {
            entry,
            late,
            outcome,
        };
        decisions.push(round.decide(&ctx, Verdict::BestEffort, segs, story));
    }
    // Once every job has had its chance at capacity free now, those still
    // waiting for the cloud may gain ground on idle edge devices; their
    // tails then take no capacity a job could run on now.
    for (j, entry, fail) in waiting {
        let ctx = round.job_ctx(j);
        let (segs, outcome) = match round.edge_now_cloud_later(&ctx) {
            Some(c) => (c.segs, Outcome::Runs(c.why)),
            None => (Vec::new(), Outcome::Waits(fail)),
        };
        let story = Story::Leftover {
            entry,
            late: None,
            outcome,
        };
        decisions.push(round.decide(&ctx, Verdict::BestEffort, segs, story));
    }
    if policy.run_ahead {
        let by_id: HashMap<u64, &JobState> = world.jobs.iter().map(|j| (j.spec.id, j)).collect();
        let mut ahead: Vec<(&JobState, usize)> = decisions
            .iter()
            .enumerate()
            .filter(|(_, d)| matches!(d.verdict, Verdict::Guaranteed { .. }))
            .filter_map(|(i, d)| Some((*by_id.get(&d.job_id)?, i)))
            .collect();
        ahead.sort_by_key(|(j, _)| (j.spec.deadline_ms, j.spec.id));
        for (j, i) in ahead {
            let ctx = round.job_ctx(j);
            round.run_ahead(&ctx, &mut decisions[i]);
        }
    }
    decisions.sort_unstable_by_key(|d| d.job_id);
    Ok(RoundPlan { now_ms, decisions })
}

/// Where a job without a reservation takes its turn, by its fields in
/// order: jobs with no deadline last, then jobs with time to spare, then
/// the policy's order, then the job id.
type Turn = (bool, bool, f64, u64);

/// Whether plan `c` finishes within the policy's promise lead from now.
fn promise_near(round: &Round, c: &plan::Candidate) -> bool {
    c.finish_ms
        .is_some_and(|f| f - round.now_ms <= round.policy.promise_lead_ms)
}

/// Whether a queued job is promised plan `c`: it meets the job's deadline,
/// finishes within the policy's promise lead, and uses edge capacity only
/// on the sure grade.
fn promised(round: &Round, c: &plan::Candidate, deadline_ms: i64) -> bool {
    c.finishes_by(deadline_ms) && promise_near(round, c) && round.on_sure(&c.segs)
}

/// Every guarantee planned again with the new arrivals, earliest deadline
/// first, on a fresh grid: a job whose deadline is near may then take
/// capacity a job with time to spare held, which moves later. `None` when a
/// job already guaranteed would lose its guarantee; the round then keeps
/// every reservation as it stands. A new job no plan can guarantee is
/// rejected, or returned to run best-effort if it asked for that.
#[allow(clippy::type_complexity)]
fn reshuffle<'a>(
    world: &'a WorldSnapshot,
    now_ms: i64,
    policy: &'a Policy,
    words: Words,
    guaranteed: &[&'a JobState],
    pending: &[&'a JobState],
) -> Option<(Round<'a>, Vec<JobDecision>, Vec<(&'a JobState, Entry)>)> {
    let mut round = Round::new(world, now_ms, policy, words);
    let mut all: Vec<&JobState> = guaranteed.iter().chain(pending).copied().collect();
    all.sort_by_key(|j| (j.spec.deadline_ms, j.spec.submitted_ms, j.spec.id));
    let mut decisions = Vec::with_capacity(all.len());
    let mut downgraded = Vec::new();
    for j in all {
        let ctx = round.job_ctx(j);
        let since = match j.admission {
            Admission::Guaranteed { since_ms } => Some(since_ms),
            _ => None,
        };
        match (round.plan(&ctx, Want::Guarantee), since) {
            (Ok(c), Some(since_ms)) => {
                decisions.push(round.replan(&ctx, since_ms, Reason::Reshuffled, c));
            }
            (Ok(c), None) => decisions.push(round.admit(&ctx, c)),
            (Err(_), Some(_)) => return None,
            (Err(fail), None) => match round.refuse(&ctx, fail) {
                Ok(d) => decisions.push(d),
                Err(entry) => downgraded.push((j, entry)),
            },
        }
    }
    Some((round, decisions, downgraded))
}

/// A job's laxity, seconds: how long it can wait and still meet its
/// deadline on one device of the fastest class,
/// `(deadline_ms − now_ms) / 1000 − work_s`, with `work_s` its
/// [`remaining_work`] in seconds (negative: it cannot).
fn laxity_s(now_ms: i64, j: &JobState, work_s: f64) -> f64 {
    (j.spec.deadline_ms - now_ms) as f64 / 1000.0 - work_s
}

/// Single-device seconds of work left on the fastest class: the
/// shortest-remaining-time key.
fn remaining_work(round: &Round, j: &JobState) -> f64 {
    let left = (j.spec.iterations - j.progress.done_iters).max(0.0);
    let fastest = round
        .world
        .throughput
        .classes
        .values()
        .filter_map(|m| m.get(&j.spec.model)?.lookup(j.spec.global_batch, 1))
        .map(|t| t.iters_per_s)
        .fold(0.0, f64::max);
    if fastest > 0.0 {
        left / fastest
    } else {
        f64::MAX
    }
}
