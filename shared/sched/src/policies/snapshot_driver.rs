//! Any registered policy driven on [`WorldSnapshot`]s, round after round,
//! answering with a [`RoundPlan`]: what the live coordinator runs. The store
//! gives one snapshot a round and applies one plan, whichever policy is chosen.
//!
//! - `tidemill` is [`crate::schedule`] on the snapshot as it is, and
//!   `cloud-only` the same on its cloud nodes: their admissions and
//!   reservations come back in the snapshot, so they survive a restart of
//!   the coordinator.
//! - A baseline sees the snapshot as the simulator shows it a round
//!   ([`View`]): the online nodes with devices, cloud first, as a
//!   [`CostModel`]; each job's progress; the edges' reported load and
//!   forecast windows (an edge whose latest report predates the forecast
//!   slot in progress counts as reporting that slot's forecast). Its
//!   decision becomes one [`JobDecision`] per job, with a one-segment plan
//!   priced by the same cost model. A baseline keeps its
//!   own state (admitted jobs, leases) in memory, as its paper's scheduler
//!   does; a restart of the coordinator starts it afresh. A job asks for its
//!   `max_workers` where a baseline runs jobs on the GPUs they request.
//!   Jobs a baseline gives up on (their deadline passed) are rejected.
//!   The coordinator rounds on its own timer, but a baseline is asked again
//!   only when the simulator's engine would ask it ([`super::replan`]); in
//!   between, its last decision is issued again.

use std::collections::HashMap;

use crate::decision::{Action, Explanation, JobDecision, RoundPlan, Segment, Shape, Verdict};
use crate::placement::{CostModel, CostNode, Place};
use crate::schedule;
use crate::settings::Policy;
use crate::world::{Admission, Assignment, EdgeAvailability, NodeKind, WorldSnapshot};

use super::replan::{Asked, Seen};
use super::{Decision, EdgeSignals, JobRun, JobStatus, PolicyName, Scheduler, View};

/// A registered policy and what it remembers between rounds.
pub struct SnapshotDriver {
    name: PolicyName,
    settings: Policy,
    /// The baseline, built at its first round; `None` for the tidal scheduler.
    baseline: Option<Box<dyn Scheduler>>,
    /// Every job seen, by a slot that stays the job's for good.
    jobs: Vec<JobRun>,
    slot_of: HashMap<u64, usize>,
    /// The slots of the last round's jobs.
    active: Vec<usize>,
    last_ms: Option<i64>,
    /// The baseline's last decision, while it stands.
    asked: Option<Asked>,
}

impl SnapshotDriver {
    /// `name`, with the tidal scheduler's settings `settings`.
    pub fn new(name: PolicyName, settings: Policy) -> Self {
        SnapshotDriver {
            name,
            settings,
            baseline: None,
            jobs: Vec::new(),
            slot_of: HashMap::new(),
            active: Vec::new(),
            last_ms: None,
            asked: None,
        }
    }

    /// The policy's name.
    pub fn name(&self) -> PolicyName {
        self.name
    }

    /// One round on `world` at `now_ms`, guarded by the world's node
    /// labels: no policy starts a job on a node lacking a label it requires.
    pub fn plan(&mut self, world: &WorldSnapshot, now_ms: i64) -> RoundPlan {
        let plan = self.policy_round(world, now_ms);
        world.constraints.guard(plan)
    }

    fn policy_round(&mut self, world: &WorldSnapshot, now_ms: i64) -> RoundPlan {
        match self.name {
            PolicyName::Tidemill => schedule(world, now_ms, &self.settings),
            PolicyName::CloudOnly => {
                let cloud = WorldSnapshot {
                    nodes: world
                        .nodes
                        .iter()
                        .filter(|n| matches!(n.kind, NodeKind::Cloud { .. }))
                        .cloned()
                        .collect(),
                    ..world.clone()
                };
                schedule(&cloud, now_ms, &self.settings)
            }
            _ => self.baseline_round(world, now_ms),
        }
    }

