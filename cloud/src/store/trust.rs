//! What the store keeps of how far each node is trusted: the capabilities it
//! joined with (a larger claim waits for an admin), the labels an admin gave
//! it, the assignments it acknowledged and never started (taken back, and
//! the node cordoned after too many), and how long the coordinator has
//! heard from it, which bounds the history its forecasts may claim.

use std::collections::BTreeSet;

use super::db;
use super::db::{OptionalExtension, Query, Transaction, params};
use serde::{Deserialize, Serialize};
use tidemill_proto::{Capabilities, Hello};
use tidemill_sched::Constraints;

use super::{Store, StoreError, event, tidal};
use crate::claims;

/// What `nodes` shows of a node's standing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeTrust {
    /// Labels an admin gave the node (`nodes label`), sorted.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Why the coordinator cordoned the node, if it did; `nodes uncordon`
    /// clears it.
    #[serde(default)]
    pub cordon_reason: Option<String>,
    /// Assignments the node acknowledged and did not start in time.
    #[serde(default)]
    pub unstarted: u32,
    /// Capabilities the node claimed beyond those it joined with, refused
    /// until `nodes accept-capabilities`.
    #[serde(default)]
    pub refused_claim: Option<Capabilities>,
}

/// A hello refused because it claims more than the node joined with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "node {node_id} claims more than it joined with ({}); an admin who trusts the new hardware runs `tidemill-cloud nodes accept-capabilities {node_id}`",
    over.join("; ")
)]
pub struct ClaimRefusal {
    /// The node.
    pub node_id: String,
    /// Each way the claim goes beyond the record.
    pub over: Vec<String>,
}

/// What `nodes accept-capabilities` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum Acceptance {
    /// The refused claim is now the node's record.
    Accepted {
        /// The capabilities now recorded.
        capabilities: Capabilities,
    },
    /// The node has no refused claim.
    NothingPending,
    /// No node has this id.
    UnknownNode,
}

/// An assignment taken back because its task did not start in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenBack {
    /// The node that acknowledged it.
    pub node_id: String,
    /// The job, queued again.
    pub job_id: u64,
    /// The task withdrawn.
    pub task_id: u64,
    /// Why the node is now cordoned, if this was one time too many.
    pub cordoned: Option<String>,
}

