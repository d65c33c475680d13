//! A job's checkpoints as the engine keeps them: the iterations saved at its
//! last checkpoint and the training seconds since. The rule (when a job
//! saves, what a planned stop keeps and what an eviction loses) is written
//! in the engine's module doc ([`super::engine`]); this module applies it.

/// One job's last checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Checkpoint {
    /// Iterations saved in it.
    pub iters: f64,
    /// Seconds of training (stepping, not start-up) since it was saved.
    pub since_s: f64,
}

/// What an eviction threw away.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lost {
    /// Iterations made since the last checkpoint.
    pub iters: f64,
    /// Seconds of training that made them.
    pub train_s: f64,
}

impl Checkpoint {
    /// The job, at `iters0` iterations, trained `stepped_s` seconds more at
    /// `step_s` seconds per iteration, saving every `interval_s` seconds of
    /// training: a save falls at each whole multiple of `interval_s` of
    /// training since the last one; the latest is kept.
    pub fn train(&mut self, iters0: f64, stepped_s: f64, step_s: f64, interval_s: f64) {
        let since = self.since_s + stepped_s;
        if interval_s <= 0.0 || since < interval_s || step_s <= 0.0 {
            self.since_s = since;
            return;
        }
        let saves = (since / interval_s).floor();
        let at_s = saves * interval_s - self.since_s;
        self.iters = iters0 + at_s / step_s;
        self.since_s = since - saves * interval_s;
    }

    /// A planned stop or move: the job saves on the way out, at `done` iterations.
    pub fn save(&mut self, done: f64) {
        *self = Checkpoint {
            iters: done,
            since_s: 0.0,
        };
    }

    /// An eviction: `done` falls back to the checkpoint; returns what was lost.
    pub fn evict(&mut self, done: &mut f64) -> Lost {
        let kept = self.iters.min(*done);
        let lost = Lost {
            iters: *done - kept,
            train_s: self.since_s,
        };
        *done = kept;
        self.save(kept);
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eviction_fifty_minutes_in_loses_the_last_twenty() {
        // 30-min interval, 2 s per iteration, 50 min of training in two
        // stretches (40 + 10 min): the save at 30 min holds 1800 / 2 = 900
        // iterations; the eviction at 50 min (1500 done) loses 20 min = 600.
        let mut c = Checkpoint::default();
        c.train(0.0, 2400.0, 2.0, 1800.0);
        assert_eq!(
            c,
            Checkpoint {
                iters: 900.0,
                since_s: 600.0
            }
        );
        c.train(1200.0, 600.0, 2.0, 1800.0);
        assert_eq!(
            c,
            Checkpoint {
                iters: 900.0,
                since_s: 1200.0
            }
        );
        let mut done = 1500.0;
        let lost = c.evict(&mut done);
        assert_eq!(done, 900.0);
        assert_eq!(
            lost,
            Lost {
                iters: 600.0,
                train_s: 1200.0
            }
        );
    }

    #[test]
    fn several_saves_in_one_stretch_keep_the_latest() {
        // From 10 min since the last save, 65 min more at 1 s/it from 100
        // iterations: saves at 20 and 50 min into the stretch; the latest
        // holds 100 + 3000 = 3100 iterations, 25 min ago.
        let mut c = Checkpoint {
            iters: 100.0,
            since_s: 600.0,
        };
        c.train(100.0, 3900.0, 1.0, 1800.0);
        assert_eq!(
            c,
            Checkpoint {
                iters: 3100.0,
                since_s: 900.0
            }
        );
    }

    #[test]
    fn a_planned_stop_keeps_everything() {
        let mut c = Checkpoint::default();
        c.train(0.0, 1000.0, 1.0, 1800.0);
        c.save(1000.0);
        let mut done = 1000.0;
        assert_eq!(c.evict(&mut done), Lost::default());
        assert_eq!(done, 1000.0);
    }
}
