//! Where a daemon keeps checkpoints it holds for jobs, chunk by chunk: the
//! coordinator keeps what edges send it, and an edge what it read from a
//! task's checkpoint dir or fetched before a task starts. Only complete
//! checkpoints are ever read back: every chunk was checked against the
//! manifest's hash as it arrived, the whole is checked again at commit, and
//! each chunk once more as it is read, so a bit flipped on disk is found
//! before anyone uses it.
//!
//! Layout under the root: `job-<id>/<manifest id>/` holds `manifest`, one
//! file `c<n>` per chunk, and `complete` once committed. Every path is made
//! from a job id (a number) and a manifest id (checked SHA-256 hex): no
//! value from the wire names a path. A transfer cut halfway keeps its
//! chunks, so the same offer resumes where it stopped.

use std::path::{Path, PathBuf};

use tidemill_proto::{Manifest, ManifestError};

use crate::identity::sha256_hex;

/// The marker a committed checkpoint's directory holds.
const COMPLETE: &str = "complete";
/// The manifest's file in a checkpoint's directory.
const MANIFEST: &str = "manifest";

/// Why a checkpoint operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The manifest is refused.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A manifest id is not SHA-256 hex.
    #[error("checkpoint id {0:?} is not a SHA-256 hex string; the sender is broken or hostile")]
    BadId(String),
    /// No offer of that manifest was made for that job.
    #[error("no checkpoint {id} was offered for job {job_id}; offer its manifest first")]
    Unknown {
        /// The job.
        job_id: u64,
        /// The manifest id.
        id: String,
    },
    /// A chunk number is beyond the manifest's.
    #[error("chunk {index} is beyond the {count} chunks of checkpoint {id}")]
    NoChunk {
        /// The chunk asked for.
        index: u32,
        /// Chunks in the manifest.
        count: usize,
        /// The manifest id.
        id: String,
    },
    /// A chunk's bytes do not match its hash (or its length).
    #[error("chunk {index} of checkpoint {id} does not match its SHA-256; send it again")]
    BadChunk {
        /// The chunk.
        index: u32,
        /// The manifest id.
        id: String,
    },
    /// A commit came before every chunk arrived intact.
    #[error("checkpoint {id} lacks {missing} chunks; send them, then commit again")]
    Incomplete {
        /// The manifest id.
        id: String,
        /// How many chunks are missing or were found corrupt.
        missing: usize,
        /// Of those, how many were on disk but no longer matched their hash.
        corrupt: usize,
    },
    /// The disk failed.
    #[error("checkpoint store {path}: {source}; check the data dir's disk and permissions")]
    Io {
        /// Where.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The id of a manifest: SHA-256 of its encoding.
pub fn manifest_id(m: &Manifest) -> String {
    sha256_hex(&tidemill_proto::encode(m).expect("manifests encode"))
}

/// Whether `data` is chunk `index` of `m` (length and hash).
pub fn chunk_matches(m: &Manifest, index: u32, data: &[u8]) -> bool {
    m.chunks()
        .nth(index as usize)
        .is_some_and(|c| c.len == data.len() && sha256_hex(data) == c.hash)
}

/// A daemon's checkpoints, under one root it alone writes.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    root: PathBuf,
    max_bytes: u64,
    keep: usize,
}

impl CheckpointStore {
    /// A store under `root`, taking checkpoints of at most `max_bytes` and
    /// keeping the `keep` newest complete ones of each job (at least one).
    pub fn new(root: PathBuf, max_bytes: u64, keep: usize) -> Self {
        CheckpointStore {
            root,
            max_bytes,
            keep: keep.max(1),
        }
    }

    fn job_dir(&self, job_id: u64) -> PathBuf {
        self.root.join(format!("job-{job_id}"))
    }

