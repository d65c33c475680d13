//! Nodes, placements and what a placement costs in time and bytes. The
//! formulas are the scheduler library's (`tidemill_sched::cost`); this module
//! only applies them to the simulator's placements, the same way the
//! scheduler's planner does, so every policy is charged by one model:
//!
//! - step time: [`cost::step_time`] over [`cost::class_compute_s`] of each
//!   node's class at the placement's total worker count, and the slowest
//!   inter-node link;
//! - start-up: [`cost::staging_s`] per node (the data shard from where the data
//!   is, the checkpoint from where the job last ran), the slowest node, plus
//!   the restart time; a job resumed where it stopped pays only the restart.
//!
//! The link between two nodes is the scheduler's: the pair's entry in the
//! link table's `measured` list, else its class default (see
//! `topology::LinkTiers::table`, which puts the same-site tier there). WAN
//! bytes keep the three classes: traffic inside a site counts as edge-edge.

use std::collections::HashMap;

use tidemill_sched::cost::{self, LinkSpec};
use tidemill_sched::{DataSite, JobSpec, LinkClass, LinkTable, ThroughputTables};

/// A placement: (node index, workers), sorted by node index; empty = not running.
pub type Place = Vec<(u32, u32)>;

/// A simulated node.
#[derive(Debug, Clone)]
pub struct SimNode {
    /// Node id.
    pub id: String,
    /// Device class.
    pub class: String,
    /// Training devices.
    pub devices: u32,
    /// Cloud price per GPU-hour, or `None` for an edge box.
    pub price_per_gpu_hour: Option<f64>,
    /// Index among edge boxes (into the edge world), for edge boxes.
    pub edge: Option<usize>,
    /// The edge site the box stands at; `None` for cloud nodes and boxes of no site.
    pub site: Option<String>,
}

impl SimNode {
    /// True for a cloud node.
    pub fn is_cloud(&self) -> bool {
        self.price_per_gpu_hour.is_some()
    }
}

/// Bytes moved over the WAN, per link class.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct WanBytes {
    /// Edge-to-edge bytes.
    pub edge_edge: f64,
    /// Cloud-to-edge bytes.
    pub cloud_edge: f64,
    /// Cloud-to-cloud bytes.
    pub cloud_cloud: f64,
}

impl WanBytes {
    /// Adds `bytes` to `class`.
    pub fn add(&mut self, class: LinkClass, bytes: f64) {
        match class {
            LinkClass::EdgeEdge => self.edge_edge += bytes,
            LinkClass::CloudEdge => self.cloud_edge += bytes,
            LinkClass::CloudCloud => self.cloud_cloud += bytes,
        }
    }

    /// Adds every class of `other`.
    pub fn add_all(&mut self, other: &WanBytes) {
        self.edge_edge += other.edge_edge;
        self.cloud_edge += other.cloud_edge;
        self.cloud_cloud += other.cloud_cloud;
    }
}

/// What a start or migration costs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Startup {
    /// Seconds before the first step.
    pub secs: f64,
    /// Bytes it moves.
    pub wan: WanBytes,
}

/// The cost model over the simulator's nodes.
#[derive(Debug, Clone)]
pub struct CostModel {
    /// Every node, cloud first.
    pub nodes: Vec<SimNode>,
    /// Throughput tables (measured and filled).
    pub tables: ThroughputTables,
    /// Link defaults per class.
    pub links: LinkTable,
    /// Overlap exponent γ.
    pub gamma: f64,
    /// Restart from a checkpoint, seconds.
    pub restart_s: f64,
    /// `links.measured` by node id, both ways round.
    measured: HashMap<String, HashMap<String, LinkSpec>>,
}

impl CostModel {
    /// The cost model over `nodes`, with `links` indexed for pair lookups.
    pub fn new(
        nodes: Vec<SimNode>,
        tables: ThroughputTables,
        links: LinkTable,
        gamma: f64,
        restart_s: f64,
    ) -> CostModel {
        let mut measured: HashMap<String, HashMap<String, LinkSpec>> = HashMap::new();
        for l in &links.measured {
            for (x, y) in [(&l.a, &l.b), (&l.b, &l.a)] {
                measured
                    .entry(x.clone())
                    .or_default()
                    .insert(y.clone(), l.link);
            }
        }
        CostModel {
            nodes,
            tables,
            links,
            gamma,
            restart_s,
            measured,
        }
    }

    /// The class of the path between two nodes.
    pub fn link_class(&self, a: u32, b: u32) -> LinkClass {
        match (
            self.nodes[a as usize].is_cloud(),
            self.nodes[b as usize].is_cloud(),
        ) {
            (true, true) => LinkClass::CloudCloud,
            (false, false) => LinkClass::EdgeEdge,
            _ => LinkClass::CloudEdge,
        }
    }

    /// The link between nodes `a` and `b`, and its class: the pair's entry
    /// in `links.measured`, else the class default, as the scheduler reads
    /// the same table.
    fn link(&self, a: u32, b: u32) -> (LinkClass, LinkSpec) {
        let c = self.link_class(a, b);
        let measured = self
            .measured
            .get(&self.nodes[a as usize].id)
            .and_then(|m| m.get(&self.nodes[b as usize].id));
        (c, *measured.unwrap_or(self.links.default_for(c)))
    }

