//! What a forecast says: per-resource quantile slots, idle windows and a summary.

use serde::{Deserialize, Serialize};

use crate::{CycleVerdict, DailyCycle, MIN_CYCLE_DAYS, Method, PriorUse, Resource};

/// Predicted utilisation of one slot, percent (0-100).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// 10th percentile: optimistic.
    pub p10: f64,
    /// Median: the point forecast.
    pub p50: f64,
    /// 90th percentile: pessimistic. Idle windows are judged on P50 and P90
    /// together ([`crate::is_idle`]).
    pub p90: f64,
}

impl Quantiles {
    /// Clamps all three to 0-100, keeping p10 ≤ p50 ≤ p90.
    pub(crate) fn clamped(self) -> Self {
        let c = |v: f64| v.clamp(0.0, 100.0);
        let p50 = c(self.p50);
        Self {
            p10: c(self.p10).min(p50),
            p50,
            p90: c(self.p90).max(p50),
        }
    }
}

/// The forecast of one resource of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceForecast {
    /// Which resource.
    pub resource: Resource,
    /// Whether its history shows a daily cycle.
    pub cycle: CycleVerdict,
    /// One entry per slot from the forecast start; `None` where the method has
    /// no basis (e.g. same-slot-yesterday without yesterday's data).
    pub slots: Vec<Option<Quantiles>>,
    /// Hours of observed history the forecast was built from (observed
    /// slots × slot length), so that a forecast made on a few hours is not
    /// read as one made on a week. 0 in a forecast from an older edge.
    #[serde(default)]
    pub observed_h: f64,
}

/// A stretch in which the node is expected to stay idle.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IdleWindow {
    /// Start, Unix ms (a slot boundary).
    pub start_ms: i64,
    /// End (exclusive), Unix ms.
    pub end_ms: i64,
    /// Probability (0-1) that its least certain slot is really idle; at least
    /// [`crate::ForecastConfig::idle_confidence`] because every slot passed it.
    pub confidence: f64,
}

impl IdleWindow {
    /// Length in hours.
    pub fn hours(&self) -> f64 {
        (self.end_ms - self.start_ms) as f64 / 3.6e6
    }
}

/// A node's forecast from one method at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeForecast {
    /// The method that made it.
    pub method: Method,
    /// When it was made (the `now` it was given), Unix ms.
    pub issued_ms: i64,
    /// Start of the first slot: `issued_ms` rounded up to a slot boundary, Unix ms.
    pub start_ms: i64,
    /// Slot length, seconds.
    pub slot_len_s: u32,
    /// The idle threshold the windows were derived with, percent.
    pub idle_threshold_pct: f64,
    /// One entry per resource the node has reported.
    pub resources: Vec<ResourceForecast>,
    /// Idle windows, in time order.
    pub idle_windows: Vec<IdleWindow>,
    /// Days of history the forecaster keeps at most (`history_days`): what
    /// [`NodeForecast::history`] measures the observed history against. 0 in a
    /// forecast from an older edge.
    #[serde(default)]
    pub history_days: u32,
    /// The peers' prior the forecast blends in while the node's own history
    /// is short; `None` when it rests on the node's history alone.
    #[serde(default)]
    pub prior: Option<PriorUse>,
}

/// How much history a forecast stands on, as `nodes` and the demo label it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HistoryDepth {
    /// Hours observed, on the best-observed resource.
    pub observed_h: f64,
    /// Days the forecaster keeps at most.
    pub kept_days: u32,
}

impl HistoryDepth {
    /// Too little to tell whether the node has a daily cycle (fewer than
    /// [`MIN_CYCLE_DAYS`] days observed): the forecast extrapolates a level
    /// rather than repeating a measured day.
    pub fn is_low(&self) -> bool {
        self.observed_h < MIN_CYCLE_DAYS as f64 * 24.0
    }
}

impl std::fmt::Display for HistoryDepth {
    /// `low history (6 h of 7 d)`, or `history 50 h of 7 d`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (label, close) = if self.is_low() {
            ("low history (", ")")
        } else {
            ("history ", "")
        };
        write!(
            f,
            "{label}{:.0} h of {} d{close}",
            self.observed_h, self.kept_days
        )
    }
}

