//! The forecasts the scheduler sees in the simulator: every box's forecaster
//! is fed its reported bins ([`EdgeWorld`]) and refreshed at each refresh
//! boundary. A forecast made from a history window seen before (a reused
//! series, or a cycled one coming round again) is taken from a memo instead
//! of being made again; see [`OnlineForecasts`].

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use tidemill_forecast::{ForecastConfig, LoadSample, NodeForecaster, Quantiles, Resource};
use tidemill_sched::EdgeAvailability;

use super::edges::{EdgeWorld, WindowKey};

/// Every edge box's online forecaster, fed the reported load bin by bin and
/// never ahead of `now`, with forecasts kept by the history window they were
/// made from.
///
/// A forecast is a pure function of its history window (the settings are the
/// same for every box), and a full window is fixed by its [`WindowKey`]. Boxes
/// that reuse a series, and a box whose cycled series comes round again, meet
/// keys already seen; their forecasts are taken from the memo instead of being
/// made again. The results are the same as without the memo (tested).
pub struct OnlineForecasts {
    config: ForecastConfig,
    models: Vec<NodeForecaster>,
    /// Bins fed to every model: all are fed to the same frontier.
    fed_bins: i64,
    /// The refresh boundary of the forecasts in `latest`.
    issued_ms: Option<i64>,
    /// Start of the first slot of the forecasts in `latest`, ms.
    start_ms: i64,
    /// Each box's forecast per slot, as issued at the last refresh boundary.
    latest: Vec<Slots>,
    memo: Option<Memo>,
    threads: usize,
    /// Forecasts made, and forecasts taken from the memo.
    pub counts: ForecastCounts,
}

/// How many forecasts a run made and how many it reused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ForecastCounts {
    /// Forecasts computed.
    pub made: u64,
    /// Forecasts taken from the memo.
    pub reused: u64,
}

/// A forecast's quantiles per slot, percent; shared by the boxes it serves.
type Slots = Arc<[Option<Quantiles>]>;

/// Forecasts by window key, in two generations of at most
/// [`MEMO_GENERATION`] entries: when the newer fills, the older is dropped, so
/// the memo stays bounded when windows never repeat (a trace longer than the run).
#[derive(Default)]
struct Memo {
    newer: HashMap<WindowKey, Slots>,
    older: HashMap<WindowKey, Slots>,
}

/// Entries per memo generation: about 1.6 kB each with a 24-hour horizon of
/// 15-minute slots, so at most about 100 MB in all.
const MEMO_GENERATION: usize = 1 << 15;

impl Memo {
    fn get(&mut self, key: &WindowKey) -> Option<Slots> {
        if let Some(f) = self.newer.get(key) {
            return Some(f.clone());
        }
        let f = self.older.remove(key)?;
        self.insert(*key, f.clone());
        Some(f)
    }

    fn insert(&mut self, key: WindowKey, f: Slots) {
        if self.newer.len() >= MEMO_GENERATION {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(key, f);
    }
}

/// Where one box's forecast comes from at a refresh.
enum Source {
    Memo(Slots),
    /// Made from this box's own window (keyed when the window is full).
    Made(Option<WindowKey>),
    /// The same window as an earlier box's at this refresh.
    SameAs(usize),
}

impl OnlineForecasts {
    /// Forecasters for `boxes` boxes with `config`, fed from the world's origin;
    /// refreshes run on `threads` threads.
    pub fn new(
        config: ForecastConfig,
        boxes: usize,
        threads: usize,
    ) -> Result<Self, tidemill_forecast::ConfigError> {
        let model = NodeForecaster::new(config.clone())?;
        Ok(OnlineForecasts {
            config,
            models: vec![model; boxes],
            fed_bins: 0,
            issued_ms: None,
            start_ms: 0,
            latest: Vec::new(),
            memo: Some(Memo::default()),
            threads: threads.max(1),
            counts: ForecastCounts::default(),
        })
    }

    /// Box `e`'s availability at `now_ms`: the forecast of its one
    /// resource (CPU) issued at the last refresh boundary (`refresh_ms` grid),
    /// made from every bin reported by then, its latest reported load and
    /// since when it has reported itself idle,
    /// turned into windows by the live coordinator's rule,
    /// [`EdgeAvailability::from_forecast`]. The first call after a boundary
    /// refreshes every box.
    pub fn availability(
        &mut self,
        world: &EdgeWorld,
        e: usize,
        now_ms: i64,
        refresh_ms: i64,
    ) -> EdgeAvailability {
        let issued_ms = now_ms.div_euclid(refresh_ms) * refresh_ms;
        if self.issued_ms != Some(issued_ms) {
            self.refresh(world, issued_ms);
        }
        EdgeAvailability {
            idle_since_ms: world.reported_idle_since(e, now_ms),
            ..EdgeAvailability::from_forecast(
                self.start_ms,
                self.config.slot_len_ms(),
                &[&self.latest[e]],
                world.boxes[e].threshold_pct,
                now_ms,
                Some(world.reported(e, now_ms)),
            )
        }
    }

