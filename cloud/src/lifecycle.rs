//! A job's life as pure transitions: what a task's event, or the loss of a
//! node, does to the job, and in words why. The store reads what the rules
//! need, calls these, and carries out the returned [`Transition`] in one
//! transaction; nothing here touches the database or the clock.

use tidemill_proto::TaskEvent;

use crate::job::JobPhase;

/// What the store knows of a task's job when the task reports an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskContext<'a> {
    /// The node the task runs on.
    pub node_id: &'a str,
    /// The coordinator had asked this task to checkpoint and stop (a move,
    /// a pause, or a lost node).
    pub yielding: bool,
    /// The job's other tasks still open and not being stopped.
    pub others_open: u32,
    /// The job's own progress reports have reached its work's iterations:
    /// a task that exits 0 as it is being stopped finished the job, rather
    /// than checkpointing to be resumed.
    pub work_done: bool,
}

/// What an event does to the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The task itself is now running (`true`) or done (`false`).
    pub task_running: bool,
    /// The job's new phase, if it changes; applied only to a job still
    /// queued or running.
    pub phase: Option<JobPhase>,
    /// The exit code to record with a final phase.
    pub exit_code: Option<i32>,
    /// Credit the job's progress up to the event before it waits again.
    pub settle_progress: bool,
    /// Ask the job's other tasks to checkpoint and stop.
    pub stop_other_ranks: bool,
    /// Why, for the job's reason and the event log.
    pub reason: String,
}

/// The job after one of its tasks reports `event`.
pub fn on_task_event(ctx: TaskContext<'_>, event: &TaskEvent) -> Transition {
    let node = ctx.node_id;
    let (how, ended, exit_code) = match event {
        TaskEvent::Started { pid } => {
            return Transition {
                task_running: true,
                phase: Some(JobPhase::Running),
                exit_code: None,
                settle_progress: false,
                stop_other_ranks: false,
                reason: format!("running on {node} (pid {pid})"),
            };
        }
        TaskEvent::Exited {
            exit_code,
            signal,
            cancelled,
        } => {
            let how = how_ended(*exit_code, *signal);
            let phase = if *cancelled {
                JobPhase::Cancelled
            } else if *exit_code == Some(0) {
                JobPhase::Succeeded
            } else {
                JobPhase::Failed
            };
            (how, phase, *exit_code)
        }
        TaskEvent::Yielded {
            exit_code,
            signal,
            reason,
        } => {
            if ctx.yielding {
                // Already being stopped: the edge's own stop only came first.
                (how_ended(*exit_code, *signal), JobPhase::Queued, *exit_code)
            } else {
                return on_edge_yield(node, reason);
            }
        }
        TaskEvent::Failed { reason } => (reason.clone(), JobPhase::Failed, None),
    };
    let done = |phase, settle_progress, stop_other_ranks, reason| Transition {
        task_running: false,
        phase,
        exit_code,
        settle_progress,
        stop_other_ranks,
        reason,
    };
    // A task that finished the job's work as it was asked to stop ended the
    // job: resuming it would pay a start-up to do nothing.
    if ctx.yielding && ctx.work_done && ended == JobPhase::Succeeded {
        let reason = format!("finished its work on {node} as it was being stopped ({how})");
        return done(Some(JobPhase::Succeeded), false, false, reason);
    }
    // A task being stopped no longer counts towards the job's outcome: the
    // job waits for the plan to resume it once its last such task is down.
    if ctx.yielding {
        return if ctx.others_open > 0 {
            done(
                None,
                false,
                false,
                format!("stopped on {node} to follow the plan ({how})"),
            )
        } else {
            let reason = format!(
                "checkpointed and stopped on {node} to follow the plan ({how}); waiting to resume"
            );
            done(Some(JobPhase::Queued), true, false, reason)
        };
    }
    if ended == JobPhase::Succeeded && ctx.others_open > 0 {
        let reason = format!("rank on {node} {how}; waiting for the other ranks");
        return done(None, false, false, reason);
    }
    let reason = match ended {
        JobPhase::Cancelled => format!("cancelled by an operator; {how}"),
        _ if ctx.others_open > 0 => format!("{how} on {node}; stopping the other ranks"),
        _ => how,
    };
    // One rank failing fails the job: its other ranks stop.
    done(Some(ended), false, ended == JobPhase::Failed, reason)
}

/// How a process ended, in words.
fn how_ended(exit_code: Option<i32>, signal: Option<i32>) -> String {
    match (exit_code, signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended".to_string(),
    }
}

/// A job whose tasks on `node_id` cannot go on, for the node's own reason
/// (`why`): they stop, the job's other ranks too, and it waits to resume
/// from its checkpoint, there or elsewhere.
fn requeued(node_id: &str, why: &str) -> Transition {
    Transition {
        task_running: false,
        phase: Some(JobPhase::Queued),
        exit_code: None,
        settle_progress: true,
        stop_other_ranks: true,
        reason: format!("{node_id} {why}; waiting to resume from the checkpoint"),
    }
}

/// The job after `node_id`, on which it had tasks, went offline.
pub fn on_node_lost(node_id: &str) -> Transition {
    requeued(node_id, "went offline")
}

