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
//! Site mapping ([`EdgeWorld::by_site`], `[utilization.by_site]`): every box
//! of an edge site follows its site's series instead. Site k follows series
//! σ_k (k mod S unless configured), shifted by r_k × reuse_offset_h hours,
//! r_k the number of earlier sites following σ_k. The series is first reduced
//! to its complete days, laid end to end ([`complete_days`]), so day-long
//! gaps in the trace (C2TM's) are not carried as flat load. Then, with L the
//! binned series and P its p-th percentile (nearest rank over one period),
//! the site's load is `u(b) = L(b) × peak_pct / P` (so the series' own
//! scale does not matter), and box i of the site reads
//! `load_i(b) = min(100, g_i × u(b + shift_k + δ_i))`, its factor
//! `g_i ~ U[1 − s, 1 + s]` and phase jitter `δ_i` a whole number of bins
//! uniform in `[−⌊j / bin⌋, ⌊j / bin⌋]`, drawn in box order from the seed.
//!
//! Truth: a box is idle in a bin when its mean load is under its threshold.
//! Reports: a box's reported load at `t` is the bin at `t − detect_delay`, so
//! every change is seen `detect_delay` late; training during that gap after
//! the tide comes in is interference.
//!
//! The forecasts made from what the boxes report are
//! [`super::forecasts::OnlineForecasts`].

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

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

    /// The `p`-th percentile of one period's bins, nearest rank: the
    /// `⌈p / 100 × n⌉`-th smallest of the n bins.
    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.load.clone();
        sorted.sort_by(f64::total_cmp);
        let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// Bins (within the period) where idleness under `threshold_pct` flips, ascending.
    fn flips(&self, threshold_pct: f64) -> Vec<usize> {
        let n = self.load.len();
        let idle = |k: usize| self.load[k] < threshold_pct;
        (0..n)
            .filter(|&k| idle(k) != idle((k + n - 1) % n))
            .collect()
    }
}

const DAY_MS: i64 = 86_400_000;

/// `series` reduced to its complete days, laid end to end from its first
/// complete day on: a complete day is a UTC day in which no two consecutive
/// samples, nor the day's start and first sample or its last sample and end,
/// lie more than twice the series' median sample step apart. Each kept
/// sample keeps its time of day. A series with no complete day is returned
/// as it is.
pub fn complete_days(series: &Series) -> Series {
    let pts = &series.points;
    let mut steps: Vec<i64> = pts
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .filter(|&d| d > 0)
        .collect();
    steps.sort_unstable();
    let Some(&median) = steps.get(steps.len() / 2) else {
        return series.clone();
    };
    let max_gap = 2 * median;
    let complete = |day: &[(i64, f64)]| {
        let start = day[0].0.div_euclid(DAY_MS) * DAY_MS;
        let inner = day.windows(2).all(|w| w[1].0 - w[0].0 <= max_gap);
        inner && day[0].0 - start <= max_gap && start + DAY_MS - day[day.len() - 1].0 <= max_gap
    };
    let days: Vec<&[(i64, f64)]> = pts
        .chunk_by(|a, b| a.0.div_euclid(DAY_MS) == b.0.div_euclid(DAY_MS))
        .filter(|d| complete(d))
        .collect();
    let Some(first) = days.first() else {
        return series.clone();
    };
    let origin = first[0].0.div_euclid(DAY_MS) * DAY_MS;
    let points = days
        .iter()
        .enumerate()
        .flat_map(|(k, day)| {
            let start = day[0].0.div_euclid(DAY_MS) * DAY_MS;
            day.iter()
                .map(move |&(t, v)| (origin + k as i64 * DAY_MS + t - start, v))
        })
        .collect();
    Series {
        node: series.node.clone(),
        points,
    }
}

/// How the boxes of one edge site follow the site's series (module docs).
#[derive(Debug, Clone, Copy)]
pub struct SiteTide {
    /// The percentile p (0 to 100] of the site's binned series mapped to `peak_pct`.
    pub percentile: f64,
    /// A box's load, percent, at its site's p-th percentile (before its factor).
    pub peak_pct: f64,
    /// Spread s of the per-box factor g ~ U[1 − s, 1 + s].
    pub gain_spread: f64,
    /// Per-box phase jitter j, ms: a whole number of bins in [−j, j].
    pub jitter_ms: i64,
    /// Shift of each reuse of a series by a later site, ms.
    pub reuse_offset_ms: i64,
    /// Seed of the per-box draws.
    pub seed: u64,
}

