//! The coordinator's side of moving checkpoints: it keeps each job's latest
//! complete checkpoints, sent by the edge the job's task stopped on, and
//! hands them to the edge the job starts on next.
//!
//! Why store-and-forward through the coordinator, and not edge to edge:
//! edges do not listen (a direct path would need a new authenticated
//! listener on every edge, and a path through every operator's NAT), while
//! every edge already holds a mutual-TLS QUIC connection to the
//! coordinator, which authenticates both ends and knows which node runs
//! which job. The source edge sends the checkpoint when its task stops,
//! before it reports the stop, so the coordinator holds it before the job
//! can be placed elsewhere; the destination fetches it before its task
//! starts. The price is two legs per move instead of one, and the
//! coordinator's disk; the source need not be up when the job restarts.
//!
//! Every request names a job the asking node has a task of (a node cannot
//! read or write another job's checkpoints), every path is derived from the
//! job id and a checked hash ([`tidemill_runtime::checkpoint`]), and sizes
//! are bounded by `[checkpoint] max_bytes` and the manifest's limits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tidemill_proto::{CloudMsg, EdgeMsg, ErrorCode};
use tidemill_runtime::checkpoint::{CheckpointError, CheckpointStore};

use crate::coordinator::Coordinator;
use crate::store::TransferRecord;

/// Under the data dir, the checkpoints the coordinator keeps.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// An upload under way: when its first offer came, what it moved, and how
/// many chunks failed their hash.
#[derive(Debug, Clone, Copy)]
struct Upload {
    since: Instant,
    moved: u64,
    resent: u32,
}

/// The checkpoints kept, and the uploads under way.
pub struct Keeper {
    /// The chunk store under `<data_dir>/checkpoints`.
    pub store: CheckpointStore,
    uploads: Mutex<HashMap<(u64, String), Upload>>,
}

impl Keeper {
    /// A keeper under `data_dir` with the `[checkpoint]` settings.
    pub fn new(data_dir: &std::path::Path, cfg: &crate::config::CheckpointConfig) -> Self {
        Keeper {
            store: CheckpointStore::new(data_dir.join(CHECKPOINTS_DIR), cfg.max_bytes, cfg.keep),
            uploads: Mutex::new(HashMap::new()),
        }
    }
}

/// A refusal: its code and a sentence for the edge's operator.
pub type Refusal = (ErrorCode, String);

fn refusal(e: CheckpointError) -> Refusal {
    let code = match e {
        CheckpointError::Io { .. } => ErrorCode::Internal,
        CheckpointError::BadChunk { .. } => ErrorCode::Corrupt,
        _ => ErrorCode::UnexpectedMessage,
    };
    (code, e.to_string())
}

