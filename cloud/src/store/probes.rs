//! What link probing needs from the store: when each of a node's links was
//! last measured, so that only due links are probed, and what probes have
//! cost each node, for the metrics.

use tidemill_proto::CLOUD_PEER;

use super::db::Query;
use super::{Store, StoreError};

/// Probe traffic one node has carried, as prober and as responder, in UDP
/// payload bytes, since the coordinator's database began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeBytes {
    /// The node.
    pub node_id: String,
    /// Bytes it sent: for its own probes, and answering its peers'.
    pub sent: u64,
    /// Bytes it received: the answers to its probes, and its peers' probes.
    pub received: u64,
}

impl Store {
    /// When each measured link between `node_id` and another edge was last
    /// measured, by either end: (the other edge, Unix ms of the latest sample).
    pub fn edge_links_of(&self, node_id: &str) -> Result<Vec<(String, i64)>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT other, MAX(t_ms) FROM (
                     SELECT to_node AS other, t_ms FROM links WHERE from_node = ?1 AND to_node != ?2
                     UNION ALL
                     SELECT from_node, t_ms FROM links WHERE to_node = ?1
                 ) AS l GROUP BY other ORDER BY other",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([node_id, CLOUD_PEER], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// The probe traffic of every node that has probed or been probed, by
    /// node id. A probe's bytes sent by the prober are its sent and the
    /// responder's received, and the other way round; the coordinator's side
    /// of edges' probes to it is not a node's and is left out.
    pub fn probe_bytes(&self) -> Result<Vec<ProbeBytes>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT node, SUM(sent), SUM(received) FROM (
                     SELECT from_node AS node, probe_sent AS sent, probe_received AS received FROM links
                     UNION ALL
                     SELECT to_node, probe_received, probe_sent FROM links WHERE to_node != ?1
                 ) AS l GROUP BY node ORDER BY node",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map([CLOUD_PEER], |r| {
                Ok(ProbeBytes {
                    node_id: r.get(0)?,
                    sent: r.get::<_, i64>(1)? as u64,
                    received: r.get::<_, i64>(2)? as u64,
                })
            })
            .map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::testkit::on_both_backends;
    use tidemill_proto::{LinkSample, Report, ReportBody};

    use super::*;
    use crate::store::testkit::hello;

    fn links(seq: u64, samples: &[(&str, i64, u64, u64)]) -> Report {
        Report {
            seq,
            body: ReportBody::Links(
                samples
                    .iter()
                    .map(|(peer, t_ms, sent, received)| LinkSample {
                        peer: (*peer).into(),
                        t_ms: *t_ms,
                        rtt_ms: 20.0,
                        bandwidth_bps: 1e6,
                        loss: 0.0,
                        probe_sent_bytes: *sent,
                        probe_received_bytes: *received,
                    })
                    .collect(),
            ),
        }
    }

    on_both_backends! {
        fn probe_bytes_add_up_per_node_as_prober_and_responder_and_count_once(db) {
            let mut store = db.open();
            for n in ["a", "b", "c"] {
                store.register(&hello(n), 0).unwrap();
            }
            let first = links(1, &[("cloud", 10, 30_000, 3_000), ("b", 10, 40_000, 6_000)]);
            store.apply_report("a", &first, 10).unwrap();
            // Resent after a reconnect: already stored, not counted again.
            store.apply_report("a", &first, 11).unwrap();
            // A passive sample costs nothing and adds nothing.
            store
                .apply_report("a", &links(2, &[("cloud", 20, 0, 0)]), 20)
                .unwrap();
            store
                .apply_report("c", &links(1, &[("b", 30, 45_000, 7_000)]), 30)
                .unwrap();
            assert_eq!(
                store.probe_bytes().unwrap(),
                vec![
                    ProbeBytes {
                        node_id: "a".into(),
                        sent: 70_000,
                        received: 9_000
                    },
                    ProbeBytes {
                        node_id: "b".into(),
                        sent: 13_000,
                        received: 85_000
                    },
                    ProbeBytes {
                        node_id: "c".into(),
                        sent: 45_000,
                        received: 7_000
                    },
                ]
            );
            // b's links to a and c were measured by them; the cloud link is not an edge's.
            assert_eq!(
                store.edge_links_of("b").unwrap(),
                vec![("a".to_string(), 10), ("c".to_string(), 30)]
            );
            assert_eq!(
                store.edge_links_of("a").unwrap(),
                vec![("b".to_string(), 10)]
            );
        }
    }
}
