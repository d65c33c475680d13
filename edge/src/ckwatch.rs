//! What a task left in its job's checkpoint dir, for its end report: files
//! and bytes, whether the task itself saved any, and, where it saved none,
//! the last line of its output that named the dir and reads as an error
//! (where a trainer's failed write says why). The edge learns of
//! checkpoints by looking at the dir it gave the task, so a trainer needs
//! no convention beyond writing into `TIDEMILL_CHECKPOINT_DIR`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use tidemill_proto::CheckpointState;

/// How deep below the checkpoint dir files are counted.
const MAX_DEPTH: usize = 8;

/// How many entries are looked at, at most: a dir with more is counted in part.
const MAX_ENTRIES: usize = 100_000;

/// Words that make a line naming the dir read as an error (lower case).
const ERROR_WORDS: [&str; 9] = [
    "error",
    "denied",
    "cannot",
    "can't",
    "failed",
    "no such file",
    "read-only",
    "no space",
    "exception",
];

/// A file's size and when it was last written, to tell what a task wrote.
type Stamp = (u64, Option<SystemTime>);

/// One task's view of its job's checkpoint dir.
#[derive(Debug)]
pub struct CheckpointWatch {
    dir: PathBuf,
    /// The dir's files when the task started.
    before: BTreeMap<PathBuf, Stamp>,
    /// The last error line that named the dir.
    last_error: Mutex<Option<String>>,
}

impl CheckpointWatch {
    /// Notes what `dir` holds as the task starts.
    pub fn new(dir: &Path) -> CheckpointWatch {
        CheckpointWatch {
            dir: dir.to_path_buf(),
            before: files(dir),
            last_error: Mutex::new(None),
        }
    }

    /// Reads one line of the task's output.
    pub fn see(&self, line: &str) {
        let dir = self.dir.to_string_lossy();
        if !line.contains(&*dir) {
            return;
        }
        let lower = line.to_lowercase();
        if ERROR_WORDS.iter().any(|w| lower.contains(w)) {
            *self.last_error.lock().unwrap() = Some(line.to_string());
        }
    }

    /// What the dir holds now, against what it held when the task started.
    pub fn state(&self) -> CheckpointState {
        let now = files(&self.dir);
        let saved_by_task = now
            .iter()
            .any(|(path, stamp)| self.before.get(path) != Some(stamp));
        CheckpointState {
            files: now.len() as u64,
            bytes: now.values().map(|(len, _)| len).sum(),
            saved_by_task,
            last_error: if saved_by_task {
                None
            } else {
                self.last_error.lock().unwrap().clone()
            },
        }
        .bounded()
    }
}

/// The regular files under `dir` (links not followed), with their stamps.
fn files(dir: &Path) -> BTreeMap<PathBuf, Stamp> {
    let mut found = BTreeMap::new();
    let mut todo = vec![(dir.to_path_buf(), 0)];
    let mut seen = 0;
    while let Some((at, depth)) = todo.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return found;
            }
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_file() {
                found.insert(entry.path(), (meta.len(), meta.modified().ok()));
            } else if meta.is_dir() && depth < MAX_DEPTH {
                todo.push((entry.path(), depth + 1));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_that_saved_nothing_reports_its_last_error_naming_the_dir() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("job-1");
        std::fs::create_dir(&ck).unwrap();
        let watch = CheckpointWatch::new(&ck);
        let denied = format!(
            "sh: 1: cannot create {}/step: Permission denied",
            ck.display()
        );
        watch.see("iteration 3 loss 0.5");
        watch.see(&format!("resuming from {}", ck.display()));
        watch.see(&denied);
        watch.see("cannot reach the dataset mirror");
        let state = watch.state();
        assert_eq!(
            state,
            CheckpointState {
                files: 0,
                bytes: 0,
                saved_by_task: false,
                last_error: Some(denied),
            }
        );
    }

    #[test]
    fn a_saved_checkpoint_counts_and_hides_earlier_errors() {
        let dir = tempfile::tempdir().unwrap();
        let ck = dir.path().join("job-2");
        std::fs::create_dir_all(ck.join("shard")).unwrap();
        std::fs::write(ck.join("old"), b"12").unwrap();
        let watch = CheckpointWatch::new(&ck);
        let kept = watch.state();
        assert_eq!((kept.files, kept.bytes, kept.saved_by_task), (1, 2, false));
        watch.see(&format!(
            "error: {}/shard/a: disk full, retrying",
            ck.display()
        ));
        std::fs::write(ck.join("shard/a"), b"12345").unwrap();
        let state = watch.state();
        assert_eq!((state.files, state.bytes), (2, 7));
        assert!(
            state.saved_by_task && state.last_error.is_none(),
            "{state:?}"
        );
    }

    #[test]
    fn long_error_lines_are_cut_on_a_character_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let watch = CheckpointWatch::new(dir.path());
        let max = CheckpointState::MAX_ERROR_LEN;
        watch.see(&format!(
            "error at {}: {}",
            dir.path().display(),
            "é".repeat(max)
        ));
        let error = watch.state().last_error.unwrap();
        assert!(
            error.len() <= max && error.len() > max - 2,
            "{}",
            error.len()
        );
    }
}
