//! Rolling-origin backtest: at every origin, each method forecasts from the data
//! before the origin only, and is scored on the slots that follow.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

use tidemill_forecast::metrics::{Scoreboard, ScoredPoint};
use tidemill_forecast::{
    ForecastConfig, HorizonBucket, Method, Quantiles, Resource, SeriesForecaster,
};

use crate::trace::Series;

/// History a node needs before its first origin, ms: one day, so that
/// same-slot-yesterday (the MASE reference) exists.
pub const WARMUP_MS: i64 = 86_400_000;

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct Backtest {
    /// Slot length, horizon, idle threshold and history kept.
    pub config: ForecastConfig,
    /// Time between origins, ms.
    pub step_ms: i64,
    /// The methods to score; same-slot-yesterday is always computed as the reference.
    pub methods: Vec<Method>,
}

/// Whole days of a node's own samples before an origin, in bands: how a
/// forecast improves as a box's history grows, and how much of a short
/// trace's score comes from young histories. Each band is `from..to` days
/// (`None`: no end); the first origin comes a day after a node's first sample.
pub const HISTORY_BANDS: [(u32, Option<u32>); 6] = [
    (1, Some(2)),
    (2, Some(3)),
    (3, Some(4)),
    (4, Some(7)),
    (7, Some(14)),
    (14, None),
];

/// The index in [`HISTORY_BANDS`] of `days` whole days of history (at least 1).
pub fn history_band(days: u32) -> usize {
    HISTORY_BANDS
        .iter()
        .rposition(|(from, _)| days >= *from)
        .unwrap_or(0)
}

/// A band's name, as printed and in JSON: `1 d`, `4-6 d`, `14+ d`.
pub fn history_band_name(band: usize) -> String {
    match HISTORY_BANDS[band] {
        (from, Some(to)) if to == from + 1 => format!("{from} d"),
        (from, Some(to)) => format!("{from}-{} d", to - 1),
        (from, None) => format!("{from}+ d"),
    }
}

/// One method's scores: over every lead, and per horizon bucket
/// (indexed as [`HorizonBucket::ALL`]).
#[derive(Debug, Clone, Default)]
pub struct Boards {
    /// Every scored lead.
    pub all: Scoreboard,
    /// The leads of each bucket.
    pub by_bucket: [Scoreboard; 3],
    /// The leads of each bucket, per band of the node's own history at the
    /// origin (indexed as [`HISTORY_BANDS`], then as [`HorizonBucket::ALL`]).
    pub by_history: [[Scoreboard; 3]; HISTORY_BANDS.len()],
    /// tidemill's forecast scored on this method's points only (every lead),
    /// so that the two compare on the same origins and slots.
    pub tidemill_here: Scoreboard,
}

impl Boards {
    fn merge(&mut self, other: &Boards) {
        self.all.merge(&other.all);
        for (a, b) in self.by_bucket.iter_mut().zip(&other.by_bucket) {
            a.merge(b);
        }
        for (a, b) in self.by_history.iter_mut().zip(&other.by_history) {
            for (a, b) in a.iter_mut().zip(b) {
                a.merge(b);
            }
        }
        self.tidemill_here.merge(&other.tidemill_here);
    }
}

/// Per-slot means of a series on the forecast grid, indexed from its first slot.
pub struct SlotMeans {
    first_slot: i64,
    means: Vec<Option<f64>>,
}

impl SlotMeans {
    /// Averages `points` per slot of `slot_len_ms`.
    pub fn new(points: &[(i64, f64)], slot_len_ms: i64) -> Self {
        let (Some(first), Some(last)) = (points.first(), points.last()) else {
            return Self {
                first_slot: 0,
                means: Vec::new(),
            };
        };
        let first_slot = first.0.div_euclid(slot_len_ms);
        let n = (last.0.div_euclid(slot_len_ms) - first_slot + 1) as usize;
        let mut sums = vec![(0.0, 0u32); n];
        for (t, v) in points {
            let s = &mut sums[(t.div_euclid(slot_len_ms) - first_slot) as usize];
            s.0 += v;
            s.1 += 1;
        }
        let means = sums
            .into_iter()
            .map(|(sum, n)| (n > 0).then(|| sum / f64::from(n)))
            .collect();
        Self { first_slot, means }
    }

    /// The mean of absolute slot `slot`, if observed.
    pub fn get(&self, slot: i64) -> Option<f64> {
        let i = usize::try_from(slot - self.first_slot).ok()?;
        self.means.get(i).copied().flatten()
    }
}

/// The origins of a node whose samples span `first_ms..=last_ms`: multiples of
/// `step_ms` from one day after the first sample up to the last sample.
pub fn origins(first_ms: i64, last_ms: i64, step_ms: i64) -> impl Iterator<Item = i64> {
    let start = (first_ms + WARMUP_MS).div_euclid(step_ms) * step_ms;
    let start = if start < first_ms + WARMUP_MS {
        start + step_ms
    } else {
        start
    };
    (0..)
        .map(move |k| start + k * step_ms)
        .take_while(move |o| *o <= last_ms)
}

