//! Dispatch: sends each connected edge the commands the store says it is owed,
//! and records each one the edge acknowledges.

use std::time::Duration;

use tidemill_proto::{CloudMsg, Command, EdgeMsg};
use tidemill_runtime::clock::{self, SystemClock};
use tidemill_runtime::frames;

use crate::coordinator::Coordinator;
use crate::store::{Owed, StoreError};

/// Sends a node every command it has not acknowledged, stopping at the first
/// failure; undelivered commands are retried next round or on reconnect.
pub(crate) async fn deliver(
    coord: &Coordinator,
    node_id: &str,
    conn: &quinn::Connection,
) -> Result<(), StoreError> {
    let owed = coord
        .store
        .lock()
        .unwrap()
        .owed(node_id, coord.cfg.scheduler.master_port)?;
    let timeout = Duration::from_secs(coord.cfg.link.stream_timeout_secs);
    for item in owed {
        let (cmd, task_id) = match &item {
            Owed::Assign(a) => (Command::Assign(a.clone()), a.task_id),
            Owed::Cancel(id) => (Command::Cancel { task_id: *id }, *id),
        };
        let command = CloudMsg::Command(cmd);
        let reply = clock::timeout(
            &SystemClock,
            timeout,
            frames::request_sized::<_, EdgeMsg>(conn, &command),
        )
        .await;
        let reply = reply.map(|r| {
            r.map(|(reply, sent, received)| {
                coord.metrics.count(&command, "sent", sent);
                coord.metrics.count(&reply, "received", received);
                reply
            })
        });
        match reply {
            Ok(Ok(EdgeMsg::CommandAck { task_id: acked })) if acked == task_id => {
                coord
                    .store
                    .lock()
                    .unwrap()
                    .acknowledged(&item, coord.clock.now_ms())?;
                tracing::info!(node_id = %node_id, task_id, command = ?kind(&item), "command delivered");
            }
            Ok(Ok(other)) => {
                tracing::warn!(node_id = %node_id, task_id, reply = ?other, "edge refused a command");
                return Ok(());
            }
            Ok(Err(e)) => {
                tracing::warn!(node_id = %node_id, task_id, error = %e, "cannot deliver a command; will retry");
                return Ok(());
            }
            Err(_) => {
                tracing::warn!(node_id = %node_id, task_id, "edge did not answer a command in time; will retry");
                return Ok(());
            }
        }
    }
    Ok(())
}

fn kind(o: &Owed) -> &'static str {
    match o {
        Owed::Assign(_) => "assign",
        Owed::Cancel(_) => "cancel",
    }
}
