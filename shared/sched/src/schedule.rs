//! The deadline-aware scheduler: one pure round from a [`WorldSnapshot`] to a
//! [`RoundPlan`].
//!
//! Time is cut into policy slots from `now` to the horizon; every node has a
//! free-device count per slot (edge nodes only inside their P90 idle windows,
//! less the grace, and not while the tide is in). Jobs reserve capacity in this
//! order, so no later decision can take what an earlier one holds:
//! 1. guaranteed jobs whose standing reservation is still valid keep it, in admission order;
//! 2. guaranteed jobs whose reservation broke (tide in, node lost) are re-planned, earliest deadline first;
//! 3. new SLO jobs are admitted earliest deadline first, only if a plan meets the deadline;
//! 4. jobs without a reservation take what is left, in least-attained-service
//!    or shortest-remaining-time order, those with a deadline still ahead
//!    first: an SLO job (downgraded, or every SLO job under
//!    [`AdmissionMode::EachRound`]) only capacity free now on which it can
//!    still meet its deadline, a best-effort job any leftover edge capacity;
//!    cloud capacity free now only if the policy allows it.
//!
//! A plan for one job picks, among an edge placement (none, one node, or the
//! top-k candidate nodes together) followed, if needed, by a cloud tail that
//! starts as late as the deadline allows, the one with the least cloud cost,
//! then the earliest finish. Edge candidates are found through an index sorted
//! by first free slot, and cloud nodes are grouped by (class, size, price), so a
//! round costs about jobs × (candidates + groups) × slots, not jobs × nodes.

use std::collections::HashMap;

use crate::cost::{LinkSpec, StepTime, class_compute_s, gpu_cost, staging_s, step_time};
use crate::decision::{Action, Explanation, JobDecision, RoundPlan, Segment, Shape, Verdict};
use crate::throughput::ModelTable;
use crate::world::{
    Admission, AdmissionMode, Assignment, BestEffortOrder, DataSite, JobClass, JobState, LinkClass,
    NodeKind, OnInfeasible, Policy, WorldSnapshot,
};

/// Iterations left below this count as done (absorbs floating-point drift).
pub const DONE_EPS_ITERS: f64 = 1e-6;

/// Runs one scheduling round at `now_ms` (Unix ms); see the module docs.
pub fn schedule(world: &WorldSnapshot, now_ms: i64, policy: &Policy) -> RoundPlan {
    let mut round = Round::new(world, now_ms, policy);
    let mut decisions = Vec::with_capacity(world.jobs.len());

    let mut guaranteed: Vec<&JobState> = Vec::new();
    let mut pending: Vec<&JobState> = Vec::new();
    let mut best_effort: Vec<(&JobState, String)> = Vec::new();
    for j in &world.jobs {
        match (j.admission, j.spec.class) {
            (Admission::Guaranteed { .. }, _) => guaranteed.push(j),
            (Admission::Pending, JobClass::Slo) => match policy.admission {
                AdmissionMode::Reserve => pending.push(j),
                AdmissionMode::EachRound => best_effort.push((
                    j,
                    "admitted without a reservation (admission = each-round)".to_string(),
                )),
            },
            _ => best_effort.push((j, "best-effort job".to_string())),
        }
    }
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
                let reason = format!(
                    "guaranteed; keeps its reservation: {}",
                    reserved(&round, &segs)
                );
                decisions.push(round.decide(&ctx, Verdict::Guaranteed { since_ms }, segs, reason));
            }
            Err(why) => broken.push((j, since_ms, why)),
        }
    }
    broken.sort_by_key(|(j, _, _)| (j.spec.deadline_ms, j.spec.id));
    for (j, since_ms, why) in broken {
        let ctx = round.job_ctx(j);
        let verdict = Verdict::Guaranteed { since_ms };
        match round.plan(&ctx, Want::Guarantee) {
            Ok(c) => {
                let reason = format!("guaranteed; re-planned because {why}; {}", c.why);
                decisions.push(round.decide(&ctx, verdict, c.segs, reason));
            }
            Err(fail) => {
                let c = round
                    .plan(&ctx, Want::MeetDeadline)
                    .or_else(|_| round.plan(&ctx, Want::Leftover))
                    .ok();
                let reason = format!(
                    "guaranteed but now AT RISK: {why}, and {fail}; running best-effort until capacity frees"
                );
                decisions.push(match c {
                    Some(c) => round.decide(&ctx, verdict, c.segs, reason),
                    None => round.decide(&ctx, verdict, Vec::new(), reason),
                });
            }
        }
    }
    pending.sort_by_key(|j| (j.spec.deadline_ms, j.spec.submitted_ms, j.spec.id));
    for j in pending {
        let ctx = round.job_ctx(j);
        match round.plan(&ctx, Want::Guarantee) {
            Ok(c) => {
                let reason = format!("admitted as guaranteed: {}", c.why);
                let verdict = Verdict::Guaranteed { since_ms: now_ms };
                decisions.push(round.decide(&ctx, verdict, c.segs, reason));
            }
            Err(fail) => match j.spec.on_infeasible {
                OnInfeasible::Reject => {
                    let reason = format!("rejected at admission: {fail}");
                    decisions.push(round.decide(&ctx, Verdict::Rejected, Vec::new(), reason));
                }
                OnInfeasible::BestEffort => best_effort.push((
                    j,
                    format!("cannot be guaranteed ({fail}); admitted best-effort as asked"),
                )),
            },
        }
    }
    // Jobs with a deadline still ahead go first: capacity now can still save them.
    let key = |j: &JobState| {
        let plain = j.spec.class != JobClass::Slo;
        let measure = match policy.best_effort_order {
            BestEffortOrder::LeastAttainedService => j.progress.attained_s,
            BestEffortOrder::ShortestRemainingTime => remaining_work(&round, j),
        };
        (plain, measure, j.spec.id)
    };
    let mut best_effort: Vec<_> = best_effort
        .into_iter()
        .map(|(j, why)| (key(j), j, why))
        .collect();
    best_effort.sort_by(|a, b| {
        (a.0.0.cmp(&b.0.0))
            .then(a.0.1.total_cmp(&b.0.1))
            .then(a.0.2.cmp(&b.0.2))
    });
    for (_, j, why) in best_effort {
        let ctx = round.job_ctx(j);
        let mut want = Want::Leftover;
        let mut why = why;
        if j.spec.class == JobClass::Slo {
            match round.hopeless(&ctx) {
                None => want = Want::MeetDeadline,
                Some(h) if j.spec.on_infeasible == OnInfeasible::Reject => {
                    let reason = format!("{why}; turned away: {h}");
                    decisions.push(round.decide(&ctx, Verdict::Rejected, Vec::new(), reason));
                    continue;
                }
                Some(h) => why = format!("{why}; {h}, so it runs best-effort as asked"),
            }
        }
        match round.plan(&ctx, want) {
            Ok(c) => {
                let reason = format!("{why}; {}", c.why);
                decisions.push(round.decide(&ctx, Verdict::BestEffort, c.segs, reason));
            }
            Err(fail) => {
                let reason = format!("{why}; waits: {fail}");
                decisions.push(round.decide(&ctx, Verdict::BestEffort, Vec::new(), reason));
            }
        }
    }
    decisions.sort_by_key(|d| d.job_id);
    RoundPlan { now_ms, decisions }
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

