//! tidemill's model: a daily level profile blended with the same slot one
//! season back (yesterday, or last week: [`crate::select`] runs both and keeps
//! the one with the smaller recent out-of-sample error), an ensemble weighted
//! by the series' recent one-day-ahead errors, a
//! persistence term from the last hour's residuals that fades with lead time,
//! and empirical residual quantiles pooled by hour of day and widened for short
//! histories. All values in percent; x[t] is slot t's mean, N the history length.
//!
//! 1. Profile m(j) for slot phase j (S phases a day): unless the history shows
//!    no daily cycle ([`DailyCycle::Absent`]; too little history to tell counts
//!    as a cycle once a day's worth of slots is observed), the weighted mean over the kept days of phases j−1, j
//!    and j+1 (circular; the neighbours damp slot noise), day d days before the
//!    last weighing 0.5^(d / 2) (recent days count more: levels drift);
//!    otherwise the mean of all kept slots.
//! 2. Seasonal naive y(t) = x[t − k·L·S] for the smallest k ≥ 1 that is
//!    observed (and, for a lead, inside the history), with L the season in
//!    days (1 or 7): the same-slot-yesterday or same-slot-last-week baseline.
//! 3. Blend weight α (the profile's share), Bates-Granger inverse-MSE weights
//!    from the last [`BLEND_DAYS`] days of one-day-ahead errors: for each such
//!    day D and slot t on it, m_D is the profile built from the days before D
//!    only, and
//!
//!    α = Σ (x[t] − y(t))² / (Σ (x[t] − m_D(t mod S))² + Σ (x[t] − y(t))²)
//!
//!    (dimensionless, in [0, 1]; [`NO_EVIDENCE_ALPHA`] = 0.5 with less than half
//!    a day of such slots). A series whose days repeat leans on the profile; one
//!    whose level shifts from day to day (holidays, weekends) on yesterday.
//!    Cost: O(history slots) per forecast (the profiles of successive days
//!    are built in one pass).
//! 4. Level b(t) = α·m(t mod S) + (1 − α)·y(t), or m(t mod S) where y(t) does
//!    not exist. Residuals e[t] = x[t] − b(t), and their autocorrelation ρ(L)
//!    at lags L = 1, 2, 4, … slots, made non-increasing and non-negative,
//!    linear between.
//! 5. R: the observed slots among the last hour before the forecast start N (or
//!    the last observed slot if none), ē their mean residual. For lead ℓ, the
//!    best linear predictor of e[N + ℓ] from ē is β·ē, with
//!
//!    c = (1/|R|) Σ_{i∈R} ρ(N + ℓ − i),  V = (1/|R|²) Σ_{i,k∈R} ρ(|i − k|),  β = c / V,
//!
//!    and its error variance is the residual variance times (1 − c·β).
//! 6. With Q_τ the τ-quantile of the residuals pooled over the slot's hour of day
//!    and the hours either side (all kept days) and w = w(observed days, α) the
//!    small-sample widening factor (`stats::widening`):
//!
//!    P_τ = b(N + ℓ) + β·ē + √(1 − c·β) · (Q₀.₅ + w·(Q_τ − Q₀.₅))
//!
//!    Short leads follow the recent level with a narrow band; long leads relax
//!    to the blended level with the full residual spread.
//!
//! With fewer than [`MIN_RESIDUALS`] observed slots the model admits it knows
//! little: P50 is the mean so far and the band is the whole 0-100 range.
//!
//! How the choices were made: the blend candidates are the two day-ahead
//! forecasts the model already had (its profile, and the yesterday baseline it
//! must beat); inverse-MSE weights were preferred to inverse-MAE weights (about
//! equal on the benchmark traces, and the textbook choice) and to least-squares
//! weights (which can put all weight on one candidate after a few lucky days).
//! BLEND_DAYS = 7 is one week; it was not swept.