    fn dir(&self, job_id: u64, id: &str) -> Result<PathBuf, CheckpointError> {
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CheckpointError::BadId(id.to_string()));
        }
        Ok(self.job_dir(job_id).join(id))
    }

    fn manifest(&self, job_id: u64, id: &str) -> Result<(PathBuf, Manifest), CheckpointError> {
        let dir = self.dir(job_id, id)?;
        let unknown = || CheckpointError::Unknown {
            job_id,
            id: id.to_string(),
        };
        let bytes = std::fs::read(dir.join(MANIFEST)).map_err(|_| unknown())?;
        let payload = bytes
            .get(tidemill_proto::HEADER_LEN..)
            .ok_or_else(unknown)?;
        let m: Manifest = tidemill_proto::decode(payload).map_err(|_| unknown())?;
        Ok((dir, m))
    }

    /// Takes an offer of `m` for `job_id`: checks it and returns its id and
    /// the chunks not held yet (all of them for a new offer, none for one
    /// committed already).
    pub fn offer(&self, job_id: u64, m: &Manifest) -> Result<(String, Vec<u32>), CheckpointError> {
        m.check(job_id, self.max_bytes)?;
        let id = manifest_id(m);
        let dir = self.dir(job_id, &id)?;
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        if dir.join(COMPLETE).exists() {
            return Ok((id, vec![]));
        }
        let path = dir.join(MANIFEST);
        if !path.exists() {
            write_atomic(&path, &tidemill_proto::encode(m).expect("manifests encode"))?;
        }
        let missing = (0..m.chunk_count() as u32)
            .filter(|i| !dir.join(format!("c{i}")).exists())
            .collect();
        Ok((id, missing))
    }

    /// Keeps chunk `index` of an offered checkpoint if it matches its hash.
    pub fn put(
        &self,
        job_id: u64,
        id: &str,
        index: u32,
        data: &[u8],
    ) -> Result<(), CheckpointError> {
        let (dir, m) = self.manifest(job_id, id)?;
        self.check_index(&m, id, index)?;
        if !chunk_matches(&m, index, data) {
            return Err(CheckpointError::BadChunk {
                index,
                id: id.to_string(),
            });
        }
        write_atomic(&dir.join(format!("c{index}")), data)
    }

    fn check_index(&self, m: &Manifest, id: &str, index: u32) -> Result<(), CheckpointError> {
        let count = m.chunk_count();
        if index as usize >= count {
            return Err(CheckpointError::NoChunk {
                index,
                count,
                id: id.to_string(),
            });
        }
        Ok(())
    }

    /// Marks an offered checkpoint complete once every chunk on disk matches
    /// its hash (a corrupt one is deleted, to be sent again), then prunes the
    /// job's older checkpoints beyond the newest `keep` and its other
    /// unfinished offers. Returns its manifest.
    pub fn commit(&self, job_id: u64, id: &str) -> Result<Manifest, CheckpointError> {
        let (dir, m) = self.manifest(job_id, id)?;
        if !dir.join(COMPLETE).exists() {
            let (mut missing, mut corrupt) = (0, 0);
            for i in 0..m.chunk_count() as u32 {
                let path = dir.join(format!("c{i}"));
                match std::fs::read(&path) {
                    Ok(data) if chunk_matches(&m, i, &data) => {}
                    Ok(_) => {
                        tracing::warn!(job_id, chunk = i, checkpoint = %id, "a stored chunk no longer matches its hash; it is sent again");
                        std::fs::remove_file(&path).map_err(io(&path))?;
                        missing += 1;
                        corrupt += 1;
                    }
                    Err(_) => missing += 1,
                }
            }
            if missing > 0 {
                return Err(CheckpointError::Incomplete {
                    id: id.to_string(),
                    missing,
                    corrupt,
                });
            }
            write_atomic(&dir.join(COMPLETE), b"")?;
        }
        self.prune(job_id, id);
        Ok(m)
    }

    /// The job's complete checkpoints, newest (highest step, then latest
    /// committed) first.
    fn complete(&self, job_id: u64) -> Vec<(String, Manifest, std::time::SystemTime)> {
        let Ok(entries) = std::fs::read_dir(self.job_dir(job_id)) else {
            return vec![];
        };
        let mut found: Vec<_> = entries
            .flatten()
            .filter_map(|e| {
                let id = e.file_name().into_string().ok()?;
                let done = std::fs::metadata(e.path().join(COMPLETE)).ok()?;
                let (_, m) = self.manifest(job_id, &id).ok()?;
                Some((id, m, done.modified().ok()?))
            })
            .collect();
        found.sort_by_key(|(_, m, at)| std::cmp::Reverse((m.step, *at)));
        found
    }

    /// The job's newest complete checkpoint, with its id.
    pub fn latest(&self, job_id: u64) -> Option<(String, Manifest)> {
        self.complete(job_id)
            .into_iter()
            .next()
            .map(|(id, m, _)| (id, m))
    }

    /// Chunk `index` of a complete checkpoint, checked against its hash.
    pub fn read_chunk(
        &self,
        job_id: u64,
        id: &str,
        index: u32,
    ) -> Result<Vec<u8>, CheckpointError> {
        let (dir, m) = self.manifest(job_id, id)?;
        if !dir.join(COMPLETE).exists() {
            return Err(CheckpointError::Unknown {
                job_id,
                id: id.to_string(),
            });
        }
        self.check_index(&m, id, index)?;
        let path = dir.join(format!("c{index}"));
        let data = std::fs::read(&path).map_err(io(&path))?;
        if !chunk_matches(&m, index, &data) {
            return Err(CheckpointError::BadChunk {
                index,
                id: id.to_string(),
            });
        }
        Ok(data)
    }

    /// Deletes every checkpoint of `job_id` (its job is over).
    pub fn remove_job(&self, job_id: u64) -> Result<(), CheckpointError> {
        let dir = self.job_dir(job_id);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&dir)(e)),
            _ => Ok(()),
        }
    }

    /// Keeps the newest `keep` complete checkpoints of the job and `current`;
    /// deletes the rest, unfinished offers included.
    fn prune(&self, job_id: u64, current: &str) {
        let keep: Vec<String> = self
            .complete(job_id)
            .into_iter()
            .take(self.keep)
            .map(|(id, ..)| id)
            .collect();
        let Ok(entries) = std::fs::read_dir(self.job_dir(job_id)) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == current || keep.contains(&name) {
                continue;
            }
            if let Err(err) = std::fs::remove_dir_all(e.path()) {
                tracing::warn!(job_id, path = %e.path().display(), error = %err, "cannot prune an old checkpoint; delete it by hand");
            }
        }
    }
}

