//! The discrete-event engine: simulated time only, jumping from event to event.
//!
//! Events are job arrivals, job completions, changes of reported edge load
//! that the policy asked for ([`EdgeInterest`]) and the policy's own wake-up
//! time. Events are coalesced into scheduling slots of `slot_ms` (60 s, as
//! ElasticFlow's simulator does): the policy is asked at the first slot
//! boundary at or after the earliest pending event, and the allocation it
//! returns holds until the next such boundary. A job finishing inside a slot
//! records its exact finish time; its devices become free at the boundary.
//!
//! Between boundaries every running job advances by the cost model: first its
//! start-up (staging, checkpoint transfer, restart), then iterations at its
//! placement's step time. Cloud GPU time, edge time while truly idle, edge
//! time while truly busy (interference) and bytes by tier (a site's LAN,
//! between sites, cloud-edge, cloud-cloud) are added up as it runs.
//! A decision that puts more workers on a node than it has devices, or runs a
//! job that is not active, is a policy bug and stops the run with an error.
//!
//! **Checkpoints and evictions.** A running job saves a checkpoint every
//! `I = spec.checkpoint_interval_s` seconds of training: at each whole
//! multiple of `I` of stepping time since its last save (start-up time does
//! not count, and a save costs no time). When a round's decision takes a
//! running job off its placement, or moves or resizes it, at round time `t`:
//!
//! - if some edge box of the old placement is *truly busy* at `t` (its true
//!   primary load at `t` is at or over its threshold, `!EdgeWorld::idle(e, t)`:
//!   the tide has come in and the box must yield at once), it is an
//!   **eviction**: the job's done iterations fall back to its last checkpoint,
//!   losing `L = s / step_s` iterations, `s` the training seconds since that
//!   checkpoint (`0 ≤ s < I`), and `s × workers` device-seconds of training;
//! - otherwise (cloud nodes are never busy) it is a **planned** stop or move:
//!   the job checkpoints on the way out and keeps all its progress, as the live
//!   edge does on SIGTERM within its grace period.
//!
//! Either way the next start pays its start-up (staging and restart). A job
//! with `I` = 30 min evicted 50 min into training loses its last 20 min.
//!
//! **A site's LAN is shared.** A running job whose placement holds two or more
//! boxes of one edge site syncs over that site's LAN; when `k` such jobs run
//! on site `s` in a round, each sees the LAN's links at `B / k` bytes/s (`B`
//! the link's bandwidth) in its step time. Step times are recomputed in every
//! round where a site's `k` changes.

mod decisions;

use thiserror::Error;

use super::checkpoints::Checkpoint;
use super::edges::EdgeWorld;
use super::jobs::TraceJob;
use super::metrics::{Accumulators, EdgeTotals, Held};
use super::placement::{CostModel, Place};
use super::policies::{EdgeInterest, EdgeSignals, JobRun, JobStatus, Scheduler, View};

/// Everything a run needs, shared by all policies.
#[derive(Clone)]
pub struct World {
    /// The jobs, sorted by submission (id = index).
    pub jobs: Vec<TraceJob>,
    /// Nodes and cost model.
    pub model: CostModel,
    /// Edge load.
    pub edges: EdgeWorld,
    /// Scheduling slot, ms.
    pub slot_ms: i64,
    /// Measurement window, ms: first submission to last deadline or submission.
    pub window: (i64, i64),
    /// When the run stops, ms.
    pub end_ms: i64,
}

/// A stretch of a job on one placement.
#[derive(Debug, Clone, PartialEq)]
pub struct Stint {
    /// The job.
    pub job: usize,
    /// Start, ms.
    pub start_ms: i64,
    /// End, ms.
    pub end_ms: i64,
    /// Where.
    pub place: Place,
    /// Iterations done in it.
    pub iters: f64,
}

/// Devices in use at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageSample {
    /// When, ms.
    pub t_ms: i64,
    /// Cloud GPUs held.
    pub cloud: u32,
    /// Edge devices held.
    pub edge: u32,
}

/// One eviction (module doc), as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Eviction {
    /// The job.
    pub job: usize,
    /// When, ms.
    pub t_ms: i64,
    /// Its done iterations before.
    pub before_iters: f64,
    /// Its done iterations after: its last checkpoint's.
    pub after_iters: f64,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The jobs' final states.
    pub jobs: Vec<JobRun>,
    /// Totals.
    pub acc: Accumulators,
    /// Every stint, when recorded.
    pub stints: Vec<Stint>,
    /// Device use after every round, when recorded.
    pub usage: Vec<UsageSample>,
    /// Every eviction, when recorded.
    pub evictions: Vec<Eviction>,
}

