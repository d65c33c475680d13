//! tidemill's model: a daily level profile, a persistence term from the last
//! hour's residuals that fades with lead time, and empirical residual quantiles
//! pooled by hour of day and widened for short histories. All values in percent.
//!
//! 1. Level m(j) for slot phase j (S phases a day): where a daily cycle is
//!    detected, the weighted mean over the kept days of phases j−1, j and j+1
//!    (circular; the neighbours damp slot noise), day d days before the last
//!    weighing 0.5^(d / 2) (recent days count more: levels drift); otherwise the
//!    mean of all kept slots.
//! 2. Residuals e[t] = x[t] − m(t mod S), and their autocorrelation ρ(L) at lags
//!    L = 1, 2, 4, … slots, made non-increasing and non-negative, linear between.
//! 3. R: the observed slots among the last hour before the forecast start N (or
//!    the last observed slot if none), ē their mean residual. For lead ℓ, the
//!    best linear predictor of e[N + ℓ] from ē is β·ē, with
//!
//!    c = (1/|R|) Σ_{i∈R} ρ(N + ℓ − i),  V = (1/|R|²) Σ_{i,k∈R} ρ(|i − k|),  β = c / V,
//!
//!    and its error variance is the residual variance times (1 − c·β).
//! 4. With Q_τ the τ-quantile of the residuals pooled over the slot's hour of day
//!    and the hours either side (all kept days) and w the small-sample widening
//!    factor (`stats::widening`):
//!
//!    P_τ = m(ℓ mod S) + β·ē + √(1 − c·β) · (Q₀.₅ + w·(Q_τ − Q₀.₅))
//!
//!    Short leads follow the recent level with a narrow band; long leads relax
//!    to the profile with the full residual spread.
//!
//! With fewer than [`MIN_RESIDUALS`] observed slots the model admits it knows
//! little: P50 is the mean so far and the band is the whole 0-100 range.

use crate::history::History;
use crate::stats::{autocorrelation, empirical_quantiles, widening};
use crate::{CycleVerdict, Quantiles};

/// Half-life of a day's weight in the daily profile, days.
const PROFILE_HALF_LIFE_DAYS: f64 = 2.0;

/// Fewest observed slots needed before residual quantiles mean anything.
const MIN_RESIDUALS: usize = 12;