/// Node index and workers on it, sorted by node index.
type Place = Vec<(usize, u32)>;

/// What a plan is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A reservation that finishes by the deadline; may book cloud capacity ahead.
    Guarantee,
    /// No reservation: capacity free now (idle edge; unreserved cloud under
    /// each-round admission or `best_effort_cloud`) on which the job can
    /// still meet its deadline.
    /// Work that finishes late is worth nothing to an SLO job, so it takes
    /// nothing else.
    MeetDeadline,
    /// Whatever is left, deadline or not.
    Leftover,
}

/// A candidate plan for one job.
struct Candidate {
    segs: Vec<Seg>,
    cost: f64,
    finish_ms: Option<i64>,
    why: String,
}

/// A planned segment in slot terms.
#[derive(Clone)]
struct Seg {
    first_slot: usize,
    /// One past the last slot used.
    end_slot: usize,
    start_ms: i64,
    end_ms: i64,
    place: Place,
    startup_s: f64,
    step: StepTime,
    iters: f64,
    cost: f64,
}

/// Per-job facts computed once per round.
struct JobCtx<'a> {
    job: &'a JobState,
    remaining: f64,
    location: Place,
    /// The model's table per device class index (`None`: the class cannot run it).
    tables: Vec<Option<&'a ModelTable>>,
    tide_note: Option<String>,
}

/// Progress of an edge placement over the slots, for choosing a cloud switch point.
struct EdgeRun {
    place: Place,
    segs: Vec<Seg>,
    /// `prog[x]`: iterations done by the start of slot x.
    prog: Vec<f64>,
    finished: Option<i64>,
    /// `ran_before[x]`: the job ran on `place` before slot x (its checkpoint is there).
    ran_before: Vec<bool>,
}

/// One way to run a job on a cloud group.
struct CloudConfig {
    /// Money, currency units.
    cost: f64,
    /// Start-up plus work, seconds.
    secs: f64,
    /// Index into the round's cloud groups.
    group: usize,
    /// Workers.
    workers: u32,
}

struct CloudGroup {
    class: usize,
    devices: u32,
    price: f64,
    nodes: Vec<usize>,
}

struct Round<'a> {
    world: &'a WorldSnapshot,
    policy: &'a Policy,
    now_ms: i64,
    base_ms: i64,
    n_slots: usize,
    id_of: HashMap<&'a str, usize>,
    class_of: Vec<usize>,
    classes: Vec<&'a str>,
    links: HashMap<(&'a str, &'a str), LinkSpec>,
    /// `free[node * n_slots + slot]`: devices not yet reserved.
    free: Vec<u32>,
    /// Edge nodes by first free slot.
    edge_index: Vec<usize>,
    /// Slots with any free device, per node (skips fully booked nodes).
    free_slot_count: Vec<u32>,
    /// First slot with free devices at the start of the round, per node.
    first_free: Vec<usize>,
    cloud_groups: Vec<CloudGroup>,
    /// `cloud_frees[slot]`: a cloud reservation ends at this slot (capacity may free up).
    cloud_frees: Vec<bool>,
}

