//! How well the live path kept up with the accelerated clock, the figures
//! only a live run has: round times and how many rounds ran of those due
//! (from the coordinator's `/metrics`), how long the edges' reports took to
//! be stored and how long an assignment took from the round that made it to
//! the edge's acknowledgement (from the coordinator's database, after the
//! run). A run whose live path lagged its clock by more than a round says
//! so: its outcomes are those of a slower coordinator, not of the policy.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use crate::swarm::quantile;

/// The round-time histogram the coordinator exports.
const ROUND_METRIC: &str = "tidemill_round_duration_seconds";

/// The coordinator's histogram of a sample's time to the first round that
/// planned with it.
const DECISION_METRIC: &str = "tidemill_report_to_decision_seconds";

/// The live path's figures; tide seconds unless a name says wall.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LivePath {
    /// Rounds the coordinator ran.
    pub rounds: u64,
    /// Rounds due over the run, one per `round_interval_secs` of tide.
    pub rounds_due: u64,
    /// Median round, wall seconds (the upper edge of its histogram bucket).
    pub round_p50_wall_s: Option<f64>,
    /// 99th-percentile round, wall seconds (the same).
    pub round_p99_wall_s: Option<f64>,
    /// Median time from an edge's sample to the coordinator storing it.
    pub report_lag_p50_s: Option<f64>,
    /// 99th percentile of the same.
    pub report_lag_p99_s: Option<f64>,
    /// Median time from the round that placed a task to the edge's
    /// acknowledgement, when the emulated task starts.
    pub assign_lag_p50_s: Option<f64>,
    /// 99th percentile of the same.
    pub assign_lag_p99_s: Option<f64>,
    /// Median time from a node's newest sample to the first round that
    /// planned jobs with it (the report lag plus the wait for a round; the
    /// upper edge of its histogram bucket).
    pub report_to_decision_p50_s: Option<f64>,
    /// 99th percentile of the same.
    pub report_to_decision_p99_s: Option<f64>,
    /// Whether the live path kept up: at least half the due rounds ran and
    /// the 99th-percentile report and assignment lags stayed within one
    /// round interval. Where it did not, live outcomes measure this box's
    /// speed as much as the policy.
    pub kept_up: bool,
}

impl LivePath {
    /// The figures from a `/metrics` scrape and the coordinator's database
    /// at `db`, for a run of `span_s` tide seconds with rounds due every
    /// `round_s`. A database that cannot be read leaves its figures empty.
    pub fn measure(metrics: &str, db: &Path, span_s: f64, round_s: f64) -> LivePath {
        let rounds = histogram(metrics, ROUND_METRIC);
        let decisions = histogram(metrics, DECISION_METRIC);
        let (reports, assigns) = lags(db).unwrap_or_else(|e| {
            tracing::warn!(db = %db.display(), error = %e, "cannot read the coordinator's database for the live path's lags");
            (Vec::new(), Vec::new())
        });
        let rounds_due = (span_s / round_s.max(1.0)).floor() as u64;
        let ran = rounds.as_ref().map_or(0, |h| h.count);
        let within = |v: Option<f64>| v.is_some_and(|v| v <= round_s);
        let mut out = LivePath {
            rounds: ran,
            rounds_due,
            round_p50_wall_s: rounds.as_ref().and_then(|h| h.quantile(0.5)),
            round_p99_wall_s: rounds.as_ref().and_then(|h| h.quantile(0.99)),
            report_lag_p50_s: quantile(&reports, 0.5),
            report_lag_p99_s: quantile(&reports, 0.99),
            assign_lag_p50_s: quantile(&assigns, 0.5),
            assign_lag_p99_s: quantile(&assigns, 0.99),
            report_to_decision_p50_s: decisions.as_ref().and_then(|h| h.quantile(0.5)),
            report_to_decision_p99_s: decisions.as_ref().and_then(|h| h.quantile(0.99)),
            kept_up: false,
        };
        out.kept_up = 2 * ran >= rounds_due
            && within(out.report_lag_p99_s)
            && (assigns.is_empty() || within(out.assign_lag_p99_s));
        out
    }
}

/// A Prometheus histogram: cumulative counts at each upper bound.
#[derive(Debug, Clone, PartialEq)]
struct Histogram {
    buckets: Vec<(f64, u64)>,
    count: u64,
}

impl Histogram {
    /// The upper bound of the bucket holding the `q`-quantile; `None` when
    /// empty or past the last finite bound.
    fn quantile(&self, q: f64) -> Option<f64> {
        let rank = ((q * self.count as f64).ceil() as u64).max(1);
        if self.count == 0 {
            return None;
        }
        self.buckets
            .iter()
            .find(|(_, n)| *n >= rank)
            .map(|(le, _)| *le)
    }
}

/// Histogram `name` from a text exposition, if it is there.
fn histogram(text: &str, name: &str) -> Option<Histogram> {
    let bucket = format!("{name}_bucket{{le=\"");
    let count = format!("{name}_count ");
    let mut buckets = Vec::new();
    let mut total = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(&bucket) {
            let (le, n) = rest.split_once("\"} ")?;
            if let (Ok(le), Ok(n)) = (le.parse::<f64>(), n.trim().parse::<u64>())
                && le.is_finite()
            {
                buckets.push((le, n));
            }
        } else if let Some(n) = line.strip_prefix(&count) {
            total = n.trim().parse::<u64>().ok();
        }
    }
    Some(Histogram {
        buckets,
        count: total?,
    })
}

