//! Parsed forecasts, kept between rounds. Every round reads each node's
//! latest forecast twice (the node list's view of it, and the plan's idle
//! windows); parsing them all again from their JSON was about a third of the
//! coordinator's CPU with 176 edges at 1 900× (perf, on the twin's EdgeFlow
//! run). A parsed forecast is kept per node with its issue time and served
//! while the row still has that issue time. Writing or deleting a node's
//! forecast forgets the node first, so a forecast replaced at the same issue
//! time is read again.

use super::db;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use tidemill_proto::NodeForecast;

/// Per node: the issue time and the parsed forecast.
#[derive(Debug, Default)]
pub(super) struct ForecastCache {
    by_node: RefCell<HashMap<String, (i64, Arc<NodeForecast>)>>,
}

impl ForecastCache {
    /// `node`'s forecast issued at `issued_ms`: the one parsed before, else
    /// `json()` parsed and kept. The outer error is the database's, the
    /// inner one says the stored JSON is not a forecast.
    pub(super) fn get(
        &self,
        node: &str,
        issued_ms: i64,
        json: impl FnOnce() -> db::Result<String>,
    ) -> db::Result<Result<Arc<NodeForecast>, serde_json::Error>> {
        if let Some((t, f)) = self.by_node.borrow().get(node)
            && *t == issued_ms
        {
            return Ok(Ok(Arc::clone(f)));
        }
        let parsed = serde_json::from_str::<NodeForecast>(&json()?).map(Arc::new);
        let mut by_node = self.by_node.borrow_mut();
        match &parsed {
            Ok(f) => by_node.insert(node.to_string(), (issued_ms, Arc::clone(f))),
            Err(_) => by_node.remove(node),
        };
        Ok(parsed)
    }

    /// Forgets `node`'s forecast: it is about to be written or deleted.
    pub(super) fn forget(&self, node: &str) {
        self.by_node.borrow_mut().remove(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(issued_ms: i64) -> String {
        let f = NodeForecast {
            issued_ms,
            ..crate::world::tests::forecast(&[Some(10.0)])
        };
        serde_json::to_string(&f).unwrap()
    }

    #[test]
    fn a_forecast_is_parsed_once_per_issue_time_and_again_once_forgotten() {
        let cache = ForecastCache::default();
        let mut reads = 0;
        let mut get = |cache: &ForecastCache, t: i64| {
            cache
                .get("e1", t, || {
                    reads += 1;
                    Ok(json(t))
                })
                .unwrap()
                .unwrap()
        };
        assert_eq!(get(&cache, 1_000).issued_ms, 1_000);
        assert_eq!(get(&cache, 1_000).issued_ms, 1_000);
        assert_eq!(get(&cache, 2_000).issued_ms, 2_000);
        cache.forget("e1");
        get(&cache, 2_000);
        assert_eq!(reads, 3);
    }

    #[test]
    fn json_that_is_not_a_forecast_is_an_error_and_not_kept() {
        let cache = ForecastCache::default();
        let bad = cache.get("e1", 1, || Ok("{\"not\": 1}".into())).unwrap();
        assert!(bad.is_err());
        let good = cache.get("e1", 1, || Ok(json(1))).unwrap();
        assert!(good.is_ok());
    }
}
