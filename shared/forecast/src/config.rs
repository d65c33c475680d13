//! Forecast settings and their validation.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Resource;

/// Seconds in one day.
pub const DAY_S: u32 = 86_400;

/// How a node's forecasts are made; fixed for the life of a [`crate::NodeForecaster`].
///
/// Durations are in seconds; thresholds in percent (0-100).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ForecastConfig {
    /// Length of one forecast slot, seconds. Samples are averaged per slot.
    pub slot_len_s: u32,
    /// How far ahead to forecast, seconds (default 48 h: plans run 48 h ahead).
    pub horizon_s: u32,
    /// Utilisation (percent) under which a resource counts as idle.
    pub idle_threshold_pct: f64,
    /// How many days of history are kept and used.
    pub history_days: u32,
    /// How long a sample's value is held over following empty slots, seconds;
    /// lets coarse traces (e.g. hourly) fill the finer slot grid.
    pub max_hold_s: u32,
    /// Resources that must all be idle for the node to be idle; a resource the
    /// node does not report is skipped.
    pub idle_resources: Vec<Resource>,
    /// How sure a slot must be to count as idle: it is idle when the forecast
    /// probability that utilisation stays under `idle_threshold_pct`
    /// ([`crate::idle_probability`]) is at least this (0.5 to 0.99). The default,
    /// 0.8, is the P80 quantile under the threshold; 0.9 is the P90.
    pub idle_confidence: f64,
    /// Hours of a node's own history after which a peers' prior no longer
    /// counts: the prior's weight falls linearly from 1 with no history to 0
    /// at this many hours ([`crate::Prior::weight`]).
    pub prior_blend_h: f64,
}

impl Default for ForecastConfig {
    fn default() -> Self {
        Self {
            slot_len_s: 900,
            horizon_s: 2 * DAY_S,
            idle_threshold_pct: 30.0,
            history_days: 14,
            max_hold_s: 3_600,
            idle_resources: vec![Resource::Cpu, Resource::Gpu],
            idle_confidence: DEFAULT_IDLE_CONFIDENCE,
            prior_blend_h: DEFAULT_PRIOR_BLEND_H,
        }
    }
}

/// Default [`ForecastConfig::idle_confidence`]: idle when P(utilisation under
/// the threshold) ≥ 0.8, i.e. when the P80 quantile is under it.
pub const DEFAULT_IDLE_CONFIDENCE: f64 = 0.8;

/// Default [`ForecastConfig::prior_blend_h`]: two days, when a node's own
/// history first tells whether it has a daily cycle ([`crate::MIN_CYCLE_DAYS`]).
pub const DEFAULT_PRIOR_BLEND_H: f64 = 48.0;

/// A [`ForecastConfig`] value that breaks a rule.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("invalid forecast setting `{key}` = {value}: {rule}")]
pub struct ConfigError {
    /// The setting's name.
    pub key: &'static str,
    /// The offending value, as written.
    pub value: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

impl ForecastConfig {
    /// Checks every setting and returns the first rule broken.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |key, value: String, rule| Err(ConfigError { key, value, rule });
        if !(300..=900).contains(&self.slot_len_s) || 3_600 % self.slot_len_s != 0 {
            return fail(
                "slot_len_s",
                self.slot_len_s.to_string(),
                "must be between 300 and 900 seconds (5 to 15 min) and divide one hour evenly",
            );
        }
        if self.horizon_s < self.slot_len_s || self.horizon_s > 2 * DAY_S {
            return fail(
                "horizon_s",
                self.horizon_s.to_string(),
                "must be at least one slot and at most 172800 seconds (48 h)",
            );
        }
        if !(self.idle_threshold_pct > 0.0 && self.idle_threshold_pct <= 100.0) {
            return fail(
                "idle_threshold_pct",
                self.idle_threshold_pct.to_string(),
                "must be a percentage above 0 and at most 100",
            );
        }
        if !(2..=56).contains(&self.history_days) {
            return fail(
                "history_days",
                self.history_days.to_string(),
                "must be between 2 and 56 days",
            );
        }
        if self.max_hold_s > DAY_S {
            return fail(
                "max_hold_s",
                self.max_hold_s.to_string(),
                "must be at most 86400 seconds (one day)",
            );
        }
        if self.idle_resources.is_empty() {
            return fail(
                "idle_resources",
                "[]".to_string(),
                "must name at least one resource (cpu, mem or gpu)",
            );
        }
        if !(0.5..=0.99).contains(&self.idle_confidence) {
            return fail(
                "idle_confidence",
                self.idle_confidence.to_string(),
                "must be a probability between 0.5 and 0.99",
            );
        }
        if !(self.prior_blend_h > 0.0 && self.prior_blend_h <= f64::from(self.history_days) * 24.0)
        {
            return fail(
                "prior_blend_h",
                self.prior_blend_h.to_string(),
                "must be above 0 hours and at most history_days x 24",
            );
        }
        Ok(())
    }

