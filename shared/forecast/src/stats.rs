//! Small statistics shared by the methods: empirical quantiles, autocorrelation
//! and the small-sample widening factor.

use crate::Quantiles;

/// Empirical P10, P50 and P90 of `values` (sorted in place); `None` when empty.
/// See [`sorted_quantiles`].
pub(crate) fn empirical_quantiles(values: &mut [f64]) -> Option<Quantiles> {
    values.sort_unstable_by(f64::total_cmp);
    sorted_quantiles(values)
}

/// Empirical P10, P50 and P90 of ascending `sorted` values; `None` when empty.
///
/// The median-unbiased estimator (Hyndman-Fan type 8, as statrs'
/// `OrderStatistics::quantile`): with n values x₁ ≤ … ≤ xₙ and
/// h = (n + 1/3)·τ + 1/3, Q(τ) = x₍⌊h⌋₎ + (h − ⌊h⌋)·(x₍⌊h⌋+1₎ − x₍⌊h⌋₎), and
/// Q(τ) = x₁ for ⌊h⌋ < 1, xₙ for ⌊h⌋ ≥ n (same unit as the values). Taking
/// sorted input lets a caller sort once and read many pools, where statrs
/// selects twice per quantile.
pub(crate) fn sorted_quantiles(sorted: &[f64]) -> Option<Quantiles> {
    let n = sorted.len();
    let q = |tau: f64| quantile_of(n, tau, |i| sorted[i]);
    (n > 0).then(|| Quantiles {
        p10: q(0.1),
        p50: q(0.5),
        p90: q(0.9),
    })
}

/// The τ-quantile of n > 0 values by the rule of [`sorted_quantiles`], where
/// `at(i)` is the (i + 1)-th smallest; only ranks ⌊h⌋ − 1 and ⌊h⌋ are read,
/// so a caller may select them instead of sorting.
pub(crate) fn quantile_of(n: usize, tau: f64, at: impl Fn(usize) -> f64) -> f64 {
    let (h, k) = type8_position(n, tau);
    if k == 0 {
        at(0)
    } else if k >= n {
        at(n - 1)
    } else {
        let (a, b) = (at(k - 1), at(k));
        a + (h - k as f64) * (b - a)
    }
}

/// h = (n + 1/3)·τ + 1/3 and ⌊h⌋, the position of the τ-quantile of n
/// sorted values (see [`sorted_quantiles`]).
fn type8_position(n: usize, tau: f64) -> (f64, usize) {
    let h = (n as f64 + 1.0 / 3.0) * tau + 1.0 / 3.0;
    (h, h.floor() as usize)
}

/// The median of `values` (reordered in place) by the rule of
/// [`sorted_quantiles`], in linear time: the two order statistics it reads
/// are selected, not sorted for; `None` when empty.
pub(crate) fn selected_median(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    let low = type8_position(n, 0.5).1.saturating_sub(1).min(n - 1);
    values.select_nth_unstable_by(low, f64::total_cmp);
    let next = values[low + 1..]
        .iter()
        .copied()
        .min_by(f64::total_cmp)
        .unwrap_or(values[low]);
    Some(quantile_of(n, 0.5, |i| {
        if i == low { values[low] } else { next }
    }))
}

/// A series with gaps as two dense arrays, the value (0 where missing) and
/// its presence (1 or 0), so that sums over present pairs need no branch.
pub(crate) struct Gapped {
    values: Vec<f64>,
    present: Vec<f64>,
}

impl Gapped {
    pub(crate) fn new(series: &[Option<f64>]) -> Self {
        let (values, present) = series
            .iter()
            .map(|v| v.map_or((0.0, 0.0), |v| (v, 1.0)))
            .unzip();
        Self { values, present }
    }
}

/// Lag-`lag` autocorrelation of a zero-centred series with gaps:
///
/// ρ(L) = Σ e_t·e_{t+L} / √(Σ e_t² · Σ e_{t+L}²), summing over the pairs where both
/// values are present (dimensionless, in [-1, 1]). `None` without any pair or
/// when either sum of squares is zero.
pub(crate) fn autocorrelation(series: &Gapped, lag: usize) -> Option<f64> {
    let lag = lag.min(series.values.len());
    let n = series.values.len() - lag;
    let (a, pa) = (&series.values[..n], &series.present[..n]);
    let (b, pb) = (&series.values[lag..], &series.present[lag..]);
    let (mut cross, mut head, mut tail) = (0.0, 0.0, 0.0);
    for i in 0..n {
        // A missing value is 0 with presence 0: it adds nothing to any sum.
        cross += a[i] * b[i];
        head += a[i] * a[i] * pb[i];
        tail += b[i] * b[i] * pa[i];
    }
    (head > 0.0 && tail > 0.0).then(|| cross / (head * tail).sqrt())
}