/// Writes `data` to `path` through a temporary file and a rename, so a
/// reader sees all of it or nothing.
fn write_atomic(path: &Path, data: &[u8]) -> Result<(), CheckpointError> {
    let tmp = path.with_extension("part");
    std::fs::write(&tmp, data).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemill_proto::{CHUNK_BYTES, ManifestFile};

    /// The chunk hashes a manifest lists for a file holding `data`.
    fn chunk_hashes(data: &[u8]) -> Vec<String> {
        data.chunks(CHUNK_BYTES as usize).map(sha256_hex).collect()
    }

    fn manifest(step: u64, data: &[u8]) -> Manifest {
        Manifest {
            job_id: 4,
            step,
            files: vec![ManifestFile {
                name: "model.pt".into(),
                size: data.len() as u64,
                chunks: chunk_hashes(data),
            }],
        }
    }

    fn data(seed: u8) -> Vec<u8> {
        (0..(CHUNK_BYTES as usize * 2 + 100))
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn chunk(d: &[u8], i: usize) -> &[u8] {
        d.chunks(CHUNK_BYTES as usize).nth(i).unwrap()
    }

    #[test]
    fn a_cut_transfer_resumes_and_a_corrupt_chunk_is_refused_and_sent_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(dir.path().into(), 1 << 30, 2);
        let d = data(1);
        let m = manifest(10, &d);
        let (id, missing) = store.offer(4, &m).unwrap();
        assert_eq!(missing, vec![0, 1, 2]);
        store.put(4, &id, 0, chunk(&d, 0)).unwrap();
        // The link broke here; the same offer resumes after chunk 0.
        assert_eq!(store.offer(4, &m).unwrap().1, vec![1, 2]);
        let mut bad = chunk(&d, 1).to_vec();
        bad[7] ^= 1;
        assert!(matches!(
            store.put(4, &id, 1, &bad),
            Err(CheckpointError::BadChunk { index: 1, .. })
        ));
        assert!(matches!(
            store.commit(4, &id),
            Err(CheckpointError::Incomplete {
                missing: 2,
                corrupt: 0,
                ..
            })
        ));
        assert!(
            store.latest(4).is_none(),
            "an incomplete checkpoint is never used"
        );
        store.put(4, &id, 1, chunk(&d, 1)).unwrap();
        store.put(4, &id, 2, chunk(&d, 2)).unwrap();
        assert_eq!(store.commit(4, &id).unwrap().step, 10);
        let (latest, _) = store.latest(4).unwrap();
        let back: Vec<u8> = (0..3)
            .flat_map(|i| store.read_chunk(4, &latest, i).unwrap())
            .collect();
        assert_eq!(back, d);
        assert!(store.offer(4, &m).unwrap().1.is_empty());
    }

    #[test]
    fn a_chunk_corrupted_on_disk_is_found_at_commit_and_at_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(dir.path().into(), 1 << 30, 2);
        let d = data(2);
        let m = manifest(5, &d);
        let (id, _) = store.offer(4, &m).unwrap();
        for i in 0..3 {
            store.put(4, &id, i, chunk(&d, i as usize)).unwrap();
        }
        let c1 = dir.path().join("job-4").join(&id).join("c1");
        let mut bytes = std::fs::read(&c1).unwrap();
        bytes[0] ^= 0xff;
        std::fs::write(&c1, &bytes).unwrap();
        assert!(matches!(
            store.commit(4, &id),
            Err(CheckpointError::Incomplete {
                missing: 1,
                corrupt: 1,
                ..
            })
        ));
        assert_eq!(store.offer(4, &m).unwrap().1, vec![1]);
        store.put(4, &id, 1, chunk(&d, 1)).unwrap();
        store.commit(4, &id).unwrap();
        std::fs::write(&c1, &bytes).unwrap();
        assert!(matches!(
            store.read_chunk(4, &id, 1),
            Err(CheckpointError::BadChunk { .. })
        ));
    }

    #[test]
    fn the_newest_complete_checkpoints_are_kept_and_the_rest_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(dir.path().into(), 1 << 30, 2);
        let mut ids = vec![];
        for step in [1, 2, 3] {
            let d = data(step as u8);
            let m = manifest(step, &d);
            let (id, _) = store.offer(4, &m).unwrap();
            for i in 0..3 {
                store.put(4, &id, i, chunk(&d, i as usize)).unwrap();
            }
            store.commit(4, &id).unwrap();
            ids.push(id);
        }
        assert_eq!(store.latest(4).unwrap().1.step, 3);
        let left: Vec<bool> = ids
            .iter()
            .map(|id| dir.path().join("job-4").join(id).exists())
            .collect();
        assert_eq!(left, vec![false, true, true]);
    }

    #[test]
    fn wire_values_never_choose_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(dir.path().into(), 1 << 30, 2);
        for id in ["../../etc", "/etc/passwd", &"a".repeat(63), &"g".repeat(64)] {
            assert!(matches!(
                store.put(4, id, 0, b"x"),
                Err(CheckpointError::BadId(_))
            ));
        }
        let d = data(3);
        let mut m = manifest(1, &d);
        m.files[0].name = "../escape".into();
        assert!(matches!(
            store.offer(4, &m),
            Err(CheckpointError::Manifest(ManifestError::BadName(_)))
        ));
        let m = manifest(1, &d);
        assert!(matches!(
            store.offer(5, &m),
            Err(CheckpointError::Manifest(ManifestError::WrongJob { .. }))
        ));
        let small = CheckpointStore::new(dir.path().into(), 1000, 2);
        assert!(matches!(
            small.offer(4, &m),
            Err(CheckpointError::Manifest(ManifestError::TooLarge { .. }))
        ));
        let (id, _) = store.offer(4, &m).unwrap();
        assert!(matches!(
            store.put(4, &id, 9, b"x"),
            Err(CheckpointError::NoChunk { index: 9, .. })
        ));
        assert!(matches!(
            store.read_chunk(4, &id, 0),
            Err(CheckpointError::Unknown { .. })
        ));
    }

    #[test]
    fn a_full_chunk_fits_one_frame() {
        let msg = tidemill_proto::EdgeMsg::CheckpointChunk {
            job_id: u64::MAX,
            manifest_id: "f".repeat(64),
            index: u32::MAX,
            data: vec![0xff; CHUNK_BYTES as usize],
        };
        let frame = tidemill_proto::encode(&msg).unwrap();
        assert!(frame.len() < CHUNK_BYTES as usize + 1024);
        let back: tidemill_proto::EdgeMsg =
            tidemill_proto::decode(&frame[tidemill_proto::HEADER_LEN..]).unwrap();
        assert_eq!(back, msg);
    }
}
