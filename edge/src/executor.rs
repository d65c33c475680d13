//! Runs assigned tasks as child processes and reports their lives through the
//! journal. Each task gets its own process group and, where the host allows,
//! its own cgroup ([`crate::confine`]), so cancelling it (SIGTERM to the
//! group, a grace period, then SIGKILL and `cgroup.kill`) reaches every
//! process it started, even one that left the group.

mod progress;
mod retention;

pub use progress::{PROGRESS_EVERY_MS, PROGRESS_PREFIX};

use std::collections::{HashMap, VecDeque};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tidemill_proto::{CheckpointState, Command, ReportBody, TaskAssignment, TaskEvent, TaskStatus};
use tidemill_runtime::clock::SharedClock;
use tokio::sync::{Notify, watch};

use crate::config::TaskConfig;
use crate::confine::Confinement;
use crate::journal::{Journal, JournalError};
use progress::{ProgressGate, ProgressSink, collect};

/// How long output readers may run on after the task's main process exits,
/// when a leftover child still holds its pipes. Wall time, not the clock's:
/// pipes drain at the kernel's pace however fast the clock runs, and an
/// accelerated clock would cut the output tail short.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Under the data dir, a directory per task, unless `[tasks] work_dir` is set.
pub const TASKS_DIR: &str = "tasks";

/// Under the data dir, a checkpoint directory per job, named by
/// [`job_dir`](crate::taskdirs::job_dir), unless `[tasks] checkpoint_dir` is
/// set.
pub const CHECKPOINTS_DIR: &str = "checkpoints";

/// Why a task yields while its daemon stops.
const STOPPING: &str = "its edge daemon is stopping";

/// A task this edge ended, or never started, for a reason of its own; its
/// job resumes from its checkpoint.
fn yielded(reason: String) -> TaskEvent {
    TaskEvent::Yielded {
        exit_code: None,
        signal: None,
        reason,
    }
}

/// Why a running task is being stopped, if it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// It runs on.
    No,
    /// The coordinator cancelled it (or asked it to checkpoint and stop).
    Cancel,
    /// This daemon is stopping: the task checkpoints and the job resumes.
    Yield,
}

/// Runs tasks and journals what happens to them.
pub struct Executor {
    journal: Arc<Mutex<Journal>>,
    outbox: Arc<Notify>,
    cfg: TaskConfig,
    data_dir: PathBuf,
    node_id: String,
    clock: SharedClock,
    stamps: SharedClock,
    running: Mutex<HashMap<u64, watch::Sender<Stop>>>,
    idle: Notify,
    confine: Confinement,
    /// Set once the daemon stops: new assignments are yielded at once.
    stopping: std::sync::atomic::AtomicBool,
    /// Moves jobs' checkpoints to and from the coordinator, once set.
    mover: std::sync::OnceLock<Arc<crate::checkpoint_move::Mover>>,
}

