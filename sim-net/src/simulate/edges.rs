//! The edge boxes' primary load: which utilisation series each box follows,
//! the true load per bin, what the box reports (after a detection delay), and
//! the forecasts the scheduler sees (online, or the oracle's truth).
//!
//! Mapping: edge box `i` follows series `i mod S` (S series in the trace, in
//! the trace's order), shifted by `⌊i / S⌋ × reuse_offset_h` hours so reused
//! series are not in lock-step. Each series is averaged into bins of
//! `engine.truth_bin_s` (gaps carry the last value) and cycled with a period of
//! its whole days (its span if shorter than a day), so the daily phase survives
//! the wrap; simulation time `t` of box `i` reads bin
//! `(⌊(t − origin) / bin⌋ + shift_i) mod period`. The origin is the first
//! submission minus the forecaster's warm-up.
//!
//! Truth: a box is idle in a bin when its mean load is under its threshold.
//! Reports: a box's reported load at `t` is the bin at `t − detect_delay`, so
//! every change is seen `detect_delay` late; training during that gap after
//! the tide comes in is interference.

use tidemill_forecast::{ForecastConfig, NodeForecaster, Resource, Sample};
use tidemill_sched::EdgeAvailability;

use crate::backtest::SlotMeans;
use crate::trace::Series;

/// One series on the bin grid, cycled.
#[derive(Debug, Clone)]
struct BinnedSeries {
    /// Mean load per bin over one period.
    load: Vec<f64>,
}

impl BinnedSeries {
    fn new(series: &Series, bin_ms: i64) -> Option<BinnedSeries> {
        let means = SlotMeans::new(&series.points, bin_ms);
        let first = series.points.first()?.0.div_euclid(bin_ms);
        let last = series.points.last()?.0.div_euclid(bin_ms);
        let span = (last - first + 1) as usize;
        let per_day = (86_400_000 / bin_ms).max(1) as usize;
        let period = if span >= per_day {
            span / per_day * per_day
        } else {
            span
        };
        let mut load = Vec::with_capacity(period);
        let mut carry = series.points[0].1;
        for b in 0..period as i64 {
            if let Some(v) = means.get(first + b) {
                carry = v;
            }
            load.push(carry);
        }
        Some(BinnedSeries { load })
    }
}

/// An edge box's place in the world.
#[derive(Debug, Clone)]
pub struct EdgeBox {
    series: usize,
    shift: usize,
    /// Idle threshold, percent.
    pub threshold_pct: f64,
    /// Training devices.
    pub devices: u32,
    /// Bins (within the series period) where idleness flips, ascending.
    flips: Vec<usize>,
}

/// The edge boxes' load over simulated time.
#[derive(Debug, Clone)]
pub struct EdgeWorld {
    series: Vec<BinnedSeries>,
    /// The boxes, in node order among edges.
    pub boxes: Vec<EdgeBox>,
    /// Simulation time of bin 0, ms.
    pub origin_ms: i64,
    /// Bin length, ms.
    pub bin_ms: i64,
    /// Reporting delay, ms.
    pub delay_ms: i64,
}

impl EdgeWorld {
    /// Maps `boxes` (threshold, devices) onto `series`; see the module docs.
    pub fn new(
        series: &[Series],
        boxes: &[(f64, u32)],
        origin_ms: i64,
        bin_ms: i64,
        delay_ms: i64,
        reuse_offset_ms: i64,
    ) -> EdgeWorld {
        let binned: Vec<BinnedSeries> = series
            .iter()
            .filter_map(|s| BinnedSeries::new(s, bin_ms))
            .collect();
        let n = binned.len().max(1);
        let boxes = boxes
            .iter()
            .enumerate()
            .map(|(i, &(threshold_pct, devices))| {
                let s = i % n;
                let period = binned.get(s).map_or(1, |b| b.load.len().max(1));
                let shift = ((i / n) as i64 * reuse_offset_ms / bin_ms) as usize % period;
                let flips = binned.get(s).map_or(Vec::new(), |b| {
                    let idle = |k: usize| b.load[k] < threshold_pct;
                    (0..b.load.len())
                        .filter(|&k| idle(k) != idle((k + b.load.len() - 1) % b.load.len()))
                        .collect()
                });
                EdgeBox {
                    series: s,
                    shift,
                    threshold_pct,
                    devices,
                    flips,
                }
            })
            .collect();
        EdgeWorld {
            series: binned,
            boxes,
            origin_ms,
            bin_ms,
            delay_ms,
        }
    }

    fn bin_of(&self, t_ms: i64) -> i64 {
        (t_ms - self.origin_ms).div_euclid(self.bin_ms)
    }

    fn load_at_bin(&self, e: usize, bin: i64) -> f64 {
        let b = &self.boxes[e];
        match self.series.get(b.series) {
            Some(s) => {
                let p = s.load.len() as i64;
                s.load[(bin + b.shift as i64).rem_euclid(p) as usize]
            }
            None => 0.0,
        }
    }

