//! Idle windows: runs of slots where utilisation is forecast to stay under the
//! threshold with at least the configured confidence
//! ([`crate::ForecastConfig::idle_confidence`], default 0.8: the pessimistic P80
//! quantile is under it) on every resource that matters, each with a confidence.

use statrs::distribution::{ContinuousCDF, Normal};

use crate::{IdleWindow, Quantiles};

/// Smallest P50-to-P90 spread used when converting to a probability, percent.
const MIN_SPREAD_PCT: f64 = 1e-6;

/// Φ⁻¹(0.9), the standard normal's 90th percentile: how many standard
/// deviations the P90 lies above the P50. A constant, because the scheduler
/// reads a probability for every forecast slot of every box each round.
const Z90: f64 = 1.281_551_565_544_600_8;

/// Probability (0-1) that utilisation stays under `threshold_pct`, reading the
/// upper half of the forecast as a normal distribution:
///
/// p = Φ(z),  z = z₀.₉ · (threshold − P50) / (P90 − P50),  z₀.₉ = Φ⁻¹(0.9) ≈ 1.2816
///
/// (all in percent; the spread is floored at 1e-6). p ≥ 0.9 exactly when P90 ≤
/// threshold. `z` is [`idle_score`] and `Φ` [`score_probability`].
pub fn idle_probability(q: &Quantiles, threshold_pct: f64) -> f64 {
    score_probability(idle_score(q, threshold_pct))
}

/// The standard score `z` of [`idle_probability`]. The probability rises with
/// it, so the least certain of many slots is the one with the lowest score,
/// and a caller that wants only that one takes `Φ` once.
pub fn idle_score(q: &Quantiles, threshold_pct: f64) -> f64 {
    let spread = (q.p90 - q.p50).max(MIN_SPREAD_PCT);
    Z90 * (threshold_pct - q.p50) / spread
}

/// `Φ(z)`: the probability of an [`idle_score`] (1 for `+∞`).
pub fn score_probability(z: f64) -> f64 {
    Normal::standard().cdf(z)
}

/// True when a slot counts as idle: `idle_probability(q, threshold_pct) ≥
/// confidence`. With the normal reading above this is
///
/// threshold ≥ P50 + (Φ⁻¹(confidence) / z₀.₉) · (P90 − P50)   (percent),
///
/// i.e. the forecast's `confidence`-quantile is under the threshold; with
/// confidence 0.9 it is the P90 rule, with 0.8 the P80 (P50 + 0.657·(P90 − P50)).
pub fn is_idle(q: &Quantiles, threshold_pct: f64, confidence: f64) -> bool {
    idle_probability(q, threshold_pct) >= confidence
}

/// Turns per-slot idle probabilities into windows: `per_slot[i]` is `Some(p)`
/// when slot `i` is predicted idle (p its probability), `None` otherwise. A
/// window's confidence is its least probable slot's.
pub(crate) fn windows(
    start_ms: i64,
    slot_len_ms: i64,
    per_slot: &[Option<f64>],
) -> Vec<IdleWindow> {
    let mut out: Vec<IdleWindow> = Vec::new();
    let mut open = false;
    for (i, p) in per_slot.iter().enumerate() {
        let slot_start = start_ms + i as i64 * slot_len_ms;
        match (p, open) {
            (Some(p), true) => {
                let w = out.last_mut().expect("an open window exists");
                w.end_ms = slot_start + slot_len_ms;
                w.confidence = w.confidence.min(*p);
            }
            (Some(p), false) => out.push(IdleWindow {
                start_ms: slot_start,
                end_ms: slot_start + slot_len_ms,
                confidence: *p,
            }),
            (None, _) => {}
        }
        open = p.is_some();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(p50: f64, p90: f64) -> Quantiles {
        Quantiles { p10: 0.0, p50, p90 }
    }

    #[test]
    fn z90_is_the_normal_90th_percentile() {
        assert!((Normal::standard().inverse_cdf(0.9) - Z90).abs() < 1e-12);
    }

    #[test]
    fn probability_by_hand() {
        // P90 on the threshold → exactly 0.9.
        assert!((idle_probability(&q(10.0, 30.0), 30.0) - 0.9).abs() < 1e-9);
        // P50 on the threshold → 0.5.
        assert!((idle_probability(&q(30.0, 40.0), 30.0) - 0.5).abs() < 1e-9);
        // threshold = P50 + 2·(P90 − P50) → Φ(2·1.28155) = Φ(2.5631) ≈ 0.99481.
        assert!((idle_probability(&q(10.0, 20.0), 30.0) - 0.994_81).abs() < 1e-4);
        // No spread and under the threshold → certain.
        assert!(idle_probability(&q(5.0, 5.0), 30.0) > 0.999_999);
    }

    #[test]
    fn idle_at_a_confidence_by_hand() {
        // P50 20, P90 30: the P80 is 20 + (0.84162 / 1.28155)·10 = 26.567.
        let band = q(20.0, 30.0);
        assert!(is_idle(&band, 27.0, 0.8));
        assert!(!is_idle(&band, 26.0, 0.8));
        // At 0.9 the P90 rule: a threshold of 31 passes, 29 does not.
        assert!(is_idle(&band, 31.0, 0.9) && !is_idle(&band, 29.0, 0.9));
        // At 0.5 the median decides.
        assert!(is_idle(&band, 20.5, 0.5) && !is_idle(&band, 19.5, 0.5));
    }

    #[test]
    fn windows_merge_runs_and_take_the_minimum() {
        let w = windows(1_000, 10, &[None, Some(0.95), Some(0.92), None, Some(0.99)]);
        assert_eq!(
            w,
            vec![
                IdleWindow {
                    start_ms: 1_010,
                    end_ms: 1_030,
                    confidence: 0.92
                },
                IdleWindow {
                    start_ms: 1_040,
                    end_ms: 1_050,
                    confidence: 0.99
                }
            ]
        );
    }
}
