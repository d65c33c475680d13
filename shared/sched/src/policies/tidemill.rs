//! `tidemill` and `cloud-only`: this project's scheduler,
//! [`crate::schedule`], behind the [`Scheduler`] trait: each round it builds a [`WorldSnapshot`]
//! (nodes with their idle windows and reported load, jobs with their progress,
//! admission and standing reservation), calls `schedule` (without the
//! decisions in words: nobody reads them here), and carries out the
//! actions (start, continue, migrate, pause, wait, reject). Edge windows come
//! from the view's [`super::EdgeSignals::availability`]: in the simulator each
//! box's online forecaster (P90 under the threshold, via
//! [`crate::EdgeAvailability::from_forecast`]), or the truth with `--oracle-forecast`.
//! `cloud-only` is the same scheduler with no edge box in its snapshot.
//!
//! What this adapter decides, not the scheduler: an SLO job whose deadline
//! has passed is given up on (as its owner would), and so is one the
//! scheduler turns away after it was first seen (under `admission =
//! "each-round"`, when it can no longer finish in time); only a job turned
//! away on its first round counts as rejected at admission. The topology's
//! `[tidemill]` table is the scheduler's [`crate::Policy`], read directly.

use std::collections::HashMap;

use crate::placement::{CostModel, Place};
use crate::{
    Action, Admission, Assignment, JobState, NodeKind, NodeSpec, Policy as SchedPolicy, Progress,
    Segment, Words, WorldSnapshot, schedule_with,
};

use super::{Decision, EdgeInterest, JobStatus, Scheduler, View};

/// How the tidemill policy runs.
#[derive(Debug, Clone)]
pub struct TidemillConfig {
    /// The scheduler's settings.
    pub policy: SchedPolicy,
    /// Offer the edge boxes (false: `cloud-only`).
    pub use_edge: bool,
}

/// The tidemill policy's memory between rounds: what the coordinator stores.
pub struct Tidemill {
    config: TidemillConfig,
    world: WorldSnapshot,
    /// Snapshot node index → simulator node index.
    node_of: Vec<u32>,
    index_of: HashMap<String, u32>,
    kept: HashMap<usize, (Admission, Vec<Segment>)>,
}

impl Tidemill {
    /// A tidemill policy over `model`'s nodes.
    pub fn new(config: TidemillConfig, model: &CostModel) -> Tidemill {
        let mut nodes = Vec::new();
        let mut node_of = Vec::new();
        for (q, n) in model.nodes().iter().enumerate() {
            let kind = match (n.price_per_gpu_hour, n.edge) {
                (Some(price), _) => NodeKind::Cloud {
                    price_per_gpu_hour: price,
                },
                (None, Some(_)) if config.use_edge => NodeKind::Edge(Default::default()),
                _ => continue,
            };
            nodes.push(NodeSpec {
                id: n.id.clone(),
                class: n.class.clone(),
                devices: n.devices,
                memory_per_device_bytes: u64::MAX,
                online: true,
                kind,
            });
            node_of.push(q as u32);
        }
        let index_of = model
            .nodes()
            .iter()
            .enumerate()
            .map(|(q, n)| (n.id.clone(), q as u32))
            .collect();
        let world = WorldSnapshot {
            nodes,
            // The cost model's table, same-site pairs included: the scheduler
            // prices a placement's links as the engine charges them.
            links: model.links().clone(),
            jobs: Vec::new(),
            throughput: model.tables.clone(),
            constraints: Default::default(),
        };
        Tidemill {
            config,
            world,
            node_of,
            index_of,
            kept: HashMap::new(),
        }
    }

    fn to_place(&self, on: &[Assignment]) -> Place {
        let mut p: Place = on
            .iter()
            .filter_map(|a| Some((*self.index_of.get(&a.node_id)?, a.workers)))
            .collect();
        p.sort_unstable();
        p
    }