use crate::history::History;
use crate::stats::{Gapped, autocorrelation, selected_median, sorted_quantiles, widening};
use crate::{CycleVerdict, DailyCycle, Quantiles};

/// Half-life of a day's weight in the daily profile, days.
const PROFILE_HALF_LIFE_DAYS: f64 = 2.0;

/// Fewest observed slots needed before residual quantiles mean anything.
const MIN_RESIDUALS: usize = 12;

/// What a run of the model must give: a served forecast needs its band; a
/// held-out run ([`crate::select`]) is scored on its P50 alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// P10, P50 and P90.
    Band,
    /// P50 exactly as with [`Wanted::Band`], and P10 = P90 = P50: the hourly
    /// residual medians are selected, not sorted for, which was a third of
    /// the forecaster's time.
    Median,
}

/// Forecasts `horizon` slots after `h`, with a seasonal naive term
/// `season_days` days back (1: yesterday, 7: last week).
pub(crate) fn forecast(
    h: &History,
    cycle: &CycleVerdict,
    horizon: usize,
    slots_per_hour: usize,
    season_days: usize,
    wanted: Wanted,
) -> Vec<Option<Quantiles>> {
    let x = h.values();
    let (n, s) = (x.len(), h.slots_per_day());
    let Some((last_pos, _)) = h.last_observed() else {
        return vec![None; horizon];
    };
    let (total, n_observed) = x
        .iter()
        .flatten()
        .fold((0.0, 0usize), |(t, n), v| (t + v, n + 1));
    let overall = total / n_observed as f64;
    if n_observed < MIN_RESIDUALS {
        let q = Quantiles {
            p10: 0.0,
            p50: overall,
            p90: 100.0,
        };
        return vec![Some(q.clamped()); horizon];
    }
    let sums = PhaseSums::new(h);
    // Too little history to tell is no evidence against a cycle: with a day's
    // worth of slots the profile has a shape, and the blend weight decides how
    // far it is trusted.
    let daily = match cycle.daily_cycle {
        DailyCycle::Present => true,
        DailyCycle::Absent => false,
        DailyCycle::Unknown => h.observed_days() >= 1.0,
    };
    let first_scored = h.days().saturating_sub(BLEND_DAYS).max(1).min(h.days());
    let mut profiles = sums.profiles(first_scored, h.days(), daily, f64::NAN);
    let level: Vec<f64> = profiles
        .pop()
        .expect("profiles up to h.days() inclusive")
        .into_iter()
        .map(|m| if m.is_nan() { overall } else { m })
        .collect();
    let y = seasonal_naive(x, season_days * s, n + horizon);
    let alpha = blend_weight(h, first_scored, &profiles, &y);
    let base = |i: usize| match y[i] {
        Some(y) => alpha * level[i % s] + (1.0 - alpha) * y,
        None => level[i % s],
    };
    let residuals: Vec<Option<f64>> = x
        .iter()
        .enumerate()
        .map(|(i, v)| v.map(|v| v - base(i)))
        .collect();
    let spread = hourly_spread(&residuals, s, slots_per_hour, wanted);
    let mut recent: Vec<usize> = (n.saturating_sub(slots_per_hour)..n)
        .filter(|&i| residuals[i].is_some())
        .collect();
    if recent.is_empty() {
        recent.push(last_pos);
    }
    let persistence = &Persistence::estimate(&residuals, n - recent[0] + horizon);
    let k = recent.len() as f64;
    let e_mean = recent.iter().filter_map(|&i| residuals[i]).sum::<f64>() / k;
    let v = recent
        .iter()
        .flat_map(|&a| recent.iter().map(move |&b| persistence.at(a.abs_diff(b))))
        .sum::<f64>()
        / (k * k);
    let w = widening(h.observed_days(), alpha);
    (0..horizon)
        .map(|lead| {
            let j = lead % s;
            let c = recent
                .iter()
                .map(|&i| persistence.at(n + lead - i))
                .sum::<f64>()
                / k;
            let beta = c / v;
            let shrink = (1.0 - c * beta).max(0.0).sqrt();
            let q = spread[j / slots_per_hour];
            let b = base(n + lead);
            let at = |qt: f64| b + beta * e_mean + shrink * (q.p50 + w * (qt - q.p50));
            Some(
                Quantiles {
                    p10: at(q.p10),
                    p50: at(q.p50),
                    p90: at(q.p90),
                }
                .clamped(),
            )
        })
        .collect()
}

