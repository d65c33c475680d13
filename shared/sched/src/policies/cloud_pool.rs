//! What the cloud-side baselines share: free GPUs per cloud node, packing a
//! GPU count onto nodes (a running job keeps its nodes when it can), and the
//! flat-pool throughput their planners assume (the class tables, no network;
//! the engine still charges the real placement).

use crate::placement::{CostModel, Place};

use super::{Decision, JobRun, View};

/// Free GPUs per cloud node for one round.
pub(super) struct CloudPool {
    /// (node index, free GPUs), in node order.
    free: Vec<(u32, u32)>,
}

impl CloudPool {
    /// Every cloud GPU free.
    pub(super) fn new(model: &CostModel) -> CloudPool {
        CloudPool {
            free: model
                .cloud_nodes()
                .map(|q| (q, model.nodes()[q as usize].devices))
                .collect(),
        }
    }

    /// Free GPUs in all.
    pub(super) fn total_free(&self) -> u32 {
        self.free.iter().map(|f| f.1).sum()
    }

    /// Takes `g` GPUs for `job`: its current cloud nodes if they still have
    /// room, else the node with the least room that fits (best fit), else the
    /// nodes with the most room; `None` when fewer than `g` are free.
    pub(super) fn take(&mut self, job: &JobRun, g: u32) -> Option<Place> {
        if g == 0 || self.total_free() < g {
            return None;
        }
        let current: u32 = job.place.iter().map(|p| p.1).sum();
        let on_cloud = job
            .place
            .iter()
            .all(|p| self.free.iter().any(|f| f.0 == p.0));
        if current == g && on_cloud && job.place.iter().all(|&(q, w)| self.room(q) >= w) {
            for &(q, w) in &job.place {
                self.sub(q, w);
            }
            return Some(job.place.clone());
        }
        if let Some(&(q, _)) = self
            .free
            .iter()
            .filter(|f| f.1 >= g)
            .min_by_key(|f| (f.1, f.0))
        {
            self.sub(q, g);
            return Some(vec![(q, g)]);
        }
        let mut order = self.free.clone();
        order.sort_by_key(|f| (std::cmp::Reverse(f.1), f.0));
        let mut left = g;
        let mut place = Place::new();
        for (q, f) in order {
            if left == 0 {
                break;
            }
            let t = f.min(left);
            if t > 0 {
                place.push((q, t));
                left -= t;
            }
        }
        for &(q, w) in &place {
            self.sub(q, w);
        }
        place.sort_unstable();
        Some(place)
    }

    /// First fit: the first node (by index) with room for `g`, else the
    /// first nodes in index order that together have it.
    pub(super) fn take_first_fit(&mut self, g: u32) -> Option<Place> {
        if g == 0 || self.total_free() < g {
            return None;
        }
        if let Some(&(q, _)) = self.free.iter().find(|f| f.1 >= g) {
            self.sub(q, g);
            return Some(vec![(q, g)]);
        }
        let mut left = g;
        let mut place = Place::new();
        for &(q, f) in &self.free {
            let t = f.min(left);
            if t > 0 {
                place.push((q, t));
                left -= t;
            }
            if left == 0 {
                break;
            }
        }
        for &(q, w) in &place {
            self.sub(q, w);
        }
        Some(place)
    }

    fn room(&self, q: u32) -> u32 {
        self.free.iter().find(|f| f.0 == q).map_or(0, |f| f.1)
    }

    fn sub(&mut self, q: u32, w: u32) {
        if let Some(f) = self.free.iter_mut().find(|f| f.0 == q) {
            f.1 -= w;
        }
    }
}

/// Gives each job of `order`, in turn, exactly the GPUs it asked for while
/// they are free (the non-elastic baselines' allocation step).
pub(super) fn requested_in_order(
    v: &View,
    order: &[usize],
    pool: &mut CloudPool,
    d: &mut Decision,
) {
    for &j in order {
        if pool.total_free() == 0 {
            break;
        }
        let job = &v.jobs[j];
        if let Some(p) = pool.take(job, job.requested_gpus) {
            d.run.push((j, p));
        }
    }
}

/// The cloud's device class (the first cloud node's) that the baselines plan with.
pub(super) fn cloud_class(model: &CostModel) -> Option<&str> {
    model
        .cloud_nodes()
        .next()
        .map(|q| model.nodes()[q as usize].class.as_str())
}

/// Flat-pool iterations/s of `job` on `g` cloud GPUs (0 when none or unknown).
pub(super) fn cloud_rate(model: &CostModel, job: &JobRun, g: u32) -> f64 {
    if g == 0 {
        return 0.0;
    }
    cloud_class(model)
        .and_then(|c| model.iters_per_s(c, &job.spec, g))
        .unwrap_or(0.0)
}

/// Powers of two from 1 up to `max`.
pub(super) fn pow2_upto(max: u32) -> impl Iterator<Item = u32> {
    (0..32)
        .map(|k| 1u32 << k)
        .take_while(move |&g| g <= max.max(1))
}
