//! What a placement costs in time and bytes, written once: the scheduler's
//! planner (`schedule`), every baseline policy and the simulator's engine
//! price placements through [`PlacementCost`], over the formulas of
//! [`crate::cost`]:
//!
//! - the link between two nodes: the pair's entry in the link table's
//!   `measured` list, else its class default (edge-edge, cloud-edge or
//!   cloud-cloud, by which ends are cloud nodes);
//! - step time: [`cost::step_time`] over each node's compute seconds and the
//!   slowest inter-node link of the placement;
//! - start-up: [`cost::staging_s`] per node (the data shard from where the
//!   data is, the checkpoint from where the job last ran), the slowest node;
//!   callers add the restart;
//! - traffic by [`Tier`]: a site's LAN (two edge boxes of one site), between
//!   sites (two edge boxes of different sites, or of none), cloud-edge and
//!   cloud-cloud. The wide-area part is the last three.
//!
//! [`CostModel`] is the same over a pool of nodes with their throughput
//! tables, as the baselines and the simulator's engine see them.

use std::collections::HashMap;

use crate::cost::{self, LinkSpec, StepTime};
use crate::throughput::ThroughputTables;
use crate::world::{DataSite, JobSpec, LinkClass, LinkTable};

/// A placement: (node index, workers), sorted by node index; empty = not running.
pub type Place = Vec<(u32, u32)>;

/// A node index, as a placement stores it.
pub trait NodeIx: Copy + PartialEq {
    /// The index as `usize`.
    fn ix(self) -> usize;
}

impl NodeIx for usize {
    fn ix(self) -> usize {
        self
    }
}

impl NodeIx for u32 {
    fn ix(self) -> usize {
        self as usize
    }
}

/// The link classes in their declaration order, which indexes [`PlacementCost`]'s defaults.
const CLASSES: [LinkClass; 3] = [
    LinkClass::EdgeEdge,
    LinkClass::CloudEdge,
    LinkClass::CloudCloud,
];

/// The links between a set of nodes, by node index: the one place where a
/// pair of nodes becomes a link.
#[derive(Debug, Clone)]
pub struct PlacementCost {
    cloud: Vec<bool>,
    index_of: HashMap<String, usize>,
    measured: HashMap<(usize, usize), LinkSpec>,
    /// Per node, the nodes it has a measured link to, fastest first.
    near: Vec<Vec<usize>>,
    defaults: [LinkSpec; 3],
    /// Per node, the index of its edge site (`None`: cloud, or no site).
    site: Vec<Option<u32>>,
}

