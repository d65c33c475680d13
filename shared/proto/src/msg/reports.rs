//! What an edge reports, journalled and sent in acknowledged batches:
//! utilisation samples and the lives of its tasks (their resumes, progress,
//! status, events and the checkpoints they leave).

use serde::{Deserialize, Serialize};

use super::LinkSample;

/// One utilisation sample. Percentages are 0 to 100.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When the sample was taken, in Unix milliseconds.
    pub t_ms: i64,
    /// Overall CPU utilisation, percent.
    pub cpu_pct: f32,
    /// Per-core CPU utilisation, percent.
    pub per_core_pct: Vec<f32>,
    /// Memory in use, percent of physical memory.
    pub mem_pct: f32,
    /// Bytes received on all interfaces since the previous sample.
    pub net_rx_bytes: u64,
    /// Bytes sent on all interfaces since the previous sample.
    pub net_tx_bytes: u64,
    /// Mean accelerator utilisation, percent; `None` when no accelerator could be
    /// read, which is not the same as idle.
    pub gpu_pct: Option<f32>,
}

/// One entry of an edge's journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Per-node sequence number, starting at 1 and without gaps.
    pub seq: u64,
    /// What is reported.
    pub body: ReportBody,
}

/// The payload of a [`Report`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ReportBody {
    /// A batch of samples, oldest first.
    Samples(Vec<Sample>),
    /// A change in a task's life.
    Task(TaskStatus),
    /// The node's latest forecast of its own utilisation and idle windows,
    /// computed on the edge from its journaled history.
    Forecast(Box<tidemill_forecast::NodeForecast>),
    /// Measurements of the node's links to the coordinator and to peers.
    Links(Vec<LinkSample>),
    /// Iterations a task says it has done, from its `TIDEMILL_PROGRESS`
    /// output lines, so the coordinator need not estimate them.
    Progress(TaskProgress),
    /// A task started from a checkpoint: the job's progress is the step that
    /// checkpoint holds, and the transfer that brought it, if one did.
    Resumed(TaskResume),
}

/// What a task resumed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResume {
    /// The task.
    pub task_id: u64,
    /// Its job.
    pub job_id: u64,
    /// When it started, Unix ms of the edge's sampling clock.
    pub t_ms: i64,
    /// The step its checkpoint holds.
    pub step: u64,
    /// How the checkpoint came to this node; `None` when it was here already.
    pub transfer: Option<Transfer>,
}

/// One checkpoint transfer, as its receiver timed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    /// Bytes of the checkpoint.
    pub bytes: u64,
    /// Bytes actually moved (less when a resumed transfer had some already).
    pub moved_bytes: u64,
    /// Wall seconds it took.
    pub seconds: f64,
    /// Chunks that failed their hash and were sent again.
    pub resent_chunks: u32,
    /// Whether it went through the operators' shared store
    /// ([`SHARED_STORE_PEER`](super::SHARED_STORE_PEER)) rather than through the coordinator.
    #[serde(default)]
    pub shared: bool,
}

/// A task's own count of its iterations, as its latest
/// `TIDEMILL_PROGRESS iter=N` line gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskProgress {
    /// The task.
    pub task_id: u64,
    /// The job the task belongs to.
    pub job_id: u64,
    /// When the edge read the line, Unix ms of its sampling clock.
    pub t_ms: i64,
    /// Iterations done, counted by the job itself (from its start, not from
    /// this task's: a resumed task counts on from its checkpoint).
    pub iterations: u64,
}

/// A change in a task's life, as the edge saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    /// The task.
    pub task_id: u64,
    /// The job the task belongs to.
    pub job_id: u64,
    /// When it happened, in Unix milliseconds.
    pub t_ms: i64,
    /// What happened.
    pub event: TaskEvent,
    /// The last lines of the task's combined stdout and stderr.
    pub output_tail: Vec<String>,
    /// What its job's checkpoint dir held when it ended (end events only;
    /// absent from older edges).
    #[serde(default)]
    pub checkpoint: Option<CheckpointState>,
}

/// What a task left in its job's checkpoint dir, as the edge saw it there
/// when the task ended: so that a job whose checkpoint writes all failed is
/// not reported as one that can resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    /// Regular files in the dir and below it (links not followed).
    pub files: u64,
    /// Their size in bytes.
    pub bytes: u64,
    /// Whether the task itself wrote any of them (rather than an earlier task).
    pub saved_by_task: bool,
    /// Where the task saved none: the last line of its output that named
    /// the checkpoint dir and reads as an error (the failed write's message).
    pub last_error: Option<String>,
}

impl CheckpointState {
    /// The longest `last_error` kept, in bytes.
    pub const MAX_ERROR_LEN: usize = 512;

    /// This state with `last_error` cut to [`Self::MAX_ERROR_LEN`] bytes on a
    /// character boundary: the line comes from a task's output, and a
    /// receiver does not trust the sender to have bounded it.
    pub fn bounded(mut self) -> Self {
        if let Some(e) = self.last_error.as_mut() {
            let mut end = e.len().min(Self::MAX_ERROR_LEN);
            while !e.is_char_boundary(end) {
                end -= 1;
            }
            e.truncate(end);
        }
        self
    }
}

/// What happened to a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TaskEvent {
    /// The process is running.
    Started {
        /// Its process id on the edge.
        pid: u32,
    },
    /// The process ended.
    Exited {
        /// Its exit code, if it exited normally.
        exit_code: Option<i32>,
        /// The signal that ended it, if any.
        signal: Option<i32>,
        /// Whether it ended because the coordinator cancelled it.
        cancelled: bool,
    },
    /// The edge stopped the process for a reason of its own (its daemon is
    /// stopping or restarting) after the grace period for a checkpoint: the
    /// job is not over, and resumes from its checkpoint.
    Yielded {
        /// Its exit code, if it exited normally.
        exit_code: Option<i32>,
        /// The signal that ended it, if any.
        signal: Option<i32>,
        /// A sentence for the operator: why the edge stopped it.
        reason: String,
    },
    /// The task never ran or was lost; the reason says why and what to do.
    Failed {
        /// A sentence for the operator.
        reason: String,
    },
}