    fn baseline_round(&mut self, world: &WorldSnapshot, now_ms: i64) -> RoundPlan {
        let (model, windows) = self.pool(world);
        let (active, arrived) = self.refresh_jobs(world, &model, now_ms);
        let (name, settings) = (self.name, &self.settings);
        let policy = self
            .baseline
            .get_or_insert_with(|| name.build(settings, &model));
        let nodes: Vec<String> = model.nodes().iter().map(|n| n.id.clone()).collect();
        let edge_of: Vec<Option<usize>> = model.nodes().iter().map(|n| n.edge).collect();
        let idle: Vec<bool> = (0..windows.0.len())
            .map(|e| windows.reported_idle(e, now_ms))
            .collect();
        let seen = Seen {
            now_ms,
            nodes: &nodes,
            edge_of: &edge_of,
            jobs: &self.jobs,
            active: &active,
            arrived: &arrived,
            idle: &idle,
        };
        let stands = self
            .asked
            .as_mut()
            .is_some_and(|a| a.still_holds(&seen, policy.edge_interest()));
        if !stands {
            let d = policy.schedule(&View {
                now_ms,
                jobs: &self.jobs,
                active: &active,
                arrived: &arrived,
                model: &model,
                edges: &windows,
            });
            self.asked = Some(Asked::new(d, &seen));
        }
        let d = &self.asked.as_ref().expect("asked above").decision;
        let decisions = active
            .iter()
            .zip(&world.jobs)
            .map(|(&j, state)| self.job_decision(j, &state.admission, d, &model, now_ms))
            .collect();
        RoundPlan { now_ms, decisions }
    }

    /// The online nodes with devices as a cost model, cloud first, and the
    /// edges' windows by edge index.
    fn pool(&self, world: &WorldSnapshot) -> (CostModel, Windows) {
        let mut nodes = Vec::new();
        let mut edges = Vec::new();
        let mut windows = Vec::new();
        for n in world.nodes.iter().filter(|n| n.online && n.devices > 0) {
            match &n.kind {
                NodeKind::Cloud { price_per_gpu_hour } => {
                    let price = Some(*price_per_gpu_hour);
                    nodes.push(cost_node(n.id.clone(), &n.class, n.devices, price, None));
                }
                NodeKind::Edge(av) => {
                    let e = Some(windows.len());
                    edges.push(cost_node(n.id.clone(), &n.class, n.devices, None, e));
                    windows.push(av.clone());
                }
            }
        }
        nodes.extend(edges);
        let p = &self.settings;
        let model = CostModel::new(
            nodes,
            world.throughput.clone(),
            world.links.clone(),
            p.gamma,
            p.restart_s,
        );
        (model, Windows(windows))
    }

    /// Brings every job's record up to the snapshot; returns the slots of
    /// the snapshot's jobs, in its order, and of those seen for the first time.
    fn refresh_jobs(
        &mut self,
        world: &WorldSnapshot,
        model: &CostModel,
        now_ms: i64,
    ) -> (Vec<usize>, Vec<usize>) {
        let index: HashMap<&str, u32> = model
            .nodes()
            .iter()
            .enumerate()
            .map(|(q, n)| (n.id.as_str(), q as u32))
            .collect();
        let since_s = self
            .last_ms
            .map_or(0.0, |t| (now_ms - t).max(0) as f64 / 1000.0);
        self.last_ms = Some(now_ms);
        for &slot in &self.active {
            self.jobs[slot].status = JobStatus::Done;
        }
        let mut active = Vec::with_capacity(world.jobs.len());
        let mut arrived = Vec::new();
        for state in &world.jobs {
            let id = state.spec.id;
            let slot = *self.slot_of.entry(id).or_insert_with(|| {
                arrived.push(self.jobs.len());
                self.jobs
                    .push(JobRun::new(state.spec.clone(), state.spec.max_workers));
                self.jobs.len() - 1
            });
            let job = &mut self.jobs[slot];
            let held: u32 = job.place.iter().map(|p| p.1).sum();
            job.attained_gpu_s += since_s * f64::from(held);
            let mut location: Place = state
                .progress
                .location
                .iter()
                .filter_map(|a| Some((*index.get(a.node_id.as_str())?, a.workers)))
                .collect();
            location.sort_unstable();
            job.spec = state.spec.clone();
            job.requested_gpus = state.spec.max_workers;
            job.done_iters = state.progress.done_iters;
            job.attained_s = state.progress.attained_s;
            job.place = if state.progress.running {
                location.clone()
            } else {
                Place::new()
            };
            job.location = location;
            job.startup_left_s = state.progress.startup_left_s;
            job.guaranteed_ms = match state.admission {
                Admission::Guaranteed { since_ms } => Some(since_ms),
                _ => None,
            };
            job.status = JobStatus::Active;
            active.push(slot);
        }
        self.active.clone_from(&active);
        (active, arrived)
    }