impl PlacementCost {
    /// The links between `nodes` (id, is a cloud node), in index order, per `table`.
    pub fn new<'a>(nodes: impl IntoIterator<Item = (&'a str, bool)>, table: &LinkTable) -> Self {
        let mut cloud = Vec::new();
        let mut index_of = HashMap::new();
        for (i, (id, is_cloud)) in nodes.into_iter().enumerate() {
            cloud.push(is_cloud);
            index_of.insert(id.to_string(), i);
        }
        let mut measured = HashMap::with_capacity(table.measured.len());
        let mut near: Vec<Vec<(usize, f64)>> = vec![Vec::new(); cloud.len()];
        for l in &table.measured {
            if let (Some(&a), Some(&b)) = (index_of.get(&l.a), index_of.get(&l.b))
                && a != b
                && measured.insert((a.min(b), a.max(b)), l.link).is_none()
            {
                near[a].push((b, l.link.bandwidth_bps));
                near[b].push((a, l.link.bandwidth_bps));
            }
        }
        let near = near
            .into_iter()
            .map(|mut v| {
                v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
                v.into_iter().map(|(q, _)| q).collect()
            })
            .collect();
        let site = vec![None; cloud.len()];
        PlacementCost {
            cloud,
            index_of,
            measured,
            near,
            defaults: CLASSES.map(|c| *table.default_for(c)),
            site,
        }
    }

    /// The same links, knowing each node's edge site (in index order), so
    /// that traffic between boxes of one site counts as [`Tier::SiteLan`].
    pub fn with_sites(mut self, sites: impl IntoIterator<Item = Option<u32>>) -> Self {
        for (q, s) in sites.into_iter().enumerate().take(self.site.len()) {
            self.site[q] = s;
        }
        self
    }

    /// The tier of the path between two nodes.
    pub fn tier(&self, a: usize, b: usize) -> Tier {
        match self.class(a, b) {
            LinkClass::CloudCloud => Tier::CloudCloud,
            LinkClass::CloudEdge => Tier::CloudEdge,
            LinkClass::EdgeEdge if self.site[a].is_some() && self.site[a] == self.site[b] => {
                Tier::SiteLan
            }
            LinkClass::EdgeEdge => Tier::BetweenSites,
        }
    }

    /// The index of node `id`, if it is one of these nodes.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.index_of.get(id).copied()
    }

    /// True for a cloud node.
    pub fn is_cloud(&self, q: usize) -> bool {
        self.cloud[q]
    }

    /// The nodes with a measured link to `q`, fastest first: the boxes of
    /// its site, where a multi-node placement around `q` syncs fastest.
    pub fn near(&self, q: usize) -> &[usize] {
        &self.near[q]
    }

    /// The class of the path between two nodes.
    pub fn class(&self, a: usize, b: usize) -> LinkClass {
        match (self.cloud[a], self.cloud[b]) {
            (true, true) => LinkClass::CloudCloud,
            (false, false) => LinkClass::EdgeEdge,
            _ => LinkClass::CloudEdge,
        }
    }

    /// The class default.
    pub fn default_for(&self, class: LinkClass) -> LinkSpec {
        self.defaults[class as usize]
    }

    /// The link between nodes `a` and `b`, and its class: measured, else the class default.
    pub fn link(&self, a: usize, b: usize) -> (LinkClass, LinkSpec) {
        let class = self.class(a, b);
        let spec = self
            .measured
            .get(&(a.min(b), a.max(b)))
            .copied()
            .unwrap_or_else(|| self.default_for(class));
        (class, spec)
    }

    /// Step time on `place` from each node's compute seconds (the slowest
    /// counts) and the slowest link between its nodes for `model_bytes` of
    /// gradients, with overlap exponent `gamma`; and that link's class
    /// (`None` on one node).
    pub fn step<I: NodeIx>(
        &self,
        compute_s: impl IntoIterator<Item = f64>,
        place: &[(I, u32)],
        model_bytes: f64,
        gamma: f64,
    ) -> (StepTime, Option<LinkClass>) {
        self.step_shared(compute_s, place, model_bytes, gamma, |_| 1)
    }

    /// [`PlacementCost::step`] with each site's LAN shared: a link between
    /// two boxes of site `s` carries `B / k` bytes/s, `B` its bandwidth and
    /// `k = lan_jobs(s)` (at least 1) the jobs syncing over that LAN at once.
    pub fn step_shared<I: NodeIx>(
        &self,
        compute_s: impl IntoIterator<Item = f64>,
        place: &[(I, u32)],
        model_bytes: f64,
        gamma: f64,
        lan_jobs: impl Fn(u32) -> u32,
    ) -> (StepTime, Option<LinkClass>) {
        let mut slowest: Option<(LinkClass, LinkSpec)> = None;
        for (i, &(a, _)) in place.iter().enumerate() {
            for &(b, _) in &place[i + 1..] {
                let mut l = self.link(a.ix(), b.ix());
                if let (Tier::SiteLan, Some(s)) = (self.tier(a.ix(), b.ix()), self.site[a.ix()]) {
                    l.1.bandwidth_bps /= f64::from(lan_jobs(s).max(1));
                }
                if slowest.is_none_or(|s| l.1.slower_than(&s.1, model_bytes)) {
                    slowest = Some(l);
                }
            }
        }
        let t = cost::step_time(
            compute_s,
            place.len() as u32,
            model_bytes,
            slowest.as_ref().map(|s| &s.1),
            gamma,
        );
        (t, slowest.map(|s| s.0))
    }

    /// Staging before the first step on `to`, the job's data and latest
    /// checkpoint being where it last ran, `from` (empty before its first
    /// start): per node, its data shard from the dataset's site (a node of
    /// ours, else the cloud) unless the node held the job, and the checkpoint
    /// from `from`'s first node; the slowest node counts. The restart is not
    /// included.
    pub fn staging<I: NodeIx>(&self, job: &JobSpec, from: &[(I, u32)], to: &[(I, u32)]) -> Startup {
        let n: u32 = to.iter().map(|p| p.1).sum();
        let shard = job.dataset_bytes as f64 / f64::from(n.max(1));
        let ckpt = job.checkpoint_bytes as f64;
        let source = match &job.dataset_site {
            DataSite::Node(id) => self.index_of(id),
            DataSite::Cloud => None,
        };
        let mut wan = Traffic::default();
        let mut worst: f64 = 0.0;
        for &(q, w) in to {
            let q = q.ix();
            let held = from.iter().any(|f| f.0.ix() == q);
            let data = if held || source == Some(q) {
                None
            } else {
                let (tier, spec) = match source {
                    Some(s) => (self.tier(s, q), self.link(s, q).1),
                    None if self.cloud[q] => {
                        (Tier::CloudCloud, self.default_for(LinkClass::CloudCloud))
                    }
                    None => (Tier::CloudEdge, self.default_for(LinkClass::CloudEdge)),
                };
                wan.add(tier, shard * f64::from(w));
                Some(spec)
            };
            let ck = match from.first() {
                Some(&(f, _)) if !held => {
                    let spec = self.link(f.ix(), q).1;
                    wan.add(self.tier(f.ix(), q), ckpt);
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
        Startup { secs: worst, wan }
    }
}

/// A node as the cost model sees it.
#[derive(Debug, Clone)]
pub struct CostNode {
    /// Node id.
    pub id: String,
    /// Device class.
    pub class: String,
    /// Training devices.
    pub devices: u32,
    /// Cloud price per GPU-hour, or `None` for an edge box.
    pub price_per_gpu_hour: Option<f64>,
    /// Index among edge boxes (into the edge signals), for edge boxes.
    pub edge: Option<usize>,
    /// The edge site the box stands at; `None` for cloud nodes and boxes of no site.
    pub site: Option<String>,
}

impl CostNode {
    /// True for a cloud node.
    pub fn is_cloud(&self) -> bool {
        self.price_per_gpu_hour.is_some()
    }
}

/// Where bytes travel. A site's LAN is not wide-area; the other three are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Between two edge boxes of one site: the site's LAN.
    SiteLan,
    /// Between edge boxes of different sites (or of no site): the metro link.
    BetweenSites,
    /// Between a cloud node (or cloud storage) and an edge box.
    CloudEdge,
    /// Between two cloud nodes (or cloud storage and a cloud node).
    CloudCloud,
}

/// Bytes moved, per [`Tier`].
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Traffic {
    /// Inside one edge site.
    pub site_lan: f64,
    /// Edge to edge across sites.
    pub between_sites: f64,
    /// Cloud to edge.
    pub cloud_edge: f64,
    /// Cloud to cloud.
    pub cloud_cloud: f64,
}

impl Traffic {
    /// Adds `bytes` to `tier`.
    pub fn add(&mut self, tier: Tier, bytes: f64) {
        match tier {
            Tier::SiteLan => self.site_lan += bytes,
            Tier::BetweenSites => self.between_sites += bytes,
            Tier::CloudEdge => self.cloud_edge += bytes,
            Tier::CloudCloud => self.cloud_cloud += bytes,
        }
    }

    /// Adds every tier of `other`, times `scale`.
    pub fn add_scaled(&mut self, other: &Traffic, scale: f64) {
        self.site_lan += scale * other.site_lan;
        self.between_sites += scale * other.between_sites;
        self.cloud_edge += scale * other.cloud_edge;
        self.cloud_cloud += scale * other.cloud_cloud;
    }

    /// The wide-area bytes: every tier but a site's LAN.
    pub fn wan(&self) -> f64 {
        self.between_sites + self.cloud_edge + self.cloud_cloud
    }
}

/// What a start or migration costs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Startup {
    /// Seconds before the first step.
    pub secs: f64,
    /// Bytes it moves, by tier.
    pub wan: Traffic,
}

