//! A daemon's data dir: one daemon at a time (an advisory lock whose file
//! names its holder), and the space and permissions `doctor` checks.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The lock file in a data dir; it holds `pid N` of the daemon using it.
pub const LOCK_FILE: &str = "lock";

/// Why a data dir could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock file could not be opened or written.
    #[error(
        "cannot lock data dir {path}: {source}; check that it exists and this user may write it"
    )]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another process holds the lock.
    #[error(
        "data dir {path} is in use by another process ({holder}); stop it first, or give this one another data dir"
    )]
    Held {
        /// The data dir.
        path: PathBuf,
        /// What the lock file says of its holder, such as `pid 1234`.
        holder: String,
    },
}

/// Holds a data dir for this process until dropped (the kernel releases it
/// when the process dies, so a crash leaves no stale lock).
#[derive(Debug)]
pub struct DataDirLock {
    _held: nix::fcntl::Flock<File>,
}

/// Locks `dir` for this process, or says who holds it. `dir` must exist.
pub fn lock(dir: &Path) -> Result<DataDirLock, LockError> {
    let path = dir.join(LOCK_FILE);
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    let mut lock = match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
    {
        Ok(lock) => lock,
        Err((mut file, _)) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(LockError::Held {
                path: dir.to_path_buf(),
                holder: holder.trim().to_string(),
            });
        }
    };
    lock.set_len(0).map_err(io)?;
    lock.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
    write!(lock, "pid {}", std::process::id()).map_err(io)?;
    Ok(DataDirLock { _held: lock })
}

/// The holder named in `dir`'s lock file (`pid N`) when a process holds the
/// lock now; `None` when nobody does (or there is no data dir yet).
pub fn holder(dir: &Path) -> Option<String> {
    if !dir.join(LOCK_FILE).exists() {
        return None;
    }
    match lock(dir) {
        Ok(_) => None,
        Err(LockError::Held { holder, .. }) => Some(holder),
        Err(LockError::Io { .. }) => None,
    }
}

/// Bytes free to this user on the file system that holds `dir`.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let s = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok(s.blocks_available() as u64 * s.fragment_size() as u64)
}

/// Checks that this user can create and remove a file in `dir`.
pub fn check_writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_first_holder() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path()).unwrap();
        let pid = format!("pid {}", std::process::id());
        assert_eq!(holder(dir.path()), Some(pid.clone()));
        let err = lock(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&pid) && err.contains("stop it first"), "{err}");
        drop(held);
        assert_eq!(holder(dir.path()), None);
    }

    #[test]
    fn space_and_write_checks_answer_for_a_real_dir() {
        let dir = tempfile::tempdir().unwrap();
        check_writable(dir.path()).unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(check_writable(&dir.path().join("missing")).is_err());
    }
}