/// y(i) for i in 0..len: the value one season (`lag` slots) back on the most
/// recent earlier season with data, x[i − k·lag] for the smallest k ≥ 1 with
/// i − k·lag inside the history and observed. `len` may reach beyond the
/// history (the leads); only indices before each i are read. One pass, by
/// y(i) = x[i − lag] if observed, else y(i − lag).
fn seasonal_naive(x: &[Option<f64>], lag: usize, len: usize) -> Vec<Option<f64>> {
    let mut y: Vec<Option<f64>> = vec![None; len.min(lag)];
    for i in lag..len {
        let v = x.get(i - lag).copied().flatten().or(y[i - lag]);
        y.push(v);
    }
    y
}

/// Per day d and phase j: the sum and count of the observed values among phases
/// j−1, j and j+1 (circular) of that day, so that the profile of any prefix of
/// days is a weighted sum of rows.
struct PhaseSums {
    s: usize,
    sum: Vec<f64>,
    count: Vec<f64>,
}

impl PhaseSums {
    fn new(h: &History) -> Self {
        let s = h.slots_per_day();
        let mut sum = vec![0.0; h.days() * s];
        let mut count = vec![0.0; h.days() * s];
        for d in 0..h.days() {
            for j in 0..s {
                let prev = if j == 0 { s - 1 } else { j - 1 };
                let next = if j + 1 == s { 0 } else { j + 1 };
                for k in [prev, j, next] {
                    if let Some(v) = h.at(d, k) {
                        sum[d * s + j] += v;
                        count[d * s + j] += 1.0;
                    }
                }
            }
        }
        Self { s, sum, count }
    }

    /// m(j) as known at the start of each day `upto` in `from..=to` (from
    /// days 0..upto only): with a daily cycle, the mean of phases j−1..=j+1
    /// over those days, day d weighing 0.5^((upto − 1 − d) / 2); otherwise (or
    /// where no such value was observed) the plain mean of every observed slot
    /// before day `upto`, or `fallback` if there is none. One pass over the
    /// days: the weighted sums obey W(upto + 1) = 0.5^(1/2)·W(upto) + row(upto).
    fn profiles(&self, from: usize, to: usize, daily: bool, fallback: f64) -> Vec<Vec<f64>> {
        let s = self.s;
        let decay = 0.5f64.powf(1.0 / PROFILE_HALF_LIFE_DAYS);
        let (mut w_sum, mut w_count) = (vec![0.0; s], vec![0.0; s]);
        let (mut flat_sum, mut flat_count) = (0.0, 0.0);
        let mut out = Vec::with_capacity(to.saturating_sub(from) + 1);
        for upto in 0..=to {
            if upto >= from {
                let flat = if flat_count > 0.0 {
                    flat_sum / flat_count
                } else {
                    fallback
                };
                out.push(if daily {
                    w_sum
                        .iter()
                        .zip(&w_count)
                        .map(|(&a, &c)| if c > 0.0 { a / c } else { flat })
                        .collect()
                } else {
                    vec![flat; s]
                });
            }
            if upto < to {
                let row = upto * s..(upto + 1) * s;
                for ((ws, wc), (&a, &c)) in w_sum
                    .iter_mut()
                    .zip(w_count.iter_mut())
                    .zip(self.sum[row.clone()].iter().zip(&self.count[row]))
                {
                    *ws = decay * *ws + a;
                    *wc = decay * *wc + c;
                    flat_sum += a;
                    flat_count += c;
                }
            }
        }
        out
    }
}