    /// The true primary load of box `e` at `t_ms`, percent.
    pub fn load(&self, e: usize, t_ms: i64) -> f64 {
        self.load_at_bin(e, self.bin_of(t_ms))
    }

    /// True when box `e` is truly idle at `t_ms`.
    pub fn idle(&self, e: usize, t_ms: i64) -> bool {
        self.load(e, t_ms) < self.boxes[e].threshold_pct
    }

    /// The load box `e` has reported by `t_ms`.
    pub fn reported(&self, e: usize, t_ms: i64) -> f64 {
        self.load(e, t_ms - self.delay_ms)
    }

    /// True when box `e` reports itself idle at `t_ms`.
    pub fn reported_idle(&self, e: usize, t_ms: i64) -> bool {
        self.reported(e, t_ms) < self.boxes[e].threshold_pct
    }

    /// The first time after `t_ms` at which box `e`'s reported idleness flips.
    pub fn next_reported_flip(&self, e: usize, t_ms: i64) -> Option<i64> {
        let b = &self.boxes[e];
        let period = self.series.get(b.series)?.load.len() as i64;
        if b.flips.is_empty() {
            return None;
        }
        let bin = self.bin_of(t_ms - self.delay_ms);
        let pos = (bin + b.shift as i64).rem_euclid(period);
        let next = match b.flips.iter().find(|&&f| f as i64 > pos) {
            Some(&f) => f as i64 - pos,
            None => b.flips[0] as i64 + period - pos,
        };
        Some(self.origin_ms + (bin + next) * self.bin_ms + self.delay_ms)
    }

    /// Splits `[t0, t1)` on box `e` into (idle ms, busy ms) by the truth.
    pub fn split_idle(&self, e: usize, t0: i64, t1: i64) -> (i64, i64) {
        let (mut idle, mut busy) = (0, 0);
        let mut t = t0;
        while t < t1 {
            let bin = self.bin_of(t);
            let end = (self.origin_ms + (bin + 1) * self.bin_ms).min(t1);
            if self.load_at_bin(e, bin) < self.boxes[e].threshold_pct {
                idle += end - t;
            } else {
                busy += end - t;
            }
            t = end;
        }
        (idle, busy)
    }

    /// The oracle's availability of box `e` from `now_ms` over `horizon_ms`:
    /// windows are the true idle bins.
    pub fn oracle(&self, e: usize, now_ms: i64, horizon_ms: i64) -> EdgeAvailability {
        let start = self.origin_ms + self.bin_of(now_ms) * self.bin_ms;
        let n = ((now_ms + horizon_ms - start) / self.bin_ms + 1) as usize;
        let first = self.bin_of(start);
        let loads: Vec<Option<f64>> = (0..n as i64)
            .map(|k| Some(self.load_at_bin(e, first + k)))
            .collect();
        EdgeAvailability::from_p90(
            start,
            self.bin_ms,
            &loads,
            self.boxes[e].threshold_pct,
            Some(self.reported(e, now_ms)),
        )
    }
}

/// One box's online forecaster, fed the reported load bin by bin, never ahead of `now`.
#[derive(Debug, Clone)]
pub struct OnlineForecast {
    model: NodeForecaster,
    /// Next bin to feed.
    next_bin: i64,
    /// The latest forecast.
    latest: Option<Issued>,
}

/// A forecast's P90s, as issued at a refresh boundary.
#[derive(Debug, Clone)]
struct Issued {
    issued_ms: i64,
    start_ms: i64,
    slot_ms: i64,
    p90: Vec<Option<f64>>,
}

impl OnlineForecast {
    /// A forecaster with `config`, to be fed from the world's origin.
    pub fn new(config: ForecastConfig) -> Result<Self, tidemill_forecast::ConfigError> {
        Ok(OnlineForecast {
            model: NodeForecaster::new(config)?,
            next_bin: 0,
            latest: None,
        })
    }