impl<'a> Round<'a> {
    fn new(world: &'a WorldSnapshot, now_ms: i64, policy: &'a Policy) -> Round<'a> {
        let slot = policy.slot_ms.max(1);
        let base_ms = now_ms.div_euclid(slot) * slot;
        let n_slots = ((now_ms + policy.horizon_ms.max(slot) - base_ms + slot - 1) / slot) as usize;
        let mut classes: Vec<&str> = Vec::new();
        let mut class_of = Vec::with_capacity(world.nodes.len());
        let mut id_of = HashMap::with_capacity(world.nodes.len());
        let mut free = vec![0u32; world.nodes.len() * n_slots];
        let mut free_slot_count = vec![0u32; world.nodes.len()];
        let mut first_free = vec![usize::MAX; world.nodes.len()];
        let mut groups: HashMap<(usize, u32, u64), usize> = HashMap::new();
        let mut cloud_groups: Vec<CloudGroup> = Vec::new();
        for (i, n) in world.nodes.iter().enumerate() {
            id_of.insert(n.id.as_str(), i);
            let c = match classes.iter().position(|c| *c == n.class) {
                Some(c) => c,
                None => {
                    classes.push(n.class.as_str());
                    classes.len() - 1
                }
            };
            class_of.push(c);
            if !n.online || n.devices == 0 {
                continue;
            }
            let row = &mut free[i * n_slots..(i + 1) * n_slots];
            match &n.kind {
                NodeKind::Cloud { price_per_gpu_hour } => {
                    row.fill(n.devices);
                    let key = (c, n.devices, price_per_gpu_hour.to_bits());
                    let g = *groups.entry(key).or_insert_with(|| {
                        cloud_groups.push(CloudGroup {
                            class: c,
                            devices: n.devices,
                            price: *price_per_gpu_hour,
                            nodes: Vec::new(),
                        });
                        cloud_groups.len() - 1
                    });
                    cloud_groups[g].nodes.push(i);
                }
                NodeKind::Edge(av) => {
                    let mut blocked_until = i64::MIN;
                    if av.tide_in() {
                        blocked_until = av
                            .windows
                            .iter()
                            .find(|w| w.start_ms <= now_ms && now_ms < w.end_ms)
                            .map_or(now_ms, |w| w.end_ms);
                    }
                    let mut w = av.windows.iter().peekable();
                    for (s, cell) in row.iter_mut().enumerate() {
                        let (start, end) = slot_bounds(now_ms, base_ms, slot, s);
                        while w.peek().is_some_and(|w| w.end_ms - policy.grace_ms < end) {
                            w.next();
                        }
                        let inside = w.peek().is_some_and(|w| w.start_ms <= start);
                        if inside && start >= blocked_until {
                            *cell = n.devices;
                            first_free[i] = first_free[i].min(s);
                        }
                    }
                }
            }
            free_slot_count[i] = row.iter().filter(|&&f| f > 0).count() as u32;
        }
        let mut edge_index: Vec<usize> = (0..world.nodes.len())
            .filter(|&i| first_free[i] != usize::MAX)
            .collect();
        edge_index.sort_by_key(|&i| (first_free[i], std::cmp::Reverse(free_slot_count[i]), i));
        Round {
            world,
            policy,
            now_ms,
            base_ms,
            n_slots,
            id_of,
            class_of,
            classes,
            links: world.links.index(),
            free,
            edge_index,
            free_slot_count,
            first_free,
            cloud_groups,
            cloud_frees: vec![false; n_slots + 1],
        }
    }

    fn slot_start(&self, s: usize) -> i64 {
        slot_bounds(self.now_ms, self.base_ms, self.policy.slot_ms.max(1), s).0
    }

    fn slot_end(&self, s: usize) -> i64 {
        slot_bounds(self.now_ms, self.base_ms, self.policy.slot_ms.max(1), s).1
    }

    /// The slot containing `t` (t ≥ now), clamped to the grid.
    fn slot_of(&self, t: i64) -> usize {
        (((t.max(self.now_ms) - self.base_ms) / self.policy.slot_ms.max(1)) as usize)
            .min(self.n_slots)
    }

    /// Slots whose start is before `t`.
    fn slots_before(&self, t: i64) -> usize {
        (0..=self.n_slots)
            .find(|&s| s == self.n_slots || self.slot_start(s) >= t)
            .unwrap_or(self.n_slots)
    }

    fn is_cloud(&self, node: usize) -> bool {
        matches!(self.world.nodes[node].kind, NodeKind::Cloud { .. })
    }

    fn job_ctx(&self, job: &'a JobState) -> JobCtx<'a> {
        let location: Place = {
            let mut p: Place = job
                .progress
                .location
                .iter()
                .filter_map(|a| Some((*self.id_of.get(a.node_id.as_str())?, a.workers)))
                .collect();
            p.sort_unstable();
            p
        };
        let tables = self
            .classes
            .iter()
            .map(|c| self.world.throughput.model(c, &job.spec.model))
            .collect();
        let tide_note = job.progress.running.then(|| {
            location
                .iter()
                .find_map(|&(q, _)| match &self.world.nodes[q].kind {
                    NodeKind::Edge(av) if av.tide_in() => Some(format!(
                        "the tide came in on {} (primary load {:.0}% > {:.0}% threshold)",
                        self.world.nodes[q].id,
                        av.util_now_pct.unwrap_or(0.0),
                        av.idle_threshold_pct
                    )),
                    NodeKind::Edge(_) if self.free[q * self.n_slots] == 0 => Some(format!(
                        "the idle window on {} ends (grace {} s)",
                        self.world.nodes[q].id,
                        self.policy.grace_ms / 1000
                    )),
                    _ => None,
                })
        });
        JobCtx {
            job,
            remaining: (job.spec.iterations - job.progress.done_iters).max(0.0),
            location,
            tables,
            tide_note: tide_note.flatten(),
        }
    }

    fn link(&self, a: usize, b: usize) -> LinkSpec {
        let (ia, ib) = (
            self.world.nodes[a].id.as_str(),
            self.world.nodes[b].id.as_str(),
        );
        let key = if ia <= ib { (ia, ib) } else { (ib, ia) };
        if let Some(l) = self.links.get(&key) {
            return *l;
        }
        let class = match (self.is_cloud(a), self.is_cloud(b)) {
            (true, true) => LinkClass::CloudCloud,
            (false, false) => LinkClass::EdgeEdge,
            _ => LinkClass::CloudEdge,
        };
        *self.world.links.default_for(class)
    }

    /// Compute seconds of one step on `place`, its slowest class's
    /// [`class_compute_s`]; a lower bound on the step time. `None` if a class
    /// lacks a throughput table.
    fn compute_s(&self, ctx: &JobCtx, place: &[(usize, u32)]) -> Option<f64> {
        let n: u32 = place.iter().map(|p| p.1).sum();
        let mut slowest = 0.0_f64;
        let mut seen = usize::MAX;
        for &(q, _) in place {
            let class = self.class_of[q];
            if class != seen {
                seen = class;
                let t = ctx.tables[class]?.lookup(ctx.job.spec.global_batch, n)?;
                slowest = slowest.max(class_compute_s(&t, place.len() as u32));
            }
        }
        Some(slowest)
    }

    /// Step time of `place` per the cost model; `None` if a class lacks a throughput table.
    fn step(&self, ctx: &JobCtx, place: &[(usize, u32)]) -> Option<StepTime> {
        let spec = &ctx.job.spec;
        let compute = [self.compute_s(ctx, place)?];
        let bytes = spec.model_bytes as f64;
        let mut slowest: Option<LinkSpec> = None;
        for (i, &(a, _)) in place.iter().enumerate() {
            for &(b, _) in &place[i + 1..] {
                let l = self.link(a, b);
                if slowest.is_none_or(|s| l.slower_than(&s, bytes)) {
                    slowest = Some(l);
                }
            }
        }
        Some(step_time(
            compute,
            place.len() as u32,
            bytes,
            slowest.as_ref(),
            self.policy.gamma,
        ))
    }

    /// Startup before the first step on `place`, coming from `from` (where data
    /// and checkpoint are), owing `owed_s` of unfinished startup if `place == from`.
    fn startup(
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
        let spec = &ctx.job.spec;
        let n: u32 = place.iter().map(|p| p.1).sum();
        let shard = spec.dataset_bytes as f64 / f64::from(n.max(1));
        let site = match &spec.dataset_site {
            DataSite::Node(id) => self.id_of.get(id.as_str()).copied(),
            DataSite::Cloud => None,
        };
        let has_ckpt = !from.is_empty();
        let mut worst: f64 = 0.0;
        for &(q, w) in place {
            let held = from.iter().any(|f| f.0 == q);
            let data_link = if held || site == Some(q) {
                None
            } else {
                Some(match site {
                    Some(s) => self.link(s, q),
                    None if self.is_cloud(q) => {
                        *self.world.links.default_for(LinkClass::CloudCloud)
                    }
                    None => *self.world.links.default_for(LinkClass::CloudEdge),
                })
            };
            let ckpt_link = (has_ckpt && !held).then(|| self.link(from[0].0, q));
            let s = staging_s(
                shard * f64::from(w),
                data_link.as_ref(),
                spec.checkpoint_bytes as f64,
                ckpt_link.as_ref(),
            );
            worst = worst.max(s);
        }
        worst + self.policy.restart_s
    }

    fn usable(&self, place: &[(usize, u32)], s: usize) -> bool {
        place
            .iter()
            .all(|&(q, w)| self.free[q * self.n_slots + s] >= w)
    }

    fn price(&self, place: &[(usize, u32)]) -> f64 {
        place
            .iter()
            .map(|&(q, w)| match self.world.nodes[q].kind {
                NodeKind::Cloud { price_per_gpu_hour } => price_per_gpu_hour * f64::from(w),
                NodeKind::Edge(_) => 0.0,
            })
            .sum()
    }

    /// Walks `place` over slots `[from_slot, limit)` while it is free, from
    /// checkpoint location `from`, until `work` iterations are done.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        ctx: &JobCtx,
        place: &[(usize, u32)],
        from: &[(usize, u32)],
        owed0: f64,
        from_slot: usize,
        limit: usize,
        work: f64,
        want_prog: bool,
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
            if !self.usable(place, s) {
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
            while s < limit && self.usable(place, s) {
                let dur = (self.slot_end(s) - self.slot_start(s)) as f64 / 1000.0;
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
                end_ms = self.slot_end(s);
                s += 1;
                if want_prog {
                    prog.push(done + iters);
                    ran_before.push(true);
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

    /// Edge placements worth trying: the best single nodes and the top-k together.
    fn edge_options(&self, ctx: &JobCtx, limit: usize) -> Vec<Place> {
        let spec = &ctx.job.spec;
        let mut cands: Vec<usize> = Vec::new();
        for &q in &self.edge_index {
            if cands.len() >= self.policy.edge_candidates {
                break;
            }
            if self.first_free[q] >= limit {
                break;
            }
            let n = &self.world.nodes[q];
            if self.free_slot_count[q] == 0
                || n.memory_per_device_bytes < spec.memory_per_worker_bytes
                || ctx.tables[self.class_of[q]].is_none()
            {
                continue;
            }
            if (0..limit).any(|s| self.free[q * self.n_slots + s] > 0) {
                cands.push(q);
            }
        }
        // Keep the current location first so a running job can stay put.
        for &(q, _) in &ctx.location {
            if !self.is_cloud(q) && !cands.contains(&q) {
                cands.insert(0, q);
            }
        }
        let free_before = |q: usize| {
            (0..limit)
                .filter(|&s| self.free[q * self.n_slots + s] > 0)
                .count()
        };
        cands.sort_by_cached_key(|&q| std::cmp::Reverse(free_before(q)));
        let mut opts: Vec<Place> = Vec::new();
        for &q in &cands {
            let w = self.world.nodes[q].devices.min(spec.max_workers);
            if w >= spec.min_workers.max(1) {
                opts.push(vec![(q, w)]);
            }
        }
        let mut group: Place = Vec::new();
        let mut total = 0;
        for &q in cands.iter().take(self.policy.max_edge_nodes) {
            let w = self.world.nodes[q]
                .devices
                .min(spec.max_workers - total.min(spec.max_workers));
            if w == 0 {
                break;
            }
            group.push((q, w));
            total += w;
            if group.len() >= 2 && total >= spec.min_workers {
                let mut g = group.clone();
                g.sort_unstable();
                opts.push(g);
            }
        }
        opts
    }

    /// Worker counts worth trying on a cloud group: min, max, powers of two, whole nodes.
    fn worker_options(spec_min: u32, spec_max: u32, devices: u32) -> Vec<u32> {
        let lo = spec_min.max(1);
        let mut v = vec![lo, spec_max];
        let mut p = 1;
        while p < spec_max {
            if p > lo {
                v.push(p);
            }
            p *= 2;
        }
        let mut k = devices;
        while k < spec_max {
            if k > lo {
                v.push(k);
            }
            k += devices;
        }
        v.retain(|&w| w >= lo && w <= spec_max);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The cloud tail that does `work` by `deadline_ms` starting soonest at or
    /// after slot `x`, the cheapest among those starting then. Later starts are
    /// tried only at slots where a cloud reservation ends, so a job that finds
    /// the cloud booked now can take capacity that frees before its deadline.
    fn cloud_tail(
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

    /// Every (cloud group, worker count) for `work`, with its duration, cheapest first.
    fn cloud_configs(
        &self,
        ctx: &JobCtx,
        work: f64,
        from: &[(usize, u32)],
        owed: f64,
    ) -> Vec<CloudConfig> {
        let spec = &ctx.job.spec;
        let mut configs: Vec<CloudConfig> = Vec::new();
        for (gi, g) in self.cloud_groups.iter().enumerate() {
            let node0 = g.nodes[0];
            if ctx.tables[g.class].is_none()
                || self.world.nodes[node0].memory_per_device_bytes < spec.memory_per_worker_bytes
            {
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
    fn cloud_run(
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
        let mut chosen = Vec::with_capacity(k);
        let open = g.nodes.iter().filter(|&&q| self.free_slot_count[q] > 0);
        for &q in open.take(512) {
            if (x..=last).all(|s| self.free[q * self.n_slots + s] >= per) {
                chosen.push(q);
                if chosen.len() == k {
                    break;
                }
            }
        }
        if chosen.len() < k {
            return None;
        }
        let place = spread(&chosen, w, g.devices);
        let run = self.walk(ctx, &place, from, owed, x, last + 1, work, false)?;
        (run.segs.len() == 1 && run.finished.is_some_and(|f| f <= deadline_ms)).then_some(run.segs)
    }

    /// A best-effort run on cloud capacity free now: the cheapest configuration
    /// that would still finish by the job's deadline (any time for a job without
    /// one), on nodes free in the first slot, for as long as they stay free.
    fn cloud_now(&self, ctx: &JobCtx, owed0: f64) -> Option<Candidate> {
        let spec = &ctx.job.spec;
        let configs = self.cloud_configs(ctx, ctx.remaining, &ctx.location, owed0);
        for c in &configs {
            if self.now_ms.saturating_add((c.secs * 1000.0).ceil() as i64) > spec.deadline_ms {
                continue;
            }
            let g = &self.cloud_groups[c.group];
            let k = c.workers.div_ceil(g.devices) as usize;
            let per = c.workers.div_ceil(k as u32);
            let chosen: Vec<usize> = g
                .nodes
                .iter()
                .copied()
                .filter(|&q| self.free[q * self.n_slots] >= per)
                .take(k)
                .collect();
            if chosen.len() < k {
                continue;
            }
            let place = spread(&chosen, c.workers, g.devices);
            let run = self.walk(
                ctx,
                &place,
                &ctx.location,
                owed0,
                0,
                self.n_slots,
                ctx.remaining,
                false,
            )?;
            let Some(first) = run.segs.into_iter().next().filter(|s| s.first_slot == 0) else {
                continue;
            };
            let finish_ms = (first.iters >= ctx.remaining - DONE_EPS_ITERS).then_some(first.end_ms);
            let why = format!(
                "no free edge capacity now; runs on cloud capacity no reservation holds, {} for {:.2}",
                describe(self, &place),
                first.cost
            );
            return Some(Candidate {
                cost: first.cost,
                finish_ms,
                segs: vec![first],
                why,
            });
        }
        None
    }

    /// Plans a job for what `want` asks; see [`Want`].
    fn plan(&self, ctx: &JobCtx, want: Want) -> Result<Candidate, String> {
        let spec = &ctx.job.spec;
        if ctx.remaining <= DONE_EPS_ITERS {
            return Err("its work is done".to_string());
        }
        if spec.min_workers > spec.max_workers || spec.max_workers == 0 {
            return Err(format!(
                "min_workers {} / max_workers {} leave no valid worker count; set 1 ≤ min ≤ max",
                spec.min_workers, spec.max_workers
            ));
        }
        if ctx.tables.iter().all(Option::is_none) {
            return Err(format!(
                "no device class has a throughput table for model {:?}; add one to the tables",
                spec.model
            ));
        }
        let deadline = want == Want::Guarantee;
        let due = want != Want::Leftover;
        let deadline_ms = if due { spec.deadline_ms } else { i64::MAX };
        if due && let Some(h) = self.hopeless(ctx) {
            return Err(h);
        }
        let limit = self.slots_before(deadline_ms);
        let owed0 = ctx.job.progress.startup_left_s;
        let mut best: Option<Candidate> = None;
        let mut edge_best_frac: f64 = 0.0;
        let consider = |c: Candidate, best: &mut Option<Candidate>| {
            let better = match best {
                None => true,
                Some(b) => {
                    (c.cost, c.finish_ms.unwrap_or(i64::MAX))
                        < (b.cost, b.finish_ms.unwrap_or(i64::MAX))
                }
            };
            if better {
                *best = Some(c);
            }
        };
        let opts = self.edge_options(ctx, limit);
        let n_opts = opts.len();
        for place in opts {
            // Without a reservation only a finish by the deadline counts, and
            // no walk beats running every step from now on.
            if due
                && !deadline
                && self.compute_s(ctx, &place).is_none_or(|c| {
                    self.now_ms as f64 + 1000.0 * ctx.remaining * c > deadline_ms as f64
                })
            {
                continue;
            }
            let Some(run) = self.walk(
                ctx,
                &place,
                &ctx.location,
                owed0,
                0,
                limit,
                ctx.remaining,
                deadline,
            ) else {
                continue;
            };
            edge_best_frac =
                edge_best_frac.max(run.segs.iter().map(|s| s.iters).sum::<f64>() / ctx.remaining);
            if let Some(f) = run.finished.filter(|&f| f <= deadline_ms) {
                let why = format!(
                    "{} finishes on idle edge capacity at {} with no cloud cost",
                    describe(self, &place),
                    utc(f)
                );
                consider(
                    Candidate {
                        segs: run.segs,
                        cost: 0.0,
                        finish_ms: Some(f),
                        why,
                    },
                    &mut best,
                );
                continue;
            }
            if !deadline {
                if !due && !run.segs.is_empty() {
                    let why = format!(
                        "{} takes leftover edge capacity, {:.0}% of the work within the horizon",
                        describe(self, &place),
                        100.0 * run.segs.iter().map(|s| s.iters).sum::<f64>() / ctx.remaining
                    );
                    consider(
                        Candidate {
                            segs: run.segs,
                            cost: 0.0,
                            finish_ms: None,
                            why,
                        },
                        &mut best,
                    );
                }
                continue;
            }
            if best.as_ref().is_some_and(|b| b.cost == 0.0) {
                continue;
            }
            if let Some(c) = self.edge_then_cloud(ctx, &run, limit, deadline_ms) {
                consider(c, &mut best);
            }
        }
        if deadline
            && best.as_ref().is_none_or(|b| b.cost > 0.0)
            && let Some(segs) =
                self.cloud_tail(ctx, 0, ctx.remaining, &ctx.location, owed0, deadline_ms)
        {
            let cost: f64 = segs.iter().map(|s| s.cost).sum();
            let why = format!(
                "no edge plan meets the deadline within {n_opts} edge option(s) (best reaches {:.0}%); cloud {} costs {cost:.2}",
                edge_best_frac * 100.0,
                describe(self, &segs[0].place)
            );
            let finish_ms = segs.last().map(|s| s.end_ms);
            consider(
                Candidate {
                    segs,
                    cost,
                    finish_ms,
                    why,
                },
                &mut best,
            );
        }
        let misses = |b: &Candidate| due && b.finish_ms.is_none_or(|f| f > deadline_ms);
        // Cloud capacity free now is for best-effort work only if the policy
        // says so; under each-round admission it is where SLO jobs run.
        let cloud_now_allowed = self.policy.best_effort_cloud
            || (due && self.policy.admission == AdmissionMode::EachRound);
        if !deadline
            && cloud_now_allowed
            && best
                .as_ref()
                .is_none_or(|b| b.segs.first().is_none_or(|s| s.first_slot > 0) || misses(b))
            && let Some(c) = self.cloud_now(ctx, owed0)
        {
            best = Some(c);
        }
        best.ok_or_else(|| {
            if deadline {
                format!(
                    "no plan finishes by the deadline {}: edge alone reaches {:.0}% of the {:.0} remaining iterations ({n_opts} edge option(s)), and no cloud group with free capacity is fast enough",
                    utc(spec.deadline_ms),
                    edge_best_frac * 100.0,
                    ctx.remaining
                )
            } else if due {
                format!(
                    "no capacity free now on which it can meet its deadline {}",
                    utc(spec.deadline_ms)
                )
            } else {
                "no free edge capacity within the horizon".to_string()
            }
        })
    }

    /// Why the job cannot meet its deadline however it runs, if it cannot: its
    /// deadline has passed, or even [`Round::fastest_iters_per_s`] would finish
    /// too late. A cheap bound that spares hopeless jobs a full plan.
    fn hopeless(&self, ctx: &JobCtx) -> Option<String> {
        let spec = &ctx.job.spec;
        if spec.deadline_ms <= self.now_ms {
            return Some(format!("its deadline {} has passed", utc(spec.deadline_ms)));
        }
        let fastest = self.fastest_iters_per_s(ctx);
        let need_ms = 1000.0 * ctx.remaining / fastest;
        (fastest <= 0.0 || self.now_ms as f64 + need_ms > spec.deadline_ms as f64).then(|| {
            format!(
                "it cannot finish its {:.0} remaining iterations by its deadline {} even at its fastest ({fastest:.3} iterations/s)",
                ctx.remaining,
                utc(spec.deadline_ms)
            )
        })
    }

    /// The most iterations/s any class and worker count allowed to the job
    /// gives, network aside.
    fn fastest_iters_per_s(&self, ctx: &JobCtx) -> f64 {
        let spec = &ctx.job.spec;
        let counts = Self::worker_options(spec.min_workers, spec.max_workers, spec.max_workers);
        ctx.tables
            .iter()
            .flatten()
            .flat_map(|t| {
                counts
                    .iter()
                    .filter_map(|&n| t.lookup(spec.global_batch, n))
            })
            .map(|t| t.iters_per_s)
            .fold(0.0, f64::max)
    }

    /// Edge first, then the cloud from the latest switch point that still meets the deadline.
    fn edge_then_cloud(
        &self,
        ctx: &JobCtx,
        run: &EdgeRun,
        limit: usize,
        deadline_ms: i64,
    ) -> Option<Candidate> {
        let mut x = limit;
        while x > 0 {
            let done = run.prog[x];
            if done <= 0.0 {
                return None;
            }
            // Earliest boundary with the same progress: same cost, earlier finish.
            let mut x0 = x;
            while x0 > 0 && run.prog[x0 - 1] >= done {
                x0 -= 1;
            }
            let (from, owed) = if run.ran_before[x0] {
                (run.place.as_slice(), 0.0)
            } else {
                (ctx.location.as_slice(), ctx.job.progress.startup_left_s)
            };
            if let Some(tail) =
                self.cloud_tail(ctx, x0, ctx.remaining - done, from, owed, deadline_ms)
            {
                let mut segs: Vec<Seg> = run
                    .segs
                    .iter()
                    .filter(|s| s.first_slot < x0)
                    .cloned()
                    .collect();
                if let Some(last) = segs.last_mut()
                    && last.end_slot > x0
                {
                    let cut_ms = self.slot_start(x0);
                    let secs = (cut_ms - last.start_ms) as f64 / 1000.0;
                    last.iters = (secs - last.startup_s).max(0.0) / last.step.total_s;
                    last.end_ms = cut_ms;
                    last.end_slot = x0;
                }
                let cost: f64 = tail.iter().map(|s| s.cost).sum();
                let finish_ms = tail.last().map(|s| s.end_ms);
                let why = format!(
                    "{} covers {:.0}% on idle edge capacity, then cloud {} finishes the rest by the deadline for {cost:.2}",
                    describe(self, &run.place),
                    100.0 * done / ctx.remaining,
                    describe(self, &tail[0].place)
                );
                segs.extend(tail);
                return Some(Candidate {
                    segs,
                    cost,
                    finish_ms,
                    why,
                });
            }
            x = x0 - 1;
        }
        None
    }

    /// Re-validates a guaranteed job's standing reservation against today's capacity.
    fn keep(&self, ctx: &JobCtx) -> Result<Vec<Seg>, String> {
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

    fn reserve(&mut self, segs: &[Seg]) {
        for s in segs {
            if s.place.iter().any(|&(q, _)| self.is_cloud(q)) {
                self.cloud_frees[s.end_slot.min(self.n_slots)] = true;
            }
            for &(q, w) in &s.place {
                for slot in s.first_slot..s.end_slot.min(self.n_slots) {
                    let f = &mut self.free[q * self.n_slots + slot];
                    *f = f.saturating_sub(w);
                    if *f == 0 {
                        self.free_slot_count[q] = self.free_slot_count[q].saturating_sub(1);
                    }
                }
            }
        }
    }

    /// Reserves `segs` and writes the decision with its explanation.
    fn decide(
        &mut self,
        ctx: &JobCtx,
        verdict: Verdict,
        segs: Vec<Seg>,
        reason: String,
    ) -> JobDecision {
        self.reserve(&segs);
        let to_assign = |p: &Place| -> Vec<Assignment> {
            p.iter()
                .map(|&(q, w)| Assignment {
                    node_id: self.world.nodes[q].id.clone(),
                    workers: w,
                })
                .collect()
        };
        let segments: Vec<Segment> = segs
            .iter()
            .map(|s| Segment {
                start_ms: s.start_ms,
                end_ms: s.end_ms,
                on: to_assign(&s.place),
                startup_s: s.startup_s,
                step: s.step,
                iters: s.iters,
                cloud_cost: s.cost,
            })
            .collect();
        let running = ctx.job.progress.running;
        let now_seg = segs.first().filter(|s| s.first_slot == 0);
        let action = match (verdict, now_seg) {
            (Verdict::Rejected, _) => Action::Reject,
            (_, Some(s)) if running && s.place == ctx.location => Action::Continue,
            (_, Some(s)) if running => Action::Migrate {
                from: to_assign(&ctx.location),
                to: to_assign(&s.place),
            },
            (_, Some(s)) => Action::Start {
                on: to_assign(&s.place),
            },
            (_, None) if running => Action::Pause,
            (_, None) => Action::Wait,
        };
        let mut reason = reason;
        if let (Some(note), Action::Migrate { .. } | Action::Pause) = (&ctx.tide_note, &action) {
            reason = format!("{note}: checkpointing and moving before it interferes; {reason}");
        }
        let mut nodes: Vec<String> = segments
            .iter()
            .flat_map(|s| s.on.iter().map(|a| a.node_id.clone()))
            .collect();
        nodes.sort();
        nodes.dedup();
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
            },
            segments,
        }
    }
}

fn slot_bounds(now_ms: i64, base_ms: i64, slot: i64, s: usize) -> (i64, i64) {
    let start = base_ms + s as i64 * slot;
    (start.max(now_ms), start + slot)
}

/// `w` workers over `nodes`, as evenly as the node size allows.
fn spread(nodes: &[usize], w: u32, devices: u32) -> Place {
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

fn describe(r: &Round, place: &[(usize, u32)]) -> String {
    let parts: Vec<String> = place
        .iter()
        .map(|&(q, w)| format!("{}×{} {}", r.world.nodes[q].id, w, r.world.nodes[q].class))
        .collect();
    parts.join(" + ")
}

/// A reservation in words: where each stretch runs and when it ends.
fn reserved(r: &Round, segs: &[Seg]) -> String {
    let parts: Vec<String> = segs
        .iter()
        .map(|s| format!("{} until {}", describe(r, &s.place), utc(s.end_ms)))
        .collect();
    if parts.is_empty() {
        "nothing left to run".to_string()
    } else {
        parts.join(", then ")
    }
}

/// A time for explanations: UTC to the second, as operators read it.
fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || format!("{ms} ms"),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}
