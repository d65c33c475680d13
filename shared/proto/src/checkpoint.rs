//! Checkpoints on the wire: a job's checkpoint is the set of regular files
//! directly in its checkpoint dir, described by a [`Manifest`] that names
//! each file, its size and the SHA-256 of each [`CHUNK_BYTES`] chunk of it.
//! The manifest is what "complete" means: a receiver holds a checkpoint
//! only once every chunk it lists has arrived and matched its hash.
//!
//! Which training step a checkpoint holds is the task's to say: it writes
//! the step, in decimal, to [`STEP_FILE`] after every other file of the
//! checkpoint is in place (write it to a temporary name, then rename).
//! Names starting with `.` or ending with `.tmp` are work in progress and
//! never part of a checkpoint.

use serde::{Deserialize, Serialize};

/// Bytes of a chunk (the last chunk of a file may be shorter): half the
/// frame cap, so that a chunk and its envelope always fit one frame.
pub const CHUNK_BYTES: u32 = 512 * 1024;

/// The file a task writes last, holding the step its checkpoint holds.
pub const STEP_FILE: &str = "tidemill-step";

/// Most files in one checkpoint.
pub const MAX_FILES: usize = 256;

/// Longest file name in a checkpoint, in bytes.
pub const MAX_NAME: usize = 200;

/// Most chunks in one checkpoint: what keeps a manifest well inside one
/// frame (8 GiB at [`CHUNK_BYTES`]).
pub const MAX_CHUNKS: usize = 16_384;

/// What a job's checkpoint holds, file by file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The job whose checkpoint this is.
    pub job_id: u64,
    /// The step the task wrote to [`STEP_FILE`].
    pub step: u64,
    /// The files, in name order.
    pub files: Vec<ManifestFile>,
}

/// One file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Its name in the job's checkpoint dir: one path component.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// SHA-256 (hex) of each of its chunks, in order.
    pub chunks: Vec<String>,
}

/// Why a manifest is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// A file name could choose a path, or is not a checkpoint file's.
    #[error(
        "checkpoint file name {0:?} is refused: a name is one path component of 1 to {MAX_NAME} bytes, not '.' or '..', without '/', NUL or a leading '.', and not ending in '.tmp'"
    )]
    BadName(String),
    /// Two files share a name.
    #[error("checkpoint file name {0:?} appears twice")]
    Duplicate(String),
    /// More files or bytes than the receiver takes.
    #[error(
        "checkpoint of {files} files and {bytes} bytes is over the limit of {MAX_FILES} files and {max_bytes} bytes; keep fewer or smaller files in the checkpoint dir, or raise [checkpoint] max_bytes"
    )]
    TooLarge {
        /// Files listed.
        files: usize,
        /// Bytes listed.
        bytes: u64,
        /// The receiver's byte limit.
        max_bytes: u64,
    },
    /// A file's chunk list does not fit its size, or a hash is not SHA-256 hex.
    #[error("checkpoint file {0:?} lists chunks that do not match its size or are not SHA-256 hex")]
    BadChunks(String),
    /// The checkpoint is not of the job it is sent for.
    #[error("a checkpoint of job {got} was sent for job {want}")]
    WrongJob {
        /// The job the manifest names.
        got: u64,
        /// The job the message names.
        want: u64,
    },
}

/// Whether `name` may be a checkpoint file's name: one component that
/// cannot climb, hide or be a temporary.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && !name.ends_with(".tmp")
        && !name.contains(['/', '\0', '\\'])
}