/// The few numbers a scheduler looks at first.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ForecastSummary {
    /// The first idle window, if any.
    pub next_idle: Option<IdleWindow>,
    /// Idle hours within 24 h of the forecast start.
    pub idle_hours_next_24h: f64,
    /// The CPU's daily-cycle verdict, if the node reports CPU.
    pub daily_cycle: Option<DailyCycle>,
    /// How much history the forecast stands on; `None` for a forecast from an
    /// edge that does not say.
    pub history: Option<HistoryDepth>,
    /// The peers' prior it leans on, if any.
    pub prior: Option<PriorUse>,
}

impl NodeForecast {
    /// The forecast of one resource, if the node reports it.
    pub fn resource(&self, resource: Resource) -> Option<&ResourceForecast> {
        self.resources.iter().find(|r| r.resource == resource)
    }

    /// Start of slot `i`, Unix ms.
    pub fn slot_start_ms(&self, i: usize) -> i64 {
        self.start_ms + i as i64 * i64::from(self.slot_len_s) * 1_000
    }

    /// Next idle window, idle hours in the next 24 h and the CPU cycle verdict.
    pub fn summary(&self) -> ForecastSummary {
        let day_end = self.start_ms + 86_400_000;
        let idle_ms: i64 = self
            .idle_windows
            .iter()
            .map(|w| (w.end_ms.min(day_end) - w.start_ms).max(0))
            .sum();
        ForecastSummary {
            next_idle: self.idle_windows.first().copied(),
            idle_hours_next_24h: idle_ms as f64 / 3.6e6,
            daily_cycle: self.resource(Resource::Cpu).map(|r| r.cycle.daily_cycle),
            history: self.history(),
            prior: self.prior,
        }
    }

    /// The history the forecast was built from: its best-observed resource's
    /// hours against the days kept; `None` when the edge did not say (an
    /// older edge) or reported no resource.
    pub fn history(&self) -> Option<HistoryDepth> {
        if self.history_days == 0 {
            return None;
        }
        let observed_h = self
            .resources
            .iter()
            .map(|r| r.observed_h)
            .reduce(f64::max)?;
        Some(HistoryDepth {
            observed_h,
            kept_days: self.history_days,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamping_keeps_order() {
        let q = Quantiles {
            p10: -5.0,
            p50: 120.0,
            p90: 110.0,
        }
        .clamped();
        assert_eq!((q.p10, q.p50, q.p90), (0.0, 100.0, 100.0));
    }

    #[test]
    fn summary_counts_idle_hours_within_a_day() {
        let w = |a: i64, b: i64| IdleWindow {
            start_ms: a * 3_600_000,
            end_ms: b * 3_600_000,
            confidence: 0.95,
        };
        let f = NodeForecast {
            method: Method::Tidemill,
            issued_ms: 0,
            start_ms: 0,
            slot_len_s: 900,
            idle_threshold_pct: 30.0,
            resources: vec![],
            idle_windows: vec![w(2, 5), w(22, 30)],
            history_days: 7,
            prior: None,
        };
        let s = f.summary();
        assert_eq!(s.next_idle, Some(w(2, 5)));
        assert!((s.idle_hours_next_24h - 5.0).abs() < 1e-12);
        assert_eq!(s.daily_cycle, None);
        assert_eq!(s.history, None, "no resource, no history to speak of");
        assert_eq!(f.slot_start_ms(2), 1_800_000);
    }

    #[test]
    fn history_is_labelled_low_below_two_days() {
        let low = HistoryDepth {
            observed_h: 6.0,
            kept_days: 7,
        };
        assert!(low.is_low());
        assert_eq!(low.to_string(), "low history (6 h of 7 d)");
        let enough = HistoryDepth {
            observed_h: 50.0,
            kept_days: 7,
        };
        assert!(!enough.is_low());
        assert_eq!(enough.to_string(), "history 50 h of 7 d");
    }
}