/// Runs `work` on every item over the available cores: each worker folds
/// its items into its own accumulator (from `init`), and the accumulators are
/// merged at the end; `progress(done, total)` is called after each item.
pub fn fan_out<T: Sync, A: Send>(
    items: &[T],
    init: impl Fn() -> A + Sync,
    work: impl Fn(&T, &mut A) + Sync,
    merge: impl Fn(&mut A, &A) + Sync,
    progress: impl Fn(usize, usize) + Sync,
) -> A {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let total = Mutex::new(init());
    let workers = thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len().max(1));
    thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                let mut mine = init();
                while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                    work(item, &mut mine);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, items.len());
                }
                let mut total = total
                    .lock()
                    .expect("no worker panics while holding the lock");
                merge(&mut total, &mine);
            });
        }
    });
    total.into_inner().expect("no worker panicked")
}

impl Backtest {
    /// Scores every method over every node; `progress(done, total)` is called
    /// after each node. Nodes are spread over the available cores.
    pub fn run(
        &self,
        series: &[Series],
        progress: impl Fn(usize, usize) + Sync,
    ) -> Vec<(Method, Boards)> {
        let total = fan_out(
            series,
            || vec![Boards::default(); self.methods.len()],
            |s, boards| self.node(s, boards),
            |total, boards| {
                for (t, b) in total.iter_mut().zip(boards) {
                    t.merge(b);
                }
            },
            progress,
        );
        self.methods.iter().copied().zip(total).collect()
    }