/// The cost model over a pool of nodes: what every baseline and the
/// simulator's engine charge a placement, through [`PlacementCost`].
#[derive(Debug, Clone)]
pub struct CostModel {
    nodes: Vec<CostNode>,
    /// Throughput tables (measured and filled).
    pub tables: ThroughputTables,
    links: LinkTable,
    /// Overlap exponent γ.
    pub gamma: f64,
    /// Restart from a checkpoint, seconds.
    pub restart_s: f64,
    cost: PlacementCost,
    site_of: Vec<Option<u32>>,
    sites: usize,
}

impl CostModel {
    /// The cost model over `nodes`.
    pub fn new(
        nodes: Vec<CostNode>,
        tables: ThroughputTables,
        links: LinkTable,
        gamma: f64,
        restart_s: f64,
    ) -> CostModel {
        let mut sites: Vec<&str> = Vec::new();
        let site_of: Vec<Option<u32>> = nodes
            .iter()
            .map(|n| {
                let s = n.site.as_deref().filter(|_| !n.is_cloud())?;
                let k = sites.iter().position(|x| *x == s).unwrap_or_else(|| {
                    sites.push(s);
                    sites.len() - 1
                });
                Some(k as u32)
            })
            .collect();
        let sites = sites.len();
        let cost = PlacementCost::new(nodes.iter().map(|n| (n.id.as_str(), n.is_cloud())), &links)
            .with_sites(site_of.iter().copied());
        CostModel {
            nodes,
            tables,
            links,
            gamma,
            restart_s,
            cost,
            site_of,
            sites,
        }
    }