impl Store {
    /// Registers a hello whose capabilities are within those the node joined
    /// with (the first hello records them); a larger claim is refused and
    /// kept, until an admin accepts it, for `nodes` to show. Returns, as [`Store::register`], the
    /// highest sequence number stored.
    pub fn hello(
        &mut self,
        hello: &Hello,
        address: &str,
        now_ms: i64,
    ) -> Result<Result<u64, ClaimRefusal>, StoreError> {
        let err = self.sql_err();
        let joined: Option<Option<String>> = self
            .conn
            .query_row(
                "SELECT joined_capabilities FROM nodes WHERE id = ?1",
                [&hello.node_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(&err)?;
        let joined: Option<Capabilities> = joined
            .flatten()
            .and_then(|json| serde_json::from_str(&json).ok());
        if let Some(joined) = joined {
            let over = claims::excess(&hello.capabilities, &joined);
            if !over.is_empty() {
                let claim =
                    serde_json::to_string(&hello.capabilities).expect("capabilities serialise");
                let detail = over.join("; ");
                self.write(|tx| {
                    tx.execute(
                        "UPDATE nodes SET claimed_capabilities = ?2 WHERE id = ?1",
                        params![hello.node_id, claim],
                    )
                    .map_err(&err)?;
                    event(
                        tx,
                        now_ms,
                        Some(&hello.node_id),
                        None,
                        "capabilities-refused",
                        &detail,
                    )
                    .map_err(&err)
                })?;
                return Ok(Err(ClaimRefusal {
                    node_id: hello.node_id.clone(),
                    over,
                }));
            }
        }
        let seq = self.write(|tx| {
            let seq = super::nodes::register(tx, hello, now_ms, Some(address)).map_err(&err)?;
            tx.execute(
                "UPDATE nodes SET joined_capabilities = COALESCE(joined_capabilities, capabilities)
                 WHERE id = ?1",
                [&hello.node_id],
            )
            .map_err(&err)?;
            Ok(seq)
        })?;
        Ok(Ok(seq))
    }

    /// Makes a node's refused claim its record, so its next hello with it
    /// is welcomed.
    pub fn accept_capabilities(
        &mut self,
        node_id: &str,
        now_ms: i64,
    ) -> Result<Acceptance, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let claim: Option<Option<String>> = tx
                .query_row(
                    "SELECT claimed_capabilities FROM nodes WHERE id = ?1",
                    [node_id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(&err)?;
            let Some(claim) = claim else {
                return Ok(Acceptance::UnknownNode);
            };
            let Some(capabilities) = claim.and_then(|c| serde_json::from_str(&c).ok()) else {
                return Ok(Acceptance::NothingPending);
            };
            tx.execute(
                "UPDATE nodes SET joined_capabilities = claimed_capabilities,
                        claimed_capabilities = NULL WHERE id = ?1",
                [node_id],
            )
            .map_err(&err)?;
            event(
                tx,
                now_ms,
                Some(node_id),
                None,
                "capabilities-accepted",
                "by an admin",
            )
            .map_err(&err)?;
            Ok(Acceptance::Accepted { capabilities })
        })
    }

    /// Gives `node_id` the label (`on`) or takes it away; returns the
    /// node's labels now, or `None` for an unknown node.
    pub fn set_label(
        &mut self,
        node_id: &str,
        label: &str,
        on: bool,
        now_ms: i64,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let Some(mut labels) = labels_of(tx, node_id).map_err(&err)? else {
                return Ok(None);
            };
            let changed = if on {
                labels.insert(label.to_string())
            } else {
                labels.remove(label)
            };
            if changed {
                let json = serde_json::to_string(&labels).expect("labels serialise");
                tx.execute(
                    "UPDATE nodes SET labels = ?2 WHERE id = ?1",
                    params![node_id, json],
                )
                .map_err(&err)?;
                let what = if on { "label-added" } else { "label-removed" };
                event(tx, now_ms, Some(node_id), None, what, label).map_err(&err)?;
            }
            Ok(Some(labels.into_iter().collect()))
        })
    }

    /// Every node's labels and every live job's required labels.
    pub fn constraints(&self) -> Result<Constraints, StoreError> {
        let err = self.sql_err();
        let mut c = Constraints::default();
        let mut stmt = self
            .conn
            .prepare("SELECT id, labels FROM nodes WHERE labels != '[]'")
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(&err)?;
        for row in rows {
            let (id, json) = row.map_err(&err)?;
            c.labels
                .insert(id, serde_json::from_str(&json).unwrap_or_default());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, json_extract(spec, '$.requires') FROM jobs
                 WHERE state IN ('queued', 'running')
                   AND json_array_length(json_extract(spec, '$.requires')) > 0",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .map_err(&err)?;
        for row in rows {
            let (id, json) = row.map_err(&err)?;
            let required: BTreeSet<String> = serde_json::from_str(&json).unwrap_or_default();
            c.requires.insert(id as u64, required);
        }
        Ok(c)
    }

    /// Takes back every task acknowledged before `before_ms` that has not
    /// started: the task is withdrawn (and cancelled on its node, should it
    /// start late), its job queued again, and the node's count of unstarted
    /// assignments raised; a node that reaches `cordon_after` is cordoned
    /// as `nodes drain` does, with the reason shown in `nodes`.
    pub fn take_back_unstarted(
        &mut self,
        before_ms: i64,
        cordon_after: u32,
        now_ms: i64,
    ) -> Result<Vec<TakenBack>, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let overdue: Vec<(i64, i64, String)> = tx
                .prepare(
                    "SELECT t.id, t.job_id, t.node_id FROM tasks t JOIN jobs j ON j.id = t.job_id
                     WHERE t.state = 'assigned' AND t.dispatched = 1 AND t.dispatched_ms < ?1
                       AND t.yield_requested = 0 AND j.cancel_requested = 0
                     ORDER BY t.id",
                )
                .and_then(|mut s| {
                    s.query_map([before_ms], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                        .collect()
                })
                .map_err(&err)?;
            let mut out = Vec::new();
            for (task, job, node) in overdue {
                let cordoned =
                    take_back(tx, (task, job, &node), cordon_after, now_ms).map_err(&err)?;
                out.push(TakenBack {
                    node_id: node,
                    job_id: job as u64,
                    task_id: task as u64,
                    cordoned,
                });
            }
            Ok(out)
        })
    }
}