/// Forecasts `horizon` slots after `h`.
pub(crate) fn forecast(
    h: &History,
    cycle: &CycleVerdict,
    horizon: usize,
    slots_per_hour: usize,
) -> Vec<Option<Quantiles>> {
    let x = h.values();
    let (n, s) = (x.len(), h.slots_per_day());
    let Some((last_pos, _)) = h.last_observed() else {
        return vec![None; horizon];
    };
    let observed: Vec<f64> = x.iter().flatten().copied().collect();
    let overall = observed.iter().sum::<f64>() / observed.len() as f64;
    if observed.len() < MIN_RESIDUALS {
        let q = Quantiles {
            p10: 0.0,
            p50: overall,
            p90: 100.0,
        };
        return vec![Some(q.clamped()); horizon];
    }
    let level = level_profile(h, cycle, overall);
    let residuals: Vec<Option<f64>> = x
        .iter()
        .enumerate()
        .map(|(i, v)| v.map(|v| v - level[i % s]))
        .collect();
    let spread = hourly_spread(&residuals, s, slots_per_hour);
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
    let w = widening(h.observed_days());
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
            let at = |qt: f64| level[j] + beta * e_mean + shrink * (q.p50 + w * (qt - q.p50));
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

/// m(j): where a daily cycle is detected, the recency-weighted mean of phases
/// j−1..=j+1 over the kept days (`overall` if none was observed); else `overall`.
fn level_profile(h: &History, cycle: &CycleVerdict, overall: f64) -> Vec<f64> {
    let s = h.slots_per_day();
    (0..s)
        .map(|j| {
            if !cycle.is_daily() {
                return overall;
            }
            let nd = h.days();
            let weight = |d: usize| 0.5f64.powf((nd - 1 - d) as f64 / PROFILE_HALF_LIFE_DAYS);
            let vals: Vec<(f64, f64)> = (0..nd)
                .flat_map(|d| [s - 1, 0, 1].map(|k| h.at(d, (j + k) % s).map(|v| (v, weight(d)))))
                .flatten()
                .collect();
            if vals.is_empty() {
                overall
            } else {
                vals.iter().map(|p| p.0 * p.1).sum::<f64>() / vals.iter().map(|p| p.1).sum::<f64>()
            }
        })
        .collect()
}

/// Residual quantiles per hour of day, pooled over that hour and its two
/// neighbours (circularly) across all days; all residuals where that pool is small.
fn hourly_spread(residuals: &[Option<f64>], s: usize, slots_per_hour: usize) -> Vec<Quantiles> {
    let hours = s / slots_per_hour;
    let mut by_hour: Vec<Vec<f64>> = vec![Vec::new(); hours];
    for (i, e) in residuals.iter().enumerate() {
        if let Some(e) = e {
            by_hour[(i % s) / slots_per_hour].push(*e);
        }
    }
    let mut all: Vec<f64> = by_hour.concat();
    let fallback = empirical_quantiles(&mut all).expect("at least MIN_RESIDUALS residuals");
    (0..hours)
        .map(|g| {
            let mut pool: Vec<f64> = [hours - 1, 0, 1]
                .iter()
                .flat_map(|d| by_hour[(g + d) % hours].iter().copied())
                .collect();
            if pool.len() < MIN_RESIDUALS {
                return fallback;
            }
            empirical_quantiles(&mut pool).unwrap_or(fallback)
        })
        .collect()
}

/// ρ(L): residual autocorrelation at power-of-two lags, non-increasing and
/// clamped to [0, 1], interpolated linearly in between; 0 beyond the data.
struct Persistence {
    /// (lag in slots, ρ) pairs with increasing lags starting at (0, 1).
    knots: Vec<(usize, f64)>,
}

impl Persistence {
    fn estimate(residuals: &[Option<f64>], max_lag: usize) -> Self {
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
        Self { knots }
    }

    fn at(&self, lag: usize) -> f64 {
        match self.knots.iter().position(|k| k.0 >= lag) {
            Some(0) => self.knots[0].1,
            Some(i) => {
                let (l0, r0) = self.knots[i - 1];
                let (l1, r1) = self.knots[i];
                r0 + (r1 - r0) * (lag - l0) as f64 / (l1 - l0) as f64
            }
            None => 0.0,
        }
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
    fn persistence_interpolates_and_never_rises() {
        let p = Persistence {
            knots: vec![(0, 1.0), (1, 0.8), (2, 0.6), (4, 0.2)],
        };
        assert!((p.at(3) - 0.4).abs() < 1e-12);
        assert_eq!(p.at(9), 0.0);
        // An alternating series has ρ(1) = −1 → clamped to 0, and ρ(2) = 1 → capped at 0.
        let alt: Vec<Option<f64>> = (0..20)
            .map(|i| Some(if i % 2 == 0 { 1.0 } else { -1.0 }))
            .collect();
        let est = Persistence::estimate(&alt, 2);
        assert_eq!(est.knots, vec![(0, 1.0), (1, 0.0), (2, 0.0)]);
    }

    #[test]
    fn white_noise_relaxes_to_the_flat_band() {
        // Alternating 10/20 has no persistence: every lead is mean 15 plus the
        // pooled residual quantiles (±5) widened by w(observed days).
        // Two slots per hour, so every hour pool holds as many +5 as −5.
        let x: Vec<Option<f64>> = (0..192)
            .map(|i| Some(if i % 2 == 0 { 10.0 } else { 20.0 }))
            .collect();
        let h = History::new(x, 48);
        let f = forecast(&h, &FLAT, 3, 2);
        let w = widening(4.0);
        let q = f[2].unwrap();
        assert!((q.p50 - 15.0).abs() < 1e-9, "{q:?}");
        assert!((q.p90 - (15.0 + 5.0 * w)).abs() < 1e-9, "{q:?}");
    }

    #[test]
    fn too_little_history_gives_the_full_band() {
        let x: Vec<Option<f64>> = (0..24).map(|i| (i < 3).then_some(40.0)).collect();
        let f = forecast(&History::new(x, 24), &FLAT, 2, 1);
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
