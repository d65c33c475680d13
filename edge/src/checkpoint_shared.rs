//! The optional shared-storage checkpoint backend (`[checkpoint] backend =
//! "shared"`): where the operators of several edges share storage (an NFS
//! mount, say), a stopped task's checkpoint is put there, and the next task
//! of the job, on whichever edge, takes it from there; no chunk goes
//! through the coordinator, which only hears of the manifest (its size and
//! step price the job's next move).
//!
//! The store is reached through the `object_store` crate, whose local-path
//! backend this edge builds; its S3, GCS and Azure backends would bring a
//! second TLS provider beside quinn's, so a share is mounted and given as a
//! path. The layout is the edge store's ([`CheckpointStore`]):
//! `job-<id>/<manifest id>/` holds `manifest`, one object `c<n>` per chunk
//! and `complete`, written last. Every key is made from a job id (a number)
//! and a manifest id that is the SHA-256 of a manifest read back and checked
//! like an offer; the URL comes only from the operator's config. Chunks
//! taken from the store are checked against their hash before a task sees
//! them: a corrupt one makes the whole checkpoint unusable, and the previous
//! complete one is used.

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tidemill_proto::{EdgeMsg, Manifest, Transfer};
use tidemill_runtime::checkpoint::{CheckpointError, CheckpointStore, manifest_id};
use tidemill_runtime::clock::SystemClock;

use crate::checkpoint_config::local_path;
use crate::checkpoint_move::{Mover, Pacer};

/// The marker a complete checkpoint's prefix holds, written last.
const COMPLETE: &str = "complete";
/// The manifest's object under a checkpoint's prefix.
const MANIFEST: &str = "manifest";
/// The object `tidemill-edge doctor` writes, reads back and deletes.
const PROBE: &str = "tidemill-doctor-probe";

/// Why the shared store failed.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    /// The store could not be opened, read or written.
    #[error(
        "shared checkpoint store {url}: {source}; check that [checkpoint] url names an existing directory, mounted and writable by the edge"
    )]
    Store {
        /// The configured URL.
        url: String,
        /// What failed.
        source: object_store::Error,
    },
    /// A chunk read from the store does not match its hash.
    #[error(
        "chunk {index} of checkpoint {id} of job {job_id} in the shared store {url} does not match its SHA-256; the checkpoint is not used"
    )]
    Corrupt {
        /// The configured URL.
        url: String,
        /// The job.
        job_id: u64,
        /// The checkpoint.
        id: String,
        /// The chunk.
        index: u32,
    },
    /// The doctor's probe object read back different bytes.
    #[error("shared checkpoint store {0}: an object written there read back different bytes")]
    Mismatch(String),
    /// The edge's own store refused or failed.
    #[error(transparent)]
    Local(#[from] CheckpointError),
}

/// The operators' shared checkpoint store.
#[derive(Debug, Clone)]
pub struct SharedStore {
    store: Arc<dyn ObjectStore>,
    url: String,
    max_bytes: u64,
    keep: usize,
}

impl SharedStore {
    /// Opens the store at `url` (which must exist), taking checkpoints of
    /// at most `max_bytes` and keeping the `keep` newest complete ones of
    /// each job.
    pub fn open(url: &str, max_bytes: u64, keep: usize) -> Result<Self, SharedError> {
        let err = |source| SharedError::Store {
            url: url.to_string(),
            source,
        };
        let dir = local_path(url).map_err(|rule| {
            err(object_store::Error::Generic {
                store: "LocalFileSystem",
                source: rule.into(),
            })
        })?;
        let fs = LocalFileSystem::new_with_prefix(&dir)
            .map_err(err)?
            .with_automatic_cleanup(true)
            .with_fsync(true);
        Ok(SharedStore {
            store: Arc::new(fs),
            url: url.to_string(),
            max_bytes,
            keep: keep.max(1),
        })
    }