/// The labels of `node_id`, or `None` for an unknown node.
fn labels_of(tx: &Transaction<'_>, node_id: &str) -> db::Result<Option<BTreeSet<String>>> {
    let json: Option<String> = tx
        .query_row("SELECT labels FROM nodes WHERE id = ?1", [node_id], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(json.map(|j| serde_json::from_str(&j).unwrap_or_default()))
}

/// Withdraws one unstarted task and counts it against its node; returns the
/// cordon's reason if the node is cordoned now.
fn take_back(
    tx: &Transaction<'_>,
    (task, job, node): (i64, i64, &str),
    cordon_after: u32,
    now_ms: i64,
) -> db::Result<Option<String>> {
    tx.execute(
        "UPDATE tasks SET state = 'done', taken_back = 1 WHERE id = ?1",
        [task],
    )?;
    tidal::stop_tasks(tx, job)?;
    let why =
        format!("taken back from {node}: it acknowledged the task and did not start it in time");
    tx.execute(
        "UPDATE jobs SET state = 'queued', node = NULL, progress_ms = NULL, reason = ?2
         WHERE id = ?1 AND state IN ('queued', 'running')",
        params![job, why],
    )?;
    event(tx, now_ms, Some(node), Some(job), "task-not-started", &why)?;
    let (count, drained): (u32, bool) = tx.query_row(
        "UPDATE nodes SET unstarted = unstarted + 1 WHERE id = ?1 RETURNING unstarted, drained",
        [node],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if drained || count < cordon_after {
        return Ok(None);
    }
    let reason = format!(
        "cordoned: {count} assignments acknowledged and not started in time; check the edge, then `tidemill-cloud nodes uncordon {node}`"
    );
    tx.execute(
        "UPDATE nodes SET drained = 1, cordon_reason = ?2 WHERE id = ?1",
        params![node, reason],
    )?;
    tidal::move_off(tx, node, now_ms, &reason)?;
    event(tx, now_ms, Some(node), None, "node-drained", &reason)?;
    Ok(Some(reason))
}

#[cfg(test)]
mod tests {
    use crate::store::testkit::on_both_backends;
    use tidemill_proto::TaskEvent;
    use tidemill_sched::{FirstFitLimits, first_fit};

    use super::*;
    use crate::job::JobPhase;
    use crate::store::Owed;
    use crate::store::testkit::{hello, hello_with_gpus, samples, spec, task};

    on_both_backends! {
        fn a_larger_claim_waits_for_an_admin_and_a_smaller_one_is_welcome(db) {
            let mut store = db.open();
            assert_eq!(store.hello(&hello_with_gpus("n", 1), "127.0.0.1", 0).unwrap(), Ok(0));
            let refused = store
                .hello(&hello_with_gpus("n", 8), "127.0.0.1", 1)
                .unwrap()
                .unwrap_err();
            assert!(
                refused.to_string().contains("accept-capabilities n"),
                "{refused}"
            );
            let node = &store.nodes().unwrap()[0];
            assert_eq!(node.accelerators.len(), 1);
            assert_eq!(
                node.trust
                    .refused_claim
                    .as_ref()
                    .unwrap()
                    .accelerators
                    .len(),
                8
            );
            assert!(store.hello(&hello("n"), "127.0.0.1", 2).unwrap().is_ok(), "a GPU failed");
            assert!(matches!(
                store.accept_capabilities("n", 3).unwrap(),
                Acceptance::Accepted { .. }
            ));
            assert!(store.hello(&hello_with_gpus("n", 8), "127.0.0.1", 4).unwrap().is_ok());
            assert_eq!(
                store.accept_capabilities("n", 5).unwrap(),
                Acceptance::NothingPending
            );
            assert_eq!(
                store.accept_capabilities("x", 5).unwrap(),
                Acceptance::UnknownNode
            );
        }
    }

    on_both_backends! {
        fn an_unstarted_task_is_taken_back_cancelled_and_its_node_cordoned(db) {
            let mut store = db.open();
            store.register(&hello("n1"), 0).unwrap();
            store.apply_report("n1", &samples(1, 5.0), 1).unwrap();
            let id = store.submit(&spec(), 2).unwrap();
            let policy = FirstFitLimits {
                idle_cpu_threshold_pct: 30.0,
                max_tasks_per_node: 1,
            };
            let plan = first_fit(&store.snapshot(3, false).unwrap(), &policy);
            store.apply_plan(&plan, &policy, 3).unwrap();
            let owed = store.owed("n1", 29500).unwrap();
            let [Owed::Assign(a)] = &owed[..] else {
                panic!("{owed:?}")
            };
            store.acknowledged(&owed[0], 10).unwrap();
            assert!(
                store.take_back_unstarted(10, 1, 20).unwrap().is_empty(),
                "in time"
            );
            let back = store.take_back_unstarted(11, 1, 20).unwrap();
            assert_eq!((back[0].job_id, back[0].task_id), (id, a.task_id));
            assert!(back[0].cordoned.as_ref().unwrap().contains("uncordon n1"));
            assert_eq!(store.job(id).unwrap().unwrap().state, JobPhase::Queued);
            assert_eq!(
                store.owed("n1", 29500).unwrap(),
                vec![Owed::Cancel(a.task_id)]
            );
            let node = &store.nodes().unwrap()[0];
            assert!(node.drained && node.trust.unstarted == 1);
            // A late start of the task taken back changes nothing.
            let late = task(2, a.task_id, id, TaskEvent::Started { pid: 7 });
            store.apply_report("n1", &late, 30).unwrap();
            assert_eq!(store.job(id).unwrap().unwrap().state, JobPhase::Queued);
            assert!(store.uncordon("n1", 40).unwrap());
            assert!(store.nodes().unwrap()[0].trust.cordon_reason.is_none());
        }
    }
}
