//! tidemill's forecast as served: the model of [`crate::tidemill`] run with a
//! daily and, given the history, a weekly season; per horizon bucket the season
//! with the smaller recent out-of-sample error is kept, and its P10 and P90 are
//! calibrated on the same errors (split conformal). Values in percent; N is the
//! history length in slots, S the slots in a day.
//!
//! Held-out origins: for k = 1 … [`CALIBRATION_DAYS`] (while k days leave a
//! day of history), the origin k days before the forecast start, O_k = N − k·S.
//! At O_k the model reads x[..O_k] only and forecasts min(horizon, k·S) slots,
//! all inside the history, so each has a truth y = x[O_k + ℓ] where observed.
//! The origins sit at the forecast start's time of day, so a lead's held-out
//! errors come from the same time of day as the lead itself.
//!
//! 1. Season, per bucket b ([`HorizonBucket`]): the season L ∈ {1 day, 7 days}
//!    with the smaller Σ |y − P50_L| over the held-out points of b whose
//!    origin had a week of history to look back on (ties keep the daily one). The weekly season is only tried with at least
//!    [`WEEKLY_MIN_DAYS`] days of history, so a young box pays nothing for it,
//!    and a box without a weekly pattern is served the daily forecast.
//! 2. Calibration, per bucket b, for the chosen season: with the n held-out
//!    residuals r = y − P50 (percent),
//!
//!    P10 = P50 − Q̂₀.₉(−r), P90 = P50 + Q̂₀.₉(r)  ([`conformal_quantile`])
//!
//!    (clamped to 0-100 and ordered around P50): each side misses about 10 %
//!    of the box's recent points, so P10-P90 covers about 80 %. The band is
//!    built on the P50 errors alone, not by moving the model's own band: the
//!    held-out runs read less history, so their bands are widened more than
//!    the served one, and offsets learnt on them would under-cover. In the
//!    first hour of leads the band is widened to the model's own where that
//!    is wider: there the model's persistence term follows a departure of
//!    the last hour (a load that just stepped up) that no held-out error
//!    knows of, and its band says how far. A bucket
//!    with fewer than [`MIN_CALIBRATION`] held-out points keeps the model's
//!    own band (a young box: it is already widened).
//!
//! Cost: (1 + held-out origins) model runs per season, each O(history slots).

use crate::history::History;
use crate::tidemill::{self, Wanted};
use crate::{CycleVerdict, HorizonBucket, Quantiles};

/// Days of held-out origins: one week, so that every weekday's errors count.
pub(crate) const CALIBRATION_DAYS: usize = 7;

/// Fewest days of history before the weekly season is tried: a week to look
/// back on, and two held-out origins to judge it by.
pub(crate) const WEEKLY_MIN_DAYS: usize = 9;

/// Fewest held-out points in a bucket before its band is calibrated: a
/// quarter of a day of 15-minute slots.
const MIN_CALIBRATION: usize = 24;

/// The seasons tried, in days; the first is the default.
const SEASONS: [usize; 2] = [1, 7];

/// Held-out P50 errors of one season in one bucket.
#[derive(Debug, Default, Clone)]
struct HeldOut {
    abs_err: f64,
    residuals: Vec<f64>,
}

impl HeldOut {
    /// Adds a point to the residuals; to the error that chooses the
    /// season only if `compared`.
    fn add(&mut self, q: &Quantiles, y: f64, compared: bool) {
        if compared {
            self.abs_err += (y - q.p50).abs();
        }
        self.residuals.push(y - q.p50);
    }
}

/// What was chosen for one bucket: the season's index in [`SEASONS`] and,
/// when calibrated, the band around P50 as (P50 − P10, P90 − P50), percent.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Choice {
    season: usize,
    band: Option<(f64, f64)>,
}

