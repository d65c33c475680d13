//! Whether a task can keep a checkpoint here: as the user tasks run as,
//! started the way the executor starts a task, create, write and read back a
//! file in a job's checkpoint dir (`tidemill-edge doctor`). A task that
//! cannot would run and report success while every checkpoint it tried to
//! save was lost. With `[checkpoint] backend = "shared"`, also whether the
//! edge can write, read back and delete an object in the shared store.

use std::path::PathBuf;

use crate::confine::Confinement;

/// The task and job id of the probe's dirs: no coordinator hands it out, so
/// they are never a real job's.
const PROBE_ID: u64 = u64::MAX;

/// The file the probe writes in the checkpoint dir.
const PROBE_FILE: &str = "tidemill-doctor-probe";

/// What the probe writes and expects to read back.
const PROBE_TEXT: &str = "tidemill checkpoint probe";

/// Makes a checkpoint dir as for a task, has the task user create, write
/// and read back a file in it, and removes what it made. Returns the dir, or
/// a sentence saying what failed.
pub async fn checkpoint_dir(confine: &Confinement) -> Result<PathBuf, String> {
    let dirs = confine
        .prepare(PROBE_ID, PROBE_ID)
        .map_err(|e| e.to_string())?;
    let outcome = write_and_read(confine, &dirs).await;
    for dir in [&dirs.checkpoints, &dirs.work] {
        let _ = std::fs::remove_dir_all(dir);
    }
    outcome.map(|()| dirs.checkpoints.clone())
}

async fn write_and_read(
    confine: &Confinement,
    dirs: &crate::taskdirs::Prepared,
) -> Result<(), String> {
    let user = dirs
        .user
        .map_or_else(|| "this user".to_string(), |(uid, _)| format!("uid {uid}"));
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.args(["-c", r#"printf '%s' "$2" > "$1" && cat "$1""#, "sh"])
        .arg(dirs.checkpoints.join(PROBE_FILE))
        .arg(PROBE_TEXT)
        .current_dir(&dirs.work)
        .kill_on_drop(true);
    confine
        .command(&mut cmd, &[], dirs, None, false)
        .map_err(|e| format!("cannot start a probe as {user}: {e}"))?;
    let out = cmd
        .output()
        .await
        .map_err(|e| format!("cannot start a probe as {user}: {e}"))?;
    if out.status.success() && out.stdout == PROBE_TEXT.as_bytes() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr.trim();
    Err(if why.is_empty() {
        format!(
            "as {user}, a file written in {} did not read back ({})",
            dirs.checkpoints.display(),
            out.status
        )
    } else {
        format!("as {user}: {why}")
    })
}

/// With `[checkpoint] backend = "shared"`: opens the shared store, writes
/// an object there, reads it back and deletes it. Returns the store's path,
/// or a sentence saying what failed; `None` with the coordinator backend.
pub async fn shared_store(
    cfg: &crate::checkpoint_config::CheckpointTable,
    node_id: &str,
) -> Option<Result<String, String>> {
    use crate::checkpoint_config::Backend;
    use crate::checkpoint_shared::SharedStore;
    if cfg.backend != Backend::Shared {
        return None;
    }
    let probed = async {
        let store = SharedStore::open(&cfg.url, cfg.moves.max_bytes, cfg.moves.keep)?;
        store.probe(node_id).await
    };
    Some(
        probed
            .await
            .map(|()| cfg.url.clone())
            .map_err(|e| e.to_string()),
    )
}

/// Whether the directory shared-store `url` names may be written by group
/// or others (the edge alone should).
pub fn writable_by_others(url: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    crate::checkpoint_config::local_path(url)
        .ok()
        .and_then(|dir| std::fs::metadata(dir).ok())
        .is_some_and(|m| m.permissions().mode() & 0o022 != 0)
}