/// Mixed into a run's seed for the site mapping's draws, so that they are not
/// the job trace's draws (which use the seed itself).
pub const SITE_SEED_SALT: u64 = 0x5349_5445_5449_4445;

/// One edge box in the site mapping.
#[derive(Debug, Clone, Copy)]
pub struct SiteBox {
    /// Idle threshold, percent.
    pub threshold_pct: f64,
    /// Training devices.
    pub devices: u32,
    /// Index of its site (into the per-site series list).
    pub site: usize,
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

impl EdgeBox {
    /// Box reading series `series` (its bins `load`; none without a series),
    /// `shift` bins ahead.
    fn new(
        series: usize,
        load: Option<&BinnedSeries>,
        shift: usize,
        threshold_pct: f64,
        devices: u32,
    ) -> EdgeBox {
        EdgeBox {
            series,
            shift,
            threshold_pct,
            devices,
            flips: load.map_or(Vec::new(), |b| b.flips(threshold_pct)),
        }
    }
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
                EdgeBox::new(s, binned.get(s), shift, threshold_pct, devices)
            })
            .collect();
        EdgeWorld::on_grid(binned, boxes, origin_ms, bin_ms, delay_ms)
    }

    /// Maps `boxes` onto their sites' series: site k follows
    /// `series[site_series[k]]`; see the module docs for the formulas.
    pub fn by_site(
        series: &[Series],
        site_series: &[usize],
        boxes: &[SiteBox],
        tide: &SiteTide,
        origin_ms: i64,
        bin_ms: i64,
        delay_ms: i64,
    ) -> EdgeWorld {
        let site_load: Vec<Option<(BinnedSeries, i64)>> = site_series
            .iter()
            .enumerate()
            .map(|(k, &s)| {
                let binned = BinnedSeries::new(&complete_days(series.get(s)?), bin_ms)?;
                let p = binned.percentile(tide.percentile);
                let scale = if p > 0.0 { tide.peak_pct / p } else { 0.0 };
                let reuses = site_series[..k].iter().filter(|&&o| o == s).count() as i64;
                let load = binned.load.iter().map(|v| v * scale).collect();
                Some((
                    BinnedSeries { load },
                    reuses * tide.reuse_offset_ms / bin_ms,
                ))
            })
            .collect();
        let mut rng = StdRng::seed_from_u64(tide.seed);
        let jitter = tide.jitter_ms / bin_ms;
        let mut binned = Vec::with_capacity(boxes.len());
        let boxes = boxes
            .iter()
            .map(|b| {
                let gain = rng.random_range(1.0 - tide.gain_spread..=1.0 + tide.gain_spread);
                let jitter_bins = rng.random_range(-jitter..=jitter);
                let (load, shift) = match site_load.get(b.site).and_then(Option::as_ref) {
                    Some((site, site_shift)) => {
                        let load = site.load.iter().map(|v| (gain * v).min(100.0)).collect();
                        let period = site.load.len() as i64;
                        (load, (site_shift + jitter_bins).rem_euclid(period) as usize)
                    }
                    None => (vec![0.0], 0),
                };
                let own = BinnedSeries { load };
                let edge_box =
                    EdgeBox::new(binned.len(), Some(&own), shift, b.threshold_pct, b.devices);
                binned.push(own);
                edge_box
            })
            .collect();
        EdgeWorld::on_grid(binned, boxes, origin_ms, bin_ms, delay_ms)
    }

    /// `boxes` reading `series` on bins of `bin_ms` from `origin_ms`, each
    /// change reported `delay_ms` late: the one place both mappings meet.
    fn on_grid(
        series: Vec<BinnedSeries>,
        boxes: Vec<EdgeBox>,
        origin_ms: i64,
        bin_ms: i64,
        delay_ms: i64,
    ) -> EdgeWorld {
        EdgeWorld {
            series,
            boxes,
            origin_ms,
            bin_ms,
            delay_ms,
        }
    }

    fn bin_of(&self, t_ms: i64) -> i64 {
        (t_ms - self.origin_ms).div_euclid(self.bin_ms)
    }

    pub(super) fn load_at_bin(&self, e: usize, bin: i64) -> f64 {
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

    /// The first time after `t_ms` at which box `e` reports itself idle
    /// again: its next flip, or the one after when the next is to busy.
    pub fn next_reported_flip_to_idle(&self, e: usize, t_ms: i64) -> Option<i64> {
        let f = self.next_reported_flip(e, t_ms)?;
        if self.reported_idle(e, f) {
            Some(f)
        } else {
            self.next_reported_flip(e, f)
        }
    }

    /// When box `e` last turned idle, as reported by `t_ms`: the reported
    /// time of its last flip to idle; `None` while it reports itself busy,
    /// or when it never flips.
    pub fn reported_idle_since(&self, e: usize, t_ms: i64) -> Option<i64> {
        if !self.reported_idle(e, t_ms) {
            return None;
        }
        let b = &self.boxes[e];
        let period = self.series.get(b.series)?.load.len() as i64;
        let bin = self.bin_of(t_ms - self.delay_ms);
        let pos = (bin + b.shift as i64).rem_euclid(period);
        let back = match b.flips.iter().rev().find(|&&f| f as i64 <= pos) {
            Some(&f) => pos - f as i64,
            None => match b.flips.last() {
                Some(&f) => pos + period - f as i64,
                None => return None,
            },
        };
        Some(self.origin_ms + (bin - back) * self.bin_ms + self.delay_ms)
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
        EdgeAvailability::from_known_load(
            start,
            self.bin_ms,
            &loads,
            self.boxes[e].threshold_pct,
            Some(self.reported(e, now_ms)),
        )
    }
}

