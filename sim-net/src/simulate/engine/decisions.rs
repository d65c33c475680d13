//! Applying a round's decision: checking it against the nodes' devices and
//! the jobs' states, then starting, moving, resizing and stopping jobs, a stop
//! on a truly busy box being an eviction.

use super::{EngineError, Eviction, Run, UsageSample};
use crate::simulate::placement::Place;
use crate::simulate::policies::{Decision, FirstStart, FirstStop, JobStatus};

impl Run<'_> {
    pub(super) fn apply(&mut self, now: i64, d: &Decision) -> Result<(), EngineError> {
        let model = &self.world.model;
        let mut used = vec![0u32; model.nodes().len()];
        let mut wanted: Vec<Option<&Place>> = vec![None; self.jobs.len()];
        for (j, p) in &d.run {
            let bad = |what: &str| EngineError::BadDecision {
                job: *j,
                t_ms: now,
                what: what.to_string(),
            };
            if self
                .jobs
                .get(*j)
                .is_none_or(|job| job.status != JobStatus::Active || job.spec.submitted_ms > now)
            {
                return Err(bad("not an active job"));
            }
            if wanted[*j].is_some() {
                return Err(bad("placed twice in one round"));
            }
            if p.iter()
                .any(|&(q, w)| w == 0 || q as usize >= model.nodes().len())
            {
                return Err(bad("placement names an unknown node or zero workers"));
            }
            if d.reject.contains(j) || d.abandon.contains(j) {
                return Err(bad("both placed and turned away"));
            }
            for &(q, w) in p {
                used[q as usize] += w;
            }
            wanted[*j] = (!p.is_empty()).then_some(p);
        }
        for (q, &u) in used.iter().enumerate() {
            if u > model.nodes()[q].devices {
                return Err(EngineError::OverCapacity {
                    node: model.nodes()[q].id.clone(),
                    t_ms: now,
                    used: u,
                    devices: model.nodes()[q].devices,
                });
            }
        }
        for (list, status) in [
            (&d.reject, JobStatus::Rejected),
            (&d.abandon, JobStatus::Abandoned),
        ] {
            for &j in list {
                if self
                    .jobs
                    .get(j)
                    .is_some_and(|job| job.status == JobStatus::Active)
                {
                    self.close(j, now);
                    let job = &mut self.jobs[j];
                    job.status = status;
                    job.place.clear();
                }
            }
        }
        for &j in &d.guarantee {
            if let Some(job) = self.jobs.get_mut(j) {
                job.guaranteed_ms.get_or_insert(now);
            }
        }
        self.active
            .retain(|&j| self.jobs[j].status == JobStatus::Active);
        let mut placed = false;
        for i in 0..self.active.len() {
            let j = self.active[i];
            let new: Place = wanted[j].cloned().unwrap_or_default();
            if new == self.jobs[j].place {
                continue;
            }
            self.close(j, now);
            if let Some(evicted) = self.leave(j, now) {
                let stop = FirstStop {
                    at_ms: now,
                    evicted,
                };
                self.jobs[j].first_stop.get_or_insert(stop);
            }
            let job = &mut self.jobs[j];
            self.lan[j] = model.lan_sites(&new);
            placed |= !self.lan[j].is_empty();
            if new.is_empty() {
                job.preemptions += 1;
                job.place.clear();
                job.startup_left_s = 0.0;
                continue;
            }
            let from = if job.running() {
                job.migrations += 1;
                job.place.clone()
            } else {
                job.location.clone()
            };
            let su = model.startup(&job.spec, &from, &new);
            let Some((step, sync_class)) = model.step(&job.spec, &new) else {
                return Err(EngineError::NoThroughput {
                    job: j,
                    model: job.spec.model.clone(),
                });
            };
            self.acc.traffic.add_scaled(&su.wan, 1.0);
            job.startup_left_s = su.secs;
            job.step_s = step;
            job.sync_class = sync_class;
            job.first_start
                .get_or_insert_with(|| FirstStart::on(model, now, &new));
            job.location = new.clone();
            job.place = new;
            self.open[j] = Some((now, job.done_iters));
        }
        self.share_lans(placed)?;
        if self.record {
            let (mut cloud, mut edge) = (0, 0);
            for (q, &u) in used.iter().enumerate() {
                if model.nodes()[q].is_cloud() {
                    cloud += u;
                } else {
                    edge += u;
                }
            }
            self.usage.push(UsageSample {
                t_ms: now,
                cloud,
                edge,
            });
        }
        Ok(())
    }

    /// Job `j` leaves its placement at `now` (if it runs): an eviction when
    /// a box of it is truly busy, else a planned stop (module doc). Whether
    /// it was evicted; `None` when it did not run.
    fn leave(&mut self, j: usize, now: i64) -> Option<bool> {
        let job = &mut self.jobs[j];
        if !job.running() {
            return None;
        }
        let model = &self.world.model;
        let busy = job.place.iter().any(|&(q, _)| {
            model.nodes()[q as usize]
                .edge
                .is_some_and(|e| !self.world.edges.idle(e, now))
        });
        if !busy {
            self.ckpt[j].save(job.done_iters);
            return Some(false);
        }
        let workers: u32 = job.place.iter().map(|p| p.1).sum();
        let before_iters = job.done_iters;
        let lost = self.ckpt[j].evict(&mut job.done_iters);
        if self.record {
            self.evictions.push(Eviction {
                job: j,
                t_ms: now,
                before_iters,
                after_iters: job.done_iters,
            });
        }
        self.acc.evictions += 1;
        self.acc.lost_iters += lost.iters;
        self.acc.lost_device_s += lost.train_s * f64::from(workers);
        Some(true)
    }
}
