//! Ingesting edge reports into the ledger: samples, task statuses, forecasts
//! and link measurements (store::history bounds the history they leave).
//!
//! Each report is applied in one transaction together with the node's new
//! `last_seq`, and acknowledged only after it commits; a duplicate (seq not above
//! `last_seq`) is acknowledged without effect. A crash at any point therefore
//! neither loses an acknowledged report nor applies one twice. Batches from
//! several nodes may share one transaction (`crate::group_commit`), each
//! under its own savepoint.

use super::db;
use super::db::{OptionalExtension, Query, Transaction, params};
use tidemill_proto::{Report, ReportBody};

use super::jobs::apply_task_status;
use super::{Store, StoreError, event, tidal};
use crate::job::JobPhase;
use crate::report_checks::{Dropped, ReportBounds};

/// What applying reports did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The sequence number to acknowledge: every report up to it is stored.
    pub ack: u64,
    /// The reports newly stored, by sequence number and kind.
    pub stored: Vec<(u64, ReportKind)>,
    /// How many were duplicates and changed nothing.
    pub duplicates: usize,
    /// Jobs whose state the reports changed, with their new states.
    pub jobs: Vec<(u64, JobPhase)>,
    /// Values out of range, dropped ([`crate::report_checks`]).
    pub dropped: Vec<Dropped>,
}

/// What a report carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportKind {
    /// Utilisation samples.
    Samples,
    /// A task status.
    Task,
    /// A forecast.
    Forecast,
    /// Link measurements.
    Links,
    /// A task's own count of its iterations.
    Progress,
    /// A task started from a checkpoint.
    Resumed,
}

impl ReportKind {
    /// The name stored in the ledger and logged.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportKind::Samples => "samples",
            ReportKind::Task => "task",
            ReportKind::Forecast => "forecast",
            ReportKind::Links => "links",
            ReportKind::Progress => "progress",
            ReportKind::Resumed => "resumed",
        }
    }
}

/// One node's batch of reports, and when it arrived (the coordinator's
/// clock, Unix ms).
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    /// The node that sent it.
    pub node_id: &'a str,
    /// Its reports, in the order sent.
    pub reports: &'a [Report],
    /// When it arrived.
    pub now_ms: i64,
}

impl Store {
    /// Applies a batch of reports, in order and idempotently, in one
    /// transaction; see the module docs.
    pub fn apply_reports(
        &mut self,
        node_id: &str,
        reports: &[Report],
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        let batch = Batch {
            node_id,
            reports,
            now_ms,
        };
        self.apply_report_batches(&[batch])?
            .pop()
            .expect("one result per batch")
    }

    /// Applies several nodes' batches in one transaction, so that they share
    /// one commit (one fsync) where each would otherwise pay its own. Each
    /// batch runs under its own savepoint: one that fails (a node removed, a
    /// write refused) is rolled back alone and answered with its error,
    /// while the others are stored. The outer error is the commit's: then
    /// nothing was stored.
    pub fn apply_report_batches(
        &mut self,
        batches: &[Batch<'_>],
    ) -> Result<Vec<Result<Applied, StoreError>>, StoreError> {
        let err = self.sql_err();
        let bounds = self.bounds;
        for b in batches {
            if b.reports
                .iter()
                .any(|r| matches!(r.body, ReportBody::Forecast(_)))
            {
                self.forecasts.forget(b.node_id);
            }
        }
        self.write(|tx| {
            let mut results = Vec::with_capacity(batches.len());
            for b in batches {
                tx.execute_batch("SAVEPOINT batch").map_err(&err)?;
                let applied = apply_batch(tx, b, &bounds, &err);
                let end = if applied.is_ok() {
                    "RELEASE batch"
                } else {
                    "ROLLBACK TO batch; RELEASE batch"
                };
                tx.execute_batch(end).map_err(&err)?;
                results.push(applied);
            }
            Ok(results)
        })
    }

    /// The sequence numbers in the report ledger of `node_id`, ascending.
    pub fn report_seqs(&self, node_id: &str) -> Result<Vec<u64>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare("SELECT seq FROM reports WHERE node_id = ?1 ORDER BY seq")
            .map_err(&err)?;
        let rows = stmt
            .query_map([node_id], |r| r.get::<_, i64>(0))
            .map_err(&err)?;
        rows.map(|r| r.map(|s| s as u64).map_err(&err)).collect()
    }
}

