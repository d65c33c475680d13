//! How far the coordinator trusts what an edge says (`[trust]`): the bounds
//! its reports are range-checked against, how long an acknowledged
//! assignment may take to start, and how much of a forecast's confidence
//! its history earns.
//!
//! The forecast rule: a forecast is trusted only as far as its own history
//! goes. Each idle window's confidence is capped at
//! `c_max = min(1, h / H)`, where `h` (hours) is the history the forecast
//! states it was built on (its best-observed resource) and `H` (hours) is
//! `forecast_full_trust_hours`; a forecast that states no history (`h` = 0,
//! or none given) offers no window at all. The coordinator cannot check `h`
//! against the edge's own samples (a replaying or re-joined edge has history
//! the coordinator never saw), so an edge that lies about its history gets
//! planned work: what keeps other tenants' secrets from such an edge is a
//! label only an admin sets (`requires`).

use serde::Deserialize;
use tidemill_proto::NodeForecast;
use tidemill_sched::EdgeAvailability;

use crate::report_checks::ReportBounds;

/// Longest node label, in bytes.
pub const MAX_LABEL: usize = 64;

/// Why `label` cannot be a node label, if it cannot: labels are 1 to
/// [`MAX_LABEL`] lower-case letters, digits, '.', '_' or '-'.
pub fn label_problem(label: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
    (label.is_empty() || label.len() > MAX_LABEL || !label.chars().all(ok)).then(|| {
        format!("label {label:?} is invalid: use 1 to {MAX_LABEL} lower-case letters, digits, '.', '_' or '-', e.g. \"trusted\"")
    })
}

/// `[trust]`: every key has a default, so the section may be left out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrustConfig {
    /// Seconds an edge's timestamps may be ahead of the coordinator's clock.
    pub report_skew_secs: u64,
    /// Seconds an acknowledged assignment has to start before it is taken back.
    pub start_timeout_secs: u64,
    /// Assignments not started after which a node is cordoned.
    pub cordon_after_unstarted: u32,
    /// Hours of history that earn a forecast its full confidence.
    pub forecast_full_trust_hours: f64,
}

impl Default for TrustConfig {
    fn default() -> Self {
        TrustConfig {
            report_skew_secs: 300,
            start_timeout_secs: 120,
            cordon_after_unstarted: 3,
            forecast_full_trust_hours: 48.0,
        }
    }
}

impl TrustConfig {
    /// Why the section is invalid, if it is: (key, value, rule).
    pub fn invalid(&self) -> Option<(&'static str, String, &'static str)> {
        if self.start_timeout_secs == 0 {
            Some(("start_timeout_secs", "0".into(), "must be at least 1"))
        } else if self.cordon_after_unstarted == 0 {
            Some(("cordon_after_unstarted", "0".into(), "must be at least 1"))
        } else if !(self.forecast_full_trust_hours.is_finite()
            && self.forecast_full_trust_hours > 0.0)
        {
            Some((
                "forecast_full_trust_hours",
                self.forecast_full_trust_hours.to_string(),
                "must be a number of hours above 0",
            ))
        } else {
            None
        }
    }

    /// The report bounds on a clock running `speed` times real time that
    /// keeps `retention_hours` of history: the skew is wall time, so it
    /// scales with the clock.
    pub fn report_bounds(&self, speed: f64, retention_hours: u64) -> ReportBounds {
        ReportBounds {
            skew_ms: (self.report_skew_secs as f64 * 1000.0 * speed) as i64,
            max_age_ms: retention_hours as i64 * 3_600_000,
        }
    }

    /// The start timeout in ms of a clock running `speed` times real time.
    pub fn start_timeout_ms(&self, speed: f64) -> i64 {
        (self.start_timeout_secs as f64 * 1000.0 * speed) as i64
    }

    /// `availability` with its windows' confidence capped by the history
    /// `forecast` stands on; see the module docs for the formula.
    pub fn cap(
        &self,
        mut availability: EdgeAvailability,
        forecast: Option<&NodeForecast>,
    ) -> EdgeAvailability {
        let stated_h = forecast
            .and_then(NodeForecast::history)
            .map_or(0.0, |h| h.observed_h);
        let trust = (stated_h / self.forecast_full_trust_hours).clamp(0.0, 1.0);
        if trust <= 0.0 {
            availability.windows.clear();
            availability.likely.clear();
        }
        for w in &mut availability.windows {
            w.confidence = w.confidence.min(trust);
        }
        availability
    }
}

#[cfg(test)]
mod tests {
    use tidemill_sched::Window;

    use super::*;

    fn idle_48h() -> EdgeAvailability {
        EdgeAvailability {
            windows: vec![Window {
                start_ms: 0,
                end_ms: 48 * 3_600_000,
                confidence: 0.9,
            }],
            likely: Vec::new(),
            idle_since_ms: None,
            util_now_pct: Some(0.0),
            idle_threshold_pct: 30.0,
        }
    }

    #[test]
    fn a_forecast_without_history_offers_nothing_and_history_earns_confidence() {
        let t = TrustConfig::default();
        assert!(t.cap(idle_48h(), None).windows.is_empty(), "no forecast");
        let stating = |observed_h: f64| {
            let mut f = crate::world::tests::forecast(&[]);
            f.resources[0].observed_h = observed_h;
            f
        };
        assert!(
            t.cap(idle_48h(), Some(&stating(0.0))).windows.is_empty(),
            "0 h of history stated"
        );
        // By hand: c_max = min(1, 12 h / 48 h) = 0.25 caps a window of 0.9;
        // 96 h earns min(1, 2) = 1, which leaves it at 0.9.
        let young = t.cap(idle_48h(), Some(&stating(12.0)));
        assert!((young.windows[0].confidence - 0.25).abs() < 1e-12);
        let old = t.cap(idle_48h(), Some(&stating(96.0)));
        assert!((old.windows[0].confidence - 0.9).abs() < 1e-12);
        assert!(t.invalid().is_none());
        let bounds = t.report_bounds(1200.0, 336);
        assert_eq!(bounds.skew_ms, 300 * 1000 * 1200, "the skew is wall time");
    }
}
