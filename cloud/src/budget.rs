//! Each node's hourly budgets (`[ingest]`): reports and their bytes
//! (`reports_per_hour`, `report_bytes_per_hour`, on the coordinator's
//! clock), so that one node cannot fill the coordinator's disk: a batch that
//! would take the node past either is refused whole, and the edge sends it
//! again later; and certificate renewals (`renewals_per_hour`, wall time).

use std::collections::HashMap;
use std::sync::Mutex;

use tidemill_proto::ErrorCode;

use crate::coordinator::Coordinator;

const HOUR_MS: i64 = 3_600_000;

/// What every node has stored in the hour in progress.
pub struct ReportBudget {
    reports_per_hour: u64,
    bytes_per_hour: u64,
    used: Mutex<HashMap<String, Used>>,
}

#[derive(Default)]
struct Used {
    hour: i64,
    reports: u64,
    bytes: u64,
    refused: bool,
}

/// A batch refused over its node's budget.
#[derive(Debug, thiserror::Error)]
#[error(
    "over this node's report budget for the hour ({reports} of {reports_per_hour} reports, {bytes} of {bytes_per_hour} bytes stored; [ingest] on the coordinator): the batch is refused, send it again after {retry_after_ms} (Unix ms)"
)]
pub struct OverBudget {
    /// Reports stored this hour.
    pub reports: u64,
    /// The reports cap.
    pub reports_per_hour: u64,
    /// Bytes stored this hour.
    pub bytes: u64,
    /// The bytes cap.
    pub bytes_per_hour: u64,
    /// When the next hour starts, Unix ms on the coordinator's clock.
    pub retry_after_ms: i64,
    /// Whether this is the node's first refusal this hour (logged once).
    pub first_this_hour: bool,
}

impl ReportBudget {
    /// Budgets of `reports_per_hour` reports and `bytes_per_hour` bytes.
    pub fn new(reports_per_hour: u64, bytes_per_hour: u64) -> Self {
        ReportBudget {
            reports_per_hour,
            bytes_per_hour,
            used: Mutex::default(),
        }
    }

    /// Charges a batch of `reports` taking `bytes` to `node_id` at `now_ms`,
    /// or refuses it, charging nothing, when it would not fit the hour.
    pub fn charge(
        &self,
        node_id: &str,
        now_ms: i64,
        reports: u64,
        bytes: u64,
    ) -> Result<(), OverBudget> {
        let hour = now_ms.div_euclid(HOUR_MS);
        let mut all = self.used.lock().unwrap();
        let used = all.entry(node_id.to_string()).or_default();
        if used.hour != hour {
            *used = Used {
                hour,
                ..Used::default()
            };
        }
        if used.reports + reports > self.reports_per_hour
            || used.bytes + bytes > self.bytes_per_hour
        {
            let first_this_hour = !used.refused;
            used.refused = true;
            return Err(OverBudget {
                reports: used.reports,
                reports_per_hour: self.reports_per_hour,
                bytes: used.bytes,
                bytes_per_hour: self.bytes_per_hour,
                retry_after_ms: (hour + 1) * HOUR_MS,
                first_this_hour,
            });
        }
        used.reports += reports;
        used.bytes += bytes;
        Ok(())
    }
}

/// Charges a batch of `reports` reports in a `bytes`-byte frame to
/// `node_id`; if it is over the node's budget, why (for the edge), counted,
/// and logged once an hour per node.
pub fn refusal(coord: &Coordinator, node_id: &str, reports: usize, bytes: usize) -> Option<String> {
    let now = coord.clock.now_ms();
    let over = coord
        .report_budget
        .charge(node_id, now, reports as u64, bytes as u64)
        .err()?;
    coord.metrics.reports_over_budget.inc();
    if over.first_this_hour {
        tracing::warn!(node_id = %node_id, reports = over.reports, bytes = over.bytes,
            "node over its report budget for the hour; refusing its reports until the next hour (logged once an hour)");
    }
    Some(over.to_string())
}

/// Refuses a renewal past `[ingest] renewals_per_hour` for the node (wall
/// time), counted and logged.
pub fn renewal_allowed(
    coord: &Coordinator,
    node_id: &str,
    now_ms: i64,
) -> Result<(), (ErrorCode, String)> {
    let cap = coord.cfg.ingest.renewals_per_hour;
    let recent = coord
        .store
        .lock()
        .unwrap()
        .renewals_since(node_id, now_ms - 3_600_000)
        .map_err(|e| {
            tracing::error!(node_id = %node_id, error = %e, "cannot count renewals");
            (
                ErrorCode::Internal,
                "the coordinator cannot check the renewal".to_string(),
            )
        })?;
    if recent < cap {
        return Ok(());
    }
    coord.metrics.refused_renewals.inc();
    tracing::warn!(node_id = %node_id, recent, cap, "refused a renewal over the hourly cap");
    Err((
        ErrorCode::Unauthorized,
        format!(
            "node {node_id} renewed {recent} times in the last hour, the cap ([ingest] renewals_per_hour on the coordinator); try again later"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_over_either_budget_is_refused_until_the_next_hour() {
        let b = ReportBudget::new(10, 1_000);
        b.charge("a", 0, 6, 500).unwrap();
        let over = b.charge("a", 1, 5, 10).unwrap_err();
        assert!(over.first_this_hour);
        assert_eq!((over.reports, over.retry_after_ms), (6, HOUR_MS));
        let again = b.charge("a", 2, 1, 600).unwrap_err();
        assert!(!again.first_this_hour, "logged once an hour");
        b.charge("b", 2, 10, 1_000).unwrap();
        b.charge("a", 3, 4, 500).unwrap();
        b.charge("a", HOUR_MS, 10, 1_000).unwrap();
    }
}
