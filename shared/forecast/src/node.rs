//! A node's forecaster: one series forecaster per resource, and the node-level
//! idle windows derived from them.

use serde::{Deserialize, Serialize};

use crate::idle::{idle_probability, is_idle, windows};
use crate::{
    ConfigError, ForecastConfig, Method, NodeForecast, Resource, ResourceForecast, SampleError,
    SeriesForecaster,
};

/// One utilisation sample of a node; percentages 0-100, `None` where not read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadSample {
    /// When it was taken, Unix ms.
    pub t_ms: i64,
    /// CPU utilisation, percent.
    pub cpu_pct: Option<f64>,
    /// Memory in use, percent.
    pub mem_pct: Option<f64>,
    /// Accelerator utilisation, percent.
    pub gpu_pct: Option<f64>,
}

/// Forecasts one node's CPU, memory and GPU and where it will be idle.
#[derive(Debug, Clone)]
pub struct NodeForecaster {
    config: ForecastConfig,
    cpu: SeriesForecaster,
    mem: SeriesForecaster,
    gpu: SeriesForecaster,
}

impl NodeForecaster {
    /// A forecaster with no history; fails on an invalid `config`.
    pub fn new(config: ForecastConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            cpu: SeriesForecaster::new(Resource::Cpu, config.clone())?,
            mem: SeriesForecaster::new(Resource::Mem, config.clone())?,
            gpu: SeriesForecaster::new(Resource::Gpu, config.clone())?,
            config,
        })
    }

    /// The settings it was built with.
    pub fn config(&self) -> &ForecastConfig {
        &self.config
    }

    /// Adds a sample (any order, gaps allowed; O(1) amortised). Every present
    /// value is tried; the first problem is returned.
    pub fn update(&mut self, sample: &LoadSample) -> Result<(), SampleError> {
        let mut first_err = None;
        for (series, value) in [
            (&mut self.cpu, sample.cpu_pct),
            (&mut self.mem, sample.mem_pct),
            (&mut self.gpu, sample.gpu_pct),
        ] {
            if let Some(v) = value
                && let Err(e) = series.update(sample.t_ms, v)
            {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// tidemill's forecast for the horizon after `now_ms` (Unix ms).
    pub fn forecast(&self, now_ms: i64) -> NodeForecast {
        self.forecast_with(Method::Tidemill, now_ms)
    }

    /// tidemill's forecast of `resource` alone, without idle windows, for a
    /// caller that judges idleness itself: (first slot's start in Unix ms,
    /// the forecast). `None` while the history before `now_ms` is empty.
    pub fn forecast_resource(
        &self,
        resource: Resource,
        now_ms: i64,
    ) -> Option<(i64, ResourceForecast)> {
        let series = match resource {
            Resource::Cpu => &self.cpu,
            Resource::Mem => &self.mem,
            Resource::Gpu => &self.gpu,
        };
        series.has_history(now_ms).then(|| {
            (
                series.forecast_start_ms(now_ms),
                series.forecast(Method::Tidemill, now_ms),
            )
        })
    }

    /// The forecast of any method, e.g. a baseline for comparison.
    pub fn forecast_with(&self, method: Method, now_ms: i64) -> NodeForecast {
        let start_ms = self.cpu.forecast_start_ms(now_ms);
        let resources: Vec<_> = [&self.cpu, &self.mem, &self.gpu]
            .into_iter()
            .filter(|s| s.has_history(now_ms))
            .map(|s| s.forecast(method, now_ms))
            .collect();
        let threshold = self.config.idle_threshold_pct;
        let confidence = self.config.idle_confidence;
        let judged: Vec<_> = resources
            .iter()
            .filter(|r| self.config.idle_resources.contains(&r.resource))
            .collect();
        let per_slot: Vec<Option<f64>> = (0..self.config.horizon_slots())
            .map(|i| {
                if judged.is_empty() {
                    return None;
                }
                judged.iter().try_fold(1.0_f64, |p, r| {
                    let q = r.slots[i]?;
                    is_idle(&q, threshold, confidence)
                        .then(|| p.min(idle_probability(&q, threshold)))
                })
            })
            .collect();
        NodeForecast {
            method,
            issued_ms: now_ms,
            start_ms,
            slot_len_s: self.config.slot_len_s,
            idle_threshold_pct: threshold,
            idle_windows: windows(start_ms, self.config.slot_len_ms(), &per_slot),
            resources,
            history_days: self.config.history_days,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(hours: i64) -> NodeForecaster {
        let mut node = NodeForecaster::new(ForecastConfig::default()).unwrap();
        for minute in 0..hours * 60 {
            node.update(&LoadSample {
                t_ms: minute * 60_000,
                cpu_pct: Some(10.0),
                mem_pct: None,
                gpu_pct: None,
            })
            .unwrap();
        }
        node
    }

    #[test]
    fn a_forecast_says_how_much_history_it_stands_on() {
        let days = ForecastConfig::default().history_days;
        let young = fed(6).forecast(6 * 3_600_000).history().unwrap();
        assert_eq!((young.observed_h, young.kept_days), (6.0, days));
        assert!(young.is_low());
        let old = fed(72).forecast(72 * 3_600_000).history().unwrap();
        assert_eq!(old.observed_h, 72.0);
        assert!(!old.is_low());
    }
}
