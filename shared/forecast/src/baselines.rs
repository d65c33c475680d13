//! The baselines any forecaster must beat. Their quantiles are the point forecast
//! plus empirical quantiles of the same method's in-sample errors, so pinball
//! loss and coverage can be scored for them too.

use crate::Quantiles;
use crate::history::History;
use crate::stats::empirical_quantiles;

/// Fewest in-sample errors a baseline needs before it gives quantiles.
const MIN_ERRORS: usize = 12;

/// Same slot `days` days earlier (the most recent such day with data).
///
/// For lead slot ℓ (position N + ℓ, N = history length, S slots per day):
/// P50 = x[N + ℓ − k·days·S] for the smallest k ≥ 1 that lands on observed history;
/// P10/P90 = P50 + Q₀.₁/Q₀.₉ of the in-sample errors x[t] − x[t − days·S].
pub(crate) fn same_slot_days_ago(
    h: &History,
    days: usize,
    horizon: usize,
) -> Vec<Option<Quantiles>> {
    let lag = days * h.slots_per_day();
    let x = h.values();
    let mut errors: Vec<f64> = x
        .iter()
        .zip(x.iter().skip(lag))
        .filter_map(|(old, new)| Some((*new)? - (*old)?))
        .collect();
    let Some(err) = (errors.len() >= MIN_ERRORS)
        .then(|| empirical_quantiles(&mut errors))
        .flatten()
    else {
        return vec![None; horizon];
    };
    let n = x.len();
    (0..horizon)
        .map(|lead| {
            let reference = (1..)
                .map(|k| (n + lead).checked_sub(k * lag))
                .take_while(Option::is_some)
                .flatten()
                .filter(|&i| i < n)
                .find_map(|i| x[i])?;
            Some(band(reference, &err))
        })
        .collect()
}

/// A band around a point forecast: P50 = `center`, P10/P90 = `center` plus the
/// error quantiles, clamped to 0-100 %.
fn band(center: f64, err: &Quantiles) -> Quantiles {
    Quantiles {
        p10: center + err.p10,
        p50: center,
        p90: center + err.p90,
    }
    .clamped()
}

/// The mean slot-of-day profile.
///
/// P50 = m(j), the mean of slot phase j = ℓ mod S over the kept days;
/// P10/P90 = m(j) + Q₀.₁/Q₀.₉ of all in-sample errors x[t] − m(t mod S).
pub(crate) fn mean_profile(h: &History, horizon: usize) -> Vec<Option<Quantiles>> {
    let s = h.slots_per_day();
    let profile: Vec<Option<f64>> = (0..s)
        .map(|j| {
            let vals: Vec<f64> = (0..h.days()).filter_map(|d| h.at(d, j)).collect();
            (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
        })
        .collect();
    let mut errors: Vec<f64> = h
        .values()
        .iter()
        .enumerate()
        .filter_map(|(i, v)| Some((*v)? - profile[i % s]?))
        .collect();
    let Some(err) = (errors.len() >= MIN_ERRORS)
        .then(|| empirical_quantiles(&mut errors))
        .flatten()
    else {
        return vec![None; horizon];
    };
    (0..horizon)
        .map(|lead| {
            let m = profile[lead % s]?;
            Some(band(m, &err))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four days of 4 slots: day d, slot j = 10·d + j, so day-to-day errors are all 10.
    fn ramp() -> History {
        History::new(
            (0..4)
                .flat_map(|d| (0..4).map(move |j| Some(f64::from(10 * d + j))))
                .collect(),
            4,
        )
    }

    #[test]
    fn yesterday_by_hand() {
        let f = same_slot_days_ago(&ramp(), 1, 6);
        // Lead 0 → last day's slot 0 = 30; error quantiles are all +10, so
        // P90 = 40 and P10 = 40 is lowered to P50 to keep the quantiles ordered.
        assert_eq!(
            f[0],
            Some(Quantiles {
                p10: 30.0,
                p50: 30.0,
                p90: 40.0
            })
        );
        // Lead 5 (second day ahead, slot 1) → two days back is still the last day: 31.
        assert_eq!(f[5].unwrap().p50, 31.0);
    }

    #[test]
    fn last_week_needs_a_week() {
        assert!(
            same_slot_days_ago(&ramp(), 7, 3)
                .iter()
                .all(Option::is_none)
        );
    }

    #[test]
    fn yesterday_skips_a_missing_day() {
        let mut v: Vec<Option<f64>> = ramp().values().to_vec();
        v.extend([None, Some(1.0), Some(2.0), Some(3.0)]);
        let f = same_slot_days_ago(&History::new(v, 4), 1, 1);
        // Yesterday's slot 0 is missing → two days back: 30.
        assert_eq!(f[0].unwrap().p50, 30.0);
    }

    #[test]
    fn mean_profile_by_hand() {
        let f = mean_profile(&ramp(), 2);
        // Slot 0 mean over days 0..4 = (0+10+20+30)/4 = 15; errors are ±5, ±15.
        let q = f[0].unwrap();
        assert_eq!(q.p50, 15.0);
        assert!(q.p10 < 15.0 && q.p90 > 15.0);
    }
}