    /// Slots in one day.
    pub fn slots_per_day(&self) -> usize {
        (DAY_S / self.slot_len_s) as usize
    }

    /// Slots in one hour.
    pub fn slots_per_hour(&self) -> usize {
        (3_600 / self.slot_len_s) as usize
    }

    /// Slots covered by the horizon, rounding a partial slot up.
    pub fn horizon_slots(&self) -> usize {
        self.horizon_s.div_ceil(self.slot_len_s) as usize
    }

    /// Slot length in milliseconds.
    pub fn slot_len_ms(&self) -> i64 {
        i64::from(self.slot_len_s) * 1_000
    }

    /// Start of the first forecast slot for a forecast made at `now_ms`:
    /// `now_ms` rounded up to a slot boundary, Unix ms.
    pub fn forecast_start_ms(&self, now_ms: i64) -> i64 {
        let len = self.slot_len_ms();
        now_ms.div_euclid(len) * len + if now_ms.rem_euclid(len) == 0 { 0 } else { len }
    }

    /// Slots in the history window a forecast reads (and the forecaster keeps).
    pub fn history_slots(&self) -> usize {
        self.history_days as usize * self.slots_per_day()
    }

    /// Slots of history a forecast reads: the window, and the slots before it
    /// whose value may be held over into it.
    pub fn history_reach_slots(&self) -> usize {
        self.history_slots() + self.max_hold_slots()
    }

    /// LoadSample-and-hold limit in whole slots.
    pub fn max_hold_slots(&self) -> usize {
        (self.max_hold_s / self.slot_len_s) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        assert_eq!(ForecastConfig::default().validate(), Ok(()));
    }

    #[test]
    fn slot_out_of_range_names_key_value_and_rule() {
        let cfg = ForecastConfig {
            slot_len_s: 60,
            ..ForecastConfig::default()
        };
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.key, "slot_len_s");
        let msg = err.to_string();
        assert!(msg.contains("slot_len_s") && msg.contains("60") && msg.contains("5 to 15 min"));
    }

    #[test]
    fn slot_must_divide_an_hour() {
        let cfg = ForecastConfig {
            slot_len_s: 420,
            ..ForecastConfig::default()
        };
        assert_eq!(cfg.validate().unwrap_err().key, "slot_len_s");
    }

    #[test]
    fn horizon_over_48h_is_rejected() {
        let cfg = ForecastConfig {
            horizon_s: 2 * DAY_S + 1,
            ..ForecastConfig::default()
        };
        assert_eq!(cfg.validate().unwrap_err().key, "horizon_s");
    }

    #[test]
    fn other_rules() {
        let bad = [
            ForecastConfig {
                idle_threshold_pct: f64::NAN,
                ..ForecastConfig::default()
            },
            ForecastConfig {
                history_days: 1,
                ..ForecastConfig::default()
            },
            ForecastConfig {
                max_hold_s: DAY_S + 1,
                ..ForecastConfig::default()
            },
            ForecastConfig {
                idle_resources: vec![],
                ..ForecastConfig::default()
            },
            ForecastConfig {
                idle_confidence: 0.4,
                ..ForecastConfig::default()
            },
            ForecastConfig {
                idle_confidence: 1.0,
                ..ForecastConfig::default()
            },
        ];
        let keys: Vec<_> = bad.iter().map(|c| c.validate().unwrap_err().key).collect();
        assert_eq!(
            keys,
            [
                "idle_threshold_pct",
                "history_days",
                "max_hold_s",
                "idle_resources",
                "idle_confidence",
                "idle_confidence"
            ]
        );
    }

    #[test]
    fn derived_counts() {
        let cfg = ForecastConfig::default();
        assert_eq!(cfg.slots_per_day(), 96);
        assert_eq!(cfg.slots_per_hour(), 4);
        assert_eq!(cfg.horizon_slots(), 192);
        assert_eq!(cfg.max_hold_slots(), 4);
    }

    #[test]
    fn deserialises_with_defaults() {
        let cfg: ForecastConfig = serde_json::from_str(r#"{"slot_len_s": 600}"#).unwrap();
        assert_eq!(cfg.slot_len_s, 600);
        assert_eq!(cfg.horizon_s, 2 * DAY_S);
    }
}