/// α: the profile's share in the blended level, from the one-day-ahead
/// errors of days `first..` (the last [`BLEND_DAYS`]; see the module docs),
/// `profiles[k]` being the profile known at the start of day `first + k`
/// (NaN where nothing was known).
fn blend_weight(h: &History, first: usize, profiles: &[Vec<f64>], y: &[Option<f64>]) -> f64 {
    let (x, s) = (h.values(), h.slots_per_day());
    let mut pairs: Vec<(f64, f64, f64)> = Vec::new();
    for (d, m) in (first..).zip(profiles) {
        for (j, &mj) in m.iter().enumerate() {
            let i = d * s + j;
            if let (Some(v), Some(y)) = (x[i], y[i])
                && mj.is_finite()
            {
                pairs.push((v, mj, y));
            }
        }
    }
    if pairs.len() < s / 2 {
        return NO_EVIDENCE_ALPHA;
    }
    let sse_m: f64 = pairs.iter().map(|(v, m, _)| (v - m).powi(2)).sum();
    let sse_y: f64 = pairs.iter().map(|(v, _, y)| (v - y).powi(2)).sum();
    if sse_m + sse_y > 0.0 {
        sse_y / (sse_m + sse_y)
    } else {
        NO_EVIDENCE_ALPHA
    }
}

/// Days of one-day-ahead errors that set the blend weight α: one week, so that
/// weekdays and a weekend both count and older regimes drop out.
const BLEND_DAYS: usize = 7;

/// α with less than half a day of scored slots (or two perfect candidates):
/// equal weights, as nothing says which candidate is better.
const NO_EVIDENCE_ALPHA: f64 = 0.5;

/// Residual quantiles per hour of day, pooled over that hour and its two
/// neighbours (circularly) across all days; all residuals where that pool is
/// small. With [`Wanted::Median`], each pool's median alone, as the P10, P50
/// and P90 alike.
fn hourly_spread(
    residuals: &[Option<f64>],
    s: usize,
    slots_per_hour: usize,
    wanted: Wanted,
) -> Vec<Quantiles> {
    let hours = s / slots_per_hour;
    // Built one by one: `vec![v; n]` clones `v`, and a clone drops its capacity.
    let mut by_hour: Vec<Vec<f64>> = (0..hours)
        .map(|_| Vec::with_capacity(residuals.len().div_ceil(hours)))
        .collect();
    for day in residuals.chunks(s) {
        for (bucket, hour) in by_hour.iter_mut().zip(day.chunks(slots_per_hour)) {
            bucket.extend(hour.iter().flatten());
        }
    }
    // For a band, sorted once per hour: a pool is then a linear merge of three
    // sorted runs. For a median, a pool is gathered and its median selected.
    if wanted == Wanted::Band {
        for b in &mut by_hour {
            b.sort_unstable_by(f64::total_cmp);
        }
    }
    let summary = |pool: &mut Vec<f64>| match wanted {
        Wanted::Band => sorted_quantiles(pool),
        Wanted::Median => selected_median(pool).map(|m| Quantiles {
            p10: m,
            p50: m,
            p90: m,
        }),
    };
    let mut fallback: Option<Quantiles> = None;
    let (mut pair, mut pool) = (Vec::new(), Vec::new());
    let mut out = Vec::with_capacity(hours);
    for g in 0..hours {
        let [a, b, c] = [hours - 1, 0, 1].map(|d| by_hour[(g + d) % hours].as_slice());
        pool.clear();
        match wanted {
            Wanted::Band => {
                pair.clear();
                merge_sorted(a, b, &mut pair);
                merge_sorted(&pair, c, &mut pool);
            }
            Wanted::Median => [a, b, c].iter().for_each(|r| pool.extend_from_slice(r)),
        }
        let q = match summary(&mut pool) {
            Some(q) if pool.len() >= MIN_RESIDUALS => q,
            _ => *fallback.get_or_insert_with(|| {
                let mut all = by_hour.concat();
                if wanted == Wanted::Band {
                    all.sort_unstable_by(f64::total_cmp);
                }
                summary(&mut all).expect("at least MIN_RESIDUALS residuals")
            }),
        };
        out.push(q);
    }
    out
}

