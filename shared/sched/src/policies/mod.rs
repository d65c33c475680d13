//! Every scheduling policy behind one trait, [`Scheduler`], and a registry
//! of them by name, [`PolicyName`]: the simulator's engine and the live
//! coordinator both show a policy the jobs and the nodes each round, and the
//! policy says which jobs run where, which it turns away, and when it wants
//! to be asked again. One file per policy; each file's docs name its source
//! and every simplification.

mod chronus;
mod cloud_pool;
mod edf;
mod edf_elasticflow;
mod edgeflow;
mod elasticflow;
mod first_fit;
mod profile;
mod replan;
mod snapshot_driver;
mod tidemill;
mod tiresias;

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

pub use chronus::Chronus;
pub use edf::Edf;
pub use edf_elasticflow::EdfElasticFlow;
pub use edgeflow::EdgeFlow;
pub use elasticflow::ElasticFlow;
pub use first_fit::FirstFit;
pub use snapshot_driver::SnapshotDriver;
pub use tidemill::{Tidemill, TidemillConfig};
pub use tiresias::Tiresias;

use crate::placement::{CostModel, Place};
use crate::settings::Policy;
use crate::world::{EdgeAvailability, JobClass, JobSpec, LinkClass};

/// The policies, by their command-line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    /// This project's scheduler (`crate::schedule`), cloud and edge.
    Tidemill,
    /// EdgeFlow (Journal of Software, 2025), as described in the module docs.
    Edgeflow,
    /// ElasticFlow (ASPLOS '23): minimum satisfactory share with admission control, cloud only.
    Elasticflow,
    /// Earliest deadline first, cloud only.
    Edf,
    /// Earliest deadline first as ElasticFlow's simulator runs it (widest
    /// measured GPU count, late jobs kept first), cloud only.
    EdfElasticflow,
    /// Chronus (SoCC '21): leases for SLO jobs, SRTF for the rest, cloud only.
    Chronus,
    /// Tiresias (NSDI '19): 2D-LAS with discretised queues, cloud only.
    Tiresias,
    /// First-fit in submission order, cloud only.
    FirstFit,
    /// tidemill's scheduler without the edge.
    CloudOnly,
}

impl PolicyName {
    /// Every policy, in report order.
    pub const ALL: [PolicyName; 9] = [
        PolicyName::Tidemill,
        PolicyName::Edgeflow,
        PolicyName::Elasticflow,
        PolicyName::Edf,
        PolicyName::EdfElasticflow,
        PolicyName::Chronus,
        PolicyName::Tiresias,
        PolicyName::FirstFit,
        PolicyName::CloudOnly,
    ];

    /// The command-line name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::Tidemill => "tidemill",
            PolicyName::Edgeflow => "edgeflow",
            PolicyName::Elasticflow => "elasticflow",
            PolicyName::Edf => "edf",
            PolicyName::EdfElasticflow => "edf-elasticflow",
            PolicyName::Chronus => "chronus",
            PolicyName::Tiresias => "tiresias",
            PolicyName::FirstFit => "first-fit",
            PolicyName::CloudOnly => "cloud-only",
        }
    }

    /// What the policy does, in one line, for `tidemill-cloud policies`.
    pub fn summary(self) -> &'static str {
        match self {
            PolicyName::Tidemill => {
                "tidemill's deadline-aware scheduler: cloud GPUs and the edges' forecast idle windows"
            }
            PolicyName::Edgeflow => {
                "EdgeFlow (J. Software 2025): deadline-ordered, one idle edge box or cloud GPUs per job"
            }
            PolicyName::Elasticflow => {
                "ElasticFlow (ASPLOS '23): minimum satisfactory shares with admission control, cloud only"
            }
            PolicyName::Edf => {
                "earliest deadline first on the requested GPUs, preemptive, cloud only"
            }
            PolicyName::EdfElasticflow => {
                "earliest deadline first as ElasticFlow's simulator runs it, cloud only"
            }
            PolicyName::Chronus => {
                "Chronus (SoCC '21): leases for SLO jobs, SRTF for the rest, cloud only"
            }
            PolicyName::Tiresias => {
                "Tiresias (NSDI '19): 2D-LAS with discretised queues, cloud only"
            }
            PolicyName::FirstFit => {
                "first fit in submission order on the requested GPUs, cloud only"
            }
            PolicyName::CloudOnly => "tidemill's scheduler without the edge boxes",
        }
    }

    /// A fresh instance of the policy over `model`'s nodes, with the
    /// tidal scheduler's settings `policy`.
    pub fn build(self, policy: &Policy, model: &CostModel) -> Box<dyn Scheduler> {
        match self {
            PolicyName::Tidemill | PolicyName::CloudOnly => {
                let config = TidemillConfig {
                    policy: policy.clone(),
                    use_edge: self == PolicyName::Tidemill,
                };
                Box::new(Tidemill::new(config, model))
            }
            PolicyName::Edgeflow => Box::new(EdgeFlow::default()),
            PolicyName::Elasticflow => Box::new(ElasticFlow::default()),
            PolicyName::Edf => Box::new(Edf),
            PolicyName::EdfElasticflow => Box::new(EdfElasticFlow),
            PolicyName::Chronus => Box::new(Chronus::default()),
            PolicyName::Tiresias => Box::new(Tiresias),
            PolicyName::FirstFit => Box::new(FirstFit),
        }
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that no policy has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {given:?}: expected one of {}", PolicyName::ALL.map(PolicyName::as_str).join(", "))]
pub struct UnknownPolicy {
    /// The name given.
    pub given: String,
}

impl FromStr for PolicyName {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyName::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPolicy {
                given: s.to_string(),
            })
    }
}

