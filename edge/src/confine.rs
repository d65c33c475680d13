//! Confines tasks: an unprivileged user when the daemon is root, a clean
//! environment, and a cgroup (v2) per task where the host lets the daemon make
//! one, so that the whole process tree can be killed (`cgroup.kill`) and, where
//! the memory controller is on, held to the job's memory need.
//!
//! What this does not give: no namespaces (a task sees the host's processes,
//! network and files its user may read), no seccomp, no CPU or GPU limits, and
//! no confinement at all beyond the process group where cgroup v2 is missing.

use std::io::Read;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, User};

use crate::config::TaskConfig;

/// The PATH a task gets unless its job sets one.
pub const TASK_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why tasks cannot be confined as configured.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The configured user does not exist.
    #[error(
        "[tasks] user {0:?} does not exist on this host; create it or set another (tasks must not run as root)"
    )]
    NoUser(String),
    /// The daemon is root and the tasks would be too.
    #[error(
        "[tasks] user is {0:?}, but tasks must not run as root; set an unprivileged user such as \"nobody\""
    )]
    Root(String),
}

/// How this host confines tasks.
#[derive(Debug)]
pub struct Confinement {
    /// The user tasks run as, when the daemon can switch to it.
    user: Option<(Uid, Gid, String)>,
    /// This daemon's cgroup for its tasks, if cgroup v2 is writable here.
    cgroups: Option<PathBuf>,
    /// Whether the memory controller is on for task cgroups.
    memory: bool,
    /// The daemon's data dir, which task users pass through.
    data_dir: PathBuf,
}

/// A task's cgroup, made before it starts.
#[derive(Debug)]
pub struct TaskCgroup {
    dir: PathBuf,
}

impl Confinement {
    /// Finds out what this host allows: the task user from `cfg` when the
    /// daemon is root, and a cgroup v2 subtree named after `data_dir` (so
    /// that the next start of the same edge finds its tasks' cgroups).
    pub fn detect(
        cfg: &TaskConfig,
        data_dir: &Path,
        node_id: &str,
    ) -> Result<Confinement, ConfineError> {
        let user = if Uid::effective().is_root() {
            let name = cfg.user.trim();
            let user = User::from_name(name)
                .ok()
                .flatten()
                .ok_or_else(|| ConfineError::NoUser(name.to_string()))?;
            if user.uid.is_root() {
                return Err(ConfineError::Root(name.to_string()));
            }
            Some((user.uid, user.gid, name.to_string()))
        } else {
            None
        };
        let key = tidemill_runtime::identity::sha256_hex(data_dir.to_string_lossy().as_bytes());
        let cgroups = cgroup2_mount().and_then(|mount| {
            let dir = mount
                .join("tidemill")
                .join(format!("{node_id}-{}", &key[..12]));
            std::fs::create_dir_all(&dir).ok()?;
            Some(dir)
        });
        let memory = cgroups.as_deref().is_some_and(enable_memory);
        match &cgroups {
            Some(dir) => {
                tracing::info!(node_id, cgroup = %dir.display(), memory_limits = memory, "tasks run in their own cgroups")
            }
            None => tracing::warn!(
                node_id,
                "cgroup v2 is not writable here: tasks are killed by process group only, and have no memory limit"
            ),
        }
        Ok(Confinement {
            user,
            cgroups,
            memory,
            data_dir: data_dir.to_path_buf(),
        })
    }

    /// No confinement beyond a clean environment: the daemon's own user and
    /// no cgroups (tests of the executor itself).
    pub fn none() -> Confinement {
        Confinement {
            user: None,
            cgroups: None,
            memory: false,
            data_dir: PathBuf::new(),
        }
    }