    fn err(&self) -> impl Fn(object_store::Error) -> SharedError + '_ {
        |source| SharedError::Store {
            url: self.url.clone(),
            source,
        }
    }

    fn job_key(job_id: u64) -> Key {
        Key::from(format!("job-{job_id}"))
    }

    /// The prefix of checkpoint `id`, which the caller has checked is
    /// SHA-256 hex (a manifest's id, or a listed name that read back as one).
    fn key(job_id: u64, id: &str) -> Key {
        Self::job_key(job_id).join(id)
    }

    /// Puts checkpoint `id` of `job_id`, held complete in `local`, in the
    /// store: the manifest, each chunk not there yet (a cut put resumes),
    /// then `complete`; then prunes the job's older checkpoints.
    pub async fn put(
        &self,
        local: &CheckpointStore,
        job_id: u64,
        (id, m): (&str, &Manifest),
        pacer: &mut Pacer,
    ) -> Result<Transfer, SharedError> {
        m.check(job_id, self.max_bytes)
            .map_err(CheckpointError::from)?;
        if manifest_id(m) != id {
            return Err(CheckpointError::BadId(id.to_string()).into());
        }
        let started = Instant::now();
        let dir = Self::key(job_id, id);
        let encoded = tidemill_proto::encode(m).expect("manifests encode");
        self.store
            .put(&dir.clone().join(MANIFEST), encoded.into())
            .await
            .map_err(self.err())?;
        for (index, c) in m.chunks().enumerate() {
            let key = dir.clone().join(format!("c{index}"));
            if let Ok(held) = self.store.head(&key).await
                && held.size == c.len as u64
            {
                continue;
            }
            let data = local.read_chunk(job_id, id, index as u32)?;
            pacer.admit(data.len()).await;
            self.store
                .put(&key, data.into())
                .await
                .map_err(self.err())?;
        }
        self.store
            .put(&dir.clone().join(COMPLETE), PutPayload::new())
            .await
            .map_err(self.err())?;
        self.prune(job_id, m.step).await;
        Ok(Transfer {
            bytes: m.bytes(),
            moved_bytes: pacer.sent(),
            seconds: started.elapsed().as_secs_f64(),
            resent_chunks: 0,
            shared: true,
        })
    }

    /// The manifest of checkpoint `id`, if it reads back as one of
    /// `job_id`'s within the limits and `id` is its hash.
    async fn manifest(&self, job_id: u64, id: &str) -> Option<Manifest> {
        let got = self.store.get(&Self::key(job_id, id).join(MANIFEST)).await;
        let bytes = got.ok()?.bytes().await.ok()?;
        let m: Manifest = tidemill_proto::decode(bytes.get(tidemill_proto::HEADER_LEN..)?).ok()?;
        (m.check(job_id, self.max_bytes).is_ok() && manifest_id(&m) == id).then_some(m)
    }

    /// Every checkpoint of `job_id` in the store with a readable manifest:
    /// its id, manifest, and when it was completed (`None`: not complete),
    /// newest (highest step, then latest completed) first.
    async fn listed(
        &self,
        job_id: u64,
    ) -> Result<Vec<(String, Manifest, Option<i64>)>, SharedError> {
        let listed = match self
            .store
            .list_with_delimiter(Some(&Self::job_key(job_id)))
            .await
        {
            Ok(l) => l.common_prefixes,
            Err(object_store::Error::NotFound { .. }) => vec![],
            Err(e) => return Err(self.err()(e)),
        };
        let mut found = Vec::new();
        for prefix in listed {
            let Some(id) = prefix.filename().map(str::to_string) else {
                continue;
            };
            let Some(m) = self.manifest(job_id, &id).await else {
                continue;
            };
            let done = self.store.head(&prefix.clone().join(COMPLETE)).await.ok();
            found.push((id, m, done.map(|d| d.last_modified.timestamp_millis())));
        }
        found.sort_by_key(|(_, m, at)| std::cmp::Reverse((at.is_some(), m.step, *at)));
        Ok(found)
    }

    /// The job's complete checkpoints, newest first.
    pub async fn complete(&self, job_id: u64) -> Result<Vec<(String, Manifest)>, SharedError> {
        let all = self.listed(job_id).await?;
        Ok(all
            .into_iter()
            .filter(|(_, _, at)| at.is_some())
            .map(|(id, m, _)| (id, m))
            .collect())
    }

    /// Brings complete checkpoint `m` of `job_id` from the store into
    /// `local`, checking every chunk; `None` if `local` held it already.
    pub async fn fetch(
        &self,
        local: &CheckpointStore,
        job_id: u64,
        m: &Manifest,
        pacer: &mut Pacer,
    ) -> Result<Option<Transfer>, SharedError> {
        let started = Instant::now();
        let (id, missing) = local.offer(job_id, m)?;
        let dir = Self::key(job_id, &id);
        let lens: Vec<usize> = m.chunks().map(|c| c.len).collect();
        let any = !missing.is_empty();
        for index in missing {
            pacer.admit(lens[index as usize]).await;
            let key = dir.clone().join(format!("c{index}"));
            let got = self.store.get(&key).await.map_err(self.err())?;
            let data = got.bytes().await.map_err(self.err())?;
            match local.put(job_id, &id, index, &data) {
                Err(CheckpointError::BadChunk { .. }) => {
                    return Err(SharedError::Corrupt {
                        url: self.url.clone(),
                        job_id,
                        id,
                        index,
                    });
                }
                other => other?,
            }
        }
        local.commit(job_id, &id)?;
        Ok(any.then(|| Transfer {
            bytes: m.bytes(),
            moved_bytes: pacer.sent(),
            seconds: started.elapsed().as_secs_f64(),
            resent_chunks: 0,
            shared: true,
        }))
    }

    /// Keeps the job's newest `keep` complete checkpoints, the newest of
    /// which holds `step`, and unfinished ones of a later step (another
    /// edge may be putting one); deletes the rest, each `complete` first
    /// so that a half-deleted checkpoint is never taken for a whole one.
    async fn prune(&self, job_id: u64, step: u64) {
        let Ok(all) = self.listed(job_id).await else {
            return;
        };
        let mut kept = 0;
        for (id, m, at) in all {
            let keep = match at {
                Some(_) => {
                    kept += 1;
                    kept <= self.keep
                }
                None => m.step > step,
            };
            if keep {
                continue;
            }
            if let Err(e) = self.remove(job_id, &id).await {
                tracing::warn!(job_id, checkpoint = %id, error = %e, "cannot prune an old checkpoint in the shared store; delete it by hand");
            }
        }
    }

    async fn remove(&self, job_id: u64, id: &str) -> Result<(), SharedError> {
        let dir = Self::key(job_id, id);
        match self.store.delete(&dir.clone().join(COMPLETE)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(self.err()(e)),
        }
        let listed = self
            .store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(self.err())?;
        for o in listed.objects {
            match self.store.delete(&o.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.err()(e)),
            }
        }
        Ok(())
    }

    /// Deletes every checkpoint of `job_id` (its job finished).
    pub async fn remove_job(&self, job_id: u64) -> Result<(), SharedError> {
        for (id, ..) in self.listed(job_id).await? {
            self.remove(job_id, &id).await?;
        }
        Ok(())
    }

    /// Writes an object, reads it back and deletes it (`tidemill-edge
    /// doctor`).
    pub async fn probe(&self, node_id: &str) -> Result<(), SharedError> {
        let key = Key::from(format!("{PROBE}-{node_id}"));
        let text = format!("tidemill checkpoint probe from {node_id}");
        self.store
            .put(&key, text.clone().into())
            .await
            .map_err(self.err())?;
        let got = self.store.get(&key).await.map_err(self.err())?;
        let back = got.bytes().await.map_err(self.err())?;
        self.store.delete(&key).await.map_err(self.err())?;
        if back != text.as_bytes() {
            return Err(SharedError::Mismatch(self.url.clone()));
        }
        Ok(())
    }
}

