//! Feeds the node's forecaster with every sample and issues a forecast of the
//! node's own tide on a fixed cadence, for the coordinator to plan with.

use tidemill_forecast::{
    ConfigError, ForecastConfig, LoadSample, NodeForecast, NodeForecaster, Prior,
};

use crate::journal::HistoryRow;

/// The forecaster and its schedule.
pub struct Forecasting {
    model: NodeForecaster,
    refresh_ms: i64,
    next_ms: Option<i64>,
}

impl Forecasting {
    /// A forecaster issuing a forecast every `refresh_ms` of sample-clock time,
    /// primed with `history` (time ms, CPU %, memory %, accelerator %).
    pub fn new(
        cfg: ForecastConfig,
        refresh_ms: i64,
        history: impl IntoIterator<Item = HistoryRow>,
    ) -> Result<Self, ConfigError> {
        let mut this = Forecasting {
            model: NodeForecaster::new(cfg)?,
            refresh_ms,
            next_ms: None,
        };
        for (t_ms, cpu, mem, gpu) in history {
            this.learn(t_ms, cpu, mem, gpu);
        }
        Ok(this)
    }

    /// Learns from one sample.
    pub fn observe(&mut self, s: &tidemill_proto::Sample) {
        self.learn(s.t_ms, s.cpu_pct, s.mem_pct, s.gpu_pct);
    }

    fn learn(&mut self, t_ms: i64, cpu: f32, mem: f32, gpu: Option<f32>) {
        let sample = LoadSample {
            t_ms,
            cpu_pct: Some(f64::from(cpu)),
            mem_pct: Some(f64::from(mem)),
            gpu_pct: gpu.map(f64::from),
        };
        if let Err(e) = self.model.update(&sample) {
            tracing::debug!(error = %e, "sample not used by the forecaster");
        }
    }

    /// Sets the peers' prior the forecasts blend in (see
    /// [`NodeForecaster::set_prior`]); a changed prior makes a forecast due
    /// at once, so the coordinator plans with it from the next report.
    pub fn set_prior(&mut self, prior: Option<Prior>) {
        if self.model.prior() != prior.as_ref() {
            self.model.set_prior(prior);
            self.next_ms = None;
        }
    }

    /// A fresh forecast if one is due at `now_ms`: the first call, then every
    /// `refresh_ms`.
    pub fn due(&mut self, now_ms: i64) -> Option<NodeForecast> {
        if self.next_ms.is_some_and(|next| now_ms < next) {
            return None;
        }
        self.next_ms = Some(now_ms + self.refresh_ms);
        Some(self.model.forecast(now_ms))
    }

    /// How far back history matters, in ms.
    pub fn history_ms(&self) -> i64 {
        i64::from(self.model.config().history_days) * 86_400_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: i64, cpu: f32) -> tidemill_proto::Sample {
        tidemill_proto::Sample {
            t_ms,
            cpu_pct: cpu,
            per_core_pct: vec![],
            mem_pct: 30.0,
            net_rx_bytes: 0,
            net_tx_bytes: 0,
            gpu_pct: None,
        }
    }

    #[test]
    fn issues_forecasts_on_its_cadence() {
        let mut f = Forecasting::new(ForecastConfig::default(), 300_000, []).unwrap();
        assert!(f.due(0).is_some(), "the first forecast is due at once");
        assert!(f.due(299_999).is_none());
        assert!(f.due(300_000).is_some());
    }

    #[test]
    fn learns_a_tide_from_history_and_samples() {
        const HOUR: i64 = 3_600_000;
        let busy = |h: i64| {
            if (8..20).contains(&(h % 24)) {
                80.0
            } else {
                5.0
            }
        };
        let history: Vec<_> = (0..48).map(|h| (h * HOUR, busy(h), 30.0, None)).collect();
        let mut f = Forecasting::new(ForecastConfig::default(), HOUR, history).unwrap();
        for h in 48..72 {
            f.observe(&sample(h * HOUR, busy(h)));
        }
        let forecast = f.due(72 * HOUR).unwrap();
        let summary = forecast.summary();
        assert!(
            summary.idle_hours_next_24h > 6.0 && summary.idle_hours_next_24h < 16.0,
            "{summary:?}"
        );
        let next = summary.next_idle.expect("an idle window tonight");
        assert!(
            next.start_ms >= 72 * HOUR && next.start_ms < 96 * HOUR,
            "{next:?}"
        );
    }

    #[test]
    fn a_new_prior_makes_a_forecast_due_at_once_and_shows_in_it() {
        let mut f = Forecasting::new(ForecastConfig::default(), 300_000, []).unwrap();
        f.observe(&sample(0, 10.0));
        assert!(f.due(0).unwrap().prior.is_none());
        assert!(f.due(1_000).is_none());
        let peer = f.due(300_000).unwrap();
        let prior = Prior::from_peers(tidemill_forecast::PriorSource::Site, &[&peer], 900);
        f.set_prior(prior.clone());
        let with = f.due(301_000).expect("due at once after a new prior");
        assert_eq!(with.prior.map(|p| p.peers), Some(1));
        f.set_prior(prior);
        assert!(
            f.due(302_000).is_none(),
            "the same prior again changes nothing"
        );
    }

    #[test]
    fn refuses_an_invalid_setting() {
        let cfg = ForecastConfig {
            slot_len_s: 60,
            ..ForecastConfig::default()
        };
        let err = Forecasting::new(cfg, 1, []).err().expect("invalid");
        assert_eq!(err.key, "slot_len_s");
    }
}
