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
        EdgeMsg::CheckpointShared {
            task_id, manifest, ..
        } => (manifest.job_id, Some(*task_id)),
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
            let committed = keeper.store.commit(job_id, &manifest_id);
            if let Err(CheckpointError::Incomplete { corrupt, .. }) = &committed {
                // Chunks that rotted on this disk are sent again too.
                if let Some(u) = keeper
                    .uploads
                    .lock()
                    .unwrap()
                    .get_mut(&(job_id, manifest_id.clone()))
                {
                    u.resent += *corrupt as u32;
                }
            }
            let m = committed.map_err(refusal)?;
            let upload = keeper
                .uploads
                .lock()
                .unwrap()
                .remove(&(job_id, manifest_id));
            let took = upload.map_or((0.0, 0, 0), |u| {
                (u.since.elapsed().as_secs_f64(), u.moved, u.resent)
            });
            stored(coord, node_id, &m, tidemill_proto::CLOUD_PEER, took)
        }
        // The chunks went to the operators' shared store, not here: the
        // manifest is checked as an offer's would be, and only what it says
        // is recorded (the size prices the job's next move).
        EdgeMsg::CheckpointShared {
            manifest, transfer, ..
        } => {
            manifest
                .check(job_id, coord.cfg.checkpoint.max_bytes)
                .map_err(|e| refusal(e.into()))?;
            let seconds = transfer.seconds;
            let took = (
                if seconds.is_finite() {
                    seconds.max(0.0)
                } else {
                    0.0
                },
                transfer.moved_bytes,
                transfer.resent_chunks,
            );
            stored(
                coord,
                node_id,
                &manifest,
                tidemill_proto::SHARED_STORE_PEER,
                took,
            )
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

/// Records that checkpoint `m` went from `node_id` to `to` in `(seconds,
/// moved bytes, resent chunks)`, and answers the edge.
fn stored(
    coord: &Coordinator,
    node_id: &str,
    m: &tidemill_proto::Manifest,
    to: &str,
    (seconds, moved, resent): (f64, u64, u32),
) -> Result<CloudMsg, Refusal> {
    let (job_id, bytes) = (m.job_id, m.bytes());
    let record = TransferRecord {
        t_ms: tidemill_runtime::clock::Clock::now_ms(&*coord.clock),
        from: node_id.to_string(),
        to: to.to_string(),
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
        to,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tidemill_proto::{CHUNK_BYTES, Manifest, ManifestFile, STEP_FILE};
    use tidemill_runtime::clock::SystemClock;
    use tidemill_runtime::identity::{Authority, sha256_hex};
    use tidemill_sched::{FirstFitLimits, first_fit};

    use super::*;
    use crate::store::testkit::{hello, samples};
    use crate::store::{Owed, Store};

    /// A coordinator over a fresh data dir, with job 1's task on node `n1`.
    fn coordinator(dir: &std::path::Path) -> (Coordinator, u64, u64) {
        tidemill_runtime::tls::load_or_create(dir, &["localhost".into()], 0).unwrap();
        let mut store = Store::open(dir).unwrap();
        store.register(&hello("n1"), 0).unwrap();
        store.register(&hello("n2"), 0).unwrap();
        store.apply_reports("n1", &[samples(1, 5.0)], 1).unwrap();
        let spec = crate::job::JobFile::from_toml(
            "name = \"j\"\ncommand = [\"true\"]\ndeadline = \"2030-01-01T00:00:00Z\"",
            "j",
        )
        .unwrap();
        let job = store.submit(&spec, 2).unwrap();
        let policy = FirstFitLimits {
            idle_cpu_threshold_pct: 30.0,
            max_tasks_per_node: 1,
        };
        let plan = first_fit(&store.snapshot(3, false).unwrap(), &policy);
        store.apply_plan(&plan, &policy, 3).unwrap();
        let [Owed::Assign(a)] = &store.owed("n1", 29500).unwrap()[..] else {
            panic!("job 1 placed on n1")
        };
        let task = a.task_id;
        let cfg = crate::config::CloudConfig {
            data_dir: dir.to_path_buf(),
            checkpoint: crate::config::CheckpointConfig {
                keep: 2,
                max_bytes: 4 * u64::from(CHUNK_BYTES),
            },
            ..crate::config::CloudConfig::default()
        };
        let coord = Coordinator::new(
            store,
            cfg,
            Arc::new(SystemClock),
            tidemill_sched::ThroughputTables::default(),
            Authority::load(dir).unwrap(),
        );
        (coord, job, task)
    }

    fn checkpoint(job_id: u64, step: u64) -> (Manifest, Vec<u8>) {
        let data: Vec<u8> = (0..CHUNK_BYTES as usize + 99)
            .map(|i| (i % 251) as u8)
            .collect();
        let m = Manifest {
            job_id,
            step,
            files: vec![
                ManifestFile {
                    name: "model.pt".into(),
                    size: data.len() as u64,
                    chunks: data.chunks(CHUNK_BYTES as usize).map(sha256_hex).collect(),
                },
                ManifestFile {
                    name: STEP_FILE.into(),
                    size: 2,
                    chunks: vec![sha256_hex(b"42")],
                },
            ],
        };
        (m, data)
    }

    fn code(r: Result<CloudMsg, Refusal>) -> ErrorCode {
        r.expect_err("a refusal").0
    }

    #[test]
    fn a_checkpoint_goes_up_chunk_by_chunk_a_corrupt_chunk_again_and_comes_down_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (coord, job, task) = coordinator(dir.path());
        let (m, data) = checkpoint(job, 42);
        let CloudMsg::CheckpointMissing {
            manifest_id: id,
            missing,
        } = answer(
            &coord,
            "n1",
            EdgeMsg::CheckpointOffer {
                task_id: task,
                manifest: m.clone(),
            },
        )
        .unwrap()
        else {
            panic!("missing chunks")
        };
        assert_eq!(missing, vec![0, 1, 2]);
        let chunk = |index: u32, data: Vec<u8>| EdgeMsg::CheckpointChunk {
            job_id: job,
            manifest_id: id.clone(),
            index,
            data,
        };
        let parts: Vec<Vec<u8>> = data
            .chunks(CHUNK_BYTES as usize)
            .map(<[u8]>::to_vec)
            .chain([b"42".to_vec()])
            .collect();
        answer(&coord, "n1", chunk(0, parts[0].clone())).unwrap();
        let mut bad = parts[1].clone();
        bad[3] ^= 0x10;
        assert_eq!(
            code(answer(&coord, "n1", chunk(1, bad))),
            ErrorCode::Corrupt
        );
        let commit = || EdgeMsg::CheckpointCommit {
            job_id: job,
            manifest_id: id.clone(),
        };
        assert_eq!(
            code(answer(&coord, "n1", commit())),
            ErrorCode::UnexpectedMessage,
            "incomplete"
        );
        // Nothing incomplete is handed out.
        let latest = EdgeMsg::CheckpointLatest {
            task_id: task,
            job_id: job,
        };
        assert_eq!(
            answer(&coord, "n1", latest.clone()).unwrap(),
            CloudMsg::CheckpointLatest(None)
        );
        // The link broke; the offer again lists only what is missing.
        let again = answer(
            &coord,
            "n1",
            EdgeMsg::CheckpointOffer {
                task_id: task,
                manifest: m.clone(),
            },
        )
        .unwrap();
        assert!(
            matches!(again, CloudMsg::CheckpointMissing { ref missing, .. } if missing == &vec![1, 2]),
            "{again:?}"
        );
        answer(&coord, "n1", chunk(1, parts[1].clone())).unwrap();
        answer(&coord, "n1", chunk(2, parts[2].clone())).unwrap();
        assert_eq!(
            answer(&coord, "n1", commit()).unwrap(),
            CloudMsg::CheckpointStored {
                step: 42,
                bytes: m.bytes()
            }
        );
        assert_eq!(
            answer(&coord, "n1", latest).unwrap(),
            CloudMsg::CheckpointLatest(Some(m.clone()))
        );
        let fetched = answer(
            &coord,
            "n1",
            EdgeMsg::CheckpointFetch {
                task_id: task,
                job_id: job,
                manifest_id: id.clone(),
                index: 1,
            },
        )
        .unwrap();
        assert_eq!(
            fetched,
            CloudMsg::CheckpointChunk {
                index: 1,
                data: parts[1].clone()
            }
        );
        // The move is priced by what was measured, and shown.
        let store = coord.store.lock().unwrap();
        let transfers = store.transfers(job).unwrap();
        assert_eq!(
            (
                transfers[0].from.as_str(),
                transfers[0].step,
                transfers[0].bytes,
                transfers[0].resent_chunks
            ),
            ("n1", 42, m.bytes(), 1)
        );
        assert_eq!(store.checkpoint_sizes().unwrap()[&job], m.bytes());
    }

    #[test]
    fn bad_checkpoint_requests_are_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let (coord, job, task) = coordinator(dir.path());
        let (m, _) = checkpoint(job, 1);
        let offer = |node: &str, task_id: u64, manifest: Manifest| {
            answer(&coord, node, EdgeMsg::CheckpointOffer { task_id, manifest })
        };
        // Wrong job: a node without a task of it, a task of another node,
        // a job that does not exist.
        let refused = offer("n2", task, m.clone()).unwrap_err();
        assert_eq!(refused.0, ErrorCode::Unauthorized);
        assert!(refused.1.contains("node n2 has no task"), "{}", refused.1);
        assert_eq!(
            code(answer(
                &coord,
                "n2",
                EdgeMsg::CheckpointLatest {
                    task_id: task,
                    job_id: job
                }
            )),
            ErrorCode::Unauthorized
        );
        assert_eq!(
            code(offer("n1", task, checkpoint(job + 1, 1).0)),
            ErrorCode::Unauthorized
        );
        assert_eq!(
            code(answer(
                &coord,
                "n1",
                EdgeMsg::CheckpointFetch {
                    task_id: task + 1,
                    job_id: job,
                    manifest_id: "0".repeat(64),
                    index: 0
                }
            )),
            ErrorCode::Unauthorized
        );
        // A manifest of another job sent for this one.
        let mut other = m.clone();
        other.job_id = job + 7;
        let r = answer(
            &coord,
            "n1",
            EdgeMsg::CheckpointOffer {
                task_id: task,
                manifest: other,
            },
        );
        assert_eq!(
            code(r),
            ErrorCode::Unauthorized,
            "checked against the job the manifest names"
        );
        // Path traversal, absolute and hidden names.
        for name in ["../../etc/cron.d/x", "/etc/passwd", ".ssh", "a/b"] {
            let mut bad = m.clone();
            bad.files[0].name = name.into();
            let r = offer("n1", task, bad).unwrap_err();
            assert!(r.1.contains("is refused"), "{name}: {}", r.1);
        }
        // Oversize: over [checkpoint] max_bytes.
        let mut big = m.clone();
        big.files[0].size = 5 * u64::from(CHUNK_BYTES);
        big.files[0].chunks = vec!["a".repeat(64); 5];
        let r = offer("n1", task, big).unwrap_err();
        assert!(r.1.contains("max_bytes"), "{}", r.1);
        // Bad hashes, and ids that are not hashes.
        let mut hashes = m.clone();
        hashes.files[0].chunks[0] = "not hex".into();
        assert!(offer("n1", task, hashes).unwrap_err().1.contains("SHA-256"));
        for id in ["../job-2", "x"] {
            let r = answer(
                &coord,
                "n1",
                EdgeMsg::CheckpointChunk {
                    job_id: job,
                    manifest_id: id.into(),
                    index: 0,
                    data: vec![1],
                },
            );
            assert!(r.unwrap_err().1.contains("is not a SHA-256"));
        }
        // A chunk beyond the manifest, and one never offered.
        let CloudMsg::CheckpointMissing {
            manifest_id: id, ..
        } = offer("n1", task, m.clone()).unwrap()
        else {
            panic!()
        };
        let r = answer(
            &coord,
            "n1",
            EdgeMsg::CheckpointChunk {
                job_id: job,
                manifest_id: id,
                index: 99,
                data: vec![1],
            },
        );
        assert!(r.unwrap_err().1.contains("beyond"));
        let r = answer(
            &coord,
            "n1",
            EdgeMsg::CheckpointCommit {
                job_id: job,
                manifest_id: "f".repeat(64),
            },
        );
        assert!(r.unwrap_err().1.contains("offer its manifest first"));
        // Nothing landed outside the job's own directory.
        let root = dir.path().join(CHECKPOINTS_DIR);
        let jobs: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(jobs, vec![std::ffi::OsString::from(format!("job-{job}"))]);
        assert!(!dir.path().join("etc").exists());
    }

    #[test]
    fn a_shared_store_checkpoint_is_recorded_from_its_manifest_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (coord, job, task) = coordinator(dir.path());
        let (m, _) = checkpoint(job, 42);
        let transfer = tidemill_proto::Transfer {
            bytes: m.bytes(),
            moved_bytes: m.bytes(),
            seconds: 0.5,
            resent_chunks: 0,
            shared: true,
        };
        let shared = |manifest: Manifest| EdgeMsg::CheckpointShared {
            task_id: task,
            manifest,
            transfer: transfer.clone(),
        };
        // Only a node the job has a task on may say so.
        assert_eq!(
            code(answer(&coord, "n2", shared(m.clone()))),
            ErrorCode::Unauthorized
        );
        let mut escape = m.clone();
        escape.files[0].name = "../../etc/passwd".into();
        let mut huge = m.clone();
        huge.files[0].size = u64::MAX / 2;
        let mut other_job = m.clone();
        other_job.job_id = job + 1;
        for bad in [escape, huge] {
            assert_eq!(
                code(answer(&coord, "n1", shared(bad))),
                ErrorCode::UnexpectedMessage
            );
        }
        assert_eq!(
            code(answer(&coord, "n1", shared(other_job))),
            ErrorCode::Unauthorized,
            "a manifest names its own job, which must be one of the node's"
        );
        assert!(
            coord
                .store
                .lock()
                .unwrap()
                .transfers(job)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            answer(&coord, "n1", shared(m.clone())).unwrap(),
            CloudMsg::CheckpointStored {
                step: 42,
                bytes: m.bytes()
            }
        );
        let store = coord.store.lock().unwrap();
        let t = &store.transfers(job).unwrap()[0];
        assert_eq!(
            (t.from.as_str(), t.to.as_str(), t.step, t.bytes),
            ("n1", tidemill_proto::SHARED_STORE_PEER, 42, m.bytes())
        );
        assert_eq!(store.checkpoint_sizes().unwrap()[&job], m.bytes());
        assert!(
            keeper_holds_nothing(dir.path()),
            "no chunk went through the coordinator"
        );
    }

    fn keeper_holds_nothing(dir: &std::path::Path) -> bool {
        std::fs::read_dir(dir.join(CHECKPOINTS_DIR)).map_or(true, |mut d| d.next().is_none())
    }
}