    /// The decision about the job in slot `j`, as the tidal scheduler words one.
    fn job_decision(
        &self,
        j: usize,
        admission: &Admission,
        d: &Decision,
        model: &CostModel,
        now_ms: i64,
    ) -> JobDecision {
        let job = &self.jobs[j];
        let name = self.name;
        let on = |p: &Place| -> Vec<Assignment> {
            p.iter()
                .map(|&(q, w)| Assignment {
                    node_id: model.nodes()[q as usize].id.clone(),
                    workers: w,
                })
                .collect()
        };
        let rejected = d.reject.contains(&j);
        let abandoned = d.abandon.contains(&j);
        let verdict = match admission {
            _ if rejected || abandoned => Verdict::Rejected,
            Admission::Guaranteed { since_ms } => Verdict::Guaranteed {
                since_ms: *since_ms,
            },
            _ if d.guarantee.contains(&j) => Verdict::Guaranteed { since_ms: now_ms },
            _ => Verdict::BestEffort,
        };
        let run = d.run.iter().find(|r| r.0 == j).map(|r| &r.1);
        let action = if rejected || abandoned {
            Action::Reject
        } else {
            Action::toward(job.running(), &on(&job.place), run.map(on))
        };
        let reason = match &action {
            _ if rejected => format!("{name} turned it away at admission"),
            _ if abandoned => format!("{name} gave up on it: its deadline has passed"),
            Action::Continue => format!("{name} keeps it running"),
            Action::Migrate { .. } => format!("{name} moves it"),
            Action::Start { .. } => format!("{name} starts it"),
            Action::Pause => format!("{name} stops it for now"),
            Action::Wait | Action::Reject => format!("{name} keeps it queued"),
        };
        let segments: Vec<Segment> = run
            .filter(|_| !rejected && !abandoned)
            .and_then(|p| self.segment(job, p, &on(p), model, now_ms))
            .into_iter()
            .collect();
        let first = segments.first();
        let nodes: Vec<String> = first.map_or_else(Vec::new, |s| {
            s.on.iter().map(|a| a.node_id.clone()).collect()
        });
        let edges = run.map_or(0, |p| {
            p.iter()
                .filter(|&&(q, _)| !model.nodes()[q as usize].is_cloud())
                .count()
        });
        let shape = match (run, edges) {
            (None, _) => Shape::None,
            (Some(_), 0) => Shape::Cloud,
            (Some(_), 1) => Shape::Edge,
            (Some(_), _) => Shape::MultiEdge,
        };
        let reason = match &nodes[..] {
            [] => reason,
            n => format!("{reason} on {}", n.join(", ")),
        };
        JobDecision {
            job_id: job.spec.id,
            verdict,
            action,
            ahead: None,
            explanation: Explanation {
                shape,
                nodes,
                expected_start_ms: first.map(|s| s.start_ms),
                expected_finish_ms: first.map(|s| s.end_ms),
                step: first.map(|s| s.step),
                staging_s: first.map_or(0.0, |s| s.startup_s),
                cloud_cost: first.map_or(0.0, |s| s.cloud_cost),
                reason,
                why: Vec::new(),
            },
            segments,
        }
    }

    /// The job on `place` from now to its finish at the cost model's step
    /// time, after its start-up: what is left of it where it runs on, else
    /// staging from where it was plus the restart.
    fn segment(
        &self,
        job: &JobRun,
        place: &Place,
        on: &[Assignment],
        model: &CostModel,
        now_ms: i64,
    ) -> Option<Segment> {
        let (step, _) = model.step_time(&job.spec, place)?;
        let startup_s = if job.running() && *place == job.place {
            job.startup_left_s
        } else {
            model.startup(&job.spec, &job.location, place).secs
        };
        let secs = startup_s + job.remaining() * step.total_s;
        let price: f64 = place
            .iter()
            .filter_map(|&(q, w)| {
                Some(model.nodes()[q as usize].price_per_gpu_hour? * f64::from(w))
            })
            .fold(0.0, |a, b| a + b);
        Some(Segment {
            start_ms: now_ms,
            end_ms: now_ms + (secs * 1000.0).ceil() as i64,
            on: on.to_vec(),
            startup_s,
            step,
            iters: job.remaining(),
            cloud_cost: price * secs / 3600.0,
        })
    }
}

fn cost_node(
    id: String,
    class: &str,
    devices: u32,
    price: Option<f64>,
    edge: Option<usize>,
) -> CostNode {
    CostNode {
        id,
        class: class.to_string(),
        devices,
        price_per_gpu_hour: price,
        edge,
        site: None,
    }
}

/// The edges' windows by edge index, as the snapshot gives them.
struct Windows(Vec<EdgeAvailability>);

impl EdgeSignals for Windows {
    /// The load the edge reported, or, while its latest report predates the
    /// forecast slot in progress (the snapshot then holds no load now), the
    /// forecast for that slot.
    fn reported_idle(&self, e: usize, t_ms: i64) -> bool {
        let av = &self.0[e];
        match av.util_now_pct {
            Some(u) => u < av.idle_threshold_pct,
            None => av
                .windows
                .iter()
                .any(|w| w.start_ms <= t_ms && t_ms < w.end_ms),
        }
    }

    fn availability(&self, e: usize, _now_ms: i64, _horizon_ms: i64) -> EdgeAvailability {
        self.0[e].clone()
    }
}