/// Sorted report lags (sample to storage) and assignment lags (placement to
/// acknowledgement), tide seconds, from the coordinator's database.
fn lags(db: &Path) -> rusqlite::Result<(Vec<f64>, Vec<f64>)> {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let column = |sql: &str| -> rusqlite::Result<Vec<f64>> {
        let mut stmt = conn.prepare(sql)?;
        let mut v: Vec<f64> = stmt
            .query_map([], |r| r.get::<_, i64>(0))?
            .map(|r| r.map(|ms| ms as f64 / 1000.0))
            .collect::<rusqlite::Result<_>>()?;
        v.sort_by(f64::total_cmp);
        Ok(v)
    };
    let reports = column(
        "SELECT r.received_ms - s.t_ms FROM samples s
         JOIN reports r ON r.node_id = s.node_id AND r.seq = s.seq",
    )?;
    let assigns =
        column("SELECT dispatched_ms - created_ms FROM tasks WHERE dispatched_ms IS NOT NULL")?;
    Ok((reports, assigns))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A histogram `name` in the text exposition: cumulative counts at
    /// each upper bound, then `+Inf`, the sum and the count.
    fn exposition(name: &str, buckets: &[(&str, u64)], sum: f64) -> String {
        let count = buckets.last().map_or(0, |b| b.1);
        let mut text = format!("# TYPE {name} histogram\n");
        for (le, n) in buckets.iter().chain([&("+Inf", count)]) {
            text += &format!("{name}_bucket{{le=\"{le}\"}} {n}\n");
        }
        text + &format!("{name}_sum {sum}\n{name}_count {count}\n")
    }

    /// Rounds: half within 0.01 s, 98 % within 0.1 s, all within 1 s.
    /// Reports to decisions: 90 % within 30 s, 99 % within 60 s.
    fn scrape() -> String {
        let rounds = [("0.01", 50), ("0.1", 98), ("1", 100)];
        let decisions = [("30", 90), ("60", 99), ("120", 100)];
        exposition(ROUND_METRIC, &rounds, 3.5) + &exposition(DECISION_METRIC, &decisions, 2500.0)
    }

    #[test]
    fn round_quantiles_are_the_bucket_bounds_that_hold_them() {
        let h = histogram(&scrape(), ROUND_METRIC).unwrap();
        assert_eq!(h.count, 100);
        assert_eq!(h.quantile(0.5), Some(0.01));
        assert_eq!(h.quantile(0.99), Some(1.0));
        assert_eq!(histogram("", ROUND_METRIC), None);
        let dir = tempfile::tempdir().unwrap();
        let p = LivePath::measure(&scrape(), &dir.path().join("none.db"), 6000.0, 60.0);
        assert_eq!(p.report_to_decision_p50_s, Some(30.0));
        assert_eq!(p.report_to_decision_p99_s, Some(60.0));
    }

    /// A database with the columns the lags read: one sample stored
    /// `report_ms` after it was taken and one task acknowledged `assign_ms`
    /// after the round that placed it.
    fn db(dir: &Path, report_ms: i64, assign_ms: i64) -> std::path::PathBuf {
        let path = dir.join("t.db");
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&format!(
            "CREATE TABLE samples (node_id TEXT, seq INTEGER, t_ms INTEGER);
             CREATE TABLE reports (node_id TEXT, seq INTEGER, received_ms INTEGER);
             CREATE TABLE tasks (created_ms INTEGER, dispatched_ms INTEGER);
             INSERT INTO samples VALUES ('e1', 1, 1000);
             INSERT INTO reports VALUES ('e1', 1, {});
             INSERT INTO tasks VALUES (5000, {}), (6000, NULL);",
            1000 + report_ms,
            5000 + assign_ms
        ))
        .unwrap();
        path
    }

    #[test]
    fn lags_within_a_round_keep_up_and_one_past_it_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = LivePath::measure(&scrape(), &db(dir.path(), 30_000, 20_000), 6000.0, 60.0);
        assert_eq!(p.report_lag_p99_s, Some(30.0));
        assert_eq!(p.assign_lag_p50_s, Some(20.0));
        assert!(p.kept_up, "{p:?}");
        let dir = tempfile::tempdir().unwrap();
        let p = LivePath::measure(&scrape(), &db(dir.path(), 30_000, 600_000), 6000.0, 60.0);
        assert_eq!(p.assign_lag_p99_s, Some(600.0));
        assert!(!p.kept_up, "an assignment ten rounds late: {p:?}");
        let dir = tempfile::tempdir().unwrap();
        let p = LivePath::measure(&scrape(), &db(dir.path(), 1_000, 1_000), 60_000.0, 60.0);
        assert_eq!((p.rounds, p.rounds_due), (100, 1000));
        assert!(!p.kept_up, "a tenth of the rounds due: {p:?}");
    }

    #[test]
    fn a_run_without_a_database_has_no_lags_and_did_not_keep_up() {
        let dir = tempfile::tempdir().unwrap();
        let p = LivePath::measure(&scrape(), &dir.path().join("none.db"), 6000.0, 60.0);
        assert_eq!(p.rounds, 100);
        assert_eq!(p.rounds_due, 100);
        assert_eq!(p.report_lag_p99_s, None);
        assert!(!p.kept_up, "no reports measured is no proof of keeping up");
    }
}
