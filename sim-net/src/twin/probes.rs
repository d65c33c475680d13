//! The emulated edges' link probes: what a probe of a link would measure,
//! read off the scenario's link model instead of timed over a socket. The
//! coordinator learns the links it plans with (a site's LAN among them) the
//! way it does from real edges: it names the peers to probe, and the edge
//! reports `Links`.

use tidemill_proto::{CLOUD_PEER, LinkSample};
use tidemill_sched::cost::LinkSpec;
use tidemill_sched::placement::{CostModel, PlacementCost};

/// The scenario's links by node id.
pub(crate) struct ModelLinks {
    cost: PlacementCost,
    /// The first cloud node: the coordinator's end of an edge box's link to
    /// "cloud".
    cloud: Option<usize>,
}

impl ModelLinks {
    /// The links of `model`'s nodes.
    pub(crate) fn new(model: &CostModel) -> ModelLinks {
        let nodes = model.nodes();
        let ends = nodes.iter().map(|n| (n.id.as_str(), n.is_cloud()));
        ModelLinks {
            cost: PlacementCost::new(ends, model.links()),
            cloud: nodes.iter().position(|n| n.is_cloud()),
        }
    }

    /// What node `from` measures at `t_ms` to each of `peers` (node ids, or
    /// [`CLOUD_PEER`], which only an edge box measures: a cloud node's link
    /// to the coordinator is no edge link); a peer the model does not know
    /// is left out.
    pub(crate) fn measure<'a>(
        &self,
        from: usize,
        peers: impl IntoIterator<Item = &'a str>,
        t_ms: i64,
    ) -> Vec<LinkSample> {
        peers
            .into_iter()
            .filter_map(|peer| {
                let to = if peer == CLOUD_PEER {
                    self.cloud.filter(|_| !self.cost.is_cloud(from))?
                } else {
                    self.cost.index_of(peer)?
                };
                Some(sample(peer, &self.cost.link(from, to).1, t_ms))
            })
            .collect()
    }
}

/// The shortest round trip a probe reads, ms: the coordinator refuses a
/// link sample whose round trip is not positive, and a scenario may give a
/// link no latency.
const MIN_RTT_MS: f64 = 0.001;

/// A probe's reading of `link`: the round trip is twice the one-way latency,
/// in ms (at least [`MIN_RTT_MS`]); the rate is the link's bandwidth; no
/// bytes are spent.
fn sample(peer: &str, link: &LinkSpec, t_ms: i64) -> LinkSample {
    LinkSample {
        peer: peer.to_string(),
        t_ms,
        rtt_ms: (2000.0 * link.latency_s).max(MIN_RTT_MS),
        bandwidth_bps: link.bandwidth_bps,
        loss: link.loss,
        probe_sent_bytes: 0,
        probe_received_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use tidemill_sched::{LinkDefault, LinkTable};

    use super::*;
    use crate::simulate::testkit::{cloud_node, edge_node};
    use crate::simulate::topology::LinkTiers;

    fn tier(bandwidth_mbps: f64, latency_ms: f64) -> LinkDefault {
        LinkDefault {
            bandwidth_mbps,
            latency_ms,
            loss: 0.0,
            congestion: Default::default(),
        }
    }

    /// A cloud node, two boxes of site s0 and one of site s1, with the MEC
    /// scenario's tiers.
    fn mec() -> ModelLinks {
        let mut nodes = vec![cloud_node("c0", "A100", 1)];
        for (k, site) in ["s0", "s0", "s1"].iter().enumerate() {
            let mut n = edge_node(&format!("e{k}"), "T4", k);
            n.site = Some(site.to_string());
            nodes.push(n);
        }
        let tiers = LinkTiers {
            edge_edge: tier(1000.0, 10.0),
            cloud_edge: tier(1000.0, 30.0),
            cloud_cloud: tier(100_000.0, 0.05),
            same_site: Some(tier(10_000.0, 0.2)),
        };
        let links: LinkTable = tiers.table(&nodes);
        let tables = tidemill_sched::ThroughputTables::default();
        ModelLinks::new(&CostModel::new(nodes, tables, links, 2.0, 30.0))
    }

    #[test]
    fn a_probe_reads_the_site_lan_the_metro_and_the_cloud_link_off_the_model() {
        let links = mec();
        let got = links.measure(1, ["e1", "e2", CLOUD_PEER, "nobody"], 5);
        let read: Vec<(&str, f64, f64)> = got
            .iter()
            .map(|s| (s.peer.as_str(), s.bandwidth_bps, s.rtt_ms))
            .collect();
        // By hand: 10 000 Mb/s = 1.25e9 B/s, round trip 2 × 0.2 ms; the metro
        // 1.25e8 B/s and 2 × 10 ms; the cloud 1.25e8 B/s and 2 × 30 ms.
        let want = [
            ("e1", 1.25e9, 0.4),
            ("e2", 1.25e8, 20.0),
            (CLOUD_PEER, 1.25e8, 60.0),
        ];
        assert_eq!(read.len(), want.len(), "{got:?}");
        for ((peer, bps, rtt), (wp, wbps, wrtt)) in read.iter().zip(want) {
            assert_eq!(*peer, wp);
            assert!(
                (bps - wbps).abs() < 1e-3 && (rtt - wrtt).abs() < 1e-9,
                "{got:?}"
            );
        }
        assert!(got.iter().all(|s| s.t_ms == 5 && s.probe_sent_bytes == 0));
    }

    #[test]
    fn a_cloud_node_reports_no_coordinator_link() {
        let got = mec().measure(0, [CLOUD_PEER, "e0"], 5);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].peer, "e0");
    }
}