/// Forecasts `horizon` slots of `slot_len_s` seconds after `h` (see the module docs).
pub(crate) fn forecast(
    h: &History,
    cycle: &CycleVerdict,
    horizon: usize,
    slots_per_hour: usize,
    slot_len_s: u32,
) -> Vec<Option<Quantiles>> {
    let seasons = if h.days() >= WEEKLY_MIN_DAYS { 2 } else { 1 };
    let held = held_out(h, cycle, horizon, slots_per_hour, slot_len_s, seasons);
    let choices: Vec<Choice> = held.iter().map(|per_season| choose(per_season)).collect();
    let mut runs: [Option<Vec<Option<Quantiles>>>; 2] = [None, None];
    (0..horizon)
        .map(|lead| {
            let c = choices[HorizonBucket::of_slot(lead, slot_len_s).index()];
            let run = runs[c.season].get_or_insert_with(|| {
                let season = SEASONS[c.season];
                tidemill::forecast(h, cycle, horizon, slots_per_hour, season, Wanted::Band)
            });
            let q = run[lead]?;
            let first_hour = lead < slots_per_hour;
            Some(match c.band {
                Some((below, above)) if first_hour => Quantiles {
                    p10: (q.p50 - below).min(q.p10),
                    p50: q.p50,
                    p90: (q.p50 + above).max(q.p90),
                }
                .clamped(),
                Some((below, above)) => Quantiles {
                    p10: q.p50 - below,
                    p50: q.p50,
                    p90: q.p50 + above,
                }
                .clamped(),
                None => q,
            })
        })
        .collect()
}

/// Held-out errors per bucket and season, from the origins 1 … [`CALIBRATION_DAYS`]
/// days before the forecast start.
fn held_out(
    h: &History,
    cycle: &CycleVerdict,
    horizon: usize,
    slots_per_hour: usize,
    slot_len_s: u32,
    seasons: usize,
) -> Vec<Vec<HeldOut>> {
    let (x, s) = (h.values(), h.slots_per_day());
    let mut held = vec![vec![HeldOut::default(); seasons]; HorizonBucket::ALL.len()];
    for k in 1..=CALIBRATION_DAYS.min(h.days().saturating_sub(1)) {
        let origin = (h.days() - k) * s;
        let past = History::new(x[..origin].to_vec(), s);
        let leads = horizon.min(k * s);
        // Seasons are compared where the weekly one could look a week back.
        let compared = past.days() >= 7;
        for (season, &days) in SEASONS[..seasons].iter().enumerate() {
            let f = tidemill::forecast(&past, cycle, leads, slots_per_hour, days, Wanted::Median);
            for (lead, q) in f.iter().enumerate() {
                if let (Some(q), Some(y)) = (q, x[origin + lead]) {
                    let b = HorizonBucket::of_slot(lead, slot_len_s).index();
                    held[b][season].add(q, y, compared);
                }
            }
        }
    }
    held
}

/// The season with the smaller held-out absolute error (the first on a tie
/// or without points), and its calibrated band.
fn choose(per_season: &[HeldOut]) -> Choice {
    let season = (1..per_season.len()).fold(0, |best, i| {
        if per_season[i].abs_err < per_season[best].abs_err {
            i
        } else {
            best
        }
    });
    let r = &per_season[season].residuals;
    let band = (r.len() >= MIN_CALIBRATION).then(|| {
        let mut below: Vec<f64> = r.iter().map(|e| -e).collect();
        let mut above = r.clone();
        (
            conformal_quantile(&mut below, 0.9).unwrap_or(0.0),
            conformal_quantile(&mut above, 0.9).unwrap_or(0.0),
        )
    });
    Choice { season, band }
}

