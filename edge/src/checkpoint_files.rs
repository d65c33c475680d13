//! A job's checkpoint dir and the edge's checkpoint store: reading the files
//! a task left into a complete stored checkpoint, and writing a stored one
//! back for the next task. The dir belongs to the task's user, and the edge
//! runs as root: every file is opened relative to the dir's descriptor,
//! never following a symbolic link, and written under a fresh name, then
//! renamed into place, so that a link or hard link a task planted cannot
//! make the edge read or overwrite another file. Only regular files
//! directly in the dir whose names [`valid_name`] accepts make a checkpoint.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid, UnlinkatFlags, fchown, unlinkat};
use tidemill_proto::{CHUNK_BYTES, Manifest, ManifestFile, STEP_FILE, valid_name};
use tidemill_runtime::checkpoint::{CheckpointError, CheckpointStore};
use tidemill_runtime::identity::sha256_hex;

/// Longest [`STEP_FILE`] read, in bytes.
const MAX_STEP_FILE: u64 = 32;

/// Why a checkpoint dir could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// A file could not be opened, read or written.
    #[error("checkpoint dir {path}: {source}; check the disk and the dir's owner")]
    Io {
        /// The file or dir.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The task wrote a new checkpoint while it was being read.
    #[error(
        "the checkpoint in {0} changed while it was read (the task saved again); the previous complete one stands"
    )]
    Changed(PathBuf),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] CheckpointError),
}

fn io_at(path: &Path) -> impl Fn(nix::errno::Errno) -> FilesError + '_ {
    move |e| FilesError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

fn open_dir(dir: &Path) -> Result<File, FilesError> {
    let fd = openat(
        nix::fcntl::AT_FDCWD,
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_at(dir))?;
    Ok(File::from(fd))
}

/// Opens regular file `name` in `dir` for reading, or `None` if it is
/// missing, a link or not a regular file.
fn open_regular(dir: &File, name: &str) -> Option<File> {
    let fd = openat(
        dir.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let file = File::from(fd);
    file.metadata().ok()?.is_file().then_some(file)
}

/// The step in the dir's [`STEP_FILE`], if it holds one.
fn read_step(dir: &File) -> Option<u64> {
    let file = open_regular(dir, STEP_FILE)?;
    let len = file.metadata().ok()?.len().min(MAX_STEP_FILE) as usize;
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf).ok()?.trim().parse().ok()
}

/// The step of the checkpoint in `dir`, if it holds a complete one.
pub fn local_step(dir: &Path) -> Option<u64> {
    read_step(&open_dir(dir).ok()?)
}

/// Reads the checkpoint the task left in `dir` into `store` as a complete
/// checkpoint of `job_id`; `None` when the dir holds none (no
/// [`STEP_FILE`]). Links, directories and work-in-progress names are left
/// out (and logged).
pub fn snapshot(
    store: &CheckpointStore,
    job_id: u64,
    dir: &Path,
    max_bytes: u64,
) -> Result<Option<(String, Manifest)>, FilesError> {
    let dir_fd = open_dir(dir)?;
    let Some(step) = read_step(&dir_fd) else {
        return Ok(None);
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| FilesError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| valid_name(n))
        .collect();
    names.sort();
    let mut files = Vec::new();
    let mut listed = Vec::new();
    let mut total = 0u64;
    for name in names {
        let Some(file) = open_regular(&dir_fd, &name) else {
            tracing::warn!(job_id, dir = %dir.display(), file = %name, "left out of the checkpoint: not a regular file (a link or a directory)");
            continue;
        };
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        total += size;
        if total > max_bytes {
            break;
        }
        let mut chunks = Vec::new();
        let mut buf = vec![0; CHUNK_BYTES as usize];
        for offset in (0..size).step_by(CHUNK_BYTES as usize) {
            let len = (size - offset).min(u64::from(CHUNK_BYTES)) as usize;
            file.read_exact_at(&mut buf[..len], offset)
                .map_err(|_| FilesError::Changed(dir.to_path_buf()))?;
            chunks.push(sha256_hex(&buf[..len]));
        }
        listed.push(ManifestFile { name, size, chunks });
        files.push(file);
    }
    let m = Manifest {
        job_id,
        step,
        files: listed,
    };
    if total > max_bytes {
        return Err(FilesError::Store(CheckpointError::Manifest(
            tidemill_proto::ManifestError::TooLarge {
                files: m.files.len() + 1,
                bytes: total,
                max_bytes,
            },
        )));
    }
    let (id, missing) = store.offer(job_id, &m)?;
    for index in missing {
        let c = m
            .chunks()
            .nth(index as usize)
            .expect("offered chunks exist");
        let mut data = vec![0; c.len];
        files[c.file]
            .read_exact_at(&mut data, c.offset)
            .map_err(|_| FilesError::Changed(dir.to_path_buf()))?;
        match store.put(job_id, &id, index, &data) {
            Err(CheckpointError::BadChunk { .. }) => {
                return Err(FilesError::Changed(dir.to_path_buf()));
            }
            other => other?,
        }
    }
    if read_step(&dir_fd) != Some(step) {
        return Err(FilesError::Changed(dir.to_path_buf()));
    }
    store.commit(job_id, &id)?;
    Ok(Some((id, m)))
}

