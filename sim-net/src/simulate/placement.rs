//! Nodes, placements and what a placement costs in time and bytes. The
//! formulas are the scheduler library's (`tidemill_sched::cost`); this module
//! only applies them to the simulator's placements, the same way the
//! scheduler's planner does, so every policy is charged by one model:
//!
//! - step time: [`cost::step_time`] over the throughput of each node's class at
//!   the placement's total worker count, and the slowest inter-node link;
//! - start-up: [`cost::staging_s`] per node (the data shard from where the data
//!   is, the checkpoint from where the job last ran), the slowest node, plus
//!   the restart time; a job resumed where it stopped pays only the restart.

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
}

impl CostModel {
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

    fn link(&self, a: u32, b: u32) -> (LinkClass, LinkSpec) {
        let c = self.link_class(a, b);
        (c, *self.links.default_for(c))
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
            compute.push(1.0 / self.iters_per_s(&self.nodes[q as usize].class, job, n)?);
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
        let mut wan = WanBytes::default();
        let mut worst: f64 = 0.0;
        for &(q, w) in to {
            let held = from.iter().any(|f| f.0 == q);
            let data = if held {
                None
            } else {
                let class = match &job.dataset_site {
                    DataSite::Node(_) if !self.nodes[q as usize].is_cloud() => LinkClass::EdgeEdge,
                    _ if self.nodes[q as usize].is_cloud() => LinkClass::CloudCloud,
                    _ => LinkClass::CloudEdge,
                };
                wan.add(class, shard * f64::from(w));
                Some(*self.links.default_for(class))
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
