//! What a task says while it runs: its output lines, kept as a tail, and its
//! `TIDEMILL_PROGRESS` lines, parsed and journalled as progress reports at
//! most once per [`PROGRESS_EVERY_MS`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tidemill_proto::{ReportBody, TaskProgress};
use tidemill_runtime::clock::SharedClock;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::journal::{Journal, JournalError};

/// Longest output line kept, in bytes; longer lines are cut.
pub(super) const MAX_LINE: usize = 1000;

/// What a task prints, on stdout or stderr, to report its iterations:
/// `TIDEMILL_PROGRESS iter=N`, optionally followed by other `key=value` pairs.
pub const PROGRESS_PREFIX: &str = "TIDEMILL_PROGRESS ";

/// The least time between two progress reports of one task, ms of the
/// sampling clock, plus one at the task's end. A trainer may print a line
/// every step; the uplink carries at most 48 of its reports a day, riding
/// with the sample batches, which fit the 9 000 bytes a day that
/// docs/links.md leaves under its 0.5 kbit/s bound.
pub const PROGRESS_EVERY_MS: i64 = 1_800_000;

/// The iterations a `TIDEMILL_PROGRESS iter=N` line reports: exactly that
/// prefix, then whitespace-separated `key=value` pairs of which `iter` is
/// the one read, its value decimal digits that fit a `u64`. Any other line,
/// malformed ones included, is ordinary output (`None`).
pub(super) fn parse_progress(line: &str) -> Option<u64> {
    let pairs = line.strip_prefix(PROGRESS_PREFIX)?;
    let n = pairs
        .split_ascii_whitespace()
        .find_map(|kv| kv.strip_prefix("iter="))?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// A task's latest iteration count and what of it was reported, so that a
/// trainer printing every step sends at most one report per
/// [`PROGRESS_EVERY_MS`].
#[derive(Debug, Default)]
pub(super) struct ProgressGate {
    /// The latest count and when it was seen, ms of the sampling clock.
    latest: Option<(u64, i64)>,
    /// When the last report was let through.
    sent_ms: Option<i64>,
    /// Whether `latest` is still to be reported.
    unsent: bool,
}

impl ProgressGate {
    /// Takes a count seen at `now_ms`; returns it with its time when it is
    /// to be reported now.
    pub(super) fn see(&mut self, iters: u64, now_ms: i64) -> Option<(u64, i64)> {
        self.latest = Some((iters, now_ms));
        self.unsent = true;
        if self.sent_ms.is_some_and(|t| now_ms - t < PROGRESS_EVERY_MS) {
            return None;
        }
        self.sent_ms = Some(now_ms);
        self.unsent = false;
        self.latest
    }

    /// The latest count if the gate held it back, for the task's end.
    pub(super) fn take_unsent(&mut self) -> Option<(u64, i64)> {
        std::mem::take(&mut self.unsent)
            .then_some(self.latest)
            .flatten()
    }
}

/// Journals one task's progress lines as [`ReportBody::Progress`], through a
/// [`ProgressGate`]. The reports wait for the next batch the outbox sends
/// (samples go every few seconds) rather than waking it.
#[derive(Clone)]
pub(super) struct ProgressSink {
    pub(super) journal: Arc<Mutex<Journal>>,
    pub(super) stamps: SharedClock,
    pub(super) node_id: String,
    pub(super) task_id: u64,
    pub(super) job_id: u64,
    pub(super) gate: Arc<Mutex<ProgressGate>>,
}

impl ProgressSink {
    /// A progress line said `iters`. A journal that cannot take the report
    /// is logged, not fatal: the task runs on and its end reports the count.
    pub(super) fn seen(&self, iters: u64) {
        let due = self.gate.lock().unwrap().see(iters, self.stamps.now_ms());
        if let Some(due) = due
            && let Err(e) = self.journal(due)
        {
            tracing::warn!(node_id = %self.node_id, job_id = self.job_id, task_id = self.task_id, error = %e, "cannot journal the task's progress");
        }
    }

    /// Journals the count the gate held back, if any, at the task's end.
    pub(super) fn flush(&self) -> Result<(), JournalError> {
        let unsent = self.gate.lock().unwrap().take_unsent();
        unsent.map_or(Ok(()), |due| self.journal(due))
    }

    pub(super) fn journal(&self, (iterations, t_ms): (u64, i64)) -> Result<(), JournalError> {
        tracing::debug!(node_id = %self.node_id, job_id = self.job_id, task_id = self.task_id, iterations, "task progress");
        let body = ReportBody::Progress(TaskProgress {
            task_id: self.task_id,
            job_id: self.job_id,
            t_ms,
            iterations,
        });
        self.journal.lock().unwrap().append(&body).map(drop)
    }
}

/// Keeps the last `keep` lines of a stream, each cut to [`MAX_LINE`] bytes,
/// and hands progress lines to `progress` and every line to `checkpoint`.
pub(super) async fn collect(
    stream: impl AsyncRead + Unpin,
    tail: Arc<Mutex<VecDeque<String>>>,
    keep: usize,
    progress: ProgressSink,
    checkpoint: Arc<crate::ckwatch::CheckpointWatch>,
) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line[..line.len().min(MAX_LINE)]);
                let text = text.trim_end_matches(['\n', '\r']);
                if let Some(iters) = parse_progress(text) {
                    progress.seen(iters);
                }
                checkpoint.see(text);
                let mut tail = tail.lock().unwrap();
                tail.push_back(text.to_string());
                while tail.len() > keep {
                    tail.pop_front();
                }
            }
        }
    }
}
