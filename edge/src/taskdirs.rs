//! The directories the edge makes for tasks: each task's work dir and each
//! job's checkpoint dir, under roots the operator chose (never a path a job
//! names). Every step below a root is taken relative to an open directory
//! and refuses symbolic links (`O_NOFOLLOW`, `fchown` and `fchmod` on the
//! open directory), so that a link a task planted cannot redirect the edge,
//! running as root, to another file.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{Gid, Uid, fchown};

use crate::uids::UidRange;

/// Why a task's directory could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TaskDirError {
    /// A step of the way could not be made or opened.
    #[error(
        "cannot make {path}: {source}; check the edge's data_dir and [tasks] work_dir and checkpoint_dir"
    )]
    Io {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A step of the way is a symbolic link, or not a directory.
    #[error(
        "{path} is a symbolic link or not a directory, so the edge will not use it (a task may have planted it); remove it, and check the task that made it"
    )]
    NotADir {
        /// The path.
        path: PathBuf,
    },
    /// Every uid of the range belongs to a job here.
    #[error(
        "every uid of [tasks] uid_range {range} belongs to a job whose checkpoint or work dir is kept here; widen the range, or shorten checkpoint_retention_days"
    )]
    NoUid {
        /// The range.
        range: String,
    },
}

/// Who a task runs as.
#[derive(Debug, Clone)]
pub enum TaskUsers {
    /// The daemon's own user (the daemon is not root).
    Daemon,
    /// One user for every task (`[tasks] user`, with no uid range).
    Shared(Uid, Gid),
    /// A uid per job from `[tasks] uid_range`.
    Range(UidRange),
}

/// A task's directories, made and given to its user.
#[derive(Debug)]
pub struct Prepared {
    /// Its work dir (and HOME).
    pub work: PathBuf,
    /// Its job's checkpoint dir.
    pub checkpoints: PathBuf,
    /// The uid and gid it runs as; `None`: the daemon's own.
    pub user: Option<(Uid, Gid)>,
}

/// The roots under which task dirs are made.
#[derive(Debug, Clone)]
pub struct TaskDirs {
    /// Work dirs: `<root>/<task id>`.
    pub work_root: PathBuf,
    /// Checkpoint dirs: `<root>/job-<id>`.
    pub checkpoint_root: PathBuf,
    /// Who tasks run as.
    pub users: TaskUsers,
}

/// The name of job `job_id`'s checkpoint directory.
pub fn job_dir(job_id: u64) -> String {
    format!("job-{job_id}")
}

impl TaskDirs {
    /// Makes task `task_id`'s work dir and job `job_id`'s checkpoint dir
    /// (kept if present), both 0700 and owned by the task's user.
    pub fn prepare(&self, task_id: u64, job_id: u64) -> Result<Prepared, TaskDirError> {
        let passable = !matches!(self.users, TaskUsers::Daemon);
        let ck_root = open_root(&self.checkpoint_root, passable)?;
        let work_root = open_root(&self.work_root, passable)?;
        // One edge (or two sharing a checkpoint root) picks a job's uid at a
        // time, so that two jobs never take the same one.
        let ck_lock = nix::fcntl::Flock::lock(ck_root, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| self.io(&self.checkpoint_root, e.into()))?;
        let ck_root: &std::fs::File = &ck_lock;
        let name = job_dir(job_id);
        let user = match &self.users {
            TaskUsers::Daemon => None,
            TaskUsers::Shared(u, g) => Some((*u, *g)),
            TaskUsers::Range(range) => {
                let uid = match owner(ck_root, &self.checkpoint_root, &name)? {
                    Some(uid) if range.contains(uid) => uid,
                    _ => {
                        let used = owners(&[&self.checkpoint_root, &self.work_root], range);
                        range
                            .pick(job_id, |u| used.contains(&u))
                            .ok_or(TaskDirError::NoUid {
                                range: range.to_string(),
                            })?
                    }
                };
                Some((Uid::from_raw(uid), Gid::from_raw(uid)))
            }
        };
        let checkpoints = self.checkpoint_root.join(&name);
        own_dir(ck_root, &checkpoints, &name, user)?;
        let task = task_id.to_string();
        let work = self.work_root.join(&task);
        own_dir(&work_root, &work, &task, user)?;
        Ok(Prepared {
            work,
            checkpoints,
            user,
        })
    }