/// A policy broke the rules of the world.
#[derive(Debug, Error)]
pub enum EngineError {
    /// More workers on a node than it has devices.
    #[error(
        "policy bug at t={t_ms} ms: node {node} given {used} workers but has {devices} devices"
    )]
    OverCapacity {
        /// The node.
        node: String,
        /// When.
        t_ms: i64,
        /// Workers placed.
        used: u32,
        /// Devices.
        devices: u32,
    },
    /// A decision names a job that is not active, or a bad placement.
    #[error("policy bug at t={t_ms} ms: job {job}: {what}")]
    BadDecision {
        /// The job.
        job: usize,
        /// When.
        t_ms: i64,
        /// What is wrong.
        what: String,
    },
    /// A job was placed where no throughput table covers its model.
    #[error(
        "job {job} (model {model}) was placed on a device class with no throughput table for it; add a table for the model to --throughputs"
    )]
    NoThroughput {
        /// The job.
        job: usize,
        /// Its model.
        model: String,
    },
}

struct Run<'w> {
    world: &'w World,
    jobs: Vec<JobRun>,
    active: Vec<usize>,
    acc: Accumulators,
    record: bool,
    stints: Vec<Stint>,
    usage: Vec<UsageSample>,
    evictions: Vec<Eviction>,
    /// Per job: (start ms, iterations at start) of its open stint.
    open: Vec<Option<(i64, f64)>>,
    /// Per job: its last checkpoint.
    ckpt: Vec<Checkpoint>,
    /// Per job: the edge sites whose LAN its placement syncs over.
    lan: Vec<Vec<u32>>,
    /// Per edge site: running jobs syncing over its LAN in the last round.
    lan_jobs: Vec<u32>,
}

/// Runs `policy` over `world`; `progress(fraction)` is called now and then;
/// `record` keeps stints and usage samples for tests and plots.
pub fn run(
    world: &World,
    policy: &mut dyn Scheduler,
    signals: &dyn EdgeSignals,
    record: bool,
    progress: &mut dyn FnMut(f64),
) -> Result<Outcome, EngineError> {
    let mut r = Run {
        world,
        jobs: world
            .jobs
            .iter()
            .map(|t| JobRun::new(t.spec.clone(), t.requested_gpus))
            .collect(),
        active: Vec::new(),
        acc: Accumulators::default(),
        record,
        stints: Vec::new(),
        usage: Vec::new(),
        evictions: Vec::new(),
        open: vec![None; world.jobs.len()],
        ckpt: vec![Checkpoint::default(); world.jobs.len()],
        lan: vec![Vec::new(); world.jobs.len()],
        lan_jobs: vec![0; world.model.sites()],
    };
    let slot = world.slot_ms.max(1);
    let ceil = |t: i64| t.div_euclid(slot) * slot + if t.rem_euclid(slot) > 0 { slot } else { 0 };
    let n = world.jobs.len();
    let mut next = 0;
    let mut arrived = Vec::new();
    let Some(first) = world.jobs.first() else {
        return Ok(r.finish());
    };
    let start = ceil(first.spec.submitted_ms);
    let mut now = start;
    let span = (world.end_ms - start).max(1) as f64;
    let mut rounds_since_progress = 0;
    while now < world.end_ms {
        arrived.clear();
        while next < n && r.jobs[next].spec.submitted_ms <= now {
            r.active.push(next);
            arrived.push(next);
            next += 1;
        }
        if r.active.is_empty() {
            if next == n {
                break;
            }
            now = ceil(r.jobs[next].spec.submitted_ms);
            continue;
        }
        let decision = policy.schedule(&View {
            now_ms: now,
            jobs: &r.jobs,
            active: &r.active,
            arrived: &arrived,
            model: &world.model,
            edges: signals,
        });
        r.acc.rounds += 1;
        r.apply(now, &decision)?;
        let mut t = world.end_ms;
        if next < n {
            t = t.min(r.jobs[next].spec.submitted_ms);
        }
        for &j in &r.active {
            let job = &r.jobs[j];
            if job.running() {
                let secs = job.startup_left_s + job.remaining() * job.step_s;
                t = t.min(now + (secs * 1000.0).ceil() as i64);
            }
        }
        let edges = &world.edges;
        let box_of = |q: u32| world.model.nodes()[q as usize].edge;
        let interest = policy.edge_interest();
        if matches!(interest, EdgeInterest::InUse | EdgeInterest::InUseAndFreed) {
            for &j in &r.active {
                for &(q, _) in &r.jobs[j].place {
                    if let Some(f) = box_of(q).and_then(|e| edges.next_reported_flip(e, now)) {
                        t = t.min(f);
                    }
                }
            }
        }
        let wake_on = match interest {
            EdgeInterest::None | EdgeInterest::InUse => None,
            EdgeInterest::InUseAndFreed => {
                Some(EdgeWorld::next_reported_flip_to_idle as fn(_, _, _) -> _)
            }
            EdgeInterest::All => Some(EdgeWorld::next_reported_flip as fn(_, _, _) -> _),
        };
        if let Some(next) = wake_on {
            for q in 0..world.model.nodes().len() as u32 {
                if let Some(f) = box_of(q).and_then(|e| next(edges, e, now)) {
                    t = t.min(f);
                }
            }
        }
        if let Some(w) = decision.wake_ms {
            t = t.min(w);
        }
        let t_next = ceil(t).max(now + slot).min(world.end_ms.max(now + slot));
        r.advance(now, t_next);
        now = t_next;
        rounds_since_progress += 1;
        if rounds_since_progress >= 256 {
            rounds_since_progress = 0;
            progress((now - start) as f64 / span);
        }
    }
    progress(1.0);
    Ok(r.finish())
}

