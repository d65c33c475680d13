//! Candidate generation: the edge placements and the cloud worker counts
//! worth trying for a job, so a plan looks at a handful of options rather
//! than every node.

use super::grid::{Place, Round};
use super::job::JobCtx;

impl<'a> Round<'a> {
    /// Edge placements worth trying: the best single nodes, the top-k
    /// together, and each candidate's site: it with the nodes it has the
    /// fastest measured links to, so a placement inside one site syncs
    /// over the site's LAN rather than across sites.
    pub(super) fn edge_options(&self, ctx: &JobCtx, limit: usize) -> Vec<Place> {
        let spec = &ctx.job.spec;
        let eligible = |q: usize| {
            let n = &self.world.nodes[q];
            !self.is_cloud(q)
                && self.first_free[q] < limit
                && self.free_slot_count[q] > 0
                && n.memory_per_device_bytes >= spec.memory_per_worker_bytes
                && ctx.tables[self.class_of[q]].is_some()
                && self.world.constraints.allows(spec.id, &n.id)
                && self.free_slots_before(q, limit) > 0
        };
        // Nodes still free at their first free slot come first: one that an
        // earlier plan took there, or that a running job of its rank holds
        // ([`Round::claim`]), is kept only to fill up the candidates.
        let want = self.policy.edge_candidates;
        let mut cands: Vec<usize> = Vec::new();
        let mut taken: Vec<usize> = Vec::new();
        let open = if self.edge_open_nodes > 0 {
            &self.edge_index[..]
        } else {
            &[]
        };
        for &q in open {
            if cands.len() >= want || self.first_free[q] >= limit {
                break;
            }
            let fresh =
                self.free[q * self.n_slots + self.first_free[q]] > 0 && self.claim(ctx, q) < 2;
            if (fresh || taken.len() < want) && eligible(q) {
                if fresh { cands.push(q) } else { taken.push(q) }
            }
        }
        let fill = want.saturating_sub(cands.len());
        cands.extend(taken.into_iter().take(fill));
        // Keep the current location first so a running job can stay put.
        for &(q, _) in &ctx.location {
            let allowed = self
                .world
                .constraints
                .allows(spec.id, &self.world.nodes[q].id);
            if allowed && !self.is_cloud(q) && !cands.contains(&q) {
                cands.insert(0, q);
            }
        }
        let free_before = |q: usize| self.free_slots_before(q, limit);
        cands.sort_by_cached_key(|&q| std::cmp::Reverse(free_before(q)));
        let mut opts: Vec<Place> = Vec::new();
        for &q in &cands {
            let w = self.world.nodes[q].devices.min(spec.max_workers);
            if w >= spec.min_workers.max(1) {
                opts.push(vec![(q, w)]);
            }
        }
        self.groups(&cands, spec.min_workers, spec.max_workers, &mut opts);
        let mut grouped: Vec<usize> = Vec::new();
        for &seed in &cands {
            if grouped.contains(&seed) {
                continue;
            }
            let mut site = vec![seed];
            site.extend(
                self.links
                    .near(seed)
                    .iter()
                    .copied()
                    .filter(|&q| eligible(q)),
            );
            if site.len() < 2 {
                continue;
            }
            site[1..].sort_by_cached_key(|&q| std::cmp::Reverse(free_before(q)));
            grouped.extend(&site);
            self.groups(&site, spec.min_workers, spec.max_workers, &mut opts);
        }
        opts
    }

    /// Every prefix of `nodes`, two nodes or more and at most
    /// `max_edge_nodes`, with as many workers as it has devices up to `max`,
    /// that reaches `min` workers.
    fn groups(&self, nodes: &[usize], min: u32, max: u32, opts: &mut Vec<Place>) {
        let mut group: Place = Vec::new();
        let mut total = 0;
        for &q in nodes.iter().take(self.policy.max_edge_nodes) {
            let w = self.world.nodes[q].devices.min(max - total.min(max));
            if w == 0 {
                break;
            }
            group.push((q, w));
            total += w;
            if group.len() >= 2 && total >= min {
                let mut g = group.clone();
                g.sort_unstable();
                if !opts.contains(&g) {
                    opts.push(g);
                }
            }
        }
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