/// Writes stored checkpoint `id` of `job_id` into `dir`, each file owned by
/// `user` (the task's; `None`: the daemon's own), [`STEP_FILE`] last, so
/// that the dir never names a step whose files are not all in place.
pub fn materialize(
    store: &CheckpointStore,
    job_id: u64,
    (id, m): (&str, &Manifest),
    dir: &Path,
    user: Option<(Uid, Gid)>,
) -> Result<(), FilesError> {
    let dir_fd = open_dir(dir)?;
    let mut order: Vec<usize> = (0..m.files.len()).collect();
    order.sort_by_key(|&i| m.files[i].name == STEP_FILE);
    let first_chunk: Vec<usize> = m
        .files
        .iter()
        .scan(0, |n, f| {
            let at = *n;
            *n += f.chunks.len();
            Some(at)
        })
        .collect();
    for i in order {
        let f = &m.files[i];
        let tmp = format!(".tidemill-in-{}", f.name);
        let path = dir.join(&f.name);
        let io = io_at(&path);
        match unlinkat(dir_fd.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(io(e)),
        }
        let fd = openat(
            dir_fd.as_fd(),
            tmp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(&io)?;
        let out = File::from(fd);
        for (k, _) in f.chunks.iter().enumerate() {
            let data = store.read_chunk(job_id, id, (first_chunk[i] + k) as u32)?;
            out.write_all_at(&data, k as u64 * u64::from(CHUNK_BYTES))
                .map_err(|source| FilesError::Io {
                    path: path.clone(),
                    source,
                })?;
        }
        if let Some((uid, gid)) = user {
            fchown(out.as_fd(), Some(uid), Some(gid)).map_err(&io)?;
        }
        out.sync_all().map_err(|source| FilesError::Io {
            path: path.clone(),
            source,
        })?;
        renameat(
            dir_fd.as_fd(),
            tmp.as_str(),
            dir_fd.as_fd(),
            f.name.as_str(),
        )
        .map_err(&io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path) -> CheckpointStore {
        CheckpointStore::new(dir.join("store"), 1 << 30, 2)
    }

    #[test]
    fn a_checkpoint_read_from_one_dir_is_written_whole_into_another() {
        let tmp = tempfile::tempdir().unwrap();
        let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&dst).unwrap();
        let model: Vec<u8> = (0..(CHUNK_BYTES as usize + 777)).map(|i| i as u8).collect();
        std::fs::write(src.join("model.pt"), &model).unwrap();
        std::fs::write(src.join("model.pt.tmp"), b"half written").unwrap();
        std::fs::write(src.join(STEP_FILE), b"42\n").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", src.join("stolen")).unwrap();
        std::fs::create_dir(src.join("sub")).unwrap();
        let s = store(tmp.path());
        let (id, m) = snapshot(&s, 9, &src, 1 << 30).unwrap().unwrap();
        assert_eq!(m.step, 42);
        let names: Vec<&str> = m.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            vec!["model.pt", STEP_FILE],
            "no link, dir or temporary"
        );
        std::fs::write(dst.join("model.pt"), b"older").unwrap();
        materialize(&s, 9, (&id, &m), &dst, None).unwrap();
        assert_eq!(std::fs::read(dst.join("model.pt")).unwrap(), model);
        assert_eq!(local_step(&dst), Some(42));
    }

    #[test]
    fn a_dir_without_a_step_file_holds_no_checkpoint() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("model.pt"), b"x").unwrap();
        assert!(
            snapshot(&store(tmp.path()), 9, tmp.path(), 1 << 30)
                .unwrap()
                .is_none()
        );
        assert_eq!(local_step(tmp.path()), None);
    }

    #[test]
    fn a_planted_link_is_replaced_not_written_through() {
        let tmp = tempfile::tempdir().unwrap();
        let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&dst).unwrap();
        std::fs::write(src.join("model.pt"), b"weights").unwrap();
        std::fs::write(src.join(STEP_FILE), b"3").unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, dst.join("model.pt")).unwrap();
        std::os::unix::fs::symlink(&victim, dst.join(".tidemill-in-model.pt")).unwrap();
        let s = store(tmp.path());
        let (id, m) = snapshot(&s, 9, &src, 1 << 30).unwrap().unwrap();
        materialize(&s, 9, (&id, &m), &dst, None).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(dst.join("model.pt")).unwrap(), b"weights");
    }

    #[test]
    fn a_checkpoint_over_the_limit_is_refused_with_its_size() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("model.pt"), vec![1; 5000]).unwrap();
        std::fs::write(tmp.path().join(STEP_FILE), b"1").unwrap();
        let err = snapshot(&store(tmp.path()), 9, tmp.path(), 4096).unwrap_err();
        assert!(err.to_string().contains("max_bytes"), "{err}");
    }
}
