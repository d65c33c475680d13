//! Candidate generation: the edge placements and the cloud worker counts
//! worth trying for a job, so a plan looks at a handful of options rather
//! than every node.

use super::grid::{Place, Round};
use super::job::JobCtx;

impl<'a> Round<'a> {
    /// Edge placements worth trying: the best single nodes and the top-k together.
    pub(super) fn edge_options(&self, ctx: &JobCtx, limit: usize) -> Vec<Place> {
        let spec = &ctx.job.spec;
        let mut cands: Vec<usize> = Vec::new();
        for &q in &self.edge_index {
            if cands.len() >= self.policy.edge_candidates {
                break;
            }
            if self.first_free[q] >= limit {
                break;
            }
            let n = &self.world.nodes[q];
            if self.free_slot_count[q] == 0
                || n.memory_per_device_bytes < spec.memory_per_worker_bytes
                || ctx.tables[self.class_of[q]].is_none()
            {
                continue;
            }
            if (0..limit).any(|s| self.free[q * self.n_slots + s] > 0) {
                cands.push(q);
            }
        }
        // Keep the current location first so a running job can stay put.
        for &(q, _) in &ctx.location {
            if !self.is_cloud(q) && !cands.contains(&q) {
                cands.insert(0, q);
            }
        }
        let free_before = |q: usize| {
            (0..limit)
                .filter(|&s| self.free[q * self.n_slots + s] > 0)
                .count()
        };
        cands.sort_by_cached_key(|&q| std::cmp::Reverse(free_before(q)));
        let mut opts: Vec<Place> = Vec::new();
        for &q in &cands {
            let w = self.world.nodes[q].devices.min(spec.max_workers);
            if w >= spec.min_workers.max(1) {
                opts.push(vec![(q, w)]);
            }
        }
        let mut group: Place = Vec::new();
        let mut total = 0;
        for &q in cands.iter().take(self.policy.max_edge_nodes) {
            let w = self.world.nodes[q]
                .devices
                .min(spec.max_workers - total.min(spec.max_workers));
            if w == 0 {
                break;
            }
            group.push((q, w));
            total += w;
            if group.len() >= 2 && total >= spec.min_workers {
                let mut g = group.clone();
                g.sort_unstable();
                opts.push(g);
            }
        }
        opts
    }

    /// Worker counts worth trying on a cloud group: min, max, powers of two, whole nodes.
    pub(super) fn worker_options(spec_min: u32, spec_max: u32, devices: u32) -> Vec<u32> {
        let lo = spec_min.max(1);
        let mut v = vec![lo, spec_max];
        let mut p = 1;
        while p < spec_max {
            if p > lo {
                v.push(p);
            }
            p *= 2;
        }
        let mut k = devices;
        while k < spec_max {
            if k > lo {
                v.push(k);
            }
            k += devices;
        }
        v.retain(|&w| w >= lo && w <= spec_max);
        v.sort_unstable();
        v.dedup();
        v
    }
}
