//! Where the coordinator puts jobs without `[work]`, which no policy can plan
//! against a deadline: each queued job, in submission order, goes to the
//! first online node (by id) whose latest sample shows it idle enough and
//! that has a free task slot. (The registry's `first-fit` policy is the
//! simulator's baseline over GPUs, in [`crate::policies`].)

use serde::{Deserialize, Serialize};

use crate::snapshot::{NodeView, Placement, Plan, Snapshot, Waiting};

/// How idle a node must be, and how many such tasks it may hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstFitLimits {
    /// A node is idle enough when its latest CPU utilisation is below this, percent.
    pub idle_cpu_threshold_pct: f32,
    /// Tasks a node may run at once.
    pub max_tasks_per_node: u32,
}

/// Places queued jobs first-fit; see the module docs.
pub fn first_fit(snap: &Snapshot, policy: &FirstFitLimits) -> Plan {
    let mut nodes: Vec<_> = snap.nodes.iter().filter(|n| n.online).collect();
    nodes.sort_by(|a, b| a.id.cmp(&b.id));
    let mut load: Vec<u32> = nodes.iter().map(|n| n.running_tasks).collect();
    let idle = |cpu: Option<f32>| cpu.is_some_and(|c| c < policy.idle_cpu_threshold_pct);

    let mut plan = Plan::default();
    let mut jobs: Vec<_> = snap.queued.iter().collect();
    jobs.sort_by_key(|j| (j.submitted_ms, j.id));
    for job in jobs {
        let allowed = |n: &NodeView| snap.constraints.allows(job.id, &n.id);
        let slot = nodes
            .iter()
            .zip(load.iter_mut())
            .find(|(n, l)| allowed(n) && idle(n.cpu_util) && **l < policy.max_tasks_per_node);
        if let Some((node, l)) = slot {
            *l += 1;
            plan.placements.push(Placement {
                job_id: job.id,
                node_id: node.id.clone(),
            });
            continue;
        }
        let usable: Vec<&NodeView> = nodes.iter().copied().filter(|n| allowed(n)).collect();
        let mut reason = if nodes.is_empty() {
            "no node is online".to_string()
        } else if usable.is_empty() {
            let ids = nodes.iter().map(|n| n.id.as_str());
            snap.constraints.refusal(job.id, ids).unwrap_or_default()
        } else if !usable.iter().any(|n| idle(n.cpu_util)) {
            let seen: Vec<String> = usable
                .iter()
                .map(|n| match n.cpu_util {
                    Some(c) => format!("{} at {c:.0}%", n.id),
                    None => format!("{} not sampled yet", n.id),
                })
                .collect();
            format!(
                "no online node is below the {:.0}% CPU idle threshold ({})",
                policy.idle_cpu_threshold_pct,
                seen.join(", ")
            )
        } else {
            format!(
                "every idle node already runs {} task(s), the most allowed",
                policy.max_tasks_per_node
            )
        };
        if job.deadline_ms <= snap.now_ms {
            reason.push_str("; its deadline has already passed");
        }
        plan.waiting.push(Waiting {
            job_id: job.id,
            reason,
        });
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::JobView;

    const POLICY: FirstFitLimits = FirstFitLimits {
        idle_cpu_threshold_pct: 30.0,
        max_tasks_per_node: 1,
    };

    fn node(id: &str, online: bool, cpu: Option<f32>, running: u32) -> NodeView {
        NodeView {
            id: id.into(),
            online,
            cpu_util: cpu,
            running_tasks: running,
        }
    }

    fn job(id: u64, submitted_ms: i64) -> JobView {
        JobView {
            id,
            submitted_ms,
            deadline_ms: 1_000,
        }
    }

    #[test]
    fn places_in_submission_order_on_the_first_idle_node() {
        let snap = Snapshot {
            now_ms: 0,
            nodes: vec![
                node("c", true, Some(5.0), 0),
                node("a", true, Some(90.0), 0),
                node("b", true, Some(10.0), 0),
                node("d", false, Some(0.0), 0),
            ],
            queued: vec![job(2, 20), job(1, 10), job(3, 30)],
            ..Snapshot::default()
        };
        let plan = first_fit(&snap, &POLICY);
        let placed: Vec<_> = plan
            .placements
            .iter()
            .map(|p| (p.job_id, p.node_id.as_str()))
            .collect();
        assert_eq!(placed, vec![(1, "b"), (2, "c")]);
        assert_eq!(plan.waiting.len(), 1);
        assert_eq!(plan.waiting[0].job_id, 3);
        assert!(
            plan.waiting[0].reason.contains("already runs 1 task"),
            "{:?}",
            plan.waiting
        );
    }

    #[test]
    fn explains_why_nothing_fits() {
        let busy = Snapshot {
            now_ms: 5_000,
            nodes: vec![node("a", true, Some(75.0), 0), node("b", true, None, 0)],
            queued: vec![job(1, 0)],
            ..Snapshot::default()
        };
        let plan = first_fit(&busy, &POLICY);
        let reason = &plan.waiting[0].reason;
        assert!(
            reason.contains("a at 75%") && reason.contains("b not sampled yet"),
            "{reason}"
        );
        assert!(reason.contains("deadline has already passed"), "{reason}");
        let empty = Snapshot {
            now_ms: 0,
            nodes: vec![],
            queued: vec![job(1, 0)],
            ..Snapshot::default()
        };
        assert_eq!(
            first_fit(&empty, &POLICY).waiting[0].reason,
            "no node is online"
        );
    }

    #[test]
    fn a_job_requiring_labels_goes_only_to_a_node_that_carries_them() {
        let mut snap = Snapshot {
            now_ms: 0,
            nodes: vec![node("a", true, Some(0.0), 0), node("b", true, Some(0.0), 0)],
            queued: vec![job(1, 0)],
            ..Snapshot::default()
        };
        snap.constraints
            .requires
            .insert(1, ["trusted".to_string()].into());
        let plan = first_fit(&snap, &POLICY);
        assert!(plan.placements.is_empty());
        let reason = &plan.waiting[0].reason;
        assert!(reason.contains("a lacks [trusted]"), "{reason}");
        snap.constraints
            .labels
            .insert("b".into(), ["trusted".to_string()].into());
        let placed = first_fit(&snap, &POLICY).placements;
        assert_eq!(placed[0].node_id, "b", "{placed:?}");
    }
}
