//! Choosing a plan for one job: the candidates over its edge placements,
//! edge then a cloud tail, or cloud alone, ranked by least cloud cost, then
//! earliest finish; and the cheap bound that spares hopeless jobs a plan.

use crate::world::{AdmissionMode, JobClass};

use super::DONE_EPS_ITERS;
use super::grid::{Grade, Round};
use super::job::JobCtx;
use super::reason::Reason;
use super::walk::{EdgeRun, Seg};

/// What a plan is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    /// A reservation that finishes by the deadline; may book cloud capacity
    /// ahead; on the sure grade of edge capacity.
    Guarantee,
    /// No reservation: capacity free now (idle edge; unreserved cloud under
    /// each-round admission or `best_effort_cloud`) on which the job can
    /// still meet its deadline.
    /// Work that finishes late is worth nothing to an SLO job, so it takes
    /// nothing else. On the likely grade of edge capacity: it promises nothing.
    MeetDeadline,
    /// Whatever is left, deadline or not, on the likely grade.
    Leftover,
}

impl Want {
    /// The grade of edge capacity a plan for this may use.
    pub(super) fn grade(self) -> Grade {
        match self {
            Want::Guarantee => Grade::Sure,
            Want::MeetDeadline | Want::Leftover => Grade::Likely,
        }
    }
}

/// A candidate plan for one job.
pub(super) struct Candidate {
    pub(super) segs: Vec<Seg>,
    pub(super) cost: f64,
    pub(super) finish_ms: Option<i64>,
    pub(super) why: Reason,
}

/// The share of the time from now to a deadline that a plan should leave to
/// spare before the fewest device-seconds count for more than the earliest
/// finish ([`Candidate::rank`]).
pub(super) const SPARE_SHARE: f64 = 0.2;

impl Candidate {
    /// Whether the plan finishes the work by `deadline_ms`.
    pub(super) fn finishes_by(&self, deadline_ms: i64) -> bool {
        self.finish_ms.is_some_and(|f| f <= deadline_ms)
    }

    /// Device-seconds the plan holds: each segment's length times its workers.
    pub(super) fn device_s(&self) -> i64 {
        self.segs
            .iter()
            .map(|s| {
                let workers: i64 = s.place.iter().map(|p| i64::from(p.1)).sum();
                (s.end_ms - s.start_ms) / 1000 * workers
            })
            .sum()
    }

    /// How plans for one job compare, least first: by cloud cost; then, for
    /// a job due by a deadline (`spare_by`, Unix ms: [`Round::spare_by`]),
    /// a plan that finishes by `spare_by` before one that does not, and
    /// among those the fewest device-seconds; then the earliest finish.
    ///
    /// The fewest device-seconds is ElasticFlow's minimum satisfactory share
    /// carried to the edge. Step time grows with the ring all-reduce, so an
    /// eight-box placement of a large model may do a fifth of eight boxes'
    /// work; the earliest finish alone chose it and left later jobs no box.
    /// The spare keeps the earliest finish for plans that would end close to
    /// the deadline, where a forecast that errs would cost the job its deadline.
    pub(super) fn rank(&self, spare_by: Option<i64>) -> (f64, bool, i64, i64) {
        let finish = self.finish_ms.unwrap_or(i64::MAX);
        match spare_by.filter(|&by| self.finishes_by(by)) {
            Some(_) => (self.cost, false, self.device_s(), finish),
            None => (self.cost, true, 0, finish),
        }
    }
}