/// The split-conformal τ-quantile of n scores (sorted in place): the
/// ⌈(n + 1)·τ⌉-th smallest, or the largest when that exceeds n; `None` when
/// empty. A new score from the same distribution is at most this with
/// probability at least τ (same unit as the scores).
pub(crate) fn conformal_quantile(scores: &mut [f64], tau: f64) -> Option<f64> {
    scores.sort_unstable_by(f64::total_cmp);
    let n = scores.len();
    let rank = ((n as f64 + 1.0) * tau).ceil() as usize;
    scores.get(rank.clamp(1, n.max(1)) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DailyCycle;

    const CYCLE: CycleVerdict = CycleVerdict {
        daily_cycle: DailyCycle::Present,
        strength: Some(1.0),
        days_used: 14,
    };

    #[test]
    fn conformal_quantile_by_hand() {
        // n = 9: ⌈10·0.9⌉ = 9th smallest = 9.
        let mut s: Vec<f64> = (1..=9).rev().map(f64::from).collect();
        assert_eq!(conformal_quantile(&mut s, 0.9), Some(9.0));
        // n = 19: ⌈20·0.9⌉ = 18th smallest = 18.
        let mut s: Vec<f64> = (1..=19).map(f64::from).collect();
        assert_eq!(conformal_quantile(&mut s, 0.9), Some(18.0));
        // n = 3: ⌈4·0.9⌉ = 4 > 3 → the largest.
        assert_eq!(conformal_quantile(&mut [2.0, -1.0, 0.5], 0.9), Some(2.0));
        assert_eq!(conformal_quantile(&mut [], 0.9), None);
    }

    /// `days` days of 4-slot days (S = 4, one slot an hour would be 6 h each):
    /// weekdays follow `weekday`, days 5 and 6 of each week `weekend`.
    fn weekly(days: usize, weekday: [f64; 4], weekend: [f64; 4]) -> History {
        let x = (0..days)
            .flat_map(|d| if d % 7 >= 5 { weekend } else { weekday })
            .map(Some)
            .collect();
        History::new(x, 4)
    }

    #[test]
    fn a_weekly_pattern_picks_the_weekly_season() {
        // 14 days; day 14 (the forecast day) is a weekday, day 15 too. Every
        // held-out origin's daily model errs around weekends; the weekly one
        // never does, so it is chosen and repeats last week exactly.
        let h = weekly(14, [10.0, 40.0, 60.0, 20.0], [5.0, 5.0, 5.0, 5.0]);
        let held = held_out(&h, &CYCLE, 8, 1, 21_600, 2);
        let c = choose(&held[HorizonBucket::Near.index()]);
        assert_eq!(c.season, 1, "{:?}", held[0].iter().map(|h| h.abs_err));
        let f = forecast(&h, &CYCLE, 4, 1, 21_600);
        let p50: Vec<f64> = f.iter().map(|q| q.unwrap().p50).collect();
        for (got, want) in p50.iter().zip([10.0, 40.0, 60.0, 20.0]) {
            assert!((got - want).abs() < 1.0, "{p50:?}");
        }
    }

    #[test]
    fn no_weekly_pattern_keeps_the_daily_season() {
        // The same day every day: both seasons are exact, the tie keeps daily.
        let h = weekly(14, [10.0, 40.0, 60.0, 20.0], [10.0, 40.0, 60.0, 20.0]);
        let held = held_out(&h, &CYCLE, 8, 1, 21_600, 2);
        assert_eq!(choose(&held[0]).season, 0);
    }

    #[test]
    fn the_band_comes_from_the_held_out_residuals() {
        // 30 held-out points, truth 1 … 30 over a P50 of 10: r = −9 … 20.
        // ⌈31·0.9⌉ = 28th smallest of −r (−20 … 9) is 7, of r is 18.
        let mut held = HeldOut::default();
        let q = Quantiles {
            p10: 0.0,
            p50: 10.0,
            p90: 50.0,
        };
        for y in 1..=30 {
            held.add(&q, f64::from(y), true);
        }
        let c = choose(&[held]);
        assert_eq!(c.band, Some((7.0, 18.0)));
        // Too few points: the model's own band.
        let mut few = HeldOut::default();
        few.add(&q, 5.0, true);
        assert_eq!(choose(&[few]).band, None);
    }
}