impl Executor {
    /// An executor journaling into `journal` and waking `outbox` after each entry.
    /// `clock` times the grace period; `stamps` dates task events, and is the
    /// node's sampling clock so that they match its other reports.
    pub fn new(
        journal: Arc<Mutex<Journal>>,
        outbox: Arc<Notify>,
        cfg: TaskConfig,
        data_dir: PathBuf,
        node_id: String,
        (clock, stamps): (SharedClock, SharedClock),
        confine: Confinement,
    ) -> Arc<Self> {
        Arc::new(Executor {
            confine,
            journal,
            outbox,
            cfg,
            // Tasks get paths under it in their environment and run in
            // their own directory: a relative data dir would not hold there.
            data_dir: std::path::absolute(&data_dir).unwrap_or(data_dir),
            node_id,
            clock,
            stamps,
            running: Mutex::new(HashMap::new()),
            idle: Notify::new(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            mover: std::sync::OnceLock::new(),
        })
    }

    /// Moves checkpoints with their jobs from now on: fetched before a task
    /// starts, sent when one stops unfinished.
    pub fn set_mover(&self, mover: Arc<crate::checkpoint_move::Mover>) {
        let _ = self.mover.set(mover);
    }

    /// The connection checkpoints move over (`None`: disconnected), with the
    /// probes that measure its rate.
    pub fn set_link(&self, link: crate::checkpoint_move::Link) {
        if let Some(m) = self.mover.get() {
            m.set_link(link);
        }
    }

    /// Reports tasks that a previous run of the daemon left unfinished as
    /// yielded, so that their jobs resume from their checkpoints, and kills
    /// any of their processes that survived it.
    pub fn recover(&self) -> Result<(), JournalError> {
        let mut journal = self.journal.lock().unwrap();
        for (a, pid) in kill_leftovers(&journal, &self.confine)? {
            // The job is not over: it resumes from its last checkpoint.
            let reason = match pid {
                Some(pid) => format!(
                    "its edge daemon stopped without warning while the task ran (pid {pid}), and killed what was left of it on restart"
                ),
                None => {
                    "its edge daemon stopped without warning before the task started".to_string()
                }
            };
            tracing::warn!(node_id = %self.node_id, job_id = a.job_id, task_id = a.task_id, %reason);
            journal.finish_task(a.task_id, &self.status(&a, yielded(reason), vec![], None))?;
        }
        drop(journal);
        self.outbox.notify_one();
        Ok(())
    }

    /// Takes a command. Assignments are idempotent; cancelling a task that is not
    /// running does nothing.
    pub fn handle(self: &Arc<Self>, cmd: Command) -> Result<(), JournalError> {
        match cmd {
            Command::Assign(a) => {
                if !self.journal.lock().unwrap().accept_task(&a)? {
                    tracing::debug!(
                        job_id = a.job_id,
                        task_id = a.task_id,
                        "assignment already known"
                    );
                    return Ok(());
                }
                if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    tracing::info!(node_id = %self.node_id, job_id = a.job_id, task_id = a.task_id, "assignment yielded: the daemon is stopping");
                    return self.finish(&a, yielded(STOPPING.to_string()), vec![], None);
                }
                let (cancel_tx, cancel_rx) = watch::channel(Stop::No);
                self.running.lock().unwrap().insert(a.task_id, cancel_tx);
                let this = Arc::clone(self);
                tokio::spawn(async move {
                    let task_id = a.task_id;
                    let job_id = a.job_id;
                    if let Err(e) = this.run(a, cancel_rx).await {
                        tracing::error!(job_id, task_id, error = %e, "cannot journal the task's status");
                    }
                    let mut running = this.running.lock().unwrap();
                    running.remove(&task_id);
                    if running.is_empty() {
                        this.idle.notify_waiters();
                    }
                });
            }
            Command::Cancel { task_id } => match self.running.lock().unwrap().get(&task_id) {
                Some(cancel) => {
                    tracing::info!(node_id = %self.node_id, task_id, "cancelling task");
                    cancel.send_replace(Stop::Cancel);
                }
                None => tracing::debug!(task_id, "cancel for a task that is not running"),
            },
        }
        Ok(())
    }

    /// Stops every running task as a yield (SIGTERM, the grace period for a
    /// checkpoint, then SIGKILL), so that its job resumes rather than ends,
    /// and waits until each has ended and been journaled.
    pub async fn yield_all(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        loop {
            let idle = self.idle.notified();
            {
                let running = self.running.lock().unwrap();
                if running.is_empty() {
                    return;
                }
                for stop in running.values() {
                    stop.send_if_modified(|s| {
                        let fresh = *s == Stop::No;
                        if fresh {
                            *s = Stop::Yield;
                        }
                        fresh
                    });
                }
            }
            idle.await;
        }
    }

    fn status(
        &self,
        a: &TaskAssignment,
        event: TaskEvent,
        output_tail: Vec<String>,
        checkpoint: Option<CheckpointState>,
    ) -> ReportBody {
        ReportBody::Task(TaskStatus {
            task_id: a.task_id,
            job_id: a.job_id,
            t_ms: self.stamps.now_ms(),
            event,
            output_tail,
            checkpoint,
        })
    }

    fn journal_event(&self, a: &TaskAssignment, event: TaskEvent) -> Result<(), JournalError> {
        self.journal
            .lock()
            .unwrap()
            .append(&self.status(a, event, vec![], None))?;
        self.outbox.notify_one();
        Ok(())
    }

    fn finish(
        &self,
        a: &TaskAssignment,
        event: TaskEvent,
        tail: Vec<String>,
        checkpoint: Option<CheckpointState>,
    ) -> Result<(), JournalError> {
        tracing::info!(node_id = %self.node_id, job_id = a.job_id, task_id = a.task_id, ?event, "task ended");
        self.journal
            .lock()
            .unwrap()
            .finish_task(a.task_id, &self.status(a, event, tail, checkpoint))?;
        self.outbox.notify_one();
        Ok(())
    }

