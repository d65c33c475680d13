//! Confines tasks: a uid per job from `[tasks] uid_range` (or one shared
//! unprivileged user) when the daemon is root, a clean environment, a
//! network namespace of its own for a single-node task where the host
//! allows it, and a cgroup (v2) per task where the host lets the daemon make
//! one, so that the whole process tree can be killed (`cgroup.kill`) and,
//! where the memory controller is on, held to the job's memory need.
//!
//! What this does not give: no mount or PID namespaces (a task sees the
//! host's processes and the files its uid may read), no seccomp, no CPU or
//! GPU limits, and no confinement beyond the process group where cgroup v2
//! is missing.

use std::io::Read;
use std::path::{Path, PathBuf};

use nix::unistd::{Uid, User};

use crate::config::{TaskConfig, TaskNetwork};
use crate::taskdirs::{Prepared, TaskDirError, TaskDirs, TaskUsers};
use crate::uids::{UidRange, UidRangeError};

/// The PATH a task gets unless its job sets one.
pub const TASK_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The variable that marks a task's processes as this edge's: the
/// [`Confinement::marker`] of its data dir.
pub const MARKER_VAR: &str = "TIDEMILL_EDGE";

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
    /// The uid range clashes with this host.
    #[error(transparent)]
    UidRange(#[from] UidRangeError),
    /// The data dir cannot be made passable for task users.
    #[error("cannot let task users pass through data dir {path}: {source}; check its permissions")]
    DataDir {
        /// The data dir.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// How this host confines tasks.
#[derive(Debug)]
pub struct Confinement {
    /// Where task dirs go and whom they belong to.
    dirs: TaskDirs,
    /// This daemon's cgroup for its tasks, if cgroup v2 is writable here.
    cgroups: Option<PathBuf>,
    /// Whether the memory controller is on for task cgroups.
    memory: bool,
    /// Whether single-node tasks get their own network namespace.
    private_net: bool,
    /// What marks this data dir's task processes ([`MARKER_VAR`]).
    marker: String,
}

/// A task's cgroup, made before it starts.
#[derive(Debug)]
pub struct TaskCgroup {
    dir: PathBuf,
}

impl Confinement {
    /// Finds out what this host allows: the task users from `cfg` when the
    /// daemon is root, a private network where it may make one, and a
    /// cgroup v2 subtree named after `data_dir` (so that the next start of
    /// the same edge finds its tasks' cgroups).
    pub fn detect(
        cfg: &TaskConfig,
        data_dir: &Path,
        node_id: &str,
    ) -> Result<Confinement, ConfineError> {
        let root = Uid::effective().is_root();
        let users = if !root {
            TaskUsers::Daemon
        } else if let Some(range) = UidRange::parse(&cfg.uid_range) {
            range.check_host()?;
            TaskUsers::Range(range)
        } else {
            let name = cfg.user.trim();
            let user = User::from_name(name)
                .ok()
                .flatten()
                .ok_or_else(|| ConfineError::NoUser(name.to_string()))?;
            if user.uid.is_root() {
                return Err(ConfineError::Root(name.to_string()));
            }
            TaskUsers::Shared(user.uid, user.gid)
        };
        if !matches!(users, TaskUsers::Daemon) {
            passable(data_dir).map_err(|source| ConfineError::DataDir {
                path: data_dir.to_path_buf(),
                source,
            })?;
        }
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
        let private_net = cfg.network == TaskNetwork::Private
            && match crate::netns::available() {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(node_id, error = %e, "[tasks] network = \"private\", but this host does not let the daemon make a network namespace (it must be root): tasks share the host's network, 127.0.0.1 included");
                    false
                }
            };
        match &users {
            TaskUsers::Range(range) => {
                tracing::info!(node_id, uid_range = %range, private_net, "each job's tasks run as a uid of their own")
            }
            TaskUsers::Shared(uid, _) => tracing::warn!(
                node_id,
                uid = uid.as_raw(),
                private_net,
                "[tasks] uid_range is empty: every task runs as the same user and may read the others' files"
            ),
            TaskUsers::Daemon => tracing::warn!(
                node_id,
                private_net,
                "the daemon is not root: every task runs as the daemon's user and may read the others' files and the daemon's"
            ),
        }
        Ok(Confinement {
            dirs: task_dirs(cfg, data_dir, users),
            cgroups,
            memory,
            private_net,
            marker: marker(data_dir),
        })
    }

    /// No confinement beyond a clean environment: the daemon's own user, its
    /// task dirs under `data_dir`, the host's network and no cgroups (tests
    /// of the executor itself).
    pub fn none(cfg: &TaskConfig, data_dir: &Path) -> Confinement {
        Confinement {
            dirs: task_dirs(cfg, data_dir, TaskUsers::Daemon),
            cgroups: None,
            memory: false,
            private_net: false,
            marker: marker(data_dir),
        }
    }

    /// What task processes of this data dir carry as [`MARKER_VAR`]: a
    /// digest of its canonical path, so a copy elsewhere has another.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// Makes task `task_id`'s work dir and job `job_id`'s checkpoint dir,
    /// each 0700 and owned by the user the task will run as.
    pub fn prepare(&self, task_id: u64, job_id: u64) -> Result<Prepared, TaskDirError> {
        self.dirs.prepare(task_id, job_id)
    }

    /// Whether process `pid` is the one this data dir's edge started for
    /// `task_id`: its environment carries both the task id and this data
    /// dir's marker. A copied data dir's journal names the real edge's pids;
    /// they carry the other marker and are left alone.
    pub fn runs_task(&self, pid: u32, task_id: u64) -> bool {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            return false;
        };
        let task = format!("TIDEMILL_TASK_ID={task_id}");
        let edge = format!("{MARKER_VAR}={}", self.marker);
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        vars.contains(&task.as_bytes()) && vars.contains(&edge.as_bytes())
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

    /// Whether a task that has no peers elsewhere (`alone`) gets a network
    /// namespace of its own.
    pub fn private_net(&self, alone: bool) -> bool {
        alone && self.private_net
    }

    /// Prepares `cmd` for a task: a clean environment holding only `env`
    /// (and PATH and HOME, unless `env` sets them), then, in the child before
    /// its program starts, a move into `cgroup` (while still root, so that
    /// nothing it forks starts outside), into a network namespace of its own
    /// with `private_net`, and the switch to `user`.
    pub fn command(
        &self,
        cmd: &mut tokio::process::Command,
        env: &[(String, String)],
        dirs: &Prepared,
        cgroup: Option<&TaskCgroup>,
        private_net: bool,
    ) -> std::io::Result<()> {
        cmd.env_clear()
            .env("PATH", TASK_PATH)
            .env("HOME", &dirs.work)
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
        let user = dirs.user;
        if procs.is_none() && user.is_none() && !private_net {
            return Ok(());
        }
        // SAFETY: between fork and exec the closure makes only
        // async-signal-safe system calls (open, write, close, unshare,
        // socket, ioctl, setgroups, setgid, setuid) and allocates nothing.
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
                if private_net {
                    crate::netns::enter_private()?;
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
}

/// Where `cfg` puts task dirs under `data_dir`, and whom they belong to.
fn task_dirs(cfg: &TaskConfig, data_dir: &Path, users: TaskUsers) -> TaskDirs {
    let or_under = |set: &Path, default: &str| {
        if set.as_os_str().is_empty() {
            data_dir.join(default)
        } else {
            set.to_path_buf()
        }
    };
    TaskDirs {
        work_root: or_under(&cfg.work_dir, crate::executor::TASKS_DIR),
        checkpoint_root: or_under(&cfg.checkpoint_dir, crate::executor::CHECKPOINTS_DIR),
        users,
    }
}

/// The marker of `data_dir`: the start of the digest of its canonical path.
fn marker(data_dir: &Path) -> String {
    let abs = std::fs::canonicalize(data_dir)
        .or_else(|_| std::path::absolute(data_dir))
        .unwrap_or_else(|_| data_dir.to_path_buf());
    tidemill_runtime::identity::sha256_hex(abs.to_string_lossy().as_bytes())[..16].to_string()
}

/// Lets task users pass through `dir` (o+x) without listing it.
fn passable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::symlink_metadata(dir)?.permissions().mode();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o111))
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