    /// Box `e`'s availability at `now_ms`: windows from the P90 forecast issued
    /// at the last refresh boundary (`refresh_ms` grid), fed every bin reported
    /// by then. The slot in progress is observed rather than forecast: the
    /// latest reported load stands for it, as in the live coordinator.
    pub fn availability(
        &mut self,
        world: &EdgeWorld,
        e: usize,
        now_ms: i64,
        refresh_ms: i64,
    ) -> EdgeAvailability {
        let issued_ms = now_ms.div_euclid(refresh_ms) * refresh_ms;
        if self
            .latest
            .as_ref()
            .is_none_or(|l| l.issued_ms != issued_ms)
        {
            let known_until = issued_ms - world.delay_ms;
            while world.origin_ms + (self.next_bin + 1) * world.bin_ms <= known_until {
                let t_ms = world.origin_ms + self.next_bin * world.bin_ms;
                let cpu = world.load_at_bin(e, self.next_bin);
                // Bins are fed in order and the value is a percentage, so this cannot fail.
                let _ = self.model.update(&Sample {
                    t_ms,
                    cpu_pct: Some(cpu),
                    mem_pct: None,
                    gpu_pct: None,
                });
                self.next_bin += 1;
            }
            let slot_ms = self.model.config().slot_len_ms();
            self.latest = Some(
                match self.model.forecast_resource(Resource::Cpu, issued_ms) {
                    Some((start_ms, f)) => Issued {
                        issued_ms,
                        start_ms,
                        slot_ms,
                        p90: f.slots.iter().map(|q| q.map(|q| q.p90)).collect(),
                    },
                    None => Issued {
                        issued_ms,
                        start_ms: issued_ms,
                        slot_ms,
                        p90: Vec::new(),
                    },
                },
            );
        }
        let now_pct = world.reported(e, now_ms);
        let threshold = world.boxes[e].threshold_pct;
        let l = self
            .latest
            .as_ref()
            .expect("a forecast is issued above when none is");
        let mut p90 = l.p90.clone();
        if now_ms >= l.start_ms
            && let Some(slot) = p90.get_mut(((now_ms - l.start_ms) / l.slot_ms) as usize)
        {
            *slot = Some(now_pct);
        }
        EdgeAvailability::from_p90(l.start_ms, l.slot_ms, &p90, threshold, Some(now_pct))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world() -> EdgeWorld {
        // One series: 2 days of 5-minute samples, busy (60 %) 08:00-20:00, idle (10 %) otherwise.
        let points = (0..2 * 288)
            .map(|k| {
                let h = (k % 288) / 12;
                (k * 300_000, if (8..20).contains(&h) { 60.0 } else { 10.0 })
            })
            .collect();
        let s = Series {
            node: "a".into(),
            points,
        };
        EdgeWorld::new(&[s], &[(30.0, 1), (30.0, 1)], 0, 300_000, 60_000, 3_600_000)
    }

    #[test]
    fn truth_cycles_and_reuse_shifts() {
        let w = world();
        let h = 3_600_000;
        assert!(w.idle(0, 7 * h) && !w.idle(0, 8 * h));
        // Box 1 reuses the series one hour ahead.
        assert!(!w.idle(1, 7 * h));
        // Day 5 looks like day 1 (period 2 days).
        assert!(w.idle(0, 5 * 24 * h + 7 * h) && !w.idle(0, 5 * 24 * h + 9 * h));
    }

    #[test]
    fn reports_lag_by_the_delay_and_flips_are_found() {
        let w = world();
        let h = 3_600_000;
        assert!(w.reported_idle(0, 8 * h + 30_000));
        assert!(!w.reported_idle(0, 8 * h + 60_000));
        assert_eq!(w.next_reported_flip(0, 7 * h), Some(8 * h + 60_000));
        assert_eq!(w.next_reported_flip(0, 9 * h), Some(20 * h + 60_000));
        assert_eq!(w.split_idle(0, 7 * h, 9 * h), (h, h));
    }

    #[test]
    fn the_slot_in_progress_is_the_reported_load_not_the_forecast() {
        // Three days, busy 08:00-20:00; on day 2 the box is busy again from
        // 21:00 to 23:00. At 21:30 on day 2 the forecast issued at 21:00 still
        // expects the usual idle night, but the box reports 60 %.
        let h = 3_600_000;
        let points = (0..3 * 288)
            .map(|k| {
                let hour = (k % 288) / 12;
                let busy = (8..20).contains(&hour) || (k / 288 == 2 && (21..23).contains(&hour));
                (k * 300_000, if busy { 60.0 } else { 10.0 })
            })
            .collect();
        let s = Series {
            node: "a".into(),
            points,
        };
        let w = EdgeWorld::new(&[s], &[(30.0, 1)], 0, 300_000, 60_000, 0);
        let mut f = OnlineForecast::new(ForecastConfig::default()).unwrap();
        let now = 2 * 24 * h + 21 * h + h / 2;
        let a = f.availability(&w, 0, now, h);
        assert!(a.tide_in(), "{a:?}");
        assert!(
            !a.windows
                .iter()
                .any(|x| x.start_ms <= now && now < x.end_ms),
            "{a:?}"
        );
        // The forecast itself still says idle right after the slot in progress.
        let next = now + 15 * 60_000;
        assert!(
            a.windows
                .iter()
                .any(|x| x.start_ms <= next && next < x.end_ms),
            "{a:?}"
        );
    }

    #[test]
    fn oracle_windows_are_the_true_idle_bins() {
        let w = world();
        let h = 3_600_000;
        let a = w.oracle(0, 6 * h, 4 * h);
        assert_eq!(a.windows[0].start_ms, 6 * h);
        assert_eq!(a.windows[0].end_ms, 8 * h);
    }
}