/// What a box's forecast history window holds once the window, with the
/// slots it may hold a value over from, lies wholly after the origin: the
/// box's series, the series bin at the fed frontier (bins before it are the
/// series' earlier bins, cycled), and the fed frontier's time less the forecast
/// start, which places those bins on the slot grid. Equal keys, equal windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct WindowKey {
    series: usize,
    frontier_bin: i64,
    frontier_to_start_ms: i64,
}

impl EdgeWorld {
    /// The key of box `e`'s history window when `fed_bins` bins are fed and the
    /// forecast starts at `start_ms`, reading `reach_ms` back; `None` while
    /// that reach extends before the origin (the window is still filling).
    pub(super) fn window_key(
        &self,
        e: usize,
        fed_bins: i64,
        start_ms: i64,
        reach_ms: i64,
    ) -> Option<WindowKey> {
        let b = &self.boxes[e];
        let period = self.series.get(b.series)?.load.len() as i64;
        (start_ms - reach_ms >= self.origin_ms).then(|| WindowKey {
            series: b.series,
            frontier_bin: (fed_bins + b.shift as i64).rem_euclid(period),
            frontier_to_start_ms: self.origin_ms + fed_bins * self.bin_ms - start_ms,
        })
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
        // The next flip from 07:00 is to busy; the box turns idle at 20:00.
        assert_eq!(
            w.next_reported_flip_to_idle(0, 7 * h),
            Some(20 * h + 60_000)
        );
        assert_eq!(
            w.next_reported_flip_to_idle(0, 9 * h),
            Some(20 * h + 60_000)
        );
        assert_eq!(w.split_idle(0, 7 * h, 9 * h), (h, h));
        // Idle since the reported flip at 20:01, the day before for 07:00.
        assert_eq!(w.reported_idle_since(0, 22 * h), Some(20 * h + 60_000));
        assert_eq!(w.reported_idle_since(0, 7 * h), Some(-4 * h + 60_000));
        assert_eq!(w.reported_idle_since(0, 9 * h), None);
    }

    #[test]
    fn oracle_windows_are_the_true_idle_bins() {
        let w = world();
        let h = 3_600_000;
        let a = w.oracle(0, 6 * h, 4 * h);
        assert_eq!(a.windows[0].start_ms, 6 * h);
        assert_eq!(a.windows[0].end_ms, 8 * h);
    }

    /// Hourly samples over `days` days, `busy(hour of day)` at 50 else 10.
    fn hourly(node: &str, days: i64, busy: impl Fn(i64) -> bool) -> Series {
        Series {
            node: node.into(),
            points: (0..days * 24)
                .map(|k| (k * 3_600_000, if busy(k % 24) { 50.0 } else { 10.0 }))
                .collect(),
        }
    }