    async fn run(
        &self,
        a: TaskAssignment,
        mut cancel: watch::Receiver<Stop>,
    ) -> Result<(), JournalError> {
        let Some((program, args)) = a.command.split_first() else {
            let reason = "the job's command is empty; give at least the program to run".to_string();
            return self.finish(&a, TaskEvent::Failed { reason }, vec![], None);
        };
        if let Some(name) = a
            .env
            .keys()
            .find(|k| tidemill_proto::EDGE_SET_ENV.contains(&k.as_str()))
        {
            let reason = format!(
                "the assignment sets {name}, which the edge sets itself (the edge alone decides a task's checkpoint dir); the coordinator should have refused the job: upgrade it"
            );
            tracing::warn!(node_id = %self.node_id, job_id = a.job_id, task_id = a.task_id, %reason);
            return self.finish(&a, TaskEvent::Failed { reason }, vec![], None);
        }
        // Checkpoints outlive a task, so the same job started again resumes
        // from them: a directory per job under the checkpoint root the
        // operator chose, never a path the job names.
        let dirs = match self.confine.prepare(a.task_id, a.job_id) {
            Ok(dirs) => dirs,
            Err(e) => {
                let reason = format!("cannot prepare the task's directories: {e}");
                return self.finish(&a, TaskEvent::Failed { reason }, vec![], None);
            }
        };
        let mut env: Vec<(String, String)> = a.env.clone().into_iter().collect();
        env.extend([
            ("TIDEMILL_NODE_ID".to_string(), self.node_id.clone()),
            ("TIDEMILL_JOB_ID".to_string(), a.job_id.to_string()),
            ("TIDEMILL_TASK_ID".to_string(), a.task_id.to_string()),
            (
                "TIDEMILL_CHECKPOINT_DIR".to_string(),
                dirs.checkpoints.display().to_string(),
            ),
            (
                crate::confine::MARKER_VAR.to_string(),
                self.confine.marker().to_string(),
            ),
        ]);
        // The job's checkpoint interval is on the coordinator's clock; the task
        // lives in wall time, so a replay at speed × gets it speed times shorter.
        if let Some(s) = a
            .checkpoint_interval_s
            .filter(|s| s.is_finite() && *s > 0.0)
        {
            let wall_s = s / self.clock.speed();
            env.push((
                "TIDEMILL_CHECKPOINT_INTERVAL_S".to_string(),
                format!("{wall_s:.3}"),
            ));
        }
        // A task with no peers on other nodes may live in a network of its
        // own, where rank 0 (itself) listens on its own loopback.
        let alone = a.env.get("WORLD_SIZE").is_none_or(|w| w.trim() == "1");
        let private_net = self.confine.private_net(alone);
        if private_net && a.env.contains_key("MASTER_ADDR") {
            env.push(("MASTER_ADDR".to_string(), "127.0.0.1".to_string()));
        }
        let resumed = match self.mover.get() {
            Some(m) => {
                m.resume((a.task_id, a.job_id), &dirs.checkpoints, dirs.user)
                    .await
            }
            None => None,
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(&dirs.work)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let cgroup = self.confine.cgroup(a.task_id, a.memory_bytes);
        if let Err(e) = self
            .confine
            .command(&mut cmd, &env, &dirs, cgroup.as_ref(), private_net)
        {
            let reason = format!("cannot confine the task: {e}");
            return self.finish(&a, TaskEvent::Failed { reason }, vec![], None);
        }
        let checkpoint = Arc::new(crate::ckwatch::CheckpointWatch::new(&dirs.checkpoints));
        let spawned = cmd.spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let reason = format!(
                    "cannot start `{program}` on node {}: {e}; check the job's command and that the program is installed there",
                    self.node_id
                );
                return self.finish(&a, TaskEvent::Failed { reason }, vec![], None);
            }
        };
        let pid = child.id().expect("a just-spawned child has a pid");
        // Journaled before it is logged: once the line is out, a restart
        // after a crash knows the task ran (and its pid).
        self.journal.lock().unwrap().task_started(a.task_id, pid)?;
        tracing::info!(node_id = %self.node_id, job_id = a.job_id, task_id = a.task_id, pid, uid = dirs.user.map(|(u, _)| u.as_raw()), private_net, "task started");
        self.journal_event(&a, TaskEvent::Started { pid })?;
        if let Some((step, transfer)) = resumed {
            let resume = tidemill_proto::TaskResume {
                task_id: a.task_id,
                job_id: a.job_id,
                t_ms: self.stamps.now_ms(),
                step,
                transfer,
            };
            self.journal
                .lock()
                .unwrap()
                .append(&ReportBody::Resumed(resume))?;
        }

        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let progress = ProgressSink {
            journal: self.journal.clone(),
            stamps: self.stamps.clone(),
            node_id: self.node_id.clone(),
            task_id: a.task_id,
            job_id: a.job_id,
            gate: Arc::new(Mutex::new(ProgressGate::default())),
        };
        let readers = [
            tokio::spawn(collect(
                child.stdout.take().expect("piped"),
                tail.clone(),
                self.cfg.output_tail_lines,
                progress.clone(),
                checkpoint.clone(),
            )),
            tokio::spawn(collect(
                child.stderr.take().expect("piped"),
                tail.clone(),
                self.cfg.output_tail_lines,
                progress.clone(),
                checkpoint.clone(),
            )),
        ];
        let group = Pid::from_raw(pid as i32);
        let mut stopped = Stop::No;
        let status = tokio::select! {
            status = child.wait() => status,
            () = async { let _ = cancel.wait_for(|s| *s != Stop::No).await; } => {
                stopped = *cancel.borrow();
                let _ = killpg(group, Signal::SIGTERM);
                let grace = self.clock.sleep(Duration::from_secs(self.cfg.grace_secs));
                tokio::select! {
                    status = child.wait() => status,
                    _ = grace => {
                        tracing::warn!(job_id = a.job_id, task_id = a.task_id, "task ignored SIGTERM for the grace period; killing it");
                        let _ = killpg(group, Signal::SIGKILL);
                        child.wait().await
                    }
                }
            }
        };
        // Whatever the task left behind, in its group or its cgroup, goes with it.
        let _ = killpg(group, Signal::SIGKILL);
        if let Some(cgroup) = &cgroup {
            cgroup.kill();
        }
        let drain = tokio::time::sleep(DRAIN_TIMEOUT);
        tokio::pin!(drain);
        for reader in readers {
            tokio::select! { _ = reader => {}, _ = &mut drain => {} }
        }
        let tail: Vec<String> = tail.lock().unwrap().iter().cloned().collect();
        progress.flush()?;
        let event = match status {
            Ok(status) if stopped == Stop::Yield => TaskEvent::Yielded {
                exit_code: status.code(),
                signal: status.signal(),
                reason: STOPPING.to_string(),
            },
            Ok(status) => TaskEvent::Exited {
                exit_code: status.code(),
                signal: status.signal(),
                cancelled: stopped == Stop::Cancel,
            },
            Err(e) => TaskEvent::Failed {
                reason: format!("lost track of the task's process: {e}"),
            },
        };
        let checkpoint = checkpoint.state();
        if !checkpoint.saved_by_task && checkpoint.last_error.is_some() {
            tracing::warn!(node_id = %self.node_id, job_id = a.job_id, task_id = a.task_id, files = checkpoint.files, "the task saved no checkpoint, and its output names an error in its checkpoint dir (`jobs show` has the line)");
        }
        // Unfinished, the job goes on from its checkpoint, here or on
        // another node: the coordinator has it before it hears of the stop.
        let done = matches!(
            event,
            TaskEvent::Exited {
                exit_code: Some(0),
                cancelled: false,
                ..
            }
        );
        match self.mover.get() {
            Some(m) if !done => {
                let stopping = self.stopping.load(std::sync::atomic::Ordering::SeqCst);
                m.save((a.task_id, a.job_id), &dirs.checkpoints, !stopping)
                    .await;
            }
            Some(m) => m.finished(a.job_id).await,
            None => {}
        }
        self.finish(&a, event, tail, Some(checkpoint))
    }
}

