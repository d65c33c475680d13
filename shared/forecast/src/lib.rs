//! tidemill's tidal forecaster: per-node utilisation history in, quantile
//! forecasts, idle windows and a daily-cycle verdict out.
//!
//! The crate is sans-IO: no sockets, no clock. Every time is a Unix-millisecond
//! `i64` given by the caller (`now_ms` included); durations in settings are
//! seconds; utilisation is percent (0-100).
//!
//! ```
//! use tidemill_forecast::{ForecastConfig, NodeForecaster, LoadSample};
//!
//! let mut node = NodeForecaster::new(ForecastConfig::default())?;
//! for minute in 0..3 * 24 * 60 {
//!     let t_ms = minute * 60_000;
//!     let hour = (minute / 60) % 24;
//!     let cpu = if (8..20).contains(&hour) { 70.0 } else { 10.0 };
//!     node.update(&LoadSample { t_ms, cpu_pct: Some(cpu), mem_pct: Some(40.0), gpu_pct: None })?;
//! }
//! let forecast = node.forecast(3 * 86_400_000);
//! let summary = forecast.summary();
//! assert!(summary.idle_hours_next_24h > 6.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs, unreachable_pub)]

mod baselines;
mod config;
mod cycle;
mod forecast;
mod history;
mod horizon;
mod idle;
mod method;
pub mod metrics;
mod node;
mod prior;
mod ring;
mod select;
mod series;
mod stats;
mod tidemill;

pub use config::{
    ConfigError, DAY_S, DEFAULT_IDLE_CONFIDENCE, DEFAULT_PRIOR_BLEND_H, ForecastConfig,
};
pub use cycle::{CycleVerdict, DailyCycle, MIN_CYCLE_DAYS, MIN_CYCLE_STRENGTH};
pub use forecast::{
    ForecastSummary, HistoryDepth, IdleWindow, NodeForecast, Quantiles, ResourceForecast,
};
pub use horizon::HorizonBucket;
pub use idle::{idle_probability, idle_score, is_idle, score_probability};
pub use method::{Method, UnknownMethod};
pub use node::{LoadSample, NodeForecaster};
pub use prior::{Prior, PriorSource, PriorUse, ResourcePrior};
pub use series::{Resource, SampleError, SeriesForecaster};
