//! The outbox: the commands each edge is owed (task assignments and cancels),
//! kept until the edge acknowledges them.

use std::collections::HashSet;

use super::db::{Query, params};
use tidemill_proto::TaskAssignment;

use super::{Store, StoreError, secrets};
use crate::job::JobFile;
use crate::rendezvous;

/// A command owed to a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Owed {
    /// Start this task.
    Assign(TaskAssignment),
    /// Stop this task.
    Cancel(u64),
}

/// A task whose assignment its node is owed.
const OWED_ASSIGN: &str = "t.state = 'assigned' AND t.dispatched = 0
    AND j.cancel_requested = 0 AND t.yield_requested = 0";

/// A task whose cancel its node is owed.
const OWED_CANCEL: &str = "t.dispatched = 1 AND t.cancel_sent = 0
    AND ((t.state != 'done' AND (j.cancel_requested = 1 OR t.yield_requested = 1))
         OR t.taken_back = 1)";

impl Store {
    /// The nodes owed at least one command: a round delivers to these
    /// alone, with one query, instead of asking [`Store::owed`] of every
    /// connected node.
    pub fn owed_nodes(&self) -> Result<HashSet<String>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT DISTINCT t.node_id FROM tasks t JOIN jobs j ON j.id = t.job_id
                 WHERE ({OWED_ASSIGN}) OR ({OWED_CANCEL})"
            ))
            .map_err(&err)?;
        let rows = stmt.query_map([], |r| r.get(0)).map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// Commands that `node_id` has not yet acknowledged: assignments of its
    /// tasks, and cancels of its running tasks and of those taken back.
    /// Assignments carry the rendezvous of their job, with rank 0 listening on
    /// `master_port`, and its secrets, opened here for the mutual-TLS link.
    pub fn owed(&self, node_id: &str, master_port: u16) -> Result<Vec<Owed>, StoreError> {
        let err = self.sql_err();
        let mut out = Vec::new();
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT t.id, t.job_id, j.spec, t.rank, t.world, t.workers, t.master_addr, j.secret_env
                 FROM tasks t JOIN jobs j ON j.id = t.job_id
                 WHERE t.node_id = ?1 AND {OWED_ASSIGN} ORDER BY t.id"
            ))
            .map_err(&err)?;
        let assigns = stmt
            .query_map([node_id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    (
                        r.get::<_, u32>(3)?,
                        r.get::<_, u32>(4)?,
                        r.get::<_, u32>(5)?,
                    ),
                    r.get::<_, String>(6)?,
                    r.get::<_, Option<Vec<u8>>>(7)?,
                ))
            })
            .map_err(&err)?;
        for row in assigns {
            let (task_id, job_id, spec, (rank, world, workers), master_addr, sealed) =
                row.map_err(&err)?;
            let spec: JobFile =
                serde_json::from_str(&spec).expect("stored specs were serialised by this build");
            let checkpoint_interval_s = Some(spec.checkpoint_interval_s());
            let mut env = spec.env;
            env.extend(secrets::open(&self.secrets, job_id, sealed.as_deref())?);
            rendezvous::apply(&mut env, rank, world, workers, &master_addr, master_port);
            out.push(Owed::Assign(TaskAssignment {
                task_id: task_id as u64,
                job_id: job_id as u64,
                checkpoint_interval_s,
                command: spec.command,
                env,
                memory_bytes: spec
                    .work
                    .as_ref()
                    .map(|w| w.memory_per_worker_bytes)
                    .filter(|&m| m > 0),
            }));
        }
        let mut stmt = self
            .conn
            .prepare_cached(&format!(
                "SELECT t.id FROM tasks t JOIN jobs j ON j.id = t.job_id
                 WHERE t.node_id = ?1 AND {OWED_CANCEL}"
            ))
            .map_err(&err)?;
        let cancels = stmt
            .query_map([node_id], |r| r.get::<_, i64>(0))
            .map_err(&err)?;
        for id in cancels {
            out.push(Owed::Cancel(id.map_err(&err)? as u64));
        }
        Ok(out)
    }

    /// Records that the node acknowledged a command at `now_ms`: from then
    /// on, an assignment's task has the start bound to start in.
    pub fn acknowledged(&mut self, owed: &Owed, now_ms: i64) -> Result<(), StoreError> {
        let err = self.sql_err();
        match owed {
            Owed::Assign(a) => self.conn.execute(
                "UPDATE tasks SET dispatched = 1, dispatched_ms = ?2 WHERE id = ?1",
                params![a.task_id as i64, now_ms],
            ),
            Owed::Cancel(id) => self.conn.execute(
                "UPDATE tasks SET cancel_sent = 1 WHERE id = ?1",
                [*id as i64],
            ),
        }
        .map_err(err)?;
        Ok(())
    }
}