impl Mover {
    /// After a task of `job_id` finished its job: deletes the job's
    /// checkpoints from the shared store, if that is the backend (no task
    /// of the job will start again).
    pub async fn finished(&self, job_id: u64) {
        let Some(shared) = self.shared() else { return };
        match shared.remove_job(job_id).await {
            Ok(()) => {
                tracing::info!(
                    node_id = self.node_id(),
                    job_id,
                    "the job finished; its checkpoints are deleted from the shared store"
                )
            }
            Err(e) => {
                tracing::warn!(node_id = self.node_id(), job_id, error = %e, "cannot delete a finished job's checkpoints from the shared store; delete its job-<id> there by hand")
            }
        }
    }

    /// After a task of job `job_id` stopped: puts checkpoint `id`, read
    /// into this edge's store, in `shared`, then tells the coordinator of
    /// it, all within `[checkpoint] transfer_timeout_secs`. What fails is
    /// logged; the job starts next from its previous complete checkpoint.
    pub(crate) async fn share(
        &self,
        shared: &SharedStore,
        (task_id, job_id): (u64, u64),
        (id, m): (&str, &Manifest),
        patient: bool,
    ) {
        let node_id = self.node_id();
        let limit = Duration::from_secs(self.cfg().transfer_timeout_secs);
        let rate = self.rate();
        let put = async {
            let mut pacer = Pacer::new(rate);
            let t = shared.put(&self.store, job_id, (id, m), &mut pacer).await?;
            tracing::info!(
                node_id,
                job_id,
                task_id,
                step = m.step,
                bytes = t.bytes,
                moved = t.moved_bytes,
                seconds = t.seconds,
                "checkpoint put in the shared store"
            );
            let report = EdgeMsg::CheckpointShared {
                task_id,
                manifest: m.clone(),
                transfer: t,
            };
            let what = ("a shared-store checkpoint report", job_id, patient);
            self.resuming(what, || self.tell(&report)).await
        };
        match tidemill_runtime::clock::timeout(&SystemClock, limit, put).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(node_id, job_id, task_id, step = m.step, error = %e, "cannot put the checkpoint in the shared store, or tell the coordinator of it");
            }
            Err(_) => {
                tracing::warn!(
                    node_id,
                    job_id,
                    task_id,
                    step = m.step,
                    limit_s = limit.as_secs(),
                    "putting the checkpoint in the shared store took longer than [checkpoint] transfer_timeout_secs; the job's previous one stands"
                );
            }
        }
    }
}

