//! One session per node. A second connection with a node's credentials while
//! its first is connected is a second process on a copied data dir, or the
//! same edge back after a crash. The first connection is asked whether it
//! still answers: if it does, the newcomer is refused (logged, counted) and
//! the first stays, so the two never evict each other; if not, the newcomer
//! replaces it at once instead of waiting out the idle timeout.

use std::net::SocketAddr;
use std::time::Duration;

use tidemill_runtime::quic;

use crate::coordinator::Coordinator;

/// Least time a live connection is given to answer: ample for an ack on any
/// link the edges use, short enough for a restarted edge not to notice.
const LEAST_ANSWER: Duration = Duration::from_secs(1);

/// Why the newcomer `conn` of `node_id` is refused, if it is: the node's
/// other connection still answers.
pub async fn refusal(
    coord: &Coordinator,
    node_id: &str,
    conn: &quinn::Connection,
    remote: SocketAddr,
) -> Option<String> {
    let existing = coord.session_of(node_id)?;
    if existing.stable_id() == conn.stable_id() {
        return None;
    }
    let within = (existing.rtt() * 4).max(LEAST_ANSWER);
    if quic::answers(&existing, within).await {
        coord.metrics.refused_duplicates.inc();
        let first = existing.remote_address();
        tracing::warn!(node_id = %node_id, %remote, %first,
            "refused a second connection of a connected node: its first connection still answers");
        return Some(format!(
            "node {node_id} is connected already (from {first}) and that connection answers: a second process with the same credentials (a copied data dir?) is refused; stop it, or join it as a node of its own with `tidemill-edge join`"
        ));
    }
    tracing::info!(node_id = %node_id, %remote, "the node's previous connection no longer answers; replacing it");
    None
}