/// The job after the edge on `node_id` stopped one of its tasks for its own
/// reason (`why`, the edge's words): a yield, never a cancel.
fn on_edge_yield(node_id: &str, why: &str) -> Transition {
    requeued(node_id, &format!("yielded the task: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(yielding: bool, others_open: u32) -> TaskContext<'static> {
        TaskContext {
            node_id: "e1",
            yielding,
            others_open,
            work_done: false,
        }
    }

    fn exited(code: Option<i32>, cancelled: bool) -> TaskEvent {
        TaskEvent::Exited {
            exit_code: code,
            signal: code.is_none().then_some(15),
            cancelled,
        }
    }

    #[test]
    fn a_start_runs_the_job() {
        let t = on_task_event(ctx(false, 0), &TaskEvent::Started { pid: 7 });
        assert_eq!((t.task_running, t.phase), (true, Some(JobPhase::Running)));
        assert_eq!(t.reason, "running on e1 (pid 7)");
    }

    #[test]
    fn the_last_rank_to_succeed_ends_the_job_and_earlier_ones_wait() {
        let early = on_task_event(ctx(false, 1), &exited(Some(0), false));
        assert_eq!(early.phase, None);
        assert_eq!(
            early.reason,
            "rank on e1 exited with code 0; waiting for the other ranks"
        );
        let last = on_task_event(ctx(false, 0), &exited(Some(0), false));
        assert_eq!(
            (last.phase, last.exit_code),
            (Some(JobPhase::Succeeded), Some(0))
        );
        assert!(!last.stop_other_ranks);
    }

    #[test]
    fn one_failing_rank_fails_the_job_and_stops_the_others() {
        let t = on_task_event(ctx(false, 2), &exited(Some(3), false));
        assert_eq!(t.phase, Some(JobPhase::Failed));
        assert!(t.stop_other_ranks);
        assert_eq!(
            t.reason,
            "exited with code 3 on e1; stopping the other ranks"
        );
        let lost = on_task_event(
            ctx(false, 0),
            &TaskEvent::Failed {
                reason: "no such file".into(),
            },
        );
        assert_eq!(
            (lost.phase, lost.reason.as_str()),
            (Some(JobPhase::Failed), "no such file")
        );
    }

    #[test]
    fn a_stopped_task_requeues_the_job_once_its_last_rank_is_down() {
        // Killed by SIGTERM after a checkpoint: not a failure.
        let first = on_task_event(ctx(true, 1), &exited(None, false));
        assert_eq!((first.phase, first.settle_progress), (None, false));
        let last = on_task_event(ctx(true, 0), &exited(None, false));
        assert_eq!(
            (last.phase, last.settle_progress),
            (Some(JobPhase::Queued), true)
        );
        assert_eq!(
            last.reason,
            "checkpointed and stopped on e1 to follow the plan (killed by signal 15); waiting to resume"
        );
    }

    #[test]
    fn a_task_that_finished_its_work_as_it_was_stopped_ends_the_job() {
        let finished = TaskContext {
            work_done: true,
            ..ctx(true, 0)
        };
        let t = on_task_event(finished, &exited(Some(0), false));
        assert_eq!(
            (t.phase, t.exit_code, t.settle_progress),
            (Some(JobPhase::Succeeded), Some(0), false)
        );
        assert_eq!(
            t.reason,
            "finished its work on e1 as it was being stopped (exited with code 0)"
        );
        // Killed before its exit: stopped, whatever it reported.
        let killed = on_task_event(finished, &exited(None, false));
        assert_eq!(killed.phase, Some(JobPhase::Queued));
    }

    #[test]
    fn a_cancel_and_a_lost_node_are_worded_for_the_operator() {
        let t = on_task_event(ctx(false, 0), &exited(None, true));
        assert_eq!(t.phase, Some(JobPhase::Cancelled));
        assert_eq!(t.reason, "cancelled by an operator; killed by signal 15");
        let lost = on_node_lost("e3");
        assert_eq!(
            (lost.phase, lost.settle_progress, lost.stop_other_ranks),
            (Some(JobPhase::Queued), true, true)
        );
        assert_eq!(
            lost.reason,
            "e3 went offline; waiting to resume from the checkpoint"
        );
    }

    #[test]
    fn an_edge_that_stops_its_task_requeues_the_job_and_never_cancels_it() {
        let yielded = TaskEvent::Yielded {
            exit_code: None,
            signal: Some(15),
            reason: "the edge daemon is stopping".into(),
        };
        let t = on_task_event(ctx(false, 1), &yielded);
        assert_eq!(
            (
                t.phase,
                t.settle_progress,
                t.stop_other_ranks,
                t.task_running
            ),
            (Some(JobPhase::Queued), true, true, false)
        );
        assert_eq!(
            t.reason,
            "e1 yielded the task: the edge daemon is stopping; waiting to resume from the checkpoint"
        );
        // A task the coordinator had already asked to stop ends as that stop.
        let asked = on_task_event(ctx(true, 0), &yielded);
        assert_eq!(
            (asked.phase, asked.settle_progress),
            (Some(JobPhase::Queued), true)
        );
        assert!(
            asked.reason.starts_with("checkpointed and stopped on e1"),
            "{}",
            asked.reason
        );
    }
}
