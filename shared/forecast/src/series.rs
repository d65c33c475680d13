//! One resource of one node: its bounded history and the forecast methods over it.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::history::History;
use crate::ring::SlotRing;
use crate::{ConfigError, ForecastConfig, Method, ResourceForecast, baselines, cycle, select};

/// A measured resource of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// CPU utilisation.
    Cpu,
    /// Memory in use.
    Mem,
    /// Accelerator (GPU/NPU) utilisation.
    Gpu,
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resource::Cpu => "cpu",
            Resource::Mem => "mem",
            Resource::Gpu => "gpu",
        })
    }
}

/// A sample the forecaster could not use.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SampleError {
    /// NaN or infinite value.
    #[error(
        "{resource} value {value} at t_ms={t_ms} is not a finite number: send percentages 0-100, and None for a resource that was not read"
    )]
    NotFinite {
        /// The resource.
        resource: Resource,
        /// The sample's time, Unix ms.
        t_ms: i64,
        /// The value received.
        value: f64,
    },
    /// Older than the kept history; it cannot affect any forecast.
    #[error(
        "{resource} sample at t_ms={t_ms} is older than the oldest kept slot (t_ms={oldest_kept_ms}) and was dropped: raise history_days to keep more"
    )]
    TooOld {
        /// The resource.
        resource: Resource,
        /// The sample's time, Unix ms.
        t_ms: i64,
        /// Start of the oldest kept slot, Unix ms.
        oldest_kept_ms: i64,
    },
}

/// The forecaster of one resource: O(1) amortised per sample, bounded memory
/// (`history_days` × slots per day), forecasts computed on demand.
#[derive(Debug, Clone)]
pub struct SeriesForecaster {
    resource: Resource,
    config: ForecastConfig,
    ring: SlotRing,
}

impl SeriesForecaster {
    /// A forecaster with no history yet.
    pub fn new(resource: Resource, config: ForecastConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let ring = SlotRing::new(config.slot_len_ms(), config.history_slots());
        Ok(Self {
            resource,
            config,
            ring,
        })
    }

    /// The resource it forecasts.
    pub fn resource(&self) -> Resource {
        self.resource
    }

    /// The settings it was built with.
    pub fn config(&self) -> &ForecastConfig {
        &self.config
    }

    /// Adds one sample (time in Unix ms, value in percent; clamped to 0-100).
    /// Samples may arrive out of order and with gaps.
    pub fn update(&mut self, t_ms: i64, value_pct: f64) -> Result<(), SampleError> {
        if !value_pct.is_finite() {
            return Err(SampleError::NotFinite {
                resource: self.resource,
                t_ms,
                value: value_pct,
            });
        }
        self.ring
            .add(t_ms, value_pct.clamp(0.0, 100.0))
            .map_err(|stale| SampleError::TooOld {
                resource: self.resource,
                t_ms,
                oldest_kept_ms: stale.oldest_kept_ms,
            })
    }

    /// Start of the first forecast slot for a forecast made at `now_ms`, Unix ms.
    pub fn forecast_start_ms(&self, now_ms: i64) -> i64 {
        self.config.forecast_start_ms(now_ms)
    }

    /// Forecasts the horizon after `now_ms` with `method`. Only slots before the
    /// forecast start are read.
    pub fn forecast(&self, method: Method, now_ms: i64) -> ResourceForecast {
        let history = self.history(now_ms);
        let cycle = cycle::assess(&history, self.config.slots_per_hour());
        let horizon = self.config.horizon_slots();
        let slots = match method {
            Method::SameSlotYesterday => baselines::same_slot_days_ago(&history, 1, horizon),
            Method::SameSlotLastWeek => baselines::same_slot_days_ago(&history, 7, horizon),
            Method::MeanProfile => baselines::mean_profile(&history, horizon),
            Method::Tidemill => select::forecast(
                &history,
                &cycle,
                horizon,
                self.config.slots_per_hour(),
                self.config.slot_len_s,
            ),
        };
        ResourceForecast {
            resource: self.resource,
            cycle,
            slots,
            observed_h: history.observed_days() * 24.0,
        }
    }

    /// The observed slots of the last day before the forecast start for
    /// `now_ms`: (slot start in Unix ms, mean in percent), oldest first.
    pub(crate) fn last_day(&self, now_ms: i64) -> Vec<(i64, f64)> {
        let history = self.history(now_ms);
        let values = history.values();
        let per_day = self.config.slots_per_day().min(values.len());
        let slot_ms = self.config.slot_len_ms();
        let first_ms = self.forecast_start_ms(now_ms) - per_day as i64 * slot_ms;
        values[values.len() - per_day..]
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (first_ms + i as i64 * slot_ms, v)))
            .collect()
    }

    /// True when the history window before `now_ms` holds a sample.
    pub fn has_history(&self, now_ms: i64) -> bool {
        let (end, len) = self.span(now_ms);
        self.ring
            .any_in_window(end, len, self.config.max_hold_slots())
    }

    fn history(&self, now_ms: i64) -> History {
        let (end, len) = self.span(now_ms);
        History::new(
            self.ring.window(end, len, self.config.max_hold_slots()),
            self.config.slots_per_day(),
        )
    }

    /// The history window before the forecast start: (end slot, length in slots).
    fn span(&self, now_ms: i64) -> (i64, usize) {
        let end = self.forecast_start_ms(now_ms) / self.config.slot_len_ms();
        (end, self.config.history_slots())
    }
}