    /// Every node, cloud first; a placement's node index is the position here.
    pub fn nodes(&self) -> &[CostNode] {
        &self.nodes
    }

    /// Link defaults per class, and measured links, as the model was built with.
    pub fn links(&self) -> &LinkTable {
        &self.links
    }

    /// The same model over the nodes `edit` leaves (the links re-indexed).
    pub fn with_nodes(&self, edit: impl FnOnce(&mut Vec<CostNode>)) -> CostModel {
        let mut nodes = self.nodes.clone();
        edit(&mut nodes);
        CostModel::new(
            nodes,
            self.tables.clone(),
            self.links.clone(),
            self.gamma,
            self.restart_s,
        )
    }

    /// The class of the path between two nodes.
    pub fn link_class(&self, a: u32, b: u32) -> LinkClass {
        self.cost.class(a as usize, b as usize)
    }

    /// Iterations/s of `job`'s model at its batch on `workers` devices of `class`.
    pub fn iters_per_s(&self, class: &str, job: &JobSpec, workers: u32) -> Option<f64> {
        self.tables
            .lookup(class, &job.model, job.global_batch, workers)
            .map(|t| t.iters_per_s)
    }

    /// Step time of `job` on `place`, seconds, and the class of its slowest link
    /// (`None` on one node); `None` when a class has no table for the model.
    pub fn step(&self, job: &JobSpec, place: &[(u32, u32)]) -> Option<(f64, Option<LinkClass>)> {
        self.step_time(job, place)
            .map(|(t, class)| (t.total_s, class))
    }

    /// [`CostModel::step`] with the compute and sync split.
    pub fn step_time(
        &self,
        job: &JobSpec,
        place: &[(u32, u32)],
    ) -> Option<(StepTime, Option<LinkClass>)> {
        self.step_time_shared(job, place, |_| 1)
    }