impl<'a> Round<'a> {
    /// Plans a job for what `want` asks; see [`Want`].
    pub(super) fn plan(&self, ctx: &JobCtx<'a>, want: Want) -> Result<Candidate, Reason> {
        let spec = &ctx.job.spec;
        if ctx.remaining <= DONE_EPS_ITERS {
            return Err(Reason::WorkDone);
        }
        if spec.min_workers > spec.max_workers || spec.max_workers == 0 {
            return Err(Reason::BadWorkers {
                min: spec.min_workers,
                max: spec.max_workers,
            });
        }
        if ctx.tables.iter().all(Option::is_none) {
            return Err(Reason::NoTable {
                model: spec.model.clone(),
            });
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
        let spare_by = due.then(|| self.spare_by(deadline_ms));
        let ranks_first = |c: &Candidate, best: &Option<Candidate>| {
            best.as_ref()
                .is_none_or(|b| c.rank(spare_by) < b.rank(spare_by))
        };
        let consider = |c: Candidate, best: &mut Option<Candidate>| {
            if ranks_first(&c, best) {
                *best = Some(c);
            }
        };
        // An edge candidate is put into words only once it ranks first:
        // naming its nodes for every option walked was a twentieth of a
        // busy round.
        let consider_edge =
            |segs, finish_ms, why: &dyn Fn() -> Reason, best: &mut Option<Candidate>| {
                let c = Candidate {
                    segs,
                    cost: 0.0,
                    finish_ms,
                    why: Reason::WorkDone,
                };
                if ranks_first(&c, best) {
                    *best = Some(Candidate { why: why(), ..c });
                }
            };
        if !deadline
            && let Some(c) = self.stay(ctx, limit, due.then_some(deadline_ms), want.grade())
        {
            return Ok(c);
        }
        // Held to a deadline without a reservation, a job lists no edge
        // placement when none could pass the bounds below.
        let opts = if due && !deadline && !self.edge_may_finish(ctx, limit, deadline_ms) {
            Vec::new()
        } else {
            self.edge_options(ctx, limit)
        };
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
            // Only a finish counts for work held to a deadline without a
            // reservation, and for a best-effort plan once another one is in
            // hand (unfinished plans tie, and the first stands): an option
            // that cannot finish is not walked.
            if !deadline && (due || best.is_some()) && !self.may_finish(ctx, &place, limit) {
                continue;
            }
            // Once a best-effort plan finishes, only an earlier finish ranks
            // above it: an option that cannot finish sooner is not walked
            // (1 ms spares the bound a rounding error).
            if !due
                && let Some(f) = best.as_ref().and_then(|b| b.finish_ms)
                && self
                    .finish_floor_ms(ctx, &place, limit)
                    .is_none_or(|floor| floor > f as f64 + 1.0)
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
                want.grade(),
            ) else {
                continue;
            };
            edge_best_frac =
                edge_best_frac.max(run.segs.iter().map(|s| s.iters).sum::<f64>() / ctx.remaining);
            if let Some(f) = run.finished.filter(|&f| f <= deadline_ms) {
                let why = || Reason::EdgeFinishes {
                    place: self.shares(&place),
                    finish_ms: f,
                };
                consider_edge(run.segs, Some(f), &why, &mut best);
                continue;
            }
            if !deadline {
                if !due && !run.segs.is_empty() {
                    let done_pct =
                        100.0 * run.segs.iter().map(|s| s.iters).sum::<f64>() / ctx.remaining;
                    let why = || Reason::EdgeLeftover {
                        place: self.shares(&place),
                        done_pct,
                    };
                    consider_edge(run.segs, None, &why, &mut best);
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
            let why = Reason::CloudOnly {
                options: n_opts,
                edge_pct: edge_best_frac * 100.0,
                place: self.shares(&segs[0].place),
                cost,
            };
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
        // No fixed shape fits: the share the job needs over time may.
        if deadline
            && best.is_none()
            && let Some(c) = self.elastic(ctx, deadline_ms, false)
        {
            best = Some(c);
        }
        // Cloud capacity free now is for best-effort work only if the policy
        // says so; under each-round admission it is where SLO jobs run.
        let cloud_now_allowed = self.policy.best_effort_cloud
            || (due && self.policy.admission != AdmissionMode::Reserve);
        // Without a reservation, a plan that does not run now, or misses the
        // deadline it is held to, gives way to cloud capacity free now.
        let idle_now = |best: &Option<Candidate>| {
            !deadline
                && cloud_now_allowed
                && best.as_ref().is_none_or(|b| {
                    b.segs.first().is_none_or(|s| s.first_slot > 0)
                        || (due && !b.finishes_by(deadline_ms))
                })
        };
        if idle_now(&best)
            && let Some(c) = self.cloud_now(ctx, owed0)
        {
            best = Some(c);
        }
        // Fewer workers now and more when capacity frees up may still meet
        // the deadline where no shape free now does.
        if due
            && idle_now(&best)
            && let Some(c) = self.elastic(ctx, deadline_ms, true)
        {
            best = Some(c);
        }
        best.ok_or(if deadline {
            Reason::NoPlanByDeadline {
                deadline_ms: spec.deadline_ms,
                edge_pct: edge_best_frac * 100.0,
                remaining: ctx.remaining,
                options: n_opts,
            }
        } else if due {
            Reason::NoCapacityNow {
                deadline_ms: spec.deadline_ms,
            }
        } else {
            Reason::NoLeftoverEdge
        })
    }

    /// The time by which a plan leaves [`SPARE_SHARE`] of the time from now
    /// to `deadline_ms` to spare, Unix ms.
    pub(super) fn spare_by(&self, deadline_ms: i64) -> i64 {
        deadline_ms - ((deadline_ms - self.now_ms) as f64 * SPARE_SHARE) as i64
    }

    /// Why the job cannot meet its deadline however it runs, if it cannot: its
    /// deadline has passed, or even [`Round::fastest_iters_per_s`] would finish
    /// too late. A cheap bound that spares hopeless jobs a full plan.
    pub(super) fn hopeless(&self, ctx: &JobCtx) -> Option<Reason> {
        let spec = &ctx.job.spec;
        if spec.deadline_ms <= self.now_ms {
            return Some(Reason::DeadlinePassed {
                deadline_ms: spec.deadline_ms,
            });
        }
        let fastest = self.fastest_iters_per_s(ctx);
        let need_ms = 1000.0 * ctx.remaining / fastest;
        (fastest <= 0.0 || self.now_ms as f64 + need_ms > spec.deadline_ms as f64).then_some(
            Reason::TooSlow {
                remaining: ctx.remaining,
                deadline_ms: spec.deadline_ms,
                fastest,
            },
        )
    }

    /// The most iterations/s any class and worker count allowed to the job
    /// gives, network aside.
    pub(super) fn fastest_iters_per_s(&self, ctx: &JobCtx) -> f64 {
        let spec = &ctx.job.spec;
        let counts = Self::worker_options(spec.min_workers, spec.max_workers, spec.max_workers);
        (0..ctx.tables.len())
            .flat_map(|class| counts.iter().filter_map(move |&n| ctx.rate(class, n)))
            .map(|t| t.iters_per_s)
            .fold(0.0, f64::max)
    }

    /// A running job without a reservation stays where it runs when it can
    /// go on there now and, if it is held to `deadline_ms`, still meets it:
    /// moving it would pay a checkpoint and a restart for nothing it needs.
    /// Judged on `grade`: the sure grade for a job that holds a promise,
    /// the likely grade for one that holds none, as its plans are made (a
    /// stay judged on the sure grade moved such jobs off boxes still idle
    /// and near doubled the migrations per job).
    pub(super) fn stay(
        &self,
        ctx: &JobCtx,
        limit: usize,
        deadline_ms: Option<i64>,
        grade: Grade,
    ) -> Option<Candidate> {
        if !ctx.job.progress.running || ctx.location.is_empty() {
            return None;
        }
        let owed0 = ctx.job.progress.startup_left_s;
        let run = self.walk(
            ctx,
            &ctx.location,
            &ctx.location,
            owed0,
            0,
            limit,
            ctx.remaining,
            false,
            grade,
        )?;
        run.segs.first().filter(|s| s.first_slot == 0)?;
        let finish_ms = run.finished;
        let cost = run.segs.iter().map(|s| s.cost).sum();
        let c = Candidate {
            segs: run.segs,
            cost,
            finish_ms,
            why: Reason::Stays {
                place: self.shares(&ctx.location),
                finish_ms,
            },
        };
        deadline_ms.is_none_or(|d| c.finishes_by(d)).then_some(c)
    }

    /// Running jobs first: a running SLO job on edge boxes that can still
    /// meet its deadline keeps running there when its stay
    /// ([`Round::stay`], on `grade`) meets it, before any queued job is
    /// planned. Jobs on the cloud are left to the queue's order: there a
    /// shorter arrival may still take a GPU first (shortest first meets
    /// more deadlines), and the job resumes on a plan that meets its own.
    pub(super) fn running_first(&self, ctx: &JobCtx, grade: Grade) -> Option<Candidate> {
        let spec = &ctx.job.spec;
        if spec.class != JobClass::Slo || !ctx.job.progress.running || self.hopeless(ctx).is_some()
        {
            return None;
        }
        if ctx.location.iter().any(|&(q, _)| self.is_cloud(q)) {
            return None;
        }
        self.stay(
            ctx,
            self.slots_before(spec.deadline_ms),
            Some(spec.deadline_ms),
            grade,
        )
    }

    /// Without a reservation, a job the cloud cannot take now gains ground on
    /// idle edge devices now (the likely grade), if a cloud tail later still
    /// meets the deadline: every iteration done there is cloud time the job
    /// no longer needs. The tail is booked in this round's grid where it
    /// fits, else priced past the horizon ([`Round::tail_past_horizon`]); it
    /// is held for this round only, and the next round plans the job again.
    pub(super) fn edge_now_cloud_later(&self, ctx: &JobCtx) -> Option<Candidate> {
        let deadline_ms = ctx.job.spec.deadline_ms;
        let limit = self.slots_before(deadline_ms);
        let owed0 = ctx.job.progress.startup_left_s;
        let mut runs: Vec<(usize, EdgeRun)> = Vec::new();
        for place in self.edge_options(ctx, limit) {
            // The stretch of slots the placement is free from now on.
            let stretch = (0..limit)
                .take_while(|&s| self.usable(&place, s, Grade::Likely))
                .count();
            if stretch == 0 {
                continue;
            }
            if let Some(run) = self.walk(
                ctx,
                &place,
                &ctx.location,
                owed0,
                0,
                stretch,
                ctx.remaining,
                true,
                Grade::Likely,
            ) {
                runs.push((stretch, run));
            }
        }
        // The placements that gain the most ground first; a tail is priced
        // for the best two only, so a waiting job costs a few tails a round.
        runs.sort_by(|a, b| b.1.prog[b.0].total_cmp(&a.1.prog[a.0]));
        let mut best: Option<Candidate> = None;
        for (stretch, run) in runs.iter().take(2) {
            // Switch at the end of the stretch, else halfway there, and so on.
            let mut x = *stretch;
            while x > 0 && run.prog[x] > 0.0 {
                if let Some(c) = self.switch_to_cloud(ctx, run, x, run.prog[x], deadline_ms, true)
                    && self.pays(ctx, &c, run.prog[x])
                {
                    let key = |c: &Candidate| (c.cost, c.finish_ms.unwrap_or(i64::MAX));
                    if best.as_ref().is_none_or(|b| key(&c) < key(b)) {
                        best = Some(c);
                    }
                    break;
                }
                x /= 2;
            }
        }
        best
    }

    /// Whether the `done` iterations a hybrid plan `c` gains on the edge buy
    /// more than its tail loses to start from the edge rather than from
    /// where the job is now: `done − (s_edge − s_here) / t_tail > 0`, with
    /// `s_edge` the tail's start-up from the edge (checkpoint transfer and
    /// restart), `s_here` the same tail's start-up from the job's location,
    /// seconds, and `t_tail` its step time, seconds per iteration.
    fn pays(&self, ctx: &JobCtx, c: &Candidate, done: f64) -> bool {
        let Some(tail) = c.segs.iter().find(|s| self.price(&s.place) > 0.0) else {
            return false;
        };
        let owed = ctx.job.progress.startup_left_s;
        let here = self.startup(ctx, &tail.place, &ctx.location, owed, false);
        done - (tail.startup_s - here) / tail.step.total_s > 0.0
    }

    /// Edge first, then the cloud from the latest switch point that still meets the deadline.
    pub(super) fn edge_then_cloud(
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
            if let Some(c) = self.switch_to_cloud(ctx, run, x0, done, deadline_ms, false) {
                return Some(c);
            }
            x = x0 - 1;
        }
        None
    }

    /// The plan that runs `run` on the edge up to slot boundary `x0`, where
    /// it has done `done` iterations, then a cloud tail that finishes the
    /// rest by the deadline, if one does; with `past_horizon` (no promise),
    /// a tail past the grid's end counts too.
    fn switch_to_cloud(
        &self,
        ctx: &JobCtx,
        run: &EdgeRun,
        x0: usize,
        done: f64,
        deadline_ms: i64,
        past_horizon: bool,
    ) -> Option<Candidate> {
        let (from, owed) = if run.ran_before[x0] {
            (run.place.as_slice(), 0.0)
        } else {
            (ctx.location.as_slice(), ctx.job.progress.startup_left_s)
        };
        let work = ctx.remaining - done;
        let tail = self
            .cloud_tail(ctx, x0, work, from, owed, deadline_ms)
            .or_else(|| {
                past_horizon
                    .then(|| self.tail_past_horizon(ctx, work, from, owed, deadline_ms))
                    .flatten()
            })?;
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
        let why = Reason::EdgeThenCloud {
            edge: self.shares(&run.place),
            edge_pct: 100.0 * done / ctx.remaining,
            cloud: self.shares(&tail[0].place),
            cost,
        };
        segs.extend(tail);
        Some(Candidate {
            segs,
            cost,
            finish_ms,
            why,
        })
    }
}