/// Applies one node's batch inside `tx`: see the module docs.
fn apply_batch(
    tx: &Transaction<'_>,
    b: &Batch<'_>,
    bounds: &ReportBounds,
    err: &impl Fn(db::Error) -> StoreError,
) -> Result<Applied, StoreError> {
    let (node_id, now_ms) = (b.node_id, b.now_ms);
    let last: Option<i64> = tx
        .query_row("SELECT last_seq FROM nodes WHERE id = ?1", [node_id], |r| {
            r.get(0)
        })
        .optional()
        .map_err(err)?;
    let mut last = last.ok_or_else(|| StoreError::UnknownNode(node_id.to_string()))? as u64;
    let mut applied = Applied {
        ack: last,
        stored: Vec::new(),
        duplicates: 0,
        jobs: Vec::new(),
        dropped: Vec::new(),
    };
    for report in b.reports {
        if report.seq <= last {
            applied.duplicates += 1;
            continue;
        }
        if report.seq != last + 1 {
            let detail = format!("sequence jumped from {last} to {}", report.seq);
            tracing::warn!(node_id, %detail, "report sequence gap");
            event(tx, now_ms, Some(node_id), None, "sequence-gap", &detail).map_err(err)?;
        }
        let checked = Checked {
            bounds,
            now_ms,
            dropped: &mut applied.dropped,
        };
        let (kind, job) = apply_body(tx, node_id, report, checked).map_err(err)?;
        tx.execute(
            "INSERT INTO reports (node_id, seq, kind, received_ms) VALUES (?1, ?2, ?3, ?4)",
            params![node_id, report.seq as i64, kind.as_str(), now_ms],
        )
        .map_err(err)?;
        applied.stored.push((report.seq, kind));
        applied.jobs.extend(job);
        last = report.seq;
    }
    tx.execute(
        "UPDATE nodes SET last_seq = ?2, last_seen_ms = ?3 WHERE id = ?1",
        params![node_id, last as i64, now_ms],
    )
    .map_err(err)?;
    applied.ack = last;
    Ok(applied)
}

/// The range checks a report's body goes through, and where what they drop
/// is noted.
struct Checked<'a> {
    bounds: &'a ReportBounds,
    now_ms: i64,
    dropped: &'a mut Vec<Dropped>,
}

impl Checked<'_> {
    fn drop(&mut self, seq: u64, (field, value): (&'static str, String)) {
        self.dropped.push(Dropped { seq, field, value });
    }

    /// `t_ms`, or the coordinator's time in its place when it is out of
    /// bounds (noted as dropped).
    fn time(&mut self, seq: u64, field: &'static str, t_ms: i64) -> i64 {
        match self.bounds.time_problem(t_ms, self.now_ms) {
            Some(v) => {
                self.drop(seq, (field, v));
                self.now_ms
            }
            None => t_ms,
        }
    }

    /// The latest timestamp a stored row may keep and still be replaced only
    /// by a newer one: a row dated beyond it came from the future.
    fn horizon(&self) -> i64 {
        self.now_ms.saturating_add(self.bounds.skew_ms)
    }
}