    /// [`CostModel::step_time`] with each edge site's LAN shared by
    /// `lan_jobs(site)` jobs ([`PlacementCost::step_shared`]).
    pub fn step_time_shared(
        &self,
        job: &JobSpec,
        place: &[(u32, u32)],
        lan_jobs: impl Fn(u32) -> u32,
    ) -> Option<(StepTime, Option<LinkClass>)> {
        let n: u32 = place.iter().map(|p| p.1).sum();
        let mut compute = Vec::with_capacity(place.len());
        for &(q, _) in place {
            let class = &self.nodes[q as usize].class;
            let t = self.tables.lookup(class, &job.model, job.global_batch, n)?;
            compute.push(cost::class_compute_s(&t, place.len() as u32));
        }
        Some(
            self.cost
                .step_shared(compute, place, job.model_bytes as f64, self.gamma, lan_jobs),
        )
    }

    /// The edge site of node `q` (an index below [`CostModel::sites`]);
    /// `None` for cloud nodes and boxes of no site.
    pub fn site_of(&self, q: u32) -> Option<u32> {
        self.site_of[q as usize]
    }

    /// How many edge sites the nodes stand at.
    pub fn sites(&self) -> usize {
        self.sites
    }

    /// The sites whose LAN `place`'s all-reduce crosses: those holding two
    /// or more of its nodes (ascending, each once).
    pub fn lan_sites(&self, place: &[(u32, u32)]) -> Vec<u32> {
        repeated(place.iter().filter_map(|&(q, _)| self.site_of(q)).collect())
    }

    /// Start-up of `job` on `to`, its data and checkpoint being on `from`
    /// (where it last ran; empty before its first start): the staging plus
    /// the restart; a job resumed where it stopped pays only the restart.
    pub fn startup(&self, job: &JobSpec, from: &[(u32, u32)], to: &[(u32, u32)]) -> Startup {
        if from == to {
            return Startup {
                secs: self.restart_s,
                wan: Traffic::default(),
            };
        }
        let s = self.cost.staging(job, from, to);
        Startup {
            secs: s.secs + self.restart_s,
            wan: s.wan,
        }
    }

    /// Bytes one iteration's ring all-reduce puts on the wire over `place`,
    /// by tier: the ring visits the n nodes in index order and each of its
    /// n hops (node i to node i+1 mod n) carries `2(n−1)/n × M` bytes, M the
    /// model's bytes (the ring of [`cost::ring_allreduce_s`]); `2(n−1) × M`
    /// in all.
    pub fn allreduce_traffic(&self, job: &JobSpec, place: &[(u32, u32)]) -> Traffic {
        let mut t = Traffic::default();
        let n = place.len();
        if n <= 1 {
            return t;
        }
        let per_hop = 2.0 * (n as f64 - 1.0) / n as f64 * job.model_bytes as f64;
        for i in 0..n {
            let (a, b) = (place[i].0, place[(i + 1) % n].0);
            t.add(self.cost.tier(a as usize, b as usize), per_hop);
        }
        t
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

/// The values that occur two or more times in `v` (ascending, each once):
/// the sites or LAN groups on which a placement holds several nodes.
pub fn repeated(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    let mut out: Vec<u32> = Vec::new();
    for w in v.windows(2) {
        if w[0] == w[1] && out.last() != Some(&w[0]) {
            out.push(w[0]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::MeasuredLink;

    #[test]
    fn near_lists_measured_peers_fastest_first() {
        let link = |a: &str, b: &str, bandwidth_bps: f64| MeasuredLink {
            a: a.into(),
            b: b.into(),
            link: LinkSpec {
                bandwidth_bps,
                latency_s: 0.001,
                loss: 0.0,
                congestion: crate::cost::Congestion::LossBased,
            },
        };
        let table = LinkTable {
            measured: vec![
                link("a", "b", 1e6),
                link("c", "a", 1e9),
                link("b", "x", 1e9),
            ],
            ..LinkTable::default()
        };
        let cost = PlacementCost::new(
            [("a", false), ("b", false), ("c", false), ("d", true)],
            &table,
        );
        assert_eq!(cost.near(0), &[2, 1], "c's link is faster than b's");
        assert_eq!(cost.near(1), &[0], "x is not one of the nodes");
        assert_eq!(cost.near(2), &[0]);
        assert!(cost.near(3).is_empty());
    }
}