    fn to_assignments(&self, v: &View, place: &[(u32, u32)]) -> Vec<Assignment> {
        place
            .iter()
            .map(|&(q, w)| Assignment {
                node_id: v.model.nodes()[q as usize].id.clone(),
                workers: w,
            })
            .collect()
    }
}

impl Scheduler for Tidemill {
    /// Every flip on the boxes its jobs use, and every box that turns idle:
    /// new capacity a waiting job can gain ground on.
    fn edge_interest(&self) -> EdgeInterest {
        if self.config.use_edge {
            EdgeInterest::InUseAndFreed
        } else {
            EdgeInterest::None
        }
    }

    fn schedule(&mut self, v: &View) -> Decision {
        let h = self.config.policy.horizon_ms;
        for (i, &q) in self.node_of.iter().enumerate() {
            if let Some(e) = v.model.nodes()[q as usize].edge
                && self.config.use_edge
            {
                self.world.nodes[i].kind = NodeKind::Edge(v.edges.availability(e, v.now_ms, h));
            }
        }
        self.kept
            .retain(|&j, _| v.jobs[j].status == JobStatus::Active);
        let mut d = Decision::default();
        // A job whose deadline has passed has missed it; its owner gives up on it.
        let (late, live): (Vec<usize>, Vec<usize>) = v
            .active
            .iter()
            .partition(|&&j| v.jobs[j].slo() && v.jobs[j].spec.deadline_ms <= v.now_ms);
        d.abandon = late;
        self.world.jobs = live
            .iter()
            .map(|&j| {
                let job = &v.jobs[j];
                let (admission, reservation) = self
                    .kept
                    .get(&j)
                    .cloned()
                    .unwrap_or((Admission::Pending, Vec::new()));
                let admission = match (admission, job.slo()) {
                    (Admission::Pending, false) => Admission::BestEffort,
                    (a, _) => a,
                };
                JobState {
                    spec: job.spec.clone(),
                    admission,
                    progress: Progress {
                        done_iters: job.done_iters,
                        attained_s: job.attained_s,
                        location: self.to_assignments(v, &job.location),
                        running: job.running(),
                        startup_left_s: job.startup_left_s,
                    },
                    reservation,
                }
            })
            .collect();
        let plan = schedule_with(&self.world, v.now_ms, &self.config.policy, Words::Skip);
        for dec in &plan.decisions {
            let j = dec.job_id as usize;
            match &dec.action {
                Action::Start { on } | Action::Migrate { to: on, .. } => {
                    d.run.push((j, self.to_place(on)));
                }
                Action::Continue => d.run.push((j, v.jobs[j].place.clone())),
                // A job turned away after it was first seen gave up on its
                // deadline mid-way; only a first answer is an admission.
                Action::Reject if self.kept.contains_key(&j) => {
                    d.abandon.push(j);
                    continue;
                }
                Action::Reject => {
                    d.reject.push(j);
                    continue;
                }
                Action::Pause | Action::Wait => {}
            }
            if let Some(a) = dec.verdict.admission() {
                if matches!(a, Admission::Guaranteed { .. }) {
                    d.guarantee.push(j);
                }
                self.kept.insert(j, (a, dec.segments.clone()));
            }
            let next = dec
                .segments
                .iter()
                .chain(&dec.ahead)
                .flat_map(|s| [s.start_ms, s.end_ms])
                .filter(|&t| t > v.now_ms)
                .min();
            d.wake_ms = min_some(d.wake_ms, next);
        }
        // A box still in its dwell opens to the likely grade when it ends.
        let dwell = self.config.policy.likely_dwell_ms;
        let dwell_ends = self
            .world
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Edge(av) => av.idle_since_ms.map(|t| t + dwell),
                NodeKind::Cloud { .. } => None,
            })
            .filter(|&t| t > v.now_ms)
            .min();
        d.wake_ms = min_some(d.wake_ms, dwell_ends);
        d
    }
}

/// The earlier of two optional instants.
fn min_some(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