/// Before a task of `job_id` starts, with a checkpoint of step `here` in
/// its dir, if any: the newest complete checkpoint of the job in `shared`
/// newer than that, brought into `local` (a corrupt or unreadable one is
/// skipped for the one before it). Returns its id, manifest and transfer.
pub async fn newest(
    shared: &SharedStore,
    local: &CheckpointStore,
    (node_id, job_id): (&str, u64),
    here: Option<u64>,
    rate_bps: Option<f64>,
) -> Result<Option<(String, Manifest, Option<Transfer>)>, SharedError> {
    for (id, m) in shared.complete(job_id).await? {
        if here.is_some_and(|s| s >= m.step) {
            return Ok(None);
        }
        match shared
            .fetch(local, job_id, &m, &mut Pacer::new(rate_bps))
            .await
        {
            Ok(t) => return Ok(Some((id, m, t))),
            Err(e) => {
                tracing::warn!(node_id, job_id, step = m.step, error = %e, "cannot use this checkpoint from the shared store; trying the previous complete one");
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use tidemill_proto::{CHUNK_BYTES, ManifestFile};
    use tidemill_runtime::identity::sha256_hex;

    use super::*;

    /// Checkpoint of `step` of job 4 (three chunks), complete in `local`.
    fn saved(local: &CheckpointStore, step: u64) -> (String, Manifest) {
        let data: Vec<u8> = (0..(CHUNK_BYTES as usize * 2 + 100))
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(step as u8))
            .collect();
        let m = Manifest {
            job_id: 4,
            step,
            files: vec![ManifestFile {
                name: "model.pt".into(),
                size: data.len() as u64,
                chunks: data.chunks(CHUNK_BYTES as usize).map(sha256_hex).collect(),
            }],
        };
        let (id, _) = local.offer(4, &m).unwrap();
        for (i, c) in data.chunks(CHUNK_BYTES as usize).enumerate() {
            local.put(4, &id, i as u32, c).unwrap();
        }
        local.commit(4, &id).unwrap();
        (id, m)
    }

    struct Fixture {
        tmp: tempfile::TempDir,
        shared: SharedStore,
        a: CheckpointStore,
        b: CheckpointStore,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("shared");
        std::fs::create_dir(&root).unwrap();
        let url = format!("file://{}", root.display());
        Fixture {
            shared: SharedStore::open(&url, 1 << 30, 2).unwrap(),
            a: CheckpointStore::new(tmp.path().join("a"), 1 << 30, 2),
            b: CheckpointStore::new(tmp.path().join("b"), 1 << 30, 2),
            tmp,
        }
    }

    fn put(f: &Fixture, (id, m): (&str, &Manifest)) -> Transfer {
        let mut pacer = Pacer::new(None);
        block(f.shared.put(&f.a, 4, (id, m), &mut pacer)).unwrap()
    }

    fn block<T>(fut: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(fut)
    }

    fn newest_in_b(f: &Fixture, here: Option<u64>) -> Option<(String, Manifest, Option<Transfer>)> {
        block(newest(&f.shared, &f.b, ("b", 4), here, None)).unwrap()
    }

    #[test]
    fn a_checkpoint_put_by_one_edge_is_taken_whole_by_another() {
        let f = fixture();
        let (id, m) = saved(&f.a, 7);
        let t = put(&f, (&id, &m));
        assert_eq!(
            (t.bytes, t.moved_bytes, t.shared),
            (m.bytes(), m.bytes(), true)
        );
        let key = f.tmp.path().join("shared/job-4").join(&id);
        assert!(key.join("complete").exists() && key.join("c2").exists());
        let (got, back, t) = newest_in_b(&f, None).unwrap();
        assert_eq!((got.as_str(), back.step), (id.as_str(), 7));
        assert_eq!(t.unwrap().bytes, m.bytes());
        assert_eq!(f.b.latest(4).unwrap().0, id, "complete in the edge's store");
        assert!(newest_in_b(&f, Some(7)).is_none(), "not newer than here");
        // A second put of the same checkpoint moves nothing.
        assert_eq!(put(&f, (&id, &m)).moved_bytes, 0);
    }

    #[test]
    fn a_checkpoint_without_its_complete_marker_is_never_used() {
        let f = fixture();
        let (id, m) = saved(&f.a, 3);
        put(&f, (&id, &m));
        let (id2, m2) = saved(&f.a, 9);
        put(&f, (&id2, &m2));
        std::fs::remove_file(
            f.tmp
                .path()
                .join("shared/job-4")
                .join(&id2)
                .join("complete"),
        )
        .unwrap();
        assert_eq!(newest_in_b(&f, None).unwrap().1.step, 3);
    }

    #[test]
    fn the_newest_complete_checkpoints_are_kept_and_the_rest_pruned() {
        let f = fixture();
        let ids: Vec<String> = [1, 2, 3]
            .into_iter()
            .map(|step| {
                let (id, m) = saved(&f.a, step);
                put(&f, (&id, &m));
                id
            })
            .collect();
        let left: Vec<bool> = ids
            .iter()
            .map(|id| f.tmp.path().join("shared/job-4").join(id).exists())
            .collect();
        assert_eq!(left, vec![false, true, true]);
        let steps: Vec<u64> = block(f.shared.complete(4))
            .unwrap()
            .into_iter()
            .map(|(_, m)| m.step)
            .collect();
        assert_eq!(steps, vec![3, 2]);
        block(f.shared.remove_job(4)).unwrap();
        assert!(block(f.shared.complete(4)).unwrap().is_empty());
        assert!(
            !f.tmp.path().join("shared/job-4").exists(),
            "no empty dirs left"
        );
    }

    #[test]
    fn a_corrupt_chunk_in_the_store_makes_the_previous_complete_checkpoint_used() {
        let f = fixture();
        let (old, m_old) = saved(&f.a, 5);
        put(&f, (&old, &m_old));
        let (new, m_new) = saved(&f.a, 6);
        put(&f, (&new, &m_new));
        let c1 = f.tmp.path().join("shared/job-4").join(&new).join("c1");
        let mut bytes = std::fs::read(&c1).unwrap();
        bytes[3] ^= 0x40;
        std::fs::write(&c1, &bytes).unwrap();
        let (got, m, _) = newest_in_b(&f, None).unwrap();
        assert_eq!((got.as_str(), m.step), (old.as_str(), 5));
        assert!(
            f.b.latest(4).is_some_and(|(id, _)| id == old),
            "the corrupt one is not complete in the edge's store"
        );
    }

    #[test]
    fn a_manifest_planted_under_another_name_or_job_is_ignored() {
        let f = fixture();
        let (id, m) = saved(&f.a, 5);
        put(&f, (&id, &m));
        let job4 = f.tmp.path().join("shared/job-4");
        let fake = "0".repeat(64);
        std::fs::create_dir(job4.join(&fake)).unwrap();
        std::fs::copy(
            job4.join(&id).join("manifest"),
            job4.join(&fake).join("manifest"),
        )
        .unwrap();
        std::fs::write(job4.join(&fake).join("complete"), b"").unwrap();
        let job5 = f.tmp.path().join("shared/job-5");
        std::fs::create_dir_all(&job5).unwrap();
        std::fs::rename(job4.join(&fake), job5.join(&id)).unwrap();
        let listed = block(f.shared.complete(4)).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(
            block(f.shared.complete(5)).unwrap().is_empty(),
            "job 4's manifest under job 5"
        );
    }

    #[test]
    fn the_probe_writes_reads_back_and_deletes() {
        let f = fixture();
        block(f.shared.probe("e1")).unwrap();
        assert_eq!(
            std::fs::read_dir(f.tmp.path().join("shared"))
                .unwrap()
                .count(),
            0
        );
        let gone = format!("file://{}", f.tmp.path().join("missing").display());
        let err = SharedStore::open(&gone, 1, 1).unwrap_err().to_string();
        assert!(
            err.contains("missing") && err.contains("[checkpoint] url"),
            "{err}"
        );
    }
}
