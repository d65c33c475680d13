//! Free cloud GPUs over future time as a step function, and the planning step
//! that ElasticFlow and Chronus build admission on: walk a job forward through
//! the free capacity at a given share until its work is done, and reserve what
//! it used. Time is continuous (ms); the function has one step per reservation
//! edge, so a plan costs jobs × steps, independent of the horizon.

/// Free GPUs from each breakpoint to the next; the last step lasts forever.
#[derive(Debug, Clone)]
pub(super) struct Profile {
    steps: Vec<(i64, u32)>,
}

/// How a share maps onto the free GPUs of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Share {
    /// Up to `g`, rounded down to a power of two (ElasticFlow's elastic jobs).
    Elastic(u32),
    /// Exactly `g` or nothing (a gang-scheduled job).
    Fixed(u32),
}

/// A job's plan: (start ms, end ms, GPUs) pieces, and its finish.
#[derive(Debug, Clone, Default)]
pub(super) struct Fill {
    pub(super) pieces: Vec<(i64, i64, u32)>,
    pub(super) finish_ms: i64,
}

impl Profile {
    /// `capacity` GPUs free from `now_ms` on.
    pub(super) fn new(now_ms: i64, capacity: u32) -> Profile {
        Profile {
            steps: vec![(now_ms, capacity)],
        }
    }

    /// Walks the job forward: `work` iterations, `startup_s` before its first
    /// step, `rate(g)` iterations/s on g GPUs, finishing by `deadline_ms`.
    pub(super) fn fill(
        &self,
        share: Share,
        work: f64,
        startup_s: f64,
        deadline_ms: i64,
        rate: impl Fn(u32) -> f64,
    ) -> Option<Fill> {
        let mut fill = Fill::default();
        let mut left = work;
        let mut owed = startup_s;
        for (i, &(t0, free)) in self.steps.iter().enumerate() {
            if t0 >= deadline_ms {
                return None;
            }
            let t1 = self
                .steps
                .get(i + 1)
                .map_or(deadline_ms, |s| s.0.min(deadline_ms));
            let g = match share {
                Share::Elastic(g) => pow2_floor(g.min(free)),
                Share::Fixed(g) if free >= g => g,
                Share::Fixed(_) => 0,
            };
            if g == 0 {
                continue;
            }
            let r = rate(g);
            if r <= 0.0 {
                return None;
            }
            let secs = (t1 - t0) as f64 / 1000.0;
            let su = owed.min(secs);
            owed -= su;
            let can = (secs - su) * r;
            if can >= left {
                let end = t0 + ((su + left / r) * 1000.0).ceil() as i64;
                fill.pieces.push((t0, end.min(t1).max(t0 + 1), g));
                fill.finish_ms = end;
                return (end <= deadline_ms).then_some(fill);
            }
            left -= can;
            fill.pieces.push((t0, t1, g));
        }
        None
    }

    /// The smallest share (powers of two up to `max`) whose fill meets the deadline.
    pub(super) fn min_share(
        &self,
        max: u32,
        elastic: bool,
        work: f64,
        startup_s: f64,
        deadline_ms: i64,
        rate: impl Fn(u32) -> f64,
    ) -> Option<(u32, Fill)> {
        super::cloud_pool::pow2_upto(max).find_map(|g| {
            let share = if elastic {
                Share::Elastic(g)
            } else {
                Share::Fixed(g)
            };
            self.fill(share, work, startup_s, deadline_ms, &rate)
                .map(|f| (g, f))
        })
    }

    /// Takes a fill's GPUs out of the profile.
    pub(super) fn reserve(&mut self, fill: &Fill) {
        for &(t0, t1, g) in &fill.pieces {
            self.split(t0);
            self.split(t1);
            for s in self.steps.iter_mut().filter(|s| s.0 >= t0 && s.0 < t1) {
                s.1 = s.1.saturating_sub(g);
            }
        }
    }

    fn split(&mut self, t: i64) {
        match self.steps.binary_search_by_key(&t, |s| s.0) {
            Ok(_) => {}
            Err(0) => {}
            Err(i) => {
                let free = self.steps[i - 1].1;
                self.steps.insert(i, (t, free));
            }
        }
    }
}

fn pow2_floor(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        1 << (31 - n.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_around_reservations_and_meets_deadlines() {
        let mut p = Profile::new(0, 8);
        // 4 GPUs at 1 it/s per GPU: 40 iterations take 10 s.
        let rate = |g: u32| f64::from(g);
        let f = p.fill(Share::Fixed(4), 40.0, 0.0, 20_000, rate).unwrap();
        assert_eq!(f.finish_ms, 10_000);
        p.reserve(&f);
        p.reserve(&f);
        // Now 0 GPUs free for 10 s: an elastic job waits, then runs on 8.
        let g = p.fill(Share::Elastic(8), 16.0, 0.0, 20_000, rate).unwrap();
        assert_eq!(g.finish_ms, 12_000);
        assert!(
            p.fill(Share::Elastic(8), 100.0, 0.0, 20_000, rate)
                .is_none()
        );
        let (share, _) = p.min_share(8, true, 16.0, 0.0, 14_000, rate).unwrap();
        assert_eq!(share, 4);
    }
}