impl Run<'_> {
    fn finish(mut self) -> Outcome {
        let end = self.world.end_ms;
        for j in 0..self.jobs.len() {
            self.close(j, end);
        }
        Outcome {
            jobs: self.jobs,
            acc: self.acc,
            stints: self.stints,
            usage: self.usage,
            evictions: self.evictions,
        }
    }

    fn close(&mut self, j: usize, t_ms: i64) {
        if let Some((start, iters0)) = self.open[j].take()
            && self.record
        {
            self.stints.push(Stint {
                job: j,
                start_ms: start,
                end_ms: t_ms,
                place: self.jobs[j].place.clone(),
                iters: self.jobs[j].done_iters - iters0,
            });
        }
    }

    /// Counts the jobs syncing over each site's LAN and, when a count
    /// changed or a job joined a LAN (`placed`), recomputes the step time of
    /// every job on a LAN with its site's share (module doc).
    fn share_lans(&mut self, placed: bool) -> Result<(), EngineError> {
        let mut counts = vec![0u32; self.lan_jobs.len()];
        for &j in &self.active {
            for &s in &self.lan[j] {
                counts[s as usize] += 1;
            }
        }
        if !placed && counts == self.lan_jobs {
            return Ok(());
        }
        self.lan_jobs = counts;
        let model = &self.world.model;
        for &j in &self.active {
            if self.lan[j].is_empty() {
                continue;
            }
            let job = &mut self.jobs[j];
            let k = &self.lan_jobs;
            let (t, _) = model
                .step_time_shared(&job.spec, &job.place, |s| k[s as usize])
                .ok_or_else(|| EngineError::NoThroughput {
                    job: j,
                    model: job.spec.model.clone(),
                })?;
            job.step_s = t.total_s;
        }
        Ok(())
    }

    fn advance(&mut self, now: i64, t1: i64) {
        let model = &self.world.model;
        let edges = &self.world.edges;
        let (_, window_end) = self.world.window;
        let dt_s = (t1 - now) as f64 / 1000.0;
        let mut busy_ms = vec![0i64; model.nodes().len()];
        let mut done = Vec::new();
        for &j in &self.active {
            let job = &mut self.jobs[j];
            if !job.running() {
                continue;
            }
            let su = job.startup_left_s.min(dt_s);
            job.startup_left_s -= su;
            let need_s = job.remaining() * job.step_s;
            let (used_s, iters) = if su + need_s <= dt_s {
                done.push(j);
                (su + need_s, job.remaining())
            } else {
                (dt_s, (dt_s - su) / job.step_s)
            };
            self.ckpt[j].train(
                job.done_iters,
                used_s - su,
                job.step_s,
                job.spec.checkpoint_interval_s,
            );
            job.done_iters += iters;
            job.attained_s += used_s;
            let workers: u32 = job.place.iter().map(|p| p.1).sum();
            job.attained_gpu_s += used_s * f64::from(workers);
            let used_ms = (used_s * 1000.0).ceil() as i64;
            if job.place.len() > 1 {
                let ring = model.allreduce_traffic(&job.spec, &job.place);
                self.acc.traffic.add_scaled(&ring, iters);
            }
            let held = Held {
                place: &job.place,
                from_ms: now,
                used_s,
                startup_s: su,
                window_end_ms: window_end,
            };
            self.acc.hold(model, edges, &mut busy_ms, held);
            if done.last() == Some(&j) {
                job.finish_ms = Some(now + used_ms);
                job.status = JobStatus::Done;
            }
        }
        self.acc.interference_s += busy_ms.iter().sum::<i64>() as f64 / 1000.0;
        for j in done {
            let f = self.jobs[j].finish_ms.unwrap_or(t1);
            self.close(j, f);
            self.jobs[j].place.clear();
        }
        self.active
            .retain(|&j| self.jobs[j].status == JobStatus::Active);
    }
}

/// The edge's totals over the measurement window.
pub fn edge_totals(world: &World) -> EdgeTotals {
    let (t0, t1) = world.window;
    let mut totals = EdgeTotals::default();
    for n in world.model.nodes() {
        if let Some(e) = n.edge {
            let (idle, busy) = world.edges.split_idle(e, t0, t1);
            totals.idle_device_s += f64::from(n.devices) * idle as f64 / 1000.0;
            totals.box_s += (idle + busy) as f64 / 1000.0;
        }
    }
    totals
}
