//! What the coordinator tells an edge to do: the [`Command`]s and the task
//! assignment a start carries.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Work the coordinator gives an edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Run a task. Idempotent: an edge that already has the task ignores it.
    Assign(TaskAssignment),
    /// Stop a task: SIGTERM, then SIGKILL after the grace period.
    Cancel {
        /// The task to stop.
        task_id: u64,
    },
}

/// A task to run.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskAssignment {
    /// The task, unique across the cluster.
    pub task_id: u64,
    /// The job it belongs to.
    pub job_id: u64,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Extra environment variables, secret ones included.
    pub env: BTreeMap<String, String>,
    /// The job's memory need per worker, which the edge enforces as the
    /// task's cgroup memory limit where it can.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Seconds of training, on the coordinator's clock, between the
    /// checkpoints the job asked its tasks to save; the edge hands it to the
    /// task in wall seconds as `TIDEMILL_CHECKPOINT_INTERVAL_S`. Absent from
    /// older coordinators: the edge then uses the library's default.
    #[serde(default)]
    pub checkpoint_interval_s: Option<f64>,
}

/// Shows the environment's names only: values may be secrets.
impl std::fmt::Debug for TaskAssignment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskAssignment")
            .field("task_id", &self.task_id)
            .field("job_id", &self.job_id)
            .field("command", &self.command)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("memory_bytes", &self.memory_bytes)
            .field("checkpoint_interval_s", &self.checkpoint_interval_s)
            .finish()
    }
}