/// Answers a checkpoint request of `node_id`. Blocking: it reads, hashes
/// and writes files.
pub fn answer(coord: &Coordinator, node_id: &str, msg: EdgeMsg) -> Result<CloudMsg, Refusal> {
    let (job_id, task_id) = match &msg {
        EdgeMsg::CheckpointOffer { task_id, manifest } => (manifest.job_id, Some(*task_id)),
        EdgeMsg::CheckpointChunk { job_id, .. } | EdgeMsg::CheckpointCommit { job_id, .. } => {
            (*job_id, None)
        }
        EdgeMsg::CheckpointLatest { task_id, job_id }
        | EdgeMsg::CheckpointFetch {
            task_id, job_id, ..
        } => (*job_id, Some(*task_id)),
        _ => {
            return Err((
                ErrorCode::UnexpectedMessage,
                "not a checkpoint request".into(),
            ));
        }
    };
    let allowed = coord
        .store
        .lock()
        .unwrap()
        .checkpoint_allowed(node_id, job_id, task_id)
        .map_err(|e| {
            tracing::error!(node_id, job_id, error = %e, "cannot check a checkpoint request");
            (
                ErrorCode::Internal,
                "the coordinator cannot check the request; retry".to_string(),
            )
        })?;
    if !allowed {
        let task = task_id.map_or(String::new(), |t| format!(" task {t} of"));
        return Err((
            ErrorCode::Unauthorized,
            format!(
                "node {node_id} has no{task} job {job_id} that is queued or running, so it may not send or fetch its checkpoints"
            ),
        ));
    }
    let keeper = &coord.checkpoints;
    match msg {
        EdgeMsg::CheckpointOffer { manifest, .. } => {
            let (manifest_id, missing) = keeper.store.offer(job_id, &manifest).map_err(refusal)?;
            let mut uploads = keeper.uploads.lock().unwrap();
            // An upload never committed (its edge went away) is forgotten
            // after a day; its chunks are pruned with the job's next commit.
            uploads.retain(|_, u| u.since.elapsed() < std::time::Duration::from_secs(86_400));
            uploads
                .entry((job_id, manifest_id.clone()))
                .or_insert(Upload {
                    since: Instant::now(),
                    moved: 0,
                    resent: 0,
                });
            Ok(CloudMsg::CheckpointMissing {
                manifest_id,
                missing,
            })
        }
        EdgeMsg::CheckpointChunk {
            manifest_id,
            index,
            data,
            ..
        } => {
            let put = keeper.store.put(job_id, &manifest_id, index, &data);
            if let Some(u) = keeper
                .uploads
                .lock()
                .unwrap()
                .get_mut(&(job_id, manifest_id.clone()))
            {
                u.moved += data.len() as u64;
                u.resent += u32::from(matches!(put, Err(CheckpointError::BadChunk { .. })));
            }
            if let Err(e) = &put {
                tracing::warn!(node_id, job_id, chunk = index, error = %e, "refused a checkpoint chunk");
            }
            put.map_err(refusal)?;
            Ok(CloudMsg::CheckpointChunkStored { index })
        }
        EdgeMsg::CheckpointCommit { manifest_id, .. } => {
            let m = keeper.store.commit(job_id, &manifest_id).map_err(refusal)?;
            let upload = keeper
                .uploads
                .lock()
                .unwrap()
                .remove(&(job_id, manifest_id));
            let bytes = m.bytes();
            let (seconds, moved, resent) = upload.map_or((0.0, 0, 0), |u| {
                (u.since.elapsed().as_secs_f64(), u.moved, u.resent)
            });
            let record = TransferRecord {
                t_ms: tidemill_runtime::clock::Clock::now_ms(&*coord.clock),
                from: node_id.to_string(),
                to: tidemill_proto::CLOUD_PEER.to_string(),
                bytes,
                moved_bytes: moved,
                seconds,
                step: m.step,
                resent_chunks: resent,
            };
            tracing::info!(
                node_id,
                job_id,
                step = m.step,
                bytes,
                seconds,
                resent,
                "checkpoint stored"
            );
            coord
                .store
                .lock()
                .unwrap()
                .checkpoint_stored(job_id, &record)
                .map_err(|e| (ErrorCode::Internal, e.to_string()))?;
            Ok(CloudMsg::CheckpointStored {
                step: m.step,
                bytes,
            })
        }
        EdgeMsg::CheckpointLatest { .. } => Ok(CloudMsg::CheckpointLatest(
            keeper.store.latest(job_id).map(|(_, m)| m),
        )),
        EdgeMsg::CheckpointFetch {
            manifest_id, index, ..
        } => {
            let data = keeper
                .store
                .read_chunk(job_id, &manifest_id, index)
                .map_err(refusal)?;
            Ok(CloudMsg::CheckpointChunk { index, data })
        }
        _ => unreachable!("matched above"),
    }
}

/// Deletes the checkpoints of jobs that are no longer queued or running.
pub fn prune_ended(coord: &Coordinator, live: &std::collections::HashSet<u64>) {
    let root = coord.cfg.data_dir.join(CHECKPOINTS_DIR);
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(job_id) = name
            .strip_prefix("job-")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if live.contains(&job_id) {
            continue;
        }
        match coord.checkpoints.store.remove_job(job_id) {
            Ok(()) => tracing::info!(job_id, "deleted the checkpoints of an ended job"),
            Err(e) => {
                tracing::warn!(job_id, error = %e, "cannot delete the checkpoints of an ended job")
            }
        }
    }
}
