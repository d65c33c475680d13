//! What a policy may know of the edge boxes in one run, answered from the
//! simulator's traces: the load each box reports, and the idle windows the
//! tidal scheduler plans on, from each box's online forecaster or, for an
//! oracle (and for policies that never ask), the truth.

use std::cell::RefCell;

use tidemill_forecast::{ConfigError, ForecastConfig};
use tidemill_sched::EdgeAvailability;
use tidemill_sched::policies::EdgeSignals;

use super::edges::EdgeWorld;
use super::forecasts::{ForecastCounts, OnlineForecasts};

/// The edge signals of one run.
pub struct RunSignals<'w> {
    world: &'w EdgeWorld,
    /// Each box's forecaster and the refresh period, ms; `None` for the oracle.
    forecasts: Option<(RefCell<OnlineForecasts>, i64)>,
}

impl<'w> RunSignals<'w> {
    /// Windows are the truth.
    pub fn oracle(world: &'w EdgeWorld) -> Self {
        RunSignals {
            world,
            forecasts: None,
        }
    }

    /// Windows are each box's P90 forecast with `config`, refreshed every `refresh_ms`.
    pub fn forecast(
        world: &'w EdgeWorld,
        config: ForecastConfig,
        refresh_ms: i64,
    ) -> Result<Self, ConfigError> {
        // Refreshes run on the machine's cores, read once.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let f = OnlineForecasts::new(config, world.boxes.len(), threads)?;
        Ok(RunSignals {
            world,
            forecasts: Some((RefCell::new(f), refresh_ms)),
        })
    }

    /// How many forecasts were made and reused; `None` for the oracle.
    pub fn forecast_counts(&self) -> Option<ForecastCounts> {
        self.forecasts.as_ref().map(|(f, _)| f.borrow().counts)
    }
}

impl EdgeSignals for RunSignals<'_> {
    fn reported_idle(&self, e: usize, t_ms: i64) -> bool {
        self.world.reported_idle(e, t_ms)
    }

    fn availability(&self, e: usize, now_ms: i64, horizon_ms: i64) -> EdgeAvailability {
        match &self.forecasts {
            Some((f, refresh_ms)) => {
                f.borrow_mut()
                    .availability(self.world, e, now_ms, *refresh_ms)
            }
            None => self.world.oracle(e, now_ms, horizon_ms),
        }
    }
}
