//! The re-check a plan passes when it is applied: a plan is made on a
//! snapshot, and by the time it is committed a node it names may have gone
//! offline, been forgotten, or filled up with work placed since (even earlier
//! in the same plan). Each check runs inside the transaction that writes the
//! plan, so it sees every task that transaction has already created.

use std::collections::BTreeMap;
use std::fmt;

use super::db;
use super::db::{OptionalExtension, Query, Transaction, params};
use tidemill_proto::Capabilities;

use super::{event, json_column, nodes};

/// What a node's capacity is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Capacity {
    /// Devices ([`nodes::devices`]); each open task holds its workers.
    Devices,
    /// Task slots, the first-fit policy's limit: each open task holds one.
    Slots(u32),
    /// Nothing is counted; the node need only be known and online.
    Online,
}

/// Why a placement no longer fits, naming the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Misfit {
    /// The coordinator has no such node.
    Unknown(String),
    /// The node is offline.
    Offline(String),
    /// An operator drained the node.
    Drained(String),
    /// The node has less room than the plan wants of it.
    Full {
        /// The node.
        node: String,
        /// Devices or slots free now.
        free: u32,
        /// Devices or slots the plan wants.
        wanted: u32,
        /// What is counted, plural: "devices" or "task slots".
        unit: &'static str,
    },
}

impl Misfit {
    /// The node that does not fit.
    pub(super) fn node(&self) -> &str {
        match self {
            Misfit::Unknown(node)
            | Misfit::Offline(node)
            | Misfit::Drained(node)
            | Misfit::Full { node, .. } => node,
        }
    }
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::Unknown(node) => write!(f, "node {node} is not known to the coordinator"),
            Misfit::Offline(node) => {
                write!(f, "node {node} went offline before the plan was applied")
            }
            Misfit::Drained(node) => write!(
                f,
                "node {node} is drained; `tidemill-cloud nodes uncordon {node}` lets jobs run there again"
            ),
            Misfit::Full {
                node,
                free,
                wanted,
                unit,
            } => write!(
                f,
                "node {node} has {free} free {unit}, the plan wanted {wanted}"
            ),
        }
    }
}

/// Checks that every node in `wants` (node id, devices or slots wanted there)
/// is known, online and has room for its share now. Room is the node's
/// capacity less what every open task there holds, tasks being stopped
/// included (they hold their devices until they exit), except `job`'s own
/// tasks, which a move frees. Returns the first node that does not fit.
pub(super) fn check(
    tx: &Transaction<'_>,
    job: i64,
    wants: &[(&str, u32)],
    capacity: Capacity,
) -> db::Result<Result<(), Misfit>> {
    let mut by_node: BTreeMap<&str, u32> = BTreeMap::new();
    for &(node, n) in wants {
        *by_node.entry(node).or_default() += n;
    }
    for (node, wanted) in by_node {
        let row: Option<(bool, bool, Capabilities, i64, i64)> = tx
            .query_row(
                "SELECT n.online, n.drained, n.capabilities, COUNT(t.id), COALESCE(SUM(t.workers), 0)
                 FROM nodes n
                 LEFT JOIN tasks t ON t.node_id = n.id AND t.state != 'done' AND t.job_id != ?2
                 WHERE n.id = ?1
                 GROUP BY n.id",
                params![node, job],
                |r| Ok((r.get(0)?, r.get(1)?, json_column(r, 2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()?;
        let Some((online, drained, caps, tasks, workers)) = row else {
            return Ok(Err(Misfit::Unknown(node.to_string())));
        };
        if !online {
            return Ok(Err(Misfit::Offline(node.to_string())));
        }
        if drained {
            return Ok(Err(Misfit::Drained(node.to_string())));
        }
        let (total, used, unit) = match capacity {
            Capacity::Online => continue,
            Capacity::Slots(max) => (max, tasks, "task slots"),
            Capacity::Devices => (nodes::devices(&caps.accelerators), workers, "devices"),
        };
        let free = u32::try_from(i64::from(total) - used).unwrap_or(0);
        if wanted > free {
            return Ok(Err(Misfit::Full {
                node: node.to_string(),
                free,
                wanted,
                unit,
            }));
        }
    }
    Ok(Ok(()))
}

/// Leaves `job` as it is because `misfit`: records `reason` (which names the
/// node and what was wrong) on the job and in the events, and logs it.
pub(super) fn refuse(
    tx: &Transaction<'_>,
    job: i64,
    now_ms: i64,
    misfit: &Misfit,
    reason: &str,
) -> db::Result<()> {
    tx.execute(
        "UPDATE jobs SET reason = ?2 WHERE id = ?1",
        params![job, reason],
    )?;
    event(
        tx,
        now_ms,
        Some(misfit.node()),
        Some(job),
        "plan-refused",
        reason,
    )?;
    tracing::warn!(job_id = job, node_id = %misfit.node(), %reason, "plan not applied: a node it names no longer fits");
    Ok(())
}
