//! A node's forecaster: one series forecaster per resource, and the node-level
//! idle windows derived from them.

use serde::{Deserialize, Serialize};

use crate::idle::{idle_probability, is_idle, windows};
use crate::{
    ConfigError, CycleVerdict, DailyCycle, ForecastConfig, Method, NodeForecast, Prior, PriorUse,
    Resource, ResourceForecast, SampleError, SeriesForecaster,
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
    prior: Option<Prior>,
}

impl NodeForecaster {
    /// A forecaster with no history; fails on an invalid `config`.
    pub fn new(config: ForecastConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            cpu: SeriesForecaster::new(Resource::Cpu, config.clone())?,
            mem: SeriesForecaster::new(Resource::Mem, config.clone())?,
            gpu: SeriesForecaster::new(Resource::Gpu, config.clone())?,
            prior: None,
            config,
        })
    }

    /// The settings it was built with.
    pub fn config(&self) -> &ForecastConfig {
        &self.config
    }

    /// Sets the peers' prior that tidemill's forecasts blend in while this
    /// node's own history is short (see [`Prior`]); `None` drops it. A prior
    /// with another slot length than this forecaster's is ignored.
    pub fn set_prior(&mut self, prior: Option<Prior>) {
        self.prior = prior.filter(|p| p.slot_len_s == self.config.slot_len_s);
    }

    /// The prior set, if any.
    pub fn prior(&self) -> Option<&Prior> {
        self.prior.as_ref()
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
        let fresh = !self.any_history(now_ms);
        self.tidemill(series, fresh, now_ms)
            .map(|(r, _)| (series.forecast_start_ms(now_ms), r))
    }

    /// True when some resource has history before `now_ms`.
    fn any_history(&self, now_ms: i64) -> bool {
        [&self.cpu, &self.mem, &self.gpu]
            .iter()
            .any(|s| s.has_history(now_ms))
    }

    /// tidemill's forecast of one series with the prior blended in, and the
    /// prior's weight in it. A series with no history of its own takes the
    /// prior alone when the whole node is `fresh` (a resource the node lacks
    /// must not appear from its peers once it reports).
    fn tidemill(
        &self,
        series: &SeriesForecaster,
        fresh: bool,
        now_ms: i64,
    ) -> Option<(ResourceForecast, Option<f64>)> {
        let own = series
            .has_history(now_ms)
            .then(|| series.forecast(Method::Tidemill, now_ms));
        let prior = self.prior.as_ref().and_then(|p| {
            let r = p.resource(series.resource())?;
            (own.is_some() || fresh).then_some(r)
        });
        let Some(prior) = prior else {
            return own.map(|o| (o, None));
        };
        let slot_len_s = self.config.slot_len_s;
        let start_ms = series.forecast_start_ms(now_ms);
        let slot_ms = self.config.slot_len_ms();
        let mut blended = own.unwrap_or_else(|| ResourceForecast {
            resource: series.resource(),
            cycle: CycleVerdict {
                daily_cycle: DailyCycle::Unknown,
                strength: None,
                days_used: 0,
            },
            slots: vec![None; self.config.horizon_slots()],
            observed_h: 0.0,
        });
        let weight = Prior::weight(blended.observed_h, self.config.prior_blend_h);
        if weight == 0.0 {
            return Some((blended, None));
        }
        let offset = prior.offset(&series.last_day(now_ms), slot_len_s);
        for (i, slot) in blended.slots.iter_mut().enumerate() {
            let at = prior.at(start_ms + i as i64 * slot_ms, slot_len_s);
            *slot = Prior::blend(*slot, at, offset, weight);
        }
        Some((blended, Some(weight)))
    }

    /// The forecast of any method, e.g. a baseline for comparison.
    pub fn forecast_with(&self, method: Method, now_ms: i64) -> NodeForecast {
        let start_ms = self.cpu.forecast_start_ms(now_ms);
        let series = [&self.cpu, &self.mem, &self.gpu];
        let mut prior_weight: Option<f64> = None;
        let resources: Vec<_> = if method == Method::Tidemill {
            let fresh = !self.any_history(now_ms);
            series
                .into_iter()
                .filter_map(|s| self.tidemill(s, fresh, now_ms))
                .map(|(r, w)| {
                    if let Some(w) = w {
                        prior_weight = Some(prior_weight.map_or(w, |p| p.max(w)));
                    }
                    r
                })
                .collect()
        } else {
            series
                .into_iter()
                .filter(|s| s.has_history(now_ms))
                .map(|s| s.forecast(method, now_ms))
                .collect()
        };
        let prior = self
            .prior
            .as_ref()
            .zip(prior_weight)
            .map(|(p, weight)| PriorUse {
                source: p.source,
                peers: p.peers,
                weight,
            });
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
            prior,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PriorSource, Quantiles, ResourcePrior};

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

    /// A site prior: CPU at 5 % from 00:00 to 08:00 UTC and 80 % after, and
    /// a GPU the node itself does not have.
    fn night_prior() -> Prior {
        let day: Vec<Option<Quantiles>> = (0..96)
            .map(|s| {
                let v = if s < 32 { 5.0 } else { 80.0 };
                Some(Quantiles {
                    p10: v - 2.0,
                    p50: v,
                    p90: v + 2.0,
                })
            })
            .collect();
        let resource = |resource| ResourcePrior {
            resource,
            slots: day.clone(),
        };
        Prior {
            source: PriorSource::Site,
            peers: 3,
            slot_len_s: 900,
            resources: vec![resource(Resource::Cpu), resource(Resource::Gpu)],
        }
    }

    #[test]
    fn a_fresh_node_forecasts_its_peers_tide_and_blends_it_out() {
        let mut fresh = NodeForecaster::new(ForecastConfig::default()).unwrap();
        fresh.set_prior(Some(night_prior()));
        let f = fresh.forecast(0);
        assert_eq!(
            f.resources.len(),
            2,
            "a node with no history takes every resource of the prior"
        );
        let w = f.idle_windows[0];
        assert_eq!(
            (w.start_ms, w.end_ms),
            (0, 8 * 3_600_000),
            "the peers' night"
        );
        let used = f.prior.unwrap();
        assert_eq!(
            (used.source, used.peers, used.weight),
            (PriorSource::Site, 3, 1.0)
        );

        // 12 h at 10 % from midnight: own weight 12/48, prior weight 0.75.
        // Against the peers' 5 % in its first 32 slots and 80 % in the next
        // 16, the node's level is δ = (32 × 5 + 16 × (10 − 80)) / 48 = −20
        // points, so at 13:00 the prior says 80 − 20 = 60 and the blend
        // 0.25 × own + 0.75 × 60.
        let mut young = fed(12);
        young.set_prior(Some(night_prior()));
        let f = young.forecast(12 * 3_600_000);
        assert_eq!(
            f.resources.len(),
            1,
            "no GPU from the peers once the node reports"
        );
        assert_eq!(f.prior.unwrap().weight, 0.75);
        let p50 = f.resources[0].slots[4].unwrap().p50;
        let own = fed(12).forecast(12 * 3_600_000).resources[0].slots[4]
            .unwrap()
            .p50;
        assert!(
            (p50 - (0.25 * own + 0.75 * 60.0)).abs() < 1e-9,
            "{p50} against own {own}"
        );

        let mut grown = fed(48);
        grown.set_prior(Some(night_prior()));
        assert_eq!(
            grown.forecast(48 * 3_600_000),
            fed(48).forecast(48 * 3_600_000)
        );

        let mut other = fed(1);
        other.set_prior(Some(Prior {
            slot_len_s: 300,
            ..night_prior()
        }));
        assert!(other.prior().is_none(), "another slot length is ignored");
    }
}
