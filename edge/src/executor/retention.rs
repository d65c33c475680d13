//! Retention of what tasks leave on disk: work dirs of tasks that ended and
//! checkpoint dirs of jobs that stopped running here, deleted once older than
//! the configured hours and days.

use std::time::Duration;

use super::{CHECKPOINTS_DIR, Executor, TASKS_DIR};
use crate::journal::JournalError;
use crate::taskdirs::job_dir;

impl Executor {
    /// Deletes the work dirs of tasks that ended more than
    /// `keep_ended_hours` ago and the checkpoint dirs of jobs that have not
    /// run here for `checkpoint_retention_days`, both under the data dir
    /// only, as of wall time `now`; returns how many went.
    pub fn prune_dirs(&self, now: std::time::SystemTime) -> Result<usize, JournalError> {
        let open = self.journal.lock().unwrap().unfinished_tasks()?;
        let tasks: Vec<String> = open.iter().map(|(a, _)| a.task_id.to_string()).collect();
        let jobs: Vec<String> = open.iter().map(|(a, _)| job_dir(a.job_id)).collect();
        let hours = |h: u64| Duration::from_secs(h * 3600);
        let mut gone = 0;
        for (dir, busy, keep) in [
            (TASKS_DIR, &tasks, hours(self.cfg.keep_ended_hours)),
            (
                CHECKPOINTS_DIR,
                &jobs,
                hours(self.cfg.checkpoint_retention_days * 24),
            ),
            (
                crate::checkpoint_move::STORE_DIR,
                &jobs,
                hours(self.cfg.checkpoint_retention_days * 24),
            ),
        ] {
            let Ok(entries) = std::fs::read_dir(self.data_dir.join(dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let stale = last_written(&entry.path())
                    .is_some_and(|at| now.duration_since(at).unwrap_or_default() > keep);
                if busy.contains(&name) || !stale {
                    continue;
                }
                match std::fs::remove_dir_all(entry.path()) {
                    Ok(()) => gone += 1,
                    Err(e) => {
                        tracing::warn!(node_id = %self.node_id, path = %entry.path().display(), error = %e, "cannot delete an old task dir; delete it by hand")
                    }
                }
            }
        }
        Ok(gone)
    }
}

/// When `dir` or anything directly in it was last written.
fn last_written(dir: &std::path::Path) -> Option<std::time::SystemTime> {
    let own = std::fs::symlink_metadata(dir)
        .and_then(|m| m.modified())
        .ok();
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().and_then(|m| m.modified()).ok())
        .chain(own)
        .max()
}