impl<'de> serde::Deserialize<'de> for PolicyName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where a job stands in the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatus {
    /// Submitted, not finished, not turned away.
    Active,
    /// All its iterations are done.
    Done,
    /// Turned away by the policy at admission.
    Rejected,
    /// Given up on after its deadline passed.
    Abandoned,
}

/// When and where a job first ran: the twin compares it between the live
/// run and the simulator.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstStart {
    /// When, Unix ms.
    pub at_ms: i64,
    /// Its nodes' ids, in index order.
    pub nodes: Vec<String>,
}

impl FirstStart {
    /// A start at `at_ms` on `place`, its nodes named by `model`; the
    /// simulator's engine and the twin's emulated edges record it alike.
    pub fn on(model: &CostModel, at_ms: i64, place: &[(u32, u32)]) -> Self {
        FirstStart {
            at_ms,
            nodes: place
                .iter()
                .map(|&(q, _)| model.nodes()[q as usize].id.clone())
                .collect(),
        }
    }
}

/// When a running job was first stopped, and how: the twin compares it
/// between the live run and the simulator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirstStop {
    /// When, Unix ms.
    pub at_ms: i64,
    /// Whether it was an eviction: a box of it turned busy under it, and it
    /// fell back to its last checkpoint (else a planned stop or move, which
    /// keeps its progress).
    pub evicted: bool,
}

/// A job as the engine tracks it.
#[derive(Debug, Clone)]
pub struct JobRun {
    /// The submitted job.
    pub spec: JobSpec,
    /// GPUs it asked for (non-elastic baselines run it on exactly this many).
    pub requested_gpus: u32,
    /// Iterations done.
    pub done_iters: f64,
    /// Seconds it has held devices.
    pub attained_s: f64,
    /// Device-seconds it has held (Tiresias' service).
    pub attained_gpu_s: f64,
    /// Where it runs now; empty when it does not.
    pub place: Place,
    /// Where its data and latest checkpoint are; empty before its first start.
    pub location: Place,
    /// Start-up seconds left before steps resume.
    pub startup_left_s: f64,
    /// Step time on `place`, seconds.
    pub step_s: f64,
    /// Class of the slowest link its gradients cross on `place` (`None` on one node).
    pub sync_class: Option<LinkClass>,
    /// Status.
    pub status: JobStatus,
    /// When it finished, ms.
    pub finish_ms: Option<i64>,
    /// Moves from one running placement to another.
    pub migrations: u32,
    /// Stops while running (checkpoint and wait).
    pub preemptions: u32,
    /// When the policy first promised it its deadline (admitted it with a
    /// guarantee), Unix ms; `None` if it never did.
    pub guaranteed_ms: Option<i64>,
    /// When and where it first ran; `None` before.
    pub first_start: Option<FirstStart>,
    /// When it was first stopped while running; `None` before.
    pub first_stop: Option<FirstStop>,
}