    #[test]
    fn complete_days_keep_whole_days_end_to_end() {
        let h = 3_600_000;
        // Day 0 whole; day 1 lacks 03:00-05:00 (a 4-h gap); day 2 absent;
        // day 3 whole (values 3); day 4 only 00:00-09:00.
        let points: Vec<(i64, f64)> = (0..5 * 24)
            .filter(|k| {
                let (day, hour) = (k / 24, k % 24);
                day == 0
                    || day == 3
                    || (day == 1 && !(3..6).contains(&hour))
                    || (day == 4 && hour < 10)
            })
            .map(|k| (k * h, (k / 24) as f64))
            .collect();
        let s = complete_days(&Series {
            node: "s".into(),
            points,
        });
        let want: Vec<(i64, f64)> = (0..48)
            .map(|k| (k * h, if k < 24 { 0.0 } else { 3.0 }))
            .collect();
        assert_eq!(s.points, want);
    }

    #[test]
    fn the_percentile_is_the_nearest_rank() {
        let b = BinnedSeries {
            load: (1..=10).rev().map(f64::from).collect(),
        };
        // ⌈0.9 × 10⌉ = 9th smallest; ⌈0.05 × 10⌉ = 1st.
        assert_eq!(b.percentile(90.0), 9.0);
        assert_eq!(b.percentile(5.0), 1.0);
        assert_eq!(b.percentile(100.0), 10.0);
    }

    /// Three sites of four boxes: sites 0 and 2 follow series A (busy 08-20),
    /// site 1 series B (busy 00-08); site 2 is A's reuse, 3 h later.
    fn site_world(seed: u64) -> EdgeWorld {
        let a = hourly("a", 2, |hr| (8..20).contains(&hr));
        let b = hourly("b", 2, |hr| hr < 8);
        let boxes: Vec<SiteBox> = (0..12)
            .map(|i| SiteBox {
                threshold_pct: 30.0,
                devices: 1,
                site: i / 4,
            })
            .collect();
        let tide = SiteTide {
            percentile: 100.0,
            peak_pct: 80.0,
            gain_spread: 0.2,
            jitter_ms: 3_600_000,
            reuse_offset_ms: 3 * 3_600_000,
            seed,
        };
        EdgeWorld::by_site(&[a, b], &[0, 1, 0], &boxes, &tide, 0, 3_600_000, 0)
    }

    #[test]
    fn every_box_of_a_site_follows_its_series_with_its_own_factor_and_jitter() {
        let w = site_world(7);
        // P100 = 50 maps to 80 %: the site loads are 80 % busy, 16 % idle.
        let site_load = |site: usize, bin: i64| {
            let (busy, shift): (fn(i64) -> bool, i64) = match site {
                1 => (|hr| hr < 8, 0),
                _ => (|hr| (8..20).contains(&hr), if site == 2 { 3 } else { 0 }),
            };
            if busy((bin + shift).rem_euclid(24)) {
                80.0
            } else {
                16.0
            }
        };
        let mut gains = Vec::new();
        for e in 0..12 {
            let site = e / 4;
            // The factor g, read off an idle bin (16 % × g, never clipped).
            let idle_bin = (0..48).find(|&b| w.load_at_bin(e, b) < 30.0).unwrap();
            let g = w.load_at_bin(e, idle_bin) / 16.0;
            assert!((0.8..=1.2).contains(&g), "box {e}: factor {g}");
            gains.push(g);
            let fits = |delta: i64| {
                (0..96).all(|b| {
                    let want = (g * site_load(site, b + delta)).min(100.0);
                    (w.load_at_bin(e, b) - want).abs() < 1e-9
                })
            };
            assert!(
                (-1..=1).any(fits),
                "box {e} is not its site's series × g, jittered by at most 1 bin"
            );
        }
        // Each box has a factor of its own.
        gains.sort_by(f64::total_cmp);
        gains.dedup();
        assert_eq!(gains.len(), 12);
    }

    #[test]
    fn the_site_mapping_is_deterministic_for_a_seed() {
        let loads = |w: &EdgeWorld| -> Vec<f64> {
            (0..12)
                .flat_map(|e| (0..48).map(move |b| (e, b)))
                .map(|(e, b)| w.load_at_bin(e, b))
                .collect()
        };
        assert_eq!(loads(&site_world(7)), loads(&site_world(7)));
        assert_ne!(loads(&site_world(7)), loads(&site_world(8)));
    }
}
