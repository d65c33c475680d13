//! Candidate generation: the edge placements and the cloud worker counts
//! worth trying for a job, so a plan looks at a handful of options rather
//! than every node.

use super::grid::{Place, Round};
use super::job::JobCtx;

/// Edge placements in the order found, each group once. A group found
/// again (a site's prefix that is also a prefix of the candidates) is told
/// by a fingerprint of its nodes first and compared in full only when the
/// fingerprints match: comparing every group with every option found
/// before was a tenth of a busy round.
#[derive(Default)]
struct Options {
    list: Vec<Place>,
    /// Each group's fingerprint ([`fingerprint`]) and its index in `list`.
    groups: Vec<(u64, usize)>,
}

impl Options {
    /// Adds `group` (sorted) unless it is listed already.
    fn add_group(&mut self, group: &[(usize, u32)]) {
        let f = fingerprint(group);
        let listed = self
            .groups
            .iter()
            .any(|&(g, i)| g == f && self.list[i] == group);
        if !listed {
            self.groups.push((f, self.list.len()));
            self.list.push(group.to_vec());
        }
    }
}

/// A 64-bit fingerprint of a placement's (node, workers) pairs, in order:
/// equal placements have equal fingerprints.
fn fingerprint(place: &[(usize, u32)]) -> u64 {
    place.iter().fold(0xcbf2_9ce4_8422_2325, |h, &(q, w)| {
        let x = (h ^ (q as u64) ^ (u64::from(w) << 48)).wrapping_mul(0x0000_0100_0000_01b3);
        x ^ (x >> 29)
    })
}

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
        let mut opts = Options::default();
        for &q in &cands {
            let w = self.world.nodes[q].devices.min(spec.max_workers);
            if w >= spec.min_workers.max(1) {
                opts.list.push(vec![(q, w)]);
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
        opts.list
    }

    /// Every prefix of `nodes`, two nodes or more and at most
    /// `max_edge_nodes`, with as many workers as it has devices up to `max`,
    /// that reaches `min` workers, each added to `opts` once.
    fn groups(&self, nodes: &[usize], min: u32, max: u32, opts: &mut Options) {
        let mut group: Place = Vec::with_capacity(self.policy.max_edge_nodes);
        let mut total = 0;
        for &q in nodes.iter().take(self.policy.max_edge_nodes) {
            let w = self.world.nodes[q].devices.min(max - total.min(max));
            if w == 0 {
                break;
            }
            // Kept sorted as it grows: a group is its nodes in index order.
            let at = group.partition_point(|p| *p < (q, w));
            group.insert(at, (q, w));
            total += w;
            if group.len() >= 2 && total >= min {
                opts.add_group(&group);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_found_again_is_listed_once_in_the_order_first_found() {
        let mut opts = Options::default();
        opts.list.push(vec![(4, 1)]);
        opts.add_group(&[(1, 1), (2, 1)]);
        opts.add_group(&[(1, 1), (3, 1)]);
        opts.add_group(&[(1, 1), (2, 1)]);
        // The same nodes with other worker counts are another placement.
        opts.add_group(&[(1, 2), (2, 1)]);
        assert_eq!(
            opts.list,
            vec![
                vec![(4, 1)],
                vec![(1, 1), (2, 1)],
                vec![(1, 1), (3, 1)],
                vec![(1, 2), (2, 1)],
            ]
        );
    }

    #[test]
    fn groups_with_one_fingerprint_are_still_told_apart() {
        let mut opts = Options::default();
        let a = [(1, 1), (2, 1)];
        let b = [(7, 1), (8, 1)];
        // As if `b` had `a`'s fingerprint: the full comparison decides.
        opts.groups.push((fingerprint(&b), 0));
        opts.list.push(a.to_vec());
        opts.add_group(&b);
        assert_eq!(opts.list, vec![a.to_vec(), b.to_vec()]);
    }
}
