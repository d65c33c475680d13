//! Does a series have a daily cycle? A leave-one-day-out test, so that noise or a
//! drifting level is reported as "no cycle" instead of being fitted as one.

use serde::{Deserialize, Serialize};

use crate::history::History;

/// Smallest cross-validated strength that counts as a daily cycle. Pure noise
/// scores about −1/(days − 1), so 0.1 leaves a margin above chance.
pub const MIN_CYCLE_STRENGTH: f64 = 0.1;

/// Fewest days, each with at least half its hours observed, that a verdict needs.
pub const MIN_CYCLE_DAYS: usize = 2;

/// Whether a series repeats daily.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DailyCycle {
    /// The hour-of-day shape of other days predicts each day's shape.
    Present,
    /// It does not: forecasts use a flat level instead of a daily profile.
    Absent,
    /// Too little history to tell (fewer than [`MIN_CYCLE_DAYS`] days).
    Unknown,
}

/// The daily-cycle verdict for one resource of one node.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CycleVerdict {
    /// The verdict.
    pub daily_cycle: DailyCycle,
    /// Cross-validated share of within-day variance explained by the other
    /// days' hour-of-day profile (leave one day out); `None` when unknown.
    pub strength: Option<f64>,
    /// Days that took part in the test.
    pub days_used: u32,
}

impl CycleVerdict {
    /// True when forecasts should follow a daily profile.
    pub fn is_daily(&self) -> bool {
        self.daily_cycle == DailyCycle::Present
    }
}

/// Tests `h` for a daily cycle on hourly means.
///
/// For each day d with at least 12 observed hours, and each of its observed hours
/// g that another day also observed: x(d,g) is the day's hourly mean, x̄(d) its mean
/// over those hours; p₋d(g) is the mean of hour g over the other days and p̄₋d its
/// mean over the same hours. Then
///
/// strength = 1 − Σ (x(d,g) − x̄(d) − (p₋d(g) − p̄₋d))² / Σ (x(d,g) − x̄(d))²
///
/// (dimensionless, ≤ 1): the share of within-day variance that the other days'
/// shape explains. A constant series has no within-day variance and scores 0.
pub(crate) fn assess(h: &History, slots_per_hour: usize) -> CycleVerdict {
    let hours_per_day = h.slots_per_day() / slots_per_hour;
    let hourly: Vec<Vec<Option<f64>>> = (0..h.days())
        .map(|d| {
            (0..hours_per_day)
                .map(|g| {
                    let (sum, n) = (0..slots_per_hour)
                        .filter_map(|k| h.at(d, g * slots_per_hour + k))
                        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
                    (n > 0).then(|| sum / n as f64)
                })
                .collect()
        })
        .filter(|day: &Vec<Option<f64>>| day.iter().flatten().count() * 2 >= hours_per_day)
        .collect();
    if hourly.len() < MIN_CYCLE_DAYS {
        return CycleVerdict {
            daily_cycle: DailyCycle::Unknown,
            strength: None,
            days_used: hourly.len() as u32,
        };
    }
    // Per hour of day, the sum and count over all days: each day's
    // leave-one-out profile is then (sum − own) / (count − 1).
    let mut sum = vec![0.0; hours_per_day];
    let mut count = vec![0usize; hours_per_day];
    for day in &hourly {
        for (g, v) in day.iter().enumerate() {
            if let Some(v) = v {
                sum[g] += v;
                count[g] += 1;
            }
        }
    }
    let (mut sse_profile, mut sse_flat) = (0.0, 0.0);
    let mut pairs: Vec<(f64, f64)> = Vec::with_capacity(hours_per_day);
    for day in &hourly {
        pairs.clear();
        pairs.extend((0..hours_per_day).filter_map(|g| {
            let x = day[g]?;
            (count[g] > 1).then(|| (x, (sum[g] - x) / (count[g] - 1) as f64))
        }));
        if pairs.is_empty() {
            continue;
        }
        let n = pairs.len() as f64;
        let x_mean = pairs.iter().map(|p| p.0).sum::<f64>() / n;
        let p_mean = pairs.iter().map(|p| p.1).sum::<f64>() / n;
        for &(x, p) in &pairs {
            sse_profile += (x - x_mean - (p - p_mean)).powi(2);
            sse_flat += (x - x_mean).powi(2);
        }
    }
    let strength = if sse_flat > 1e-9 {
        1.0 - sse_profile / sse_flat
    } else {
        0.0
    };
    CycleVerdict {
        daily_cycle: if strength >= MIN_CYCLE_STRENGTH {
            DailyCycle::Present
        } else {
            DailyCycle::Absent
        },
        strength: Some(strength),
        days_used: hourly.len() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hourly_history(days: &[[f64; 24]]) -> History {
        History::new(days.iter().flatten().map(|v| Some(*v)).collect(), 24)
    }

    #[test]
    fn strength_by_hand() {
        // Two days, shapes (+1 at even hours, -1 at odd) and its double: day A's
        // deviations are ±1, the other day's are ±2 → residual ±1 → SSE 24 of 24;
        // day B's deviations are ±2, predicted ±1 → SSE 24 of 96. 1 − 48/120 = 0.6.
        let a: [f64; 24] = std::array::from_fn(|g| if g % 2 == 0 { 11.0 } else { 9.0 });
        let b: [f64; 24] = std::array::from_fn(|g| if g % 2 == 0 { 52.0 } else { 48.0 });
        let v = assess(&hourly_history(&[a, b]), 1);
        assert!((v.strength.unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(v.daily_cycle, DailyCycle::Present);
        assert_eq!(v.days_used, 2);
    }

    #[test]
    fn constant_has_no_cycle_and_one_day_is_unknown() {
        let c = [5.0; 24];
        assert_eq!(
            assess(&hourly_history(&[c, c, c]), 1).daily_cycle,
            DailyCycle::Absent
        );
        assert_eq!(
            assess(&hourly_history(&[c]), 1).daily_cycle,
            DailyCycle::Unknown
        );
    }

    #[test]
    fn opposite_shapes_are_no_cycle() {
        let a: [f64; 24] = std::array::from_fn(|g| g as f64);
        let b: [f64; 24] = std::array::from_fn(|g| 23.0 - g as f64);
        let v = assess(&hourly_history(&[a, b]), 1);
        assert!(v.strength.unwrap() < 0.0);
        assert_eq!(v.daily_cycle, DailyCycle::Absent);
    }
}