impl Manifest {
    /// Checks names, sizes, hashes and bounds before anything is written.
    pub fn check(&self, job_id: u64, max_bytes: u64) -> Result<(), ManifestError> {
        if self.job_id != job_id {
            return Err(ManifestError::WrongJob {
                got: self.job_id,
                want: job_id,
            });
        }
        let bytes = self.bytes();
        let chunks: usize = self.files.iter().map(|f| f.chunks.len()).sum();
        if self.files.len() > MAX_FILES || bytes > max_bytes || chunks > MAX_CHUNKS {
            return Err(ManifestError::TooLarge {
                files: self.files.len(),
                bytes,
                max_bytes,
            });
        }
        let mut names = std::collections::BTreeSet::new();
        for f in &self.files {
            if !valid_name(&f.name) {
                return Err(ManifestError::BadName(f.name.clone()));
            }
            if !names.insert(f.name.as_str()) {
                return Err(ManifestError::Duplicate(f.name.clone()));
            }
            let want = f.size.div_ceil(u64::from(CHUNK_BYTES));
            let hex = |h: &String| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit());
            if f.chunks.len() as u64 != want || !f.chunks.iter().all(hex) {
                return Err(ManifestError::BadChunks(f.name.clone()));
            }
        }
        Ok(())
    }

    /// Total bytes of its files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Every chunk, numbered from 0 across files in order: (file, offset,
    /// length, hash).
    pub fn chunks(&self) -> impl Iterator<Item = ChunkRef<'_>> {
        self.files.iter().enumerate().flat_map(|(file, f)| {
            f.chunks.iter().enumerate().map(move |(i, hash)| {
                let offset = i as u64 * u64::from(CHUNK_BYTES);
                ChunkRef {
                    file,
                    offset,
                    len: (f.size - offset).min(u64::from(CHUNK_BYTES)) as usize,
                    hash,
                }
            })
        })
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> usize {
        self.files.iter().map(|f| f.chunks.len()).sum()
    }
}

/// Where one chunk lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef<'a> {
    /// Index of its file in the manifest.
    pub file: usize,
    /// Byte offset in that file.
    pub offset: u64,
    /// Its length.
    pub len: usize,
    /// Its SHA-256, hex.
    pub hash: &'a str,
}

/// Serialises a byte buffer as one MessagePack `bin`, not an array of
/// numbers (which would take up to twice the bytes and break the frame cap).
pub(crate) mod bin {
    use serde::{Deserializer, Serializer, de};

    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> de::Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        d.deserialize_byte_buf(Bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(names: &[&str], size: u64) -> Manifest {
        let chunks = size.div_ceil(u64::from(CHUNK_BYTES)) as usize;
        Manifest {
            job_id: 7,
            step: 3,
            files: names
                .iter()
                .map(|n| ManifestFile {
                    name: n.to_string(),
                    size,
                    chunks: vec!["ab".repeat(32); chunks],
                })
                .collect(),
        }
    }

    #[test]
    fn names_that_could_choose_a_path_are_refused() {
        for bad in [
            "..",
            ".",
            "",
            "a/b",
            "../x",
            "/etc/passwd",
            ".hidden",
            "ck.pt.tmp",
            "a\\b",
        ] {
            assert_eq!(
                manifest(&[bad], 1).check(7, u64::MAX),
                Err(ManifestError::BadName(bad.into())),
                "{bad:?}"
            );
        }
        assert!(
            manifest(&["checkpoint.pt", STEP_FILE], 1)
                .check(7, u64::MAX)
                .is_ok()
        );
    }

    #[test]
    fn sizes_counts_hashes_and_the_job_are_checked() {
        let m = manifest(&["a"], 3 * u64::from(CHUNK_BYTES));
        assert!(m.check(7, u64::MAX).is_ok());
        assert!(matches!(
            m.check(7, 100),
            Err(ManifestError::TooLarge { .. })
        ));
        assert_eq!(
            m.check(8, u64::MAX),
            Err(ManifestError::WrongJob { got: 7, want: 8 })
        );
        let mut short = m.clone();
        short.files[0].chunks.pop();
        assert!(matches!(
            short.check(7, u64::MAX),
            Err(ManifestError::BadChunks(_))
        ));
        let mut odd = m.clone();
        odd.files[0].chunks[1] = "zz".repeat(32);
        assert!(matches!(
            odd.check(7, u64::MAX),
            Err(ManifestError::BadChunks(_))
        ));
        assert!(matches!(
            manifest(&["a", "a"], 1).check(7, u64::MAX),
            Err(ManifestError::Duplicate(_))
        ));
        let many: Vec<String> = (0..=MAX_FILES).map(|i| format!("f{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(matches!(
            manifest(&many, 1).check(7, u64::MAX),
            Err(ManifestError::TooLarge { .. })
        ));
    }

    #[test]
    fn chunks_are_numbered_across_files_with_a_short_last_one() {
        let m = manifest(&["a", "b"], u64::from(CHUNK_BYTES) + 10);
        let c: Vec<_> = m.chunks().map(|c| (c.file, c.offset, c.len)).collect();
        let full = CHUNK_BYTES as usize;
        assert_eq!(
            c,
            vec![
                (0, 0, full),
                (0, u64::from(CHUNK_BYTES), 10),
                (1, 0, full),
                (1, u64::from(CHUNK_BYTES), 10)
            ]
        );
        assert_eq!(m.chunk_count(), 4);
    }
}
