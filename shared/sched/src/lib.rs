//! tidemill's scheduling policies, free of I/O: a snapshot goes in, a plan
//! comes out. The live coordinator and the simulator call the same functions;
//! neither time nor randomness is read here.
//!
//! - [`first_fit`]: jobs without `[work]` onto idle nodes, over a [`Snapshot`].
//! - [`schedule`]: the deadline-aware scheduler over a [`WorldSnapshot`], built
//!   on the [`cost`] model and [`ThroughputTables`].
//! - [`policies`]: every policy, the tidal scheduler and the baselines, behind
//!   one [`policies::Scheduler`] trait, by name.
//! - [`placement`]: what a placement costs, written once for all of them.
#![warn(missing_docs, unreachable_pub)]

mod constraints;
pub mod cost;
mod decision;
mod elasticflow;
mod first_fit;
pub mod placement;
pub mod policies;
mod provenance;
mod schedule;
mod settings;
pub mod sia;
mod snapshot;
mod throughput;
mod world;

pub use constraints::Constraints;
pub use decision::{Action, Explanation, JobDecision, RoundPlan, Segment, Shape, Verdict};
pub use elasticflow::Grid;
pub use first_fit::{FirstFitLimits, first_fit};
pub use provenance::{ClassSources, TableSource};
pub use schedule::{
    DONE_EPS_ITERS, EXPLANATION_TIME_FORMAT, Reason, Share, Stretch, Words, schedule, schedule_with,
};
pub use settings::{Policy, PolicyError};
pub use snapshot::{JobView, NodeView, Placement, Plan, Snapshot, Waiting};
pub use throughput::{
    Lambda, ModelRates, ModelTable, TableData, Throughput, ThroughputError, ThroughputTables,
};
pub use world::{
    Admission, AdmissionMode, Assignment, BestEffortOrder, DEFAULT_CHECKPOINT_INTERVAL_S, DataSite,
    EdgeAvailability, JobClass, JobSpec, JobState, LinkClass, LinkDefault, LinkDefaults, LinkTable,
    MeasuredLink, NodeKind, NodeSpec, OnInfeasible, Progress, Window, WorldSnapshot,
};