    fn io(&self, path: &Path, source: std::io::Error) -> TaskDirError {
        TaskDirError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Opens root `dir` (an operator's path, made if missing); with `passable`,
/// makes it passable (o+x) so that task users reach their own dirs in it
/// without listing it.
fn open_root(dir: &Path, passable: bool) -> Result<std::fs::File, TaskDirError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |source| TaskDirError::Io {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)
        .map_err(io)?;
    if passable {
        let mode = file.metadata().map_err(io)?.permissions().mode();
        if mode & 0o111 != 0o111 {
            file.set_permissions(std::fs::Permissions::from_mode(mode | 0o111))
                .map_err(io)?;
        }
    }
    Ok(file)
}

/// The owner of `name` in `parent` (not following a link), if it exists.
fn owner(parent: &impl AsFd, parent_path: &Path, name: &str) -> Result<Option<u32>, TaskDirError> {
    match fstatat(parent, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => Ok(Some(st.st_uid)),
        Ok(_) => Err(TaskDirError::NotADir {
            path: parent_path.join(name),
        }),
        Err(nix::errno::Errno::ENOENT) => Ok(None),
        Err(e) => Err(TaskDirError::Io {
            path: parent_path.join(name),
            source: e.into(),
        }),
    }
}

/// The uids in `range` that own an entry of one of `roots` (not following
/// links): jobs whose dirs are kept here.
fn owners(roots: &[&Path], range: &UidRange) -> std::collections::HashSet<u32> {
    use std::os::unix::fs::MetadataExt;
    roots
        .iter()
        .filter_map(|r| std::fs::read_dir(r).ok())
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::symlink_metadata(e.path()).ok())
        .map(|m| m.uid())
        .filter(|u| range.contains(*u))
        .collect()
}

/// Makes `name` in `parent` if missing and opens it without following a
/// link, then gives it to `user`, 0700. An existing dir owned by another
/// task user is taken over only by the uid the range chose for it.
fn own_dir(
    parent: &impl AsFd,
    path: &Path,
    name: &str,
    user: Option<(Uid, Gid)>,
) -> Result<(), TaskDirError> {
    let io = |e: nix::errno::Errno| TaskDirError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    };
    match mkdirat(parent, name, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(io(e)),
    }
    let dir: OwnedFd = openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => TaskDirError::NotADir {
            path: path.to_path_buf(),
        },
        e => io(e),
    })?;
    if let Some((uid, gid)) = user {
        let st = fstat(&dir).map_err(io)?;
        if st.st_uid != uid.as_raw() || st.st_gid != gid.as_raw() {
            fchown(&dir, Some(uid), Some(gid)).map_err(io)?;
        }
        fchmod(&dir, Mode::from_bits_truncate(0o700)).map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(root: &Path, users: TaskUsers) -> TaskDirs {
        TaskDirs {
            work_root: root.join("tasks"),
            checkpoint_root: root.join("checkpoints"),
            users,
        }
    }

    #[test]
    fn a_planted_link_is_refused_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let target = tempfile::tempdir().unwrap();
        let d = dirs(root.path(), TaskUsers::Daemon);
        std::fs::create_dir_all(&d.checkpoint_root).unwrap();
        std::os::unix::fs::symlink(target.path(), d.checkpoint_root.join("job-7")).unwrap();
        let err = d.prepare(1, 7).unwrap_err();
        assert!(matches!(err, TaskDirError::NotADir { .. }), "{err}");
        assert!(err.to_string().contains("job-7"), "{err}");
        std::fs::create_dir_all(&d.work_root).unwrap();
        std::fs::write(d.work_root.join("2"), b"").unwrap();
        assert!(matches!(
            d.prepare(2, 8).unwrap_err(),
            TaskDirError::NotADir { .. }
        ));
    }

    #[test]
    fn each_job_gets_its_own_uid_and_keeps_it() {
        if !Uid::effective().is_root() {
            return;
        }
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let d = dirs(
            root.path(),
            TaskUsers::Range(UidRange::parse("60600-60601").unwrap()),
        );
        let a = d.prepare(1, 10).unwrap();
        let b = d.prepare(2, 12).unwrap();
        let uid = |p: &Path| std::fs::metadata(p).unwrap().uid();
        assert_eq!(uid(&a.checkpoints), 60600);
        assert_eq!(uid(&a.work), 60600);
        assert_eq!(
            uid(&b.checkpoints),
            60601,
            "job 12 would take 60600, which job 10 holds"
        );
        let mode = std::fs::metadata(&b.checkpoints).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let again = d.prepare(3, 12).unwrap();
        assert_eq!(
            again.user.unwrap().0.as_raw(),
            60601,
            "a resumed job keeps its uid"
        );
        let err = d.prepare(4, 14).unwrap_err();
        assert!(matches!(err, TaskDirError::NoUid { .. }), "{err}");
    }
}
