//! Node labels and the jobs that require them: a feasibility filter every
//! policy honours. Labels are set by an admin (never by a node), so a job
//! that requires `trusted` is only ever placed on a node an admin vetted,
//! whichever policy plans it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::decision::{Action, Explanation, RoundPlan, Shape, Verdict};

/// Which labels each node carries and which each job requires; a node or a
/// job not named carries or requires none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraints {
    /// Labels by node id.
    #[serde(default)]
    pub labels: BTreeMap<String, BTreeSet<String>>,
    /// Required labels by job id.
    #[serde(default)]
    pub requires: BTreeMap<u64, BTreeSet<String>>,
}

impl Constraints {
    /// Whether `node` carries every label `job` requires.
    pub fn allows(&self, job: u64, node: &str) -> bool {
        self.missing(job, node).is_empty()
    }

    /// The labels `job` requires that `node` lacks, in order.
    pub fn missing(&self, job: u64, node: &str) -> Vec<&str> {
        let Some(required) = self.requires.get(&job) else {
            return Vec::new();
        };
        let carried = self.labels.get(node);
        required
            .iter()
            .filter(|l| !carried.is_some_and(|c| c.contains(*l)))
            .map(String::as_str)
            .collect()
    }

    /// Why `job` may not use `nodes`, for its reason: the first node refused
    /// and the labels it lacks; `None` when every node is allowed.
    pub fn refusal<'a>(
        &self,
        job: u64,
        mut nodes: impl Iterator<Item = &'a str>,
    ) -> Option<String> {
        nodes.find_map(|node| {
            let missing = self.missing(job, node);
            (!missing.is_empty()).then(|| {
                format!(
                    "requires node labels [{}]: {node} lacks [{}] (an admin sets them with `tidemill-cloud nodes label`)",
                    self.required(job).join(", "),
                    missing.join(", ")
                )
            })
        })
    }

    /// The labels `job` requires, in order.
    pub fn required(&self, job: u64) -> Vec<&str> {
        self.requires
            .get(&job)
            .map_or(Vec::new(), |r| r.iter().map(String::as_str).collect())
    }

    /// `plan` with every decision that would start or move a job onto a
    /// node lacking a label it requires turned into a wait (a pause, for a
    /// job that runs elsewhere) without a guarantee, its reason saying why:
    /// the guard that holds whatever the policy decided.
    pub fn guard(&self, mut plan: RoundPlan) -> RoundPlan {
        if self.requires.is_empty() {
            return plan;
        }
        for d in &mut plan.decisions {
            let (target, instead) = match &d.action {
                Action::Start { on } => (on, Action::Wait),
                Action::Migrate { to, .. } => (to, Action::Pause),
                _ => continue,
            };
            let Some(why) = self.refusal(d.job_id, target.iter().map(|a| a.node_id.as_str()))
            else {
                continue;
            };
            d.action = instead;
            d.segments.clear();
            d.ahead = None;
            if matches!(d.verdict, Verdict::Guaranteed { .. }) {
                d.verdict = Verdict::BestEffort;
            }
            d.explanation = Explanation {
                shape: Shape::None,
                nodes: Vec::new(),
                expected_start_ms: None,
                expected_finish_ms: None,
                step: None,
                staging_s: 0.0,
                cloud_cost: 0.0,
                reason: why,
                why: Vec::new(),
            };
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::JobDecision;
    use crate::world::Assignment;

    fn start(job_id: u64, node: &str) -> JobDecision {
        JobDecision {
            job_id,
            verdict: Verdict::Guaranteed { since_ms: 0 },
            action: Action::Start {
                on: vec![Assignment {
                    node_id: node.into(),
                    workers: 1,
                }],
            },
            segments: Vec::new(),
            ahead: None,
            explanation: Explanation {
                shape: Shape::Edge,
                nodes: vec![node.into()],
                expected_start_ms: Some(0),
                expected_finish_ms: Some(1),
                step: None,
                staging_s: 0.0,
                cloud_cost: 0.0,
                reason: "planned".into(),
                why: Vec::new(),
            },
        }
    }

    #[test]
    fn the_guard_turns_a_start_on_an_unlabelled_node_into_a_wait_that_says_why() {
        let mut c = Constraints::default();
        c.requires.insert(1, ["trusted".to_string()].into());
        c.labels
            .insert("vetted".into(), ["trusted".to_string()].into());
        let plan = RoundPlan {
            now_ms: 0,
            decisions: vec![start(1, "rogue"), start(1, "vetted"), start(2, "rogue")],
        };
        let guarded = c.guard(plan);
        let d = &guarded.decisions;
        assert_eq!(d[0].action, Action::Wait);
        assert_eq!(d[0].verdict, Verdict::BestEffort);
        assert!(
            d[0].explanation.reason.contains("rogue lacks [trusted]"),
            "{}",
            d[0].explanation.reason
        );
        assert!(
            matches!(d[1].action, Action::Start { .. }),
            "a labelled node"
        );
        assert!(
            matches!(d[2].action, Action::Start { .. }),
            "a job with no needs"
        );
    }
}
