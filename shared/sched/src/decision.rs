//! What a scheduling round returns: per job, the verdict, the action to take
//! now, the planned segments (the reservation to hand back next round) and a
//! serialisable explanation for `jobs show --json`.

use serde::{Deserialize, Serialize};

use crate::cost::StepTime;
use crate::schedule::Reason;
use crate::world::{Admission, Assignment};

/// The decisions of one round.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundPlan {
    /// The round's time, Unix ms.
    pub now_ms: i64,
    /// One decision per job in the snapshot, by job id.
    pub decisions: Vec<JobDecision>,
}

impl RoundPlan {
    /// The decision for `job_id`, if the job was in the snapshot.
    pub fn decision(&self, job_id: u64) -> Option<&JobDecision> {
        self.decisions.iter().find(|d| d.job_id == job_id)
    }
}

/// The admission verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "verdict")]
pub enum Verdict {
    /// Will meet its deadline; capacity is reserved for it.
    Guaranteed {
        /// When the guarantee was given, Unix ms.
        since_ms: i64,
    },
    /// Runs on leftover capacity without a promise.
    BestEffort,
    /// Turned away (SLO job that cannot be guaranteed and asked for `reject`).
    Rejected,
}

impl Verdict {
    /// The verdict's name, as its JSON form tags it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Guaranteed { .. } => "guaranteed",
            Verdict::BestEffort => "best-effort",
            Verdict::Rejected => "rejected",
        }
    }

    /// The admission state to store for the next round; `None` once rejected.
    pub fn admission(&self) -> Option<Admission> {
        match *self {
            Verdict::Guaranteed { since_ms } => Some(Admission::Guaranteed { since_ms }),
            Verdict::BestEffort => Some(Admission::BestEffort),
            Verdict::Rejected => None,
        }
    }
}

/// What the executor should do with the job now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum Action {
    /// Start (or resume after a pause) on these nodes.
    Start {
        /// Where.
        on: Vec<Assignment>,
    },
    /// Keep running where it is.
    Continue,
    /// Checkpoint, move the checkpoint, restart elsewhere.
    Migrate {
        /// Current placement.
        from: Vec<Assignment>,
        /// New placement.
        to: Vec<Assignment>,
    },
    /// Checkpoint and stop; the plan resumes it later.
    Pause,
    /// Stay queued.
    Wait,
    /// Drop the job.
    Reject,
}

impl Action {
    /// What a job on `location` (running there or not) is told so that it
    /// runs on `now`, or does not run now (`None`).
    pub fn toward(running: bool, location: &[Assignment], now: Option<Vec<Assignment>>) -> Action {
        match now {
            Some(on) if running && on == location => Action::Continue,
            Some(on) if running => Action::Migrate {
                from: location.to_vec(),
                to: on,
            },
            Some(on) => Action::Start { on },
            None if running => Action::Pause,
            None => Action::Wait,
        }
    }
}

/// One stretch of a plan on a fixed placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Start, Unix ms.
    pub start_ms: i64,
    /// End, Unix ms (exclusive): the end of its last slot, or the finish.
    pub end_ms: i64,
    /// Where the workers run.
    pub on: Vec<Assignment>,
    /// Staging / migration / restart before the first step, seconds.
    pub startup_s: f64,
    /// Predicted step time on this placement.
    pub step: StepTime,
    /// Iterations this segment completes.
    pub iters: f64,
    /// Money spent on cloud GPUs in it, currency units.
    pub cloud_cost: f64,
}

/// Which kind of placement the plan uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Nothing planned.
    None,
    /// Cloud only.
    Cloud,
    /// One edge node.
    Edge,
    /// Several edge nodes synchronising over edge-edge links.
    MultiEdge,
    /// Edge windows first, then cloud for the rest.
    EdgeThenCloud,
}

/// Why the scheduler decided what it did, for operators.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// Kind of placement.
    pub shape: Shape,
    /// Every node the plan uses.
    pub nodes: Vec<String>,
    /// When the first segment starts, Unix ms.
    pub expected_start_ms: Option<i64>,
    /// When the job finishes per the plan, Unix ms; `None` when it does not finish within the horizon.
    pub expected_finish_ms: Option<i64>,
    /// Step-time split of the first segment.
    pub step: Option<StepTime>,
    /// Staging (or migration) before the first step, seconds.
    pub staging_s: f64,
    /// Planned cloud spend, currency units.
    pub cloud_cost: f64,
    /// The reason, in words: verdict, placement choice, tide events.
    pub reason: String,
    /// The typed reasons `reason` puts into words, in the order it names
    /// them, for code that acts on why rather than shows it. Not serialised:
    /// `reason` is the stored and shown form.
    #[serde(skip)]
    pub why: Vec<Reason>,
}

/// Everything decided about one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDecision {
    /// The job.
    pub job_id: u64,
    /// Admission verdict.
    pub verdict: Verdict,
    /// What to do now.
    pub action: Action,
    /// The plan from now on; pass back as `JobState::reservation`.
    pub segments: Vec<Segment>,
    /// Where the job runs ahead of that plan until the slot in progress ends,
    /// or the window it runs in does first
    /// (`Policy::run_ahead`), with the step time to credit its progress at;
    /// `None` when the action follows the plan's first stretch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ahead: Option<Segment>,
    /// Why.
    pub explanation: Explanation,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_names_match_their_json_tags() {
        for v in [
            Verdict::Guaranteed { since_ms: 1 },
            Verdict::BestEffort,
            Verdict::Rejected,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap()["verdict"], v.as_str());
        }
    }
}