    /// Feeds every box the bins reported by `issued_ms` and issues its
    /// forecast: from the memo where its window was seen before, made (on all
    /// threads) where not.
    fn refresh(&mut self, world: &EdgeWorld, issued_ms: i64) {
        let known_until = issued_ms - world.delay_ms;
        let fed_bins = (known_until - world.origin_ms)
            .div_euclid(world.bin_ms)
            .max(self.fed_bins);
        let start_ms = self.config.forecast_start_ms(issued_ms);
        let reach_ms = self.config.history_reach_slots() as i64 * self.config.slot_len_ms();
        let mut first_with: HashMap<WindowKey, usize> = HashMap::new();
        let sources: Vec<Source> = (0..self.models.len())
            .map(|e| {
                let (Some(memo), Some(key)) = (
                    self.memo.as_mut(),
                    world.window_key(e, fed_bins, start_ms, reach_ms),
                ) else {
                    return Source::Made(None);
                };
                if let Some(f) = memo.get(&key) {
                    return Source::Memo(f);
                }
                match first_with.get(&key) {
                    Some(&first) => Source::SameAs(first),
                    None => {
                        first_with.insert(key, e);
                        Source::Made(Some(key))
                    }
                }
            })
            .collect();
        let from = self.fed_bins;
        on_threads(
            self.models.iter_mut().enumerate().collect(),
            self.threads,
            |(e, model)| {
                for bin in from..fed_bins {
                    // Bins are fed in order and the value is a percentage, so this cannot fail.
                    let _ = model.update(&LoadSample {
                        t_ms: world.origin_ms + bin * world.bin_ms,
                        cpu_pct: Some(world.load_at_bin(e, bin)),
                        mem_pct: None,
                        gpu_pct: None,
                    });
                }
            },
        );
        self.fed_bins = fed_bins;
        let to_make: Vec<usize> = (0..sources.len())
            .filter(|&e| matches!(sources[e], Source::Made(_)))
            .collect();
        let models = &self.models;
        let made_for: HashMap<usize, Slots> = on_threads(to_make, self.threads, |e| {
            let slots = models[e]
                .forecast_resource(Resource::Cpu, issued_ms)
                .map_or(Slots::from([]), |(_, f)| Slots::from(f.slots));
            (e, slots)
        })
        .into_iter()
        .collect();
        self.counts.made += made_for.len() as u64;
        self.counts.reused += (sources.len() - made_for.len()) as u64;
        self.latest = sources
            .into_iter()
            .enumerate()
            .map(|(e, source)| match source {
                Source::Memo(f) => f,
                Source::Made(key) => {
                    let f = made_for[&e].clone();
                    if let (Some(key), Some(memo)) = (key, self.memo.as_mut()) {
                        memo.insert(key, f.clone());
                    }
                    f
                }
                Source::SameAs(first) => made_for[&first].clone(),
            })
            .collect();
        self.issued_ms = Some(issued_ms);
        self.start_ms = start_ms;
    }
}

/// Maps `items` through `f` on up to `threads` threads, in order.
fn on_threads<T: Send, R: Send>(
    items: Vec<T>,
    threads: usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    if threads <= 1 || items.len() <= 1 {
        return items.into_iter().map(f).collect();
    }
    let per = items.len().div_ceil(threads);
    let mut items = items.into_iter();
    let f = &f;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let chunk: Vec<T> = items.by_ref().take(per).collect();
                scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<R>>())
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a forecast does not panic"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Series;

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
        let mut f = OnlineForecasts::new(ForecastConfig::default(), 1, 1).unwrap();
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
    fn forecasts_from_the_memo_are_the_forecasts_made_afresh() {
        // Two noisy series of 3 days (so windows differ hour by hour), reused by
        // six boxes 36 h apart: boxes 4 and 5 follow boxes 0 and 1 (72 h is the
        // period), boxes 2 and 3 meet their windows 36 h later. A 2-day history
        // fills by day 2; from then on boxes meet windows already seen.
        let h = 3_600_000;
        let series: Vec<Series> = (0..2u64)
            .map(|s| Series {
                node: format!("s{s}"),
                points: (0..3 * 288i64)
                    .map(|k| {
                        let hour = (k % 288) / 12;
                        let noise = ((k as u64 * 2_654_435_761 + s * 97) % 23) as f64;
                        let base = if (8..20).contains(&hour) { 50.0 } else { 10.0 };
                        (k * 300_000, base + noise)
                    })
                    .collect(),
            })
            .collect();
        let w = EdgeWorld::new(&series, &[(30.0, 1); 6], 0, 300_000, 60_000, 36 * h);
        let config = ForecastConfig {
            history_days: 2,
            ..ForecastConfig::default()
        };
        let mut memo = OnlineForecasts::new(config.clone(), 6, 2).unwrap();
        let mut afresh = OnlineForecasts::new(config, 6, 1).unwrap();
        afresh.memo = None;
        for hour in 0..9 * 24 {
            let now = hour * h + 20 * 60_000;
            for e in 0..6 {
                assert_eq!(
                    memo.availability(&w, e, now, h),
                    afresh.availability(&w, e, now, h),
                    "box {e} at hour {hour}"
                );
            }
        }
        assert_eq!(afresh.counts.reused, 0);
        // Days 3-9 repeat the 3-day cycle: most forecasts are reused.
        assert!(memo.counts.reused > memo.counts.made, "{:?}", memo.counts);
        assert_eq!(memo.counts.made + memo.counts.reused, 6 * 9 * 24);
    }
}