    /// Scores one node into `boards` (one per method, in `self.methods` order).
    fn node(&self, series: &Series, boards: &mut [Boards]) {
        let (Some(first), Some(last)) = (series.points.first(), series.points.last()) else {
            return;
        };
        let slot_ms = self.config.slot_len_ms();
        let hours = f64::from(self.config.slot_len_s) / 3_600.0;
        let threshold = self.config.idle_threshold_pct;
        let confidence = self.config.idle_confidence;
        let actual = SlotMeans::new(&series.points, slot_ms);
        let mut model = SeriesForecaster::new(Resource::Cpu, self.config.clone())
            .expect("the backtest's config was validated");
        let mut fed = 0;
        for origin in origins(first.0, last.0, self.step_ms) {
            while let Some(&(t, v)) = series.points.get(fed).filter(|p| p.0 < origin) {
                // Points are sorted and fed in order, so none is ever too old.
                let _ = model.update(t, v);
                fed += 1;
            }
            let reference = model.forecast(Method::SameSlotYesterday, origin).slots;
            let forecasts: Vec<Vec<Option<Quantiles>>> = self
                .methods
                .iter()
                .map(|m| model.forecast(*m, origin).slots)
                .collect();
            let ours = self.methods.iter().position(|m| *m == Method::Tidemill);
            let first_slot = origin.div_euclid(slot_ms);
            let days = u32::try_from((origin - first.0) / 86_400_000).unwrap_or(u32::MAX);
            let band = history_band(days);
            for (slots, board) in forecasts.iter().zip(boards.iter_mut()) {
                for (lead, q) in slots.iter().enumerate() {
                    let slot = first_slot + lead as i64;
                    let (Some(q), Some(y), Some(r)) = (q, actual.get(slot), reference[lead]) else {
                        continue;
                    };
                    let point = |forecast| ScoredPoint {
                        actual: y,
                        forecast,
                        reference_p50: r.p50,
                        hours,
                    };
                    let bucket = HorizonBucket::of_slot(lead, self.config.slot_len_s);
                    board.all.add(&point(*q), threshold, confidence);
                    board.by_bucket[bucket.index()].add(&point(*q), threshold, confidence);
                    board.by_history[band][bucket.index()].add(&point(*q), threshold, confidence);
                    if let Some(t) = ours.and_then(|i| forecasts[i][lead]) {
                        board.tidemill_here.add(&point(t), threshold, confidence);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Backtests one node with `points` at `step_ms` between origins.
    fn backtest_one(
        points: Vec<(i64, f64)>,
        step_ms: i64,
        methods: Vec<Method>,
    ) -> Vec<(Method, Boards)> {
        let series = Series {
            node: "n".to_string(),
            points,
        };
        let backtest = Backtest {
            config: ForecastConfig::default(),
            step_ms,
            methods,
        };
        backtest.run(std::slice::from_ref(&series), |_, _| {})
    }

    /// The points a board scored.
    fn points(board: &Scoreboard) -> u64 {
        board.figures().map_or(0, |f| f.points)
    }

    #[test]
    fn slot_means_average_and_skip_gaps() {
        let m = SlotMeans::new(&[(0, 1.0), (500, 3.0), (2_500, 7.0)], 1_000);
        assert_eq!(
            (m.get(0), m.get(1), m.get(2), m.get(3)),
            (Some(2.0), None, Some(7.0), None)
        );
        assert_eq!(m.get(-1), None);
    }

    #[test]
    fn origins_start_after_a_day_on_the_step_grid() {
        let h = 3_600_000;
        let o: Vec<i64> = origins(1_000, WARMUP_MS + 3 * h, h).collect();
        assert_eq!(o, vec![WARMUP_MS + h, WARMUP_MS + 2 * h, WARMUP_MS + 3 * h]);
    }

    #[test]
    fn leads_are_scored_per_horizon_bucket() {
        // Three days of 15-minute slots, one origin (at day 2: the step grid
        // after the one-day warm-up, and two days give yesterday's errors) with
        // a 48 h horizon: 24 of its leads fall in 0-6 h and 72 in 6-24 h, and
        // the 96 of 24-48 h lie past the data, so none is scored.
        let flat = (0..288).map(|i| (i * 900_000, 20.0)).collect();
        let boards = backtest_one(flat, 2 * WARMUP_MS, vec![Method::SameSlotYesterday]);
        let b = &boards[0].1;
        assert_eq!(points(&b.all), 96);
        assert_eq!(
            b.by_bucket.iter().map(points).collect::<Vec<_>>(),
            [24, 72, 0]
        );
    }

    #[test]
    fn history_bands_by_hand() {
        let names: Vec<String> = (0..HISTORY_BANDS.len()).map(history_band_name).collect();
        assert_eq!(names, ["1 d", "2 d", "3 d", "4-6 d", "7-13 d", "14+ d"]);
        let bands: Vec<usize> = [0, 1, 2, 3, 4, 6, 7, 13, 14, 400]
            .map(history_band)
            .to_vec();
        assert_eq!(bands, [0, 0, 1, 2, 3, 3, 4, 4, 5, 5]);
    }

    #[test]
    fn leads_are_scored_per_band_of_history() {
        // Five days of 15-minute slots from t = 0, 12-hourly origins from day 1:
        // origins at 1, 1.5 d fall in band "1 d", 2, 2.5 d in "2 d", 3, 3.5 d
        // in "3 d", 4, 4.5 d in "4-6 d" (and 5 d, past the last sample, is
        // none). Each band's points are those of its origins' leads inside the
        // data, and together they are every scored point. The origin at 1 d
        // scores none: same-slot-yesterday, the reference, needs a dozen
        // in-sample errors, so more than a day of history.
        let flat = (0..480).map(|i| (i * 900_000, 20.0)).collect();
        let boards = backtest_one(flat, WARMUP_MS / 2, vec![Method::SameSlotYesterday]);
        let b = &boards[0].1;
        let per_band: Vec<u64> = b
            .by_history
            .iter()
            .map(|buckets| buckets.iter().map(points).sum::<u64>())
            .collect();
        // Leads inside the data from an origin at day o: min(192, (5 − o)·96).
        assert_eq!(per_band, [192, 192 + 192, 192 + 144, 96 + 48, 0, 0]);
        assert_eq!(per_band.iter().sum::<u64>(), points(&b.all));
    }

    #[test]
    fn tidemill_is_also_scored_on_each_baselines_own_points() {
        // Ten days, hourly origins: same-slot-last-week forecasts only from
        // day 7, so its points are fewer than tidemill's; tidemill's score on
        // its points counts exactly those, and on its own points all of them.
        let tide = (0..960)
            .map(|i| (i * 900_000, if (i / 4) % 24 < 8 { 10.0 } else { 60.0 }))
            .collect();
        let methods = vec![Method::SameSlotLastWeek, Method::Tidemill];
        let boards = backtest_one(tide, 6 * 3_600_000, methods);
        let (week, ours) = (&boards[0].1, &boards[1].1);
        assert!(points(&week.all) > 0);
        assert!(points(&week.all) < points(&ours.all));
        assert_eq!(points(&week.tidemill_here), points(&week.all));
        assert_eq!(points(&ours.tidemill_here), points(&ours.all));
    }

    #[test]
    fn no_peeking_a_future_spike_cannot_change_past_forecasts() {
        // Two series equal before the origin and different after, both fed in
        // full: the forecasts must be identical, so nothing after it was read.
        let base: Vec<(i64, f64)> = (0..(3 * 96)).map(|i| (i * 900_000, 20.0)).collect();
        let mut spiked = base.clone();
        for p in spiked.iter_mut().skip(2 * 96 + 10) {
            p.1 = 90.0;
        }
        let cfg = ForecastConfig::default();
        let origin = 2 * 86_400_000;
        let fc = |pts: &[(i64, f64)]| {
            let mut m = SeriesForecaster::new(Resource::Cpu, cfg.clone()).unwrap();
            for (t, v) in pts {
                m.update(*t, *v).unwrap();
            }
            m.forecast(Method::Tidemill, origin)
        };
        assert_eq!(fc(&base), fc(&spiked));
    }
}