/// Kills whatever survived of the tasks a stopped daemon left unfinished in
/// `journal` (their process groups and, where they have one, their
/// cgroups), and returns those tasks with their pids; the journal still
/// holds them as unfinished, for the next start to report. A pid is killed
/// only if it provably runs this data dir's task
/// ([`Confinement::runs_task`]): after a reboot the number may name an
/// unrelated process, and a copied data dir's journal names the pids of the
/// real edge's tasks.
pub fn kill_leftovers(
    journal: &Journal,
    confine: &Confinement,
) -> Result<Vec<(TaskAssignment, Option<u32>)>, JournalError> {
    let tasks = journal.unfinished_tasks()?;
    for (a, pid) in &tasks {
        if let Some(pid) = pid.filter(|pid| confine.runs_task(*pid, a.task_id)) {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        confine.kill(a.task_id);
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::progress::parse_progress;
    use super::*;
    use tidemill_proto::TaskProgress;
    use tidemill_runtime::clock::{ScaledClock, SharedClock, SystemClock};

    struct Harness {
        dir: tempfile::TempDir,
        journal: Arc<Mutex<Journal>>,
        exec: Arc<Executor>,
    }

    fn harness(grace_secs: u64) -> Harness {
        harness_on(grace_secs, Arc::new(SystemClock))
    }

    fn harness_on(grace_secs: u64, clock: SharedClock) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(Mutex::new(Journal::open(dir.path()).unwrap()));
        let cfg = TaskConfig {
            grace_secs,
            output_tail_lines: 3,
            work_dir: PathBuf::new(),
            user: "nobody".into(),
            keep_ended_hours: 1,
            checkpoint_retention_days: 1,
            uid_range: String::new(),
            checkpoint_dir: PathBuf::new(),
            network: crate::config::TaskNetwork::Host,
        };
        let confine = Confinement::none(&cfg, dir.path());
        let exec = Executor::new(
            journal.clone(),
            Arc::new(Notify::new()),
            cfg,
            dir.path().to_owned(),
            "n1".into(),
            (clock, Arc::new(SystemClock)),
            confine,
        );
        Harness { dir, journal, exec }
    }

    fn assign(task_id: u64, cmd: &[&str]) -> Command {
        Command::Assign(TaskAssignment {
            task_id,
            job_id: 100 + task_id,
            command: cmd.iter().map(|s| s.to_string()).collect(),
            env: [("GREETING".to_string(), "hi".to_string())].into(),
            memory_bytes: None,
            checkpoint_interval_s: None,
        })
    }

    /// Waits (bounded) until no task runs, then returns the journaled task events.
    async fn finished(h: &Harness) -> Vec<TaskStatus> {
        tokio::time::timeout(Duration::from_secs(20), h.exec.stop_when_idle())
            .await
            .expect("tasks end");
        journaled(h)
            .into_iter()
            .filter_map(|body| match body {
                ReportBody::Task(t) => Some(t),
                _ => None,
            })
            .collect()
    }

    /// What the journal holds for the coordinator, oldest first.
    fn journaled(h: &Harness) -> Vec<ReportBody> {
        let pending = h.journal.lock().unwrap().pending(100).unwrap();
        pending.into_iter().map(|r| r.body).collect()
    }

    impl Executor {
        async fn stop_when_idle(&self) {
            loop {
                let idle = self.idle.notified();
                if self.running.lock().unwrap().is_empty() {
                    return;
                }
                idle.await;
            }
        }
    }

    /// Output that reaches the pipe a moment after the main process exits (here
    /// from a child in its own session, which outlives the group kill) still
    /// lands in the tail when the clock runs a million times faster than the
    /// wall: draining the pipes is wall time.
    #[tokio::test]
    async fn output_tail_survives_an_accelerated_clock() {
        let h = harness_on(5, Arc::new(ScaledClock::new(0, 1e6)));
        h.exec
            .handle(assign(
                1,
                &[
                    "sh",
                    "-c",
                    // The main process exits only once the child has left its
                    // group, so the group kill cannot catch the child first.
                    "setsid sh -c 'touch detached; sleep 0.2; echo late' & \
                     until [ -e detached ]; do sleep 0.01; done; echo early",
                ],
            ))
            .unwrap();
        let events = finished(&h).await;
        let last = events.last().unwrap();
        assert_eq!(last.output_tail, ["early", "late"], "{last:?}");
    }

    #[tokio::test]
    async fn reports_exit_code_env_and_output_tail() {
        let h = harness(5);
        h.exec
            .handle(assign(
                1,
                &[
                    "sh",
                    "-c",
                    "for i in 1 2 3 4; do echo line$i; done; echo $GREETING >&2; exit 3",
                ],
            ))
            .unwrap();
        let events = finished(&h).await;
        assert!(matches!(events[0].event, TaskEvent::Started { .. }));
        let last = events.last().unwrap();
        assert_eq!(
            last.event,
            TaskEvent::Exited {
                exit_code: Some(3),
                signal: None,
                cancelled: false
            }
        );
        assert_eq!(last.output_tail.len(), 3);
        assert!(
            last.output_tail.contains(&"hi".to_string()),
            "{:?}",
            last.output_tail
        );
        assert!(
            last.output_tail.contains(&"line4".to_string()),
            "{:?}",
            last.output_tail
        );
    }

    #[tokio::test]
    async fn each_job_gets_a_checkpoint_dir_that_outlives_its_task() {
        let h = harness(5);
        let show = "test -d \"$TIDEMILL_CHECKPOINT_DIR\" && echo \"$TIDEMILL_CHECKPOINT_DIR\"";
        h.exec.handle(assign(6, &["sh", "-c", show])).unwrap();
        let events = finished(&h).await;
        let expected = h.dir.path().join("checkpoints").join("job-106");
        assert_eq!(
            events.last().unwrap().output_tail,
            vec![expected.display().to_string()]
        );
        assert!(expected.is_dir(), "kept after the task ends");
    }

    /// A task's end report says what its checkpoint dir holds: nothing, with
    /// the failed write's message, from a task whose writes all failed (yet
    /// exited 0); the files and bytes, saved by the task, from one that wrote.
    #[tokio::test]
    async fn the_end_report_says_whether_the_task_saved_a_checkpoint() {
        let h = harness(5);
        let failing = "echo 1 > \"$TIDEMILL_CHECKPOINT_DIR/gone/step\"; exit 0";
        h.exec.handle(assign(7, &["sh", "-c", failing])).unwrap();
        let ended = finished(&h).await;
        let state = ended
            .last()
            .unwrap()
            .checkpoint
            .clone()
            .expect("an end report");
        let dir = h.dir.path().join("checkpoints").join("job-107");
        assert_eq!(
            (state.files, state.bytes, state.saved_by_task),
            (0, 0, false)
        );
        let error = state.last_error.expect("the failed write's message");
        assert!(
            error.contains(&format!("{}/gone/step", dir.display())),
            "{error}"
        );

        let h = harness(5);
        let saving = "printf 12345 > \"$TIDEMILL_CHECKPOINT_DIR/step\"";
        h.exec.handle(assign(8, &["sh", "-c", saving])).unwrap();
        let ended = finished(&h).await;
        assert!(ended[0].checkpoint.is_none(), "a start event carries none");
        let state = ended
            .last()
            .unwrap()
            .checkpoint
            .clone()
            .expect("an end report");
        assert_eq!(
            (
                state.files,
                state.bytes,
                state.saved_by_task,
                state.last_error
            ),
            (1, 5, true, None)
        );
    }

    /// The job's checkpoint interval reaches the task in wall seconds: 1800 s
    /// of a clock running 1200 times faster than the wall are 1.5 s; an
    /// assignment without one sets nothing.
    #[tokio::test]
    async fn the_checkpoint_interval_reaches_the_task_in_wall_seconds() {
        let h = harness_on(5, Arc::new(ScaledClock::new(0, 1200.0)));
        let show = "echo \"[${TIDEMILL_CHECKPOINT_INTERVAL_S-unset}]\"";
        let Command::Assign(mut a) = assign(7, &["sh", "-c", show]) else {
            unreachable!()
        };
        a.checkpoint_interval_s = Some(1800.0);
        h.exec.handle(Command::Assign(a)).unwrap();
        h.exec.handle(assign(8, &["sh", "-c", show])).unwrap();
        let tails: Vec<Vec<String>> = finished(&h)
            .await
            .into_iter()
            .filter(|t| matches!(t.event, TaskEvent::Exited { .. }))
            .map(|t| t.output_tail)
            .collect();
        assert!(tails.contains(&vec!["[1.500]".to_string()]), "{tails:?}");
        assert!(tails.contains(&vec!["[unset]".to_string()]), "{tails:?}");
    }

    #[tokio::test]
    async fn a_missing_program_fails_with_the_reason() {
        let h = harness(5);
        h.exec
            .handle(assign(2, &["/nonexistent/train.py"]))
            .unwrap();
        let events = finished(&h).await;
        let TaskEvent::Failed { reason } = &events[0].event else {
            panic!("{events:?}")
        };
        assert!(
            reason.contains("/nonexistent/train.py") && reason.contains("No such file"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn cancel_terminates_then_kills_after_the_grace_period() {
        let h = harness(1);
        // The task ignores SIGTERM, so only SIGKILL ends it.
        h.exec
            .handle(assign(
                3,
                &[
                    "sh",
                    "-c",
                    "trap '' TERM; touch armed; while :; do sleep 0.1; done",
                ],
            ))
            .unwrap();
        h.exec.handle(assign(3, &["sh", "-c", "exit 0"])).unwrap();
        wait_armed(&h, 3).await;
        h.exec.handle(Command::Cancel { task_id: 3 }).unwrap();
        let events = finished(&h).await;
        let last = events.last().unwrap();
        assert_eq!(
            last.event,
            TaskEvent::Exited {
                exit_code: None,
                signal: Some(9),
                cancelled: true
            }
        );
        assert_eq!(
            events.len(),
            2,
            "the repeated assignment was ignored: {events:?}"
        );
    }

    #[tokio::test]
    async fn cancel_lets_a_cooperative_task_exit_on_sigterm() {
        let h = harness(30);
        h.exec.handle(assign(4, &["sh", "-c", "trap 'echo checkpointed; exit 0' TERM; touch armed; while :; do sleep 0.1; done"])).unwrap();
        wait_armed(&h, 4).await;
        h.exec.handle(Command::Cancel { task_id: 4 }).unwrap();
        let events = finished(&h).await;
        let last = events.last().unwrap();
        assert_eq!(
            last.event,
            TaskEvent::Exited {
                exit_code: Some(0),
                signal: None,
                cancelled: true
            }
        );
        assert_eq!(
            last.output_tail.last().map(String::as_str),
            Some("checkpointed")
        );
    }

    #[tokio::test]
    async fn a_daemon_stop_yields_its_tasks_after_their_checkpoint() {
        let h = harness(30);
        h.exec.handle(assign(8, &["sh", "-c", "trap 'echo checkpointed; exit 0' TERM; touch armed; while :; do sleep 0.1; done"])).unwrap();
        wait_armed(&h, 8).await;
        tokio::time::timeout(Duration::from_secs(20), h.exec.yield_all())
            .await
            .expect("the task ends on SIGTERM");
        let events = finished(&h).await;
        let last = events.last().unwrap();
        assert_eq!(
            last.event,
            TaskEvent::Yielded {
                exit_code: Some(0),
                signal: None,
                reason: "its edge daemon is stopping".into()
            }
        );
        assert_eq!(
            last.output_tail.last().map(String::as_str),
            Some("checkpointed")
        );
        // What the coordinator assigns while the daemon stops is handed back.
        h.exec.handle(assign(9, &["sh", "-c", "exit 0"])).unwrap();
        let events = finished(&h).await;
        let last = events.last().unwrap();
        assert_eq!(last.task_id, 9);
        assert!(
            matches!(last.event, TaskEvent::Yielded { signal: None, .. }),
            "{last:?}"
        );
    }

    #[tokio::test]
    async fn old_task_and_checkpoint_dirs_go_and_those_in_use_stay() {
        let h = harness(5);
        h.exec
            .handle(assign(11, &["sh", "-c", "touch armed; sleep 600"]))
            .unwrap();
        wait_armed(&h, 11).await;
        for dir in ["tasks/10", "checkpoints/job-110"] {
            std::fs::create_dir_all(h.dir.path().join(dir)).unwrap();
        }
        std::fs::create_dir_all(h.dir.path().join("checkpoints/job-111")).unwrap();
        let now = std::time::SystemTime::now();
        assert_eq!(h.exec.prune_dirs(now).unwrap(), 0, "nothing is an hour old");
        let later = now + Duration::from_secs(2 * 86_400);
        assert_eq!(h.exec.prune_dirs(later).unwrap(), 2);
        let left = |d: &str| h.dir.path().join(d).exists();
        assert!(!left("tasks/10") && !left("checkpoints/job-110"));
        assert!(
            left("tasks/11") && left("checkpoints/job-111"),
            "task 11 of job 111 still runs"
        );
        h.exec.handle(Command::Cancel { task_id: 11 }).unwrap();
        finished(&h).await;
    }

    #[test]
    fn recognises_its_own_task_processes_only() {
        // The child prints once it runs its own program, so its environment is
        // its own and not the parent's copy from before exec.
        use std::os::unix::process::CommandExt;
        let h = harness(1);
        let copy = tempfile::tempdir().unwrap();
        let copied = Confinement::none(&h.exec.cfg, copy.path());
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo ready; sleep 30"])
            .env("TIDEMILL_TASK_ID", "77")
            .env(crate::confine::MARKER_VAR, h.exec.confine.marker())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut ready,
        )
        .unwrap();
        assert_eq!(ready, "ready\n");
        let ours = &h.exec.confine;
        assert!(ours.runs_task(child.id(), 77));
        assert!(!ours.runs_task(child.id(), 7), "another task's id");
        assert!(
            !copied.runs_task(child.id(), 77),
            "a copy of the data dir elsewhere does not own it"
        );
        assert!(
            !ours.runs_task(std::process::id(), 77),
            "a process without the marker"
        );
        killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
        child.wait().unwrap();
        assert!(!ours.runs_task(child.id(), 77), "a process that is gone");
    }

    #[tokio::test]
    async fn an_assignment_that_sets_the_checkpoint_dir_fails_untouched() {
        let h = harness(5);
        let target = tempfile::tempdir().unwrap();
        let victim = target.path().join("victim");
        h.exec
            .handle(Command::Assign(TaskAssignment {
                task_id: 13,
                job_id: 113,
                command: vec!["true".into()],
                env: [(
                    "TIDEMILL_CHECKPOINT_DIR".to_string(),
                    victim.display().to_string(),
                )]
                .into(),
                memory_bytes: None,
                checkpoint_interval_s: None,
            }))
            .unwrap();
        let events = finished(&h).await;
        let TaskEvent::Failed { reason } = &events[0].event else {
            panic!("{events:?}")
        };
        assert!(
            reason.contains("TIDEMILL_CHECKPOINT_DIR") && reason.contains("the edge sets itself"),
            "{reason}"
        );
        assert!(!victim.exists(), "nothing made at the job's path");
    }

    #[tokio::test]
    async fn recover_reports_tasks_interrupted_by_a_crash() {
        let h = harness(5);
        let a = TaskAssignment {
            task_id: 5,
            job_id: 6,
            command: vec!["true".into()],
            env: Default::default(),
            memory_bytes: None,
            checkpoint_interval_s: None,
        };
        h.journal.lock().unwrap().accept_task(&a).unwrap();
        h.exec.recover().unwrap();
        let events = finished(&h).await;
        let TaskEvent::Yielded { reason, .. } = &events[0].event else {
            panic!("a crash is a yield, not a failure: {events:?}")
        };
        assert!(
            reason.contains("stopped without warning before the task started"),
            "{reason}"
        );
        assert!(
            h.journal
                .lock()
                .unwrap()
                .unfinished_tasks()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn progress_lines_give_their_iterations_and_nothing_else_does() {
        assert_eq!(parse_progress("TIDEMILL_PROGRESS iter=0"), Some(0));
        assert_eq!(parse_progress("TIDEMILL_PROGRESS iter=42"), Some(42));
        assert_eq!(
            parse_progress("TIDEMILL_PROGRESS iter=7 loss=0.31 epoch=2"),
            Some(7),
            "other pairs are ignored"
        );
        assert_eq!(
            parse_progress("TIDEMILL_PROGRESS loss=0.31 iter=8"),
            Some(8),
            "iter need not come first"
        );
        assert_eq!(
            parse_progress(&format!("TIDEMILL_PROGRESS iter={}", u64::MAX)),
            Some(u64::MAX)
        );
        for malformed in [
            "TIDEMILL_PROGRESS iter=18446744073709551616",
            "TIDEMILL_PROGRESS iter=99999999999999999999999999",
            "TIDEMILL_PROGRESS iter=-1",
            "TIDEMILL_PROGRESS iter=+1",
            "TIDEMILL_PROGRESS iter=1.5",
            "TIDEMILL_PROGRESS iter=",
            "TIDEMILL_PROGRESS iter=x",
            "TIDEMILL_PROGRESS loss=0.3",
            "TIDEMILL_PROGRESS",
            "TIDEMILL_PROGRESSiter=3",
            " TIDEMILL_PROGRESS iter=3",
            "tidemill_progress iter=3",
            "step 3 TIDEMILL_PROGRESS iter=3",
            "TIDEMILL_PROGRESS iteration=3",
        ] {
            assert_eq!(parse_progress(malformed), None, "{malformed:?}");
        }
    }

    /// Bytes a day that docs/links.md leaves under its bound: 5 400 000
    /// (0.5 kbit/s for a day) less the 5 391 000 it accounts for.
    const UPLINK_HEADROOM_BYTES: usize = 9_000;

    #[test]
    fn a_day_of_progress_reports_fits_the_uplink_headroom() {
        let batch = |reports: Vec<tidemill_proto::Report>| {
            tidemill_proto::encode(&tidemill_proto::EdgeMsg::Reports(reports))
                .unwrap()
                .len()
        };
        // The largest a report can encode to, added to a batch that goes anyway.
        let report = tidemill_proto::Report {
            seq: u64::MAX,
            body: ReportBody::Progress(TaskProgress {
                task_id: u64::MAX,
                job_id: u64::MAX,
                t_ms: i64::MAX,
                iterations: u64::MAX,
            }),
        };
        let each = batch(vec![report]) - batch(Vec::new());
        let per_day = 86_400_000 / PROGRESS_EVERY_MS as usize + 1;
        assert!(
            each * per_day <= UPLINK_HEADROOM_BYTES,
            "{per_day} reports of {each} bytes"
        );
    }

    #[test]
    fn the_gate_lets_one_report_through_per_interval_and_the_last_at_the_end() {
        let mut gate = ProgressGate::default();
        assert_eq!(gate.take_unsent(), None, "nothing seen");
        assert_eq!(gate.see(1, 1_000), Some((1, 1_000)), "the first at once");
        for (i, t) in (2..=59).zip((2_000..).step_by(10_000)) {
            assert_eq!(gate.see(i, t), None, "{i} at {t} ms is held back");
        }
        let due = 1_000 + PROGRESS_EVERY_MS;
        assert_eq!(gate.see(60, due), Some((60, due)), "one interval on");
        assert_eq!(gate.take_unsent(), None, "the latest count went out");
        assert_eq!(gate.see(61, due + 1), None);
        assert_eq!(gate.see(62, due + 2), None);
        assert_eq!(gate.take_unsent(), Some((62, due + 2)), "the end sends it");
        assert_eq!(gate.take_unsent(), None, "once");
    }

    #[tokio::test]
    async fn progress_lines_are_journaled_rate_limited_and_stay_in_the_tail() {
        let h = harness(5);
        h.exec
            .handle(assign(
                12,
                &[
                    "sh",
                    "-c",
                    "for i in 1 2 3 4 5; do echo \"TIDEMILL_PROGRESS iter=$i loss=0.$i\"; done; \
                     echo 'TIDEMILL_PROGRESS iter=oops'",
                ],
            ))
            .unwrap();
        let events = finished(&h).await;
        let progress: Vec<(u64, u64, u64)> = journaled(&h)
            .into_iter()
            .filter_map(|body| match body {
                ReportBody::Progress(p) => Some((p.task_id, p.job_id, p.iterations)),
                _ => None,
            })
            .collect();
        // Five lines within a moment: the first goes at once, the latest at the end.
        assert_eq!(progress, [(12, 112, 1), (12, 112, 5)]);
        let last = events.last().unwrap();
        assert!(
            matches!(
                last.event,
                TaskEvent::Exited {
                    exit_code: Some(0),
                    ..
                }
            ),
            "a malformed line is not an error: {last:?}"
        );
        assert!(
            last.output_tail
                .contains(&"TIDEMILL_PROGRESS iter=oops".to_string()),
            "{:?}",
            last.output_tail
        );
    }

    /// Waits (bounded) until the task has installed its signal handling, which
    /// it shows by creating `armed` in its work dir.
    async fn wait_armed(h: &Harness, task_id: u64) {
        let marker = h
            .dir
            .path()
            .join("tasks")
            .join(task_id.to_string())
            .join("armed");
        let armed = async {
            while !marker.exists() {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), armed)
            .await
            .expect("task arms its trap");
    }
}
