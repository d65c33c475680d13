//! Forecast accuracy figures, so every method is scored the same way (backtests
//! and live monitoring alike).

use serde::{Deserialize, Serialize};

use crate::{Quantiles, is_idle};

/// Pinball (quantile) loss of predicting `predicted` for quantile `tau` when
/// `actual` happened, in the values' unit (percent):
///
/// L_τ(y, q) = τ·(y − q) if y ≥ q, else (1 − τ)·(q − y).
pub fn pinball_loss(tau: f64, actual: f64, predicted: f64) -> f64 {
    if actual >= predicted {
        tau * (actual - predicted)
    } else {
        (1.0 - tau) * (predicted - actual)
    }
}

/// One scored forecast slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoredPoint {
    /// The slot's true mean utilisation, percent.
    pub actual: f64,
    /// The method's forecast for the slot.
    pub forecast: Quantiles,
    /// same-slot-yesterday's P50 for the same slot (the MASE reference), percent.
    pub reference_p50: f64,
    /// The slot's length, hours (weights the idle figures in node-hours).
    pub hours: f64,
}

/// Running sums over scored points of one method.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scoreboard {
    points: u64,
    abs_err: f64,
    ref_abs_err: f64,
    pinball_p10: f64,
    pinball_p90: f64,
    covered: u64,
    idle_both_h: f64,
    idle_predicted_h: f64,
    idle_actual_h: f64,
}

/// The figures of one method over all its scored points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Scored slots.
    pub points: u64,
    /// Mean absolute error of P50: Σ|y − P50| / n, percent.
    pub mae: f64,
    /// Σ|y − P50| / Σ|y − P50_ref| over the same points, where P50_ref is
    /// same-slot-yesterday's forecast: below 1 beats it. `None` if the reference is perfect.
    pub mase: Option<f64>,
    /// Mean pinball loss of P10 (τ = 0.1), percent.
    pub pinball_p10: f64,
    /// Mean pinball loss of P90 (τ = 0.9), percent.
    pub pinball_p90: f64,
    /// Share of points with P10 ≤ y ≤ P90 (nominal 0.8).
    pub coverage_p10_p90: f64,
    /// Node-hours predicted idle ([`crate::is_idle`] at the idle confidence) that
    /// were idle (y < threshold),
    /// over node-hours predicted idle; `None` if none was predicted.
    pub idle_precision: Option<f64>,
    /// Node-hours idle and predicted idle, over node-hours idle; `None` if none was idle.
    pub idle_recall: Option<f64>,
}

impl Scoreboard {
    /// Adds one point judged against `idle_threshold_pct`; it is predicted idle
    /// when [`is_idle`] holds at `idle_confidence`.
    pub fn add(&mut self, p: &ScoredPoint, idle_threshold_pct: f64, idle_confidence: f64) {
        self.points += 1;
        self.abs_err += (p.actual - p.forecast.p50).abs();
        self.ref_abs_err += (p.actual - p.reference_p50).abs();
        self.pinball_p10 += pinball_loss(0.1, p.actual, p.forecast.p10);
        self.pinball_p90 += pinball_loss(0.9, p.actual, p.forecast.p90);
        self.covered += u64::from(p.forecast.p10 <= p.actual && p.actual <= p.forecast.p90);
        let predicted_idle = is_idle(&p.forecast, idle_threshold_pct, idle_confidence);
        let idle = p.actual < idle_threshold_pct;
        if predicted_idle {
            self.idle_predicted_h += p.hours;
        }
        if idle {
            self.idle_actual_h += p.hours;
        }
        if predicted_idle && idle {
            self.idle_both_h += p.hours;
        }
    }

    /// Merges another board's sums (e.g. from another thread).
    pub fn merge(&mut self, other: &Scoreboard) {
        self.points += other.points;
        self.abs_err += other.abs_err;
        self.ref_abs_err += other.ref_abs_err;
        self.pinball_p10 += other.pinball_p10;
        self.pinball_p90 += other.pinball_p90;
        self.covered += other.covered;
        self.idle_both_h += other.idle_both_h;
        self.idle_predicted_h += other.idle_predicted_h;
        self.idle_actual_h += other.idle_actual_h;
    }

    /// The figures so far; `None` before the first point.
    pub fn figures(&self) -> Option<Figures> {
        if self.points == 0 {
            return None;
        }
        let n = self.points as f64;
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        Some(Figures {
            points: self.points,
            mae: self.abs_err / n,
            mase: ratio(self.abs_err, self.ref_abs_err),
            pinball_p10: self.pinball_p10 / n,
            pinball_p90: self.pinball_p90 / n,
            coverage_p10_p90: self.covered as f64 / n,
            idle_precision: ratio(self.idle_both_h, self.idle_predicted_h),
            idle_recall: ratio(self.idle_both_h, self.idle_actual_h),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinball_by_hand() {
        assert!((pinball_loss(0.1, 10.0, 4.0) - 0.6).abs() < 1e-12);
        assert!((pinball_loss(0.1, 4.0, 10.0) - 5.4).abs() < 1e-12);
        assert!((pinball_loss(0.9, 4.0, 10.0) - 0.6).abs() < 1e-12);
        assert_eq!(pinball_loss(0.9, 5.0, 5.0), 0.0);
    }

    #[test]
    fn figures_by_hand() {
        let pt = |actual, p10, p50, p90, reference_p50| ScoredPoint {
            actual,
            forecast: Quantiles { p10, p50, p90 },
            reference_p50,
            hours: 0.25,
        };
        let mut b = Scoreboard::default();
        assert_eq!(b.figures(), None);
        // threshold 30:
        // 1: y=20, band 10-25 (covered), pred idle & idle.     |e|=5, |ref|=10
        // 2: y=40, band 20-28 (missed),  pred idle, not idle.  |e|=15, |ref|=0
        // 3: y=10, band 5-35  (covered), not pred, idle.       |e|=10, |ref|=20
        // 4: y=50, band 40-60 (covered), neither.              |e|=0, |ref|=10
        for p in [
            pt(20.0, 10.0, 15.0, 25.0, 30.0),
            pt(40.0, 20.0, 25.0, 28.0, 40.0),
            pt(10.0, 5.0, 20.0, 35.0, 30.0),
            pt(50.0, 40.0, 50.0, 60.0, 60.0),
        ] {
            b.add(&p, 30.0, 0.9);
        }
        let f = b.figures().unwrap();
        assert_eq!(f.points, 4);
        assert!((f.mae - 30.0 / 4.0).abs() < 1e-12);
        assert!((f.mase.unwrap() - 30.0 / 40.0).abs() < 1e-12);
        // P10 losses: 0.1·10, 0.1·20, 0.1·5, 0.1·10 → 4.5 / 4.
        assert!((f.pinball_p10 - 4.5 / 4.0).abs() < 1e-12);
        // P90 losses: 0.1·5, 0.9·12, 0.1·25, 0.1·10 → 14.8 / 4.
        assert!((f.pinball_p90 - 14.8 / 4.0).abs() < 1e-12);
        assert!((f.coverage_p10_p90 - 0.75).abs() < 1e-12);
        assert!((f.idle_precision.unwrap() - 0.5).abs() < 1e-12);
        assert!((f.idle_recall.unwrap() - 0.5).abs() < 1e-12);

        let mut merged = Scoreboard::default();
        merged.merge(&b);
        merged.merge(&b);
        assert_eq!(merged.figures().unwrap().points, 8);
        assert!((merged.figures().unwrap().mae - f.mae).abs() < 1e-12);
    }
}