/// Applies one report's body, less its out-of-range values; returns its kind
/// and any job state change.
fn apply_body(
    tx: &Transaction<'_>,
    node_id: &str,
    report: &Report,
    mut c: Checked<'_>,
) -> db::Result<(ReportKind, Option<(u64, JobPhase)>)> {
    let (seq, now_ms) = (report.seq, c.now_ms);
    match &report.body {
        ReportBody::Samples(samples) => {
            let mut insert = tx.prepare_cached(
                "INSERT INTO samples (node_id, seq, idx, t_ms, cpu, mem, gpu, net_rx, net_tx)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            let threshold: Option<f64> = tx
                .prepare_cached("SELECT idle_threshold_pct FROM nodes WHERE id = ?1")?
                .query_row([node_id], |r| r.get(0))
                .optional()?
                .flatten();
            let mut last = None;
            let mut busy_ms = None;
            for (idx, s) in samples.iter().enumerate() {
                if let Some(problem) = c.bounds.sample_problem(s, now_ms) {
                    c.drop(seq, problem);
                    continue;
                }
                insert.execute(params![
                    node_id,
                    seq as i64,
                    idx as i64,
                    s.t_ms,
                    s.cpu_pct,
                    s.mem_pct,
                    s.gpu_pct,
                    s.net_rx_bytes as i64,
                    s.net_tx_bytes as i64
                ])?;
                let load = s.cpu_pct.max(s.gpu_pct.unwrap_or(0.0));
                if threshold.is_some_and(|t| f64::from(load) >= t) {
                    busy_ms = busy_ms.max(Some(s.t_ms));
                }
                last = Some(s);
            }
            if let Some(s) = last {
                tx.execute(
                    "UPDATE nodes SET cpu_util = ?2, mem_util = ?3, gpu_util = ?4, last_sample_ms = ?5,
                        busy_ms = max(coalesce(busy_ms, ?6), coalesce(?6, busy_ms))
                     WHERE id = ?1",
                    params![node_id, s.cpu_pct, s.mem_pct, s.gpu_pct, s.t_ms, busy_ms],
                )?;
            }
            Ok((ReportKind::Samples, None))
        }
        ReportBody::Task(status) => {
            let mut status = status.clone();
            status.t_ms = c.time(seq, "task.t_ms", status.t_ms);
            Ok((
                ReportKind::Task,
                apply_task_status(tx, node_id, &status, now_ms)?,
            ))
        }
        ReportBody::Forecast(f) => {
            if let Some(problem) = c.bounds.forecast_problem(f, now_ms) {
                c.drop(seq, problem);
                return Ok((ReportKind::Forecast, None));
            }
            let json = serde_json::to_string(f).expect("forecasts serialise");
            tx.execute(
                "INSERT INTO forecasts (node_id, issued_ms, forecast) VALUES (?1, ?2, ?3)
                 ON CONFLICT (node_id) DO UPDATE SET issued_ms = ?2, forecast = ?3
                 WHERE excluded.issued_ms >= forecasts.issued_ms OR forecasts.issued_ms > ?4",
                params![node_id, f.issued_ms, json, c.horizon()],
            )?;
            tx.execute(
                "UPDATE nodes SET idle_threshold_pct = ?2, slot_len_s = ?3 WHERE id = ?1",
                params![node_id, f.idle_threshold_pct, f.slot_len_s],
            )?;
            Ok((ReportKind::Forecast, None))
        }
        ReportBody::Links(links) => {
            let mut upsert = tx.prepare_cached(
                "INSERT INTO links (from_node, to_node, t_ms, rtt_ms, bandwidth_bps, loss, probe_sent, probe_received)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (from_node, to_node) DO UPDATE
                 SET t_ms = ?3, rtt_ms = ?4, bandwidth_bps = ?5, loss = ?6,
                     probe_sent = links.probe_sent + ?7, probe_received = links.probe_received + ?8
                 WHERE excluded.t_ms >= links.t_ms OR links.t_ms > ?9",
            )?;
            for l in links {
                if let Some(problem) = c.bounds.link_problem(l, now_ms) {
                    c.drop(seq, problem);
                    continue;
                }
                upsert.execute(params![
                    node_id,
                    l.peer,
                    l.t_ms,
                    l.rtt_ms,
                    l.bandwidth_bps,
                    l.loss,
                    l.probe_sent_bytes as i64,
                    l.probe_received_bytes as i64,
                    c.horizon()
                ])?;
            }
            Ok((ReportKind::Links, None))
        }
        ReportBody::Progress(p) => {
            let mut p = p.clone();
            p.t_ms = c.time(seq, "progress.t_ms", p.t_ms);
            tidal::report_progress(tx, node_id, &p, now_ms)?;
            Ok((ReportKind::Progress, None))
        }
        ReportBody::Resumed(r) => {
            let mut r = r.clone();
            r.t_ms = c.time(seq, "resumed.t_ms", r.t_ms);
            super::checkpoints::report_resume(tx, node_id, &r, now_ms)?;
            Ok((ReportKind::Resumed, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testkit::on_both_backends;
    use crate::store::testkit::{hello, samples};

    on_both_backends! {
        fn reports_apply_once_and_survive_reopen(db) {
            let mut store = db.open();
            assert_eq!(store.register(&hello("n1"), 0).unwrap(), 0);
            assert_eq!(
                store.apply_report("n1", &samples(1, 20.0), 1).unwrap().ack,
                1
            );
            let dup = store.apply_report("n1", &samples(1, 99.0), 2).unwrap();
            assert_eq!(
                dup,
                Applied {
                    ack: 1,
                    stored: vec![],
                    duplicates: 1,
                    jobs: vec![],
                    dropped: vec![]
                }
            );
            // A batch that overlaps what is stored applies only the new reports, in order.
            let batch = [samples(1, 99.0), samples(2, 30.0), samples(3, 40.0)];
            let applied = store.apply_reports("n1", &batch[..2], 3).unwrap();
            assert_eq!((applied.ack, applied.duplicates), (2, 1));
            assert_eq!(applied.stored, vec![(2, ReportKind::Samples)]);
            drop(store);
            let mut store = db.open();
            assert_eq!(store.register(&hello("n1"), 4).unwrap(), 2);
            assert_eq!(store.report_seqs("n1").unwrap(), vec![1, 2]);
            assert_eq!(store.apply_reports("n1", &batch, 5).unwrap().ack, 3);
            let node = &store.nodes().unwrap()[0];
            assert_eq!(
                (node.last_seq, node.cpu_util, node.cpu_cores),
                (3, Some(40.0), 8)
            );
            assert!(matches!(
                store.apply_report("ghost", &samples(1, 0.0), 5),
                Err(StoreError::UnknownNode(_))
            ));
        }
    }

    on_both_backends! {
        /// Samples judged by the threshold of the node's latest forecast
        /// (30 %): the last one at or over it is when the node was last busy.
        /// Before any forecast there is no threshold to judge by.
        fn the_last_busy_sample_is_kept_by_the_forecasts_threshold(db) {
            let mut store = db.open();
            store.register(&hello("n1"), 0).unwrap();
            let busy_ms = |store: &Store| store.nodes().unwrap()[0].busy_ms;
            store.apply_report("n1", &samples(1, 90.0), 1_000).unwrap();
            assert_eq!(busy_ms(&store), None);
            let forecast = Report {
                seq: 2,
                body: ReportBody::Forecast(Box::new(crate::world::tests::forecast(&[Some(10.0)]))),
            };
            store.apply_report("n1", &forecast, 1_000_000).unwrap();
            store
                .apply_report("n1", &samples(3, 30.0), 1_000_000)
                .unwrap();
            assert_eq!(busy_ms(&store), Some(3_000), "at the threshold is busy");
            store
                .apply_report("n1", &samples(4, 29.0), 1_000_000)
                .unwrap();
            assert_eq!(busy_ms(&store), Some(3_000), "an idle sample keeps it");
            store
                .apply_report("n1", &samples(5, 80.0), 1_000_000)
                .unwrap();
            assert_eq!(busy_ms(&store), Some(5_000));
        }
    }
}