    /// Creates a task's work or checkpoint directory. With a task user, the
    /// directory is given to it, and each directory made on the way, and the
    /// data dir and those under it on the way, become passable (0711 at
    /// most) so that the user can reach it without listing them.
    pub fn task_dir(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir)?;
        if self.user.is_none() {
            return Ok(());
        }
        for d in dir.ancestors().skip(1) {
            let ours = missing.iter().any(|m| m == d);
            let inside = !self.data_dir.as_os_str().is_empty() && d.starts_with(&self.data_dir);
            if ours || inside {
                let mode = std::fs::metadata(d)?.permissions().mode();
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o111))?;
            }
        }
        self.hand_over(dir);
        Ok(())
    }

    /// Makes task `task_id`'s cgroup with `memory_bytes` as its limit;
    /// `None` where cgroups are unavailable.
    pub fn cgroup(&self, task_id: u64, memory_bytes: Option<u64>) -> Option<TaskCgroup> {
        let dir = self.cgroups.as_ref()?.join(format!("task-{task_id}"));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::warn!(task_id, error = %e, "cannot make the task's cgroup");
            return None;
        }
        if let (true, Some(bytes)) = (self.memory, memory_bytes)
            && let Err(e) = std::fs::write(dir.join("memory.max"), bytes.to_string())
        {
            tracing::warn!(task_id, error = %e, "cannot set the task's memory limit");
        }
        Some(TaskCgroup { dir })
    }

    /// Kills whatever is left of task `task_id` (a previous run's, too) and
    /// removes its cgroup.
    pub fn kill(&self, task_id: u64) {
        if let Some(root) = &self.cgroups {
            TaskCgroup {
                dir: root.join(format!("task-{task_id}")),
            }
            .kill();
        }
    }

    /// Prepares `cmd` for a task: a clean environment holding only `env`
    /// (and PATH and HOME, unless `env` sets them), then, in the child before
    /// its program starts, a move into `cgroup` (while still root, so that
    /// nothing it forks starts outside) and the switch to the task user.
    pub fn command(
        &self,
        cmd: &mut tokio::process::Command,
        env: &[(String, String)],
        home: &Path,
        cgroup: Option<&TaskCgroup>,
    ) -> std::io::Result<()> {
        cmd.env_clear()
            .env("PATH", TASK_PATH)
            .env("HOME", home)
            .envs(env.iter().map(|(k, v)| (k, v)));
        let procs = cgroup
            .map(|c| {
                std::ffi::CString::new(
                    c.dir
                        .join("cgroup.procs")
                        .into_os_string()
                        .into_encoded_bytes(),
                )
            })
            .transpose()
            .map_err(std::io::Error::other)?;
        let user = self.user.as_ref().map(|(u, g, _)| (*u, *g));
        if procs.is_none() && user.is_none() {
            return Ok(());
        }
        // SAFETY: between fork and exec the closure makes only
        // async-signal-safe system calls (open, write, close, setgroups,
        // setgid, setuid) and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(procs) = &procs {
                    let fd = nix::fcntl::open(
                        procs.as_c_str(),
                        nix::fcntl::OFlag::O_WRONLY,
                        nix::sys::stat::Mode::empty(),
                    )?;
                    nix::unistd::write(&fd, b"0")?;
                }
                if let Some((uid, gid)) = user {
                    nix::unistd::setgroups(&[gid])?;
                    nix::unistd::setgid(gid)?;
                    nix::unistd::setuid(uid)?;
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Gives `dir` to the task user, so a task may write its work and
    /// checkpoints there.
    fn hand_over(&self, dir: &Path) {
        if let Some((uid, gid, name)) = &self.user
            && let Err(e) = nix::unistd::chown(dir, Some(*uid), Some(*gid))
        {
            tracing::warn!(dir = %dir.display(), user = %name, error = %e, "cannot give the directory to the task user");
        }
    }
}

impl TaskCgroup {
    /// Kills every process in the cgroup and removes it.
    pub fn kill(&self) {
        if !self.dir.exists() {
            return;
        }
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        // The kernel removes the processes asynchronously; rmdir succeeds once
        // they are gone, and a later start retries what is left.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::yield_now();
            let empty = std::fs::read_to_string(self.dir.join("cgroup.procs"))
                .map(|p| p.trim().is_empty())
                .unwrap_or(true);
            if empty && std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
        }
    }
}

/// Where cgroup v2 is mounted, from /proc/self/mountinfo (`doctor` checks
/// it too).
pub fn cgroup2_mount() -> Option<PathBuf> {
    let mut info = String::new();
    std::fs::File::open("/proc/self/mountinfo")
        .ok()?
        .read_to_string(&mut info)
        .ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mount = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount))
    })
}

/// Turns the memory controller on for `dir`'s children, if the hierarchy has
/// it; says whether it is on.
fn enable_memory(dir: &Path) -> bool {
    let Some(mount) = cgroup2_mount() else {
        return false;
    };
    let has = |d: &Path| {
        std::fs::read_to_string(d.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"))
    };
    if !has(&mount) {
        return false;
    }
    // Each level from the mount down to `dir` passes the controller on.
    let mut level = mount.clone();
    let rel = dir.strip_prefix(&mount).unwrap_or(dir).to_path_buf();
    for part in rel.components() {
        let _ = std::fs::write(level.join("cgroup.subtree_control"), "+memory");
        level = level.join(part);
    }
    let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+memory");
    std::fs::read_to_string(dir.join("cgroup.subtree_control"))
        .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"))
}