/// Appends the ascending merge of ascending `a` and `b` to `out`: linear,
/// where sorting the pool again would be n log n.
fn merge_sorted(a: &[f64], b: &[f64], out: &mut Vec<f64>) {
    let first = out.len();
    out.resize(first + a.len() + b.len(), 0.0);
    let dst = &mut out[first..];
    let (mut i, mut j, mut k) = (0, 0, 0);
    // Selects instead of branches: random data mispredicts every other one.
    while i < a.len() && j < b.len() {
        let take_a = a[i] <= b[j];
        dst[k] = if take_a { a[i] } else { b[j] };
        i += usize::from(take_a);
        j += usize::from(!take_a);
        k += 1;
    }
    dst[k..k + a.len() - i].copy_from_slice(&a[i..]);
    dst[k + a.len() - i..].copy_from_slice(&b[j..]);
}

/// ρ(L): residual autocorrelation at power-of-two lags, non-increasing and
/// clamped to [0, 1], interpolated linearly in between; 0 beyond the last
/// power of two. Tabulated per lag, as every lead reads it for every recent slot.
struct Persistence {
    /// ρ at lags 0, 1, … up to the last knot's.
    by_lag: Vec<f64>,
}

impl Persistence {
    /// Knots up to the first power of two at or beyond `max_lag`.
    fn estimate(residuals: &[Option<f64>], max_lag: usize) -> Self {
        let residuals = &Gapped::new(residuals);
        let mut knots = vec![(0, 1.0)];
        let mut lag = 1;
        loop {
            let prev = knots.last().map_or(1.0, |k| k.1);
            let rho = autocorrelation(residuals, lag)
                .unwrap_or(0.0)
                .clamp(0.0, prev);
            knots.push((lag, rho));
            if lag >= max_lag {
                break;
            }
            lag *= 2;
        }
        Self::from_knots(&knots)
    }

    /// (lag in slots, ρ) pairs with increasing lags, starting at (0, 1).
    fn from_knots(knots: &[(usize, f64)]) -> Self {
        let mut by_lag = vec![knots[0].1];
        for w in knots.windows(2) {
            let ((l0, r0), (l1, r1)) = (w[0], w[1]);
            by_lag.extend(
                (l0 + 1..=l1).map(|lag| r0 + (r1 - r0) * (lag - l0) as f64 / (l1 - l0) as f64),
            );
        }
        Self { by_lag }
    }