    /// Iterations/s of `model` at batch `batch` on `workers` devices of `class`.
    pub fn iters_per_s(&self, class: &str, job: &JobSpec, workers: u32) -> Option<f64> {
        self.tables
            .lookup(class, &job.model, job.global_batch, workers)
            .map(|t| t.iters_per_s)
    }

    /// Step time of `job` on `place`, seconds, and the class of its slowest link
    /// (`None` on one node); `None` when a class has no table for the model.
    pub fn step(&self, job: &JobSpec, place: &[(u32, u32)]) -> Option<(f64, Option<LinkClass>)> {
        let n: u32 = place.iter().map(|p| p.1).sum();
        let mut compute = Vec::with_capacity(place.len());
        for &(q, _) in place {
            let class = &self.nodes[q as usize].class;
            let t = self.tables.lookup(class, &job.model, job.global_batch, n)?;
            compute.push(cost::class_compute_s(&t, place.len() as u32));
        }
        let bytes = job.model_bytes as f64;
        let mut slowest: Option<(LinkClass, LinkSpec)> = None;
        for (i, &(a, _)) in place.iter().enumerate() {
            for &(b, _) in &place[i + 1..] {
                let l = self.link(a, b);
                if slowest.is_none_or(|s| l.1.slower_than(&s.1, bytes)) {
                    slowest = Some(l);
                }
            }
        }
        let t = cost::step_time(
            compute,
            place.len() as u32,
            bytes,
            slowest.as_ref().map(|s| &s.1),
            self.gamma,
        );
        Some((t.total_s, slowest.map(|s| s.0)))
    }

    /// Start-up of `job` on `to`, its data and checkpoint being on `from`
    /// (where it last ran; empty before its first start).
    pub fn startup(&self, job: &JobSpec, from: &[(u32, u32)], to: &[(u32, u32)]) -> Startup {
        if from == to {
            return Startup {
                secs: self.restart_s,
                wan: WanBytes::default(),
            };
        }
        let n: u32 = to.iter().map(|p| p.1).sum();
        let shard = job.dataset_bytes as f64 / f64::from(n.max(1));
        let ckpt = job.checkpoint_bytes as f64;
        // The node holding the dataset, if it is one of ours; else it is in the cloud.
        let source = match &job.dataset_site {
            DataSite::Node(id) => self.nodes.iter().position(|n| &n.id == id),
            DataSite::Cloud => None,
        };
        let mut wan = WanBytes::default();
        let mut worst: f64 = 0.0;
        for &(q, w) in to {
            let held = from.iter().any(|f| f.0 == q);
            let data = if held || source == Some(q as usize) {
                None
            } else {
                let (class, spec) = match source {
                    Some(s) => self.link(s as u32, q),
                    None if self.nodes[q as usize].is_cloud() => (
                        LinkClass::CloudCloud,
                        *self.links.default_for(LinkClass::CloudCloud),
                    ),
                    None => (
                        LinkClass::CloudEdge,
                        *self.links.default_for(LinkClass::CloudEdge),
                    ),
                };
                wan.add(class, shard * f64::from(w));
                Some(spec)
            };
            let ck = match from.first() {
                Some(&(f, _)) if !held => {
                    let (class, spec) = self.link(f, q);
                    wan.add(class, ckpt);
                    Some(spec)
                }
                _ => None,
            };
            worst = worst.max(cost::staging_s(
                shard * f64::from(w),
                data.as_ref(),
                ckpt,
                ck.as_ref(),
            ));
        }
        Startup {
            secs: worst + self.restart_s,
            wan,
        }
    }

    /// Bytes one iteration's ring all-reduce puts on the wire over `place`:
    /// each of the n nodes sends `2(n−1)/n × M` (the ring of [`cost::ring_allreduce_s`]).
    pub fn allreduce_bytes(&self, job: &JobSpec, place: &[(u32, u32)]) -> f64 {
        let n = place.len() as f64;
        if n <= 1.0 {
            return 0.0;
        }
        2.0 * (n - 1.0) * job.model_bytes as f64
    }