impl JobRun {
    /// `spec` before its first round, asking for `requested_gpus`.
    pub fn new(spec: JobSpec, requested_gpus: u32) -> JobRun {
        JobRun {
            spec,
            requested_gpus,
            done_iters: 0.0,
            attained_s: 0.0,
            attained_gpu_s: 0.0,
            place: Place::new(),
            location: Place::new(),
            startup_left_s: 0.0,
            step_s: 0.0,
            sync_class: None,
            status: JobStatus::Active,
            finish_ms: None,
            migrations: 0,
            preemptions: 0,
            guaranteed_ms: None,
            first_start: None,
            first_stop: None,
        }
    }

    /// Iterations still to do.
    pub fn remaining(&self) -> f64 {
        (self.spec.iterations - self.done_iters).max(0.0)
    }

    /// True when it runs now.
    pub fn running(&self) -> bool {
        !self.place.is_empty()
    }

    /// True when it has a deadline.
    pub fn slo(&self) -> bool {
        self.spec.class == JobClass::Slo
    }
}

/// What a policy sees in a round.
pub struct View<'a> {
    /// The round's time, ms.
    pub now_ms: i64,
    /// Every job of the trace, by id.
    pub jobs: &'a [JobRun],
    /// Ids of the submitted, unfinished, not rejected jobs, in submission order.
    pub active: &'a [usize],
    /// Ids of the jobs submitted since the previous round.
    pub arrived: &'a [usize],
    /// Nodes and the cost model.
    pub model: &'a CostModel,
    /// The edge boxes' load (policies read only what is reported, or forecasts).
    pub edges: &'a dyn EdgeSignals,
}

/// What a policy may know of the edge boxes, by edge index
/// ([`crate::placement::CostNode::edge`]): the load they report, and the
/// idle windows forecast from it. The simulator answers from its traces and
/// forecasters, the coordinator from the store.
pub trait EdgeSignals {
    /// True when box `e`'s load, as reported at `t_ms`, is under its idle threshold.
    fn reported_idle(&self, e: usize, t_ms: i64) -> bool;
    /// Box `e`'s idle windows from `now_ms` over `horizon_ms`, as the tidal scheduler plans on them.
    fn availability(&self, e: usize, now_ms: i64, horizon_ms: i64) -> EdgeAvailability;
}

/// A policy's answer for one round.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// Jobs to run and where; active jobs not listed stop (or keep waiting).
    pub run: Vec<(usize, Place)>,
    /// Jobs to turn away at admission.
    pub reject: Vec<usize>,
    /// Admitted jobs given up on (their deadline passed); they count as missed.
    pub abandon: Vec<usize>,
    /// Jobs the policy promises, from this round on, to finish by their deadline
    /// (admission with a guarantee); counted so that broken promises show.
    pub guarantee: Vec<usize>,
    /// Ask again at this time at the latest, ms.
    pub wake_ms: Option<i64>,
}

/// Which changes of edge load make the engine ask the policy again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeInterest {
    /// None: the policy does not use the edge.
    None,
    /// Changes on boxes its jobs run on.
    InUse,
    /// Changes on boxes its jobs run on, and any box becoming idle: a
    /// planner needs to hear of new capacity, not of a box it does not use
    /// turning busy.
    InUseAndFreed,
    /// Every change of the set of idle boxes.
    All,
}

/// A scheduling policy: a view of the round in, a decision out, no I/O.
pub trait Scheduler: Send {
    /// Which edge changes trigger a round.
    fn edge_interest(&self) -> EdgeInterest;
    /// One round.
    fn schedule(&mut self, view: &View) -> Decision;
}

/// Jobs in deadline order (ties by submission, then id). A best-effort job's
/// deadline lies beyond every trace (the job readers give it `i64::MAX / 4`),
/// so best-effort jobs come last, by submission.
pub(crate) fn by_deadline(v: &View, jobs: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut order: Vec<usize> = jobs.into_iter().collect();
    order.sort_by_key(|&j| {
        let s = &v.jobs[j].spec;
        (s.deadline_ms, s.submitted_ms, j)
    });
    order
}

/// For policies that track admitted jobs: forgets the ones no longer active,
/// and abandons (gives up on) the active ones whose deadline has passed.
pub(crate) fn forget_ended_and_abandon_late(
    admitted: &mut std::collections::BTreeSet<usize>,
    v: &View,
    d: &mut Decision,
) {
    admitted.retain(|&j| v.jobs[j].status == JobStatus::Active);
    for &j in v.active {
        if admitted.contains(&j) && v.jobs[j].spec.deadline_ms <= v.now_ms {
            admitted.remove(&j);
            d.abandon.push(j);
        }
    }
}