    fn at(&self, lag: usize) -> f64 {
        self.by_lag.get(lag).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DailyCycle;

    const FLAT: CycleVerdict = CycleVerdict {
        daily_cycle: DailyCycle::Absent,
        strength: Some(0.0),
        days_used: 2,
    };

    #[test]
    fn merge_sorted_by_hand() {
        let mut out = vec![0.5];
        merge_sorted(&[1.0, 3.0, 3.0], &[2.0, 3.0, 9.0], &mut out);
        assert_eq!(out, [0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 9.0]);
        out.clear();
        merge_sorted(&[], &[4.0], &mut out);
        assert_eq!(out, [4.0]);
    }

    proptest::proptest! {
        #[test]
        fn merge_sorted_is_the_sorted_union(
            mut a in proptest::collection::vec(0u8..12, 0..40),
            mut b in proptest::collection::vec(0u8..12, 0..40),
        ) {
            a.sort_unstable();
            b.sort_unstable();
            let (a, b): (Vec<f64>, Vec<f64>) = (
                a.iter().map(|&v| f64::from(v)).collect(),
                b.iter().map(|&v| f64::from(v)).collect(),
            );
            let mut out = Vec::new();
            merge_sorted(&a, &b, &mut out);
            let mut want = [a, b].concat();
            want.sort_unstable_by(f64::total_cmp);
            proptest::prop_assert_eq!(out, want);
        }
    }

    #[test]
    fn persistence_interpolates_and_never_rises() {
        let p = Persistence::from_knots(&[(0, 1.0), (1, 0.8), (2, 0.6), (4, 0.2)]);
        assert!((p.at(3) - 0.4).abs() < 1e-12);
        assert_eq!((p.at(0), p.at(2), p.at(4)), (1.0, 0.6, 0.2));
        assert_eq!(p.at(9), 0.0);
        // An alternating series has ρ(1) = −1 → clamped to 0, and ρ(2) = 1 → capped at 0.
        let alt: Vec<Option<f64>> = (0..20)
            .map(|i| Some(if i % 2 == 0 { 1.0 } else { -1.0 }))
            .collect();
        let est = Persistence::estimate(&alt, 2);
        assert_eq!(est.by_lag, vec![1.0, 0.0, 0.0]);
    }

    #[test]
    fn white_noise_relaxes_to_the_blended_band() {
        // 10/20 alternating, shifted by one slot each day (S = 48), so yesterday's
        // slot is always the other value: its errors are ±10, the flat mean's ±5.
        // Days 1-3 score 144 slots each way: α = 144·100 / (144·25 + 144·100) = 0.8.
        let x: Vec<Option<f64>> = (0..192)
            .map(|i| Some(if (i + i / 48) % 2 == 0 { 10.0 } else { 20.0 }))
            .collect();
        let h = History::new(x, 48);
        // Residuals: ±5 on day 0 (no yesterday, level 15), ±6 after (level
        // 0.8·15 + 0.2·other = 16 or 14). They alternate, so ρ(1) < 0 → 0 and no
        // persistence. Hour pools hold 9×±6 and 3×±5 a side: Q₀.₅ = 0, Q₀.₉ = 6.
        // Lead 2 (slot 194, day 4): yesterday (slot 146) was 20 → level 16.
        let f = forecast(&h, &FLAT, 3, 2, 1, Wanted::Band);
        let w = widening(4.0, 0.8);
        let q = f[2].unwrap();
        assert!((q.p50 - 16.0).abs() < 1e-9, "{q:?}");
        assert!((q.p90 - (16.0 + 6.0 * w)).abs() < 1e-9, "{q:?}");
    }

    #[test]
    fn blend_weight_by_hand() {
        // S = 4, no cycle: day 0 all 10, days 1 and 2 all 20.
        // Day 1: profile (mean of day 0) 10, yesterday 10, truth 20 → errors 10, 10.
        // Day 2: profile (mean of days 0-1) 15, yesterday 20 → errors 5, 0.
        // α = 4·(100 + 0) / (4·(100 + 25) + 4·(100 + 0)) = 400 / 900.
        let x: Vec<Option<f64>> = [10.0, 20.0, 20.0]
            .iter()
            .flat_map(|v| [Some(*v); 4])
            .collect();
        let h = History::new(x, 4);
        let profiles = PhaseSums::new(&h).profiles(1, 2, false, f64::NAN);
        let y = seasonal_naive(h.values(), 4, 12);
        assert!((blend_weight(&h, 1, &profiles, &y) - 400.0 / 900.0).abs() < 1e-12);
        // One day only: nothing to score → equal weights.
        let one = History::new(vec![Some(10.0); 4], 4);
        let y = seasonal_naive(one.values(), 4, 4);
        assert_eq!(blend_weight(&one, 1, &[], &y), NO_EVIDENCE_ALPHA);
    }

    #[test]
    fn profile_of_a_prefix_by_hand() {
        // S = 3; day 0 = [3, 6, 9], day 1 = [6, 6, 6] with phase 2 missing.
        let x = vec![Some(3.0), Some(6.0), Some(9.0), Some(6.0), Some(6.0), None];
        let h = History::new(x, 3);
        let sums = PhaseSums::new(&h);
        // Up to day 1: phase 0 pools day 0's phases 2, 0, 1 → (9 + 3 + 6) / 3 = 6.
        let daily = sums.profiles(0, 2, true, f64::NAN);
        assert_eq!(daily[1], vec![6.0, 6.0, 6.0]);
        // Up to day 2, phase 1: day 0 pools 3, 6, 9 (weight 0.5^(1/2)), day 1 pools
        // 6, 6 (weight 1): (√½·18 + 12) / (√½·3 + 2).
        let r = 0.5f64.sqrt();
        assert!((daily[2][1] - (r * 18.0 + 12.0) / (r * 3.0 + 2.0)).abs() < 1e-12);
        // No cycle: the plain mean of every observed slot, (3 + 6 + 9 + 6 + 6) / 5.
        let flat = sums.profiles(0, 2, false, f64::NAN);
        assert_eq!(flat[2], vec![6.0; 3]);
        // Nothing before day 0 → the fallback, in both kinds.
        assert!(flat[0][0].is_nan() && daily[0][0].is_nan());
        // A range starting later holds the same profiles.
        assert_eq!(sums.profiles(2, 2, true, f64::NAN), &daily[2..]);
    }

    #[test]
    fn yesterday_skips_missing_days_and_never_reads_ahead() {
        let x = vec![Some(1.0), Some(2.0), None, Some(4.0), Some(5.0), None];
        let y = seasonal_naive(&x, 2, 8);
        assert_eq!(y.len(), 8);
        // Slot 5 (phase 1 of day 2): day 1's phase 1 (index 3) is 4.
        assert_eq!(y[5], Some(4.0));
        // A lead at 6 (phase 0 of day 3): index 4 → 5.0.
        assert_eq!(y[6], Some(5.0));
        // Slot 4 (phase 0 of day 2): index 2 is missing → index 0.
        assert_eq!(y[4], Some(1.0));
        // A lead at 7: index 5 is missing, index 3 → 4.0.
        assert_eq!(y[7], Some(4.0));
        assert_eq!(y[1], None);
    }

    proptest::proptest! {
        #[test]
        fn a_median_run_gives_the_served_p50_bit_for_bit(
            values in proptest::collection::vec(proptest::option::weighted(0.9, 0.0f64..100.0), 0..400),
            hourly in proptest::bool::ANY,
            weekly in proptest::bool::ANY,
        ) {
            // Noise with gaps, 24 or 96 slots a day, from a few slots to 16 days.
            let (s, per_hour) = if hourly { (24, 1) } else { (96, 4) };
            let x: Vec<Option<f64>> = values.iter().cycle().take(values.len() * s / 24).copied().collect();
            let h = History::new(x, s);
            let season = if weekly { 7 } else { 1 };
            let band = forecast(&h, &FLAT, 2 * s, per_hour, season, Wanted::Band);
            let median = forecast(&h, &FLAT, 2 * s, per_hour, season, Wanted::Median);
            for (b, m) in band.iter().zip(&median) {
                let (b, m) = (b.map(|q| q.p50.to_bits()), m.map(|q| q.p50.to_bits()));
                proptest::prop_assert_eq!(b, m);
            }
        }
    }

    #[test]
    fn too_little_history_gives_the_full_band() {
        let x: Vec<Option<f64>> = (0..24).map(|i| (i < 3).then_some(40.0)).collect();
        let f = forecast(&History::new(x, 24), &FLAT, 2, 1, 1, Wanted::Band);
        assert_eq!(
            f[0],
            Some(Quantiles {
                p10: 0.0,
                p50: 40.0,
                p90: 100.0
            })
        );
    }
}