    /// Indices of the cloud nodes.
    pub fn cloud_nodes(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.nodes.len() as u32).filter(|&q| self.nodes[q as usize].is_cloud())
    }

    /// GPUs in the cloud.
    pub fn cloud_gpus(&self) -> u32 {
        self.nodes
            .iter()
            .filter(|n| n.is_cloud())
            .map(|n| n.devices)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::topology::LinkTiers;
    use tidemill_sched::{LinkDefault, OnInfeasible};

    /// A cloud node `c`, boxes `a0` and `a1` at site `a`, box `b0` at site `b`;
    /// with `tiered`, boxes of one site share a 10 Gb/s, 0.2 ms link.
    fn model(tiered: bool) -> CostModel {
        let node = |id: &str, class: &str, site: Option<&str>, edge: Option<usize>| SimNode {
            id: id.into(),
            class: class.into(),
            devices: 1,
            price_per_gpu_hour: edge.is_none().then_some(3.0),
            edge,
            site: site.map(str::to_string),
        };
        let nodes = vec![
            node("c", "A", None, None),
            node("a0", "E", Some("a"), Some(0)),
            node("a1", "E", Some("a"), Some(1)),
            node("b0", "E", Some("b"), Some(2)),
        ];
        let link = |mbps, ms| LinkDefault {
            bandwidth_mbps: mbps,
            latency_ms: ms,
            loss: 0.0,
        };
        let tiers = LinkTiers {
            edge_edge: link(1000.0, 10.0),
            cloud_edge: link(100.0, 30.0),
            cloud_cloud: link(100_000.0, 0.05),
            same_site: tiered.then(|| link(10_000.0, 0.2)),
        };
        let mut tables = ThroughputTables::default();
        tables
            .insert_csv("E", "m", "e", "global_batch_size,1,2\n64,2.0,3.0\n")
            .unwrap();
        let links = tiers.table(&nodes);
        CostModel::new(nodes, tables, links, 2.0, 30.0)
    }

    fn job() -> JobSpec {
        JobSpec {
            id: 0,
            class: tidemill_sched::JobClass::Slo,
            submitted_ms: 0,
            deadline_ms: 1,
            iterations: 1.0,
            global_batch: 64,
            model: "m".into(),
            model_bytes: 100_000_000,
            dataset_bytes: 1_250_000_000,
            dataset_site: DataSite::Cloud,
            min_workers: 1,
            max_workers: 2,
            memory_per_worker_bytes: 0,
            checkpoint_bytes: 1_250_000_000,
            on_infeasible: OnInfeasible::Reject,
        }
    }

    #[test]
    fn the_link_table_holds_exactly_the_same_site_pairs() {
        let m = model(true);
        assert_eq!(m.links.measured.len(), 1);
        let l = &m.links.measured[0];
        assert_eq!((l.a.as_str(), l.b.as_str()), ("a0", "a1"));
        assert_eq!(l.link.bandwidth_bps, 1.25e9);
        assert!(model(false).links.measured.is_empty());
    }

    #[test]
    fn all_reduce_inside_a_site_uses_the_same_site_tier() {
        // Compute: 1 / 3 it/s at 2 workers. Ring of 2 nodes, M = 1e8 B:
        // T_n = 2(n−1)/n × M / B + 2(n−1) × latency.
        // Same site: 1e8 / 1.25e9 + 2 × 0.0002 = 0.0804 s.
        // Across sites: 1e8 / 1.25e8 + 2 × 0.01 = 0.82 s.
        // T = (T_c² + T_n²)^½ with γ = 2.
        let hand = |sync: f64| ((1.0f64 / 3.0).powi(2) + sync * sync).sqrt();
        let m = model(true);
        let (inside, class) = m.step(&job(), &[(1, 1), (2, 1)]).unwrap();
        assert!((inside - hand(0.0804)).abs() < 1e-12, "{inside}");
        assert_eq!(class, Some(LinkClass::EdgeEdge));
        let (across, _) = m.step(&job(), &[(1, 1), (3, 1)]).unwrap();
        assert!((across - hand(0.82)).abs() < 1e-12, "{across}");
        // Without the tier, the pair inside the site is edge-edge too.
        let flat = model(false).step(&job(), &[(1, 1), (2, 1)]).unwrap().0;
        assert!((flat - hand(0.82)).abs() < 1e-12, "{flat}");
    }

    #[test]
    fn checkpoint_moves_inside_a_site_use_the_same_site_tier() {
        let m = model(true);
        // Data shard from the cloud: 1.25e9 B / 12.5e6 B/s + 0.03 s = 100.03 s.
        // Checkpoint of 1.25e9 B: inside the site 1 s + 0.0002 s; across 10 s + 0.01 s.
        // Plus the 30 s restart.
        let inside = m.startup(&job(), &[(1, 1)], &[(2, 1)]);
        assert!(
            (inside.secs - (100.03 + 1.0002 + 30.0)).abs() < 1e-9,
            "{inside:?}"
        );
        let across = m.startup(&job(), &[(1, 1)], &[(3, 1)]);
        assert!(
            (across.secs - (100.03 + 10.01 + 30.0)).abs() < 1e-9,
            "{across:?}"
        );
        // Bytes inside a site count as edge-edge.
        assert_eq!(inside.wan.edge_edge, 1.25e9);
        assert_eq!(inside.wan.cloud_edge, 1.25e9);
    }

    #[test]
    fn a_dataset_on_a_box_is_staged_over_the_link_from_that_box() {
        let m = model(true);
        let on_a0 = JobSpec {
            dataset_site: DataSite::Node("a0".into()),
            ..job()
        };
        // To a1 (same site): 1.25e9 B / 1.25e9 B/s + 0.0002 s, plus the restart.
        let su = m.startup(&on_a0, &[], &[(2, 1)]);
        assert!((su.secs - (1.0002 + 30.0)).abs() < 1e-9, "{su:?}");
        // On a0 itself nothing moves.
        assert_eq!(m.startup(&on_a0, &[], &[(1, 1)]).secs, 30.0);
    }
}