/// Fewest days the widening factor is computed for; below it the factor is capped.
const MIN_WIDENING_DAYS: f64 = 1.5;

/// How much wider out-of-sample errors are than in-sample residuals when the
/// level is α·(a slot profile that is a mean over `n` days, the value itself
/// included in-sample) + (1 − α)·(the same slot on another day):
///
/// w(n, α) = √((A + α²/n) / (A − α·(2 − α)/n)), A = 1 + (1 − α)²,
///
/// with n (days, real-valued) floored at 1.5 and α in [0, 1] (dimensionless).
/// α = 1 gives √((n + 1) / (n − 1)) (≤ √5 ≈ 2.24 with little history, → 1 as
/// history accumulates); α = 0 gives 1, as the other day is never in-sample.
///
/// (For i.i.d. slot values with variance σ², the error of a new value is
/// σ²·(1 + α²/n + (1 − α)²), while the in-sample residual, whose own value
/// is one of the n in the mean, has variance σ²·((1 − α/n)² + α²(n − 1)/n² + (1 − α)²).)
pub(crate) fn widening(n_days: f64, alpha: f64) -> f64 {
    let n = n_days.max(MIN_WIDENING_DAYS);
    let alpha = alpha.clamp(0.0, 1.0);
    let a = 1.0 + (1.0 - alpha).powi(2);
    ((a + alpha * alpha / n) / (a - alpha * (2.0 - alpha) / n)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_match_type_8_by_hand() {
        // n = 10, τ = 0.1: h = (10 + 1/3)·0.1 + 1/3 = 1.3667 → x1 + 0.3667·(x2 − x1).
        let mut v: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let q = empirical_quantiles(&mut v).unwrap();
        assert!((q.p10 - (1.0 + 0.366_666_7)).abs() < 1e-6);
        assert!((q.p50 - 5.5).abs() < 1e-12);
        assert!((q.p90 - (9.0 + 0.633_333_3)).abs() < 1e-6);
        assert_eq!(empirical_quantiles(&mut []), None);
    }

    proptest::proptest! {
        #[test]
        fn the_selected_median_is_the_sorted_one_bit_for_bit(
            v in proptest::collection::vec(-100.0f64..100.0, 1..200),
            ties in 0usize..4,
        ) {
            // Scaled by 0 to 3 and rounded, so that many draws repeat values.
            let v: Vec<f64> = v.iter().map(|x| (x * ties as f64).round()).collect();
            let sorted = empirical_quantiles(&mut v.clone()).unwrap();
            let median = selected_median(&mut v.clone()).unwrap();
            proptest::prop_assert_eq!(median.to_bits(), sorted.p50.to_bits());
        }
    }

    #[test]
    fn quantiles_agree_with_statrs_at_every_size() {
        use statrs::statistics::{Data, OrderStatistics};
        for n in 1..40 {
            // A scrambled, repeating sequence: ties and any order.
            let v: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13) as f64 - 4.5).collect();
            let q = empirical_quantiles(&mut v.clone()).unwrap();
            let mut d = Data::new(v);
            for (ours, tau) in [(q.p10, 0.1), (q.p50, 0.5), (q.p90, 0.9)] {
                assert!((ours - d.quantile(tau)).abs() < 1e-12, "n = {n}, τ = {tau}");
            }
        }
    }

    #[test]
    fn autocorrelation_by_hand() {
        // Pairs at lag 1: (1,-1), (-1,2); the pair with None is skipped.
        let s = [Some(1.0), Some(-1.0), Some(2.0), None, Some(5.0)];
        // cross = -1 - 2 = -3, head = 1 + 1 = 2, tail = 1 + 4 = 5.
        let g = Gapped::new(&s);
        let r = autocorrelation(&g, 1).unwrap();
        assert!((r - (-3.0 / 10f64.sqrt())).abs() < 1e-12);
        assert_eq!(autocorrelation(&g, 10), None);
    }

    #[test]
    fn widening_by_hand() {
        assert!((widening(3.0, 1.0) - 2f64.sqrt()).abs() < 1e-12);
        assert!((widening(0.2, 1.0) - 5f64.sqrt()).abs() < 1e-12);
        assert!(widening(50.0, 1.0) < 1.03);
        assert_eq!(widening(3.0, 0.0), 1.0);
        // α = 0.5, n = 2: A = 1.25, w² = (1.25 + 0.125) / (1.25 − 0.375) = 1.375 / 0.875.
        assert!((widening(2.0, 0.5) - (1.375f64 / 0.875).sqrt()).abs() < 1e-12);
    }
}
