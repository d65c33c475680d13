//! Which edge boxes share a LAN, and how many running jobs sync over each:
//! a plan on several boxes of one LAN prices its all-reduce with the LAN
//! shared, as the simulator's engine charges it and as a real switch shares
//! it.
//!
//! Boxes joined by measured links form one LAN group (the link table's
//! measured pairs: in the simulator, the boxes of one site; live, the pairs
//! the edges probed). A running job counts on a group when its placement
//! holds two or more of the group's boxes. A plan for job `j` on two or more
//! boxes of group `g` sees the group's links at `B / k` bytes/s, with
//! `k = n_g + 1` where `n_g` is the running jobs counted on `g` other than
//! `j` (the load at the start of the round, held over the plan).

use crate::placement::{PlacementCost, repeated};
use crate::world::WorldSnapshot;

/// The LAN groups of a round and the running jobs on each.
pub(super) struct Lans {
    /// Per node, its group (the least node index in it); `None` for cloud
    /// nodes and boxes with no measured link.
    group: Vec<Option<u32>>,
    /// Per group (indexed by its least node index), running jobs syncing on it.
    jobs: Vec<u32>,
}

impl Lans {
    /// The groups over `links`' measured edge-to-edge pairs, and the running
    /// jobs of `world` on each; `index_of` maps a node id to its index.
    pub(super) fn new(
        world: &WorldSnapshot,
        links: &PlacementCost,
        index_of: impl Fn(&str) -> Option<usize>,
    ) -> Lans {
        let n = world.nodes.len();
        let mut parent: Vec<usize> = (0..n).collect();
        for q in (0..n).filter(|&q| !links.is_cloud(q)) {
            for &p in links.near(q).iter().filter(|&&p| !links.is_cloud(p)) {
                let (a, b) = (root(&mut parent, q), root(&mut parent, p));
                parent[a.max(b)] = a.min(b);
            }
        }
        let group: Vec<Option<u32>> = (0..n)
            .map(|q| {
                (!links.is_cloud(q) && !links.near(q).is_empty())
                    .then(|| root(&mut parent, q) as u32)
            })
            .collect();
        let mut lans = Lans {
            group,
            jobs: vec![0; n],
        };
        for j in world.jobs.iter().filter(|j| j.progress.running) {
            let place: Vec<usize> = j
                .progress
                .location
                .iter()
                .filter_map(|a| index_of(&a.node_id))
                .collect();
            for g in lans.shared(&place) {
                lans.jobs[g as usize] += 1;
            }
        }
        lans
    }

    /// The groups on which `nodes` hold two or more boxes (ascending, each once).
    pub(super) fn shared(&self, nodes: &[usize]) -> Vec<u32> {
        repeated(nodes.iter().filter_map(|&q| self.group[q]).collect())
    }

    /// Node `q`'s group, as [`PlacementCost::with_sites`] takes it.
    pub(super) fn group_of(&self, q: usize) -> Option<u32> {
        self.group[q]
    }

    /// `k` for a plan of a job on group `g`: the running jobs counted there,
    /// plus this one unless it is one of them (`counted`).
    pub(super) fn load(&self, g: u32, counted: bool) -> u32 {
        self.jobs[g as usize] + u32::from(!counted)
    }
}

/// The root of `x` in the union-find forest `parent`, halving paths.
fn root(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}
