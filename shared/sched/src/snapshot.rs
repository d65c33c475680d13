//! The read-only view a policy decides on, and the plan it returns.

use serde::{Deserialize, Serialize};

/// The state a scheduling round sees.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The time of the round, Unix ms.
    pub now_ms: i64,
    /// Every known node.
    pub nodes: Vec<NodeView>,
    /// Jobs waiting for a placement, in submission order.
    pub queued: Vec<JobView>,
    /// Node labels and the labels queued jobs require.
    #[serde(default)]
    pub constraints: crate::Constraints,
}

/// What a policy knows of a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// The node id.
    pub id: String,
    /// Connected, or disconnected for less than the grace period.
    pub online: bool,
    /// The latest CPU utilisation, percent; `None` before the first sample.
    pub cpu_util: Option<f32>,
    /// Tasks assigned to the node and not yet finished.
    pub running_tasks: u32,
}

/// What a policy knows of a queued job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    /// The job id.
    pub id: u64,
    /// When it was submitted, Unix ms.
    pub submitted_ms: i64,
    /// When it must be done, Unix ms.
    pub deadline_ms: i64,
}

/// A policy's decisions for one round.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Jobs to start, and where.
    pub placements: Vec<Placement>,
    /// Jobs left waiting, each with the reason.
    pub waiting: Vec<Waiting>,
}

/// Start a job on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The job.
    pub job_id: u64,
    /// The node.
    pub node_id: String,
}

/// A job that stays queued this round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The job.
    pub job_id: u64,
    /// Why it waits, for the operator.
    pub reason: String,
}
