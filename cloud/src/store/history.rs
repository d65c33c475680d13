//! Keeping the store's history bounded: raw samples for `raw_sample_hours`,
//! then downsampled into per-slot aggregates kept for `retention_hours`; the
//! report ledger for the raw window; events for `retention_hours`; ended jobs
//! for `ended_job_retention_days`.
//!
//! A slot is the node's forecaster's (the `slot_len_s` of its latest
//! forecast, else the edge's default), numbered as the forecaster numbers
//! them (`t_ms` divided by the slot length), and keeps for cpu, mem and gpu
//! the count, sum and maximum of the samples in it, and the sums of the
//! network deltas. The sum and count are what the forecaster itself keeps
//! per slot (`tidemill_forecast`'s slot ring), so sum / count is the per-slot
//! mean it learns from; the maximum keeps the peaks a mean hides. Sums,
//! counts and maxima add up exactly when a late sample joins a slot already
//! downsampled; quantiles would not.
//!
//! All of it is one transaction: slots are written and the samples they
//! summarise deleted together, so a crash before the commit leaves the
//! samples as they were, and a rerun after it finds no sample to count twice.
//! The SQL is plain (no SQLite-only function) so another back end can run it.

use super::db;
use super::db::{Query, Transaction, params};

use super::{Store, StoreError};

/// The cutoffs of one prune, Unix ms: what is older goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneBefore {
    /// Raw samples (downsampled first) and report ledger entries.
    pub raw_ms: i64,
    /// Downsampled slots and events.
    pub history_ms: i64,
    /// Jobs that ended, with their tasks.
    pub jobs_ms: i64,
}

impl Store {
    /// Downsamples and forgets history past its cutoffs, in one transaction
    /// (see the module docs); returns how many rows went.
    pub fn prune(&mut self, before: PruneBefore) -> Result<usize, StoreError> {
        let err = self.sql_err();
        self.write(|tx| {
            let mut gone = downsample(tx, before.raw_ms, before.history_ms).map_err(&err)?;
            gone += tx
                .execute("DELETE FROM reports WHERE received_ms < ?1", [before.raw_ms])
                .map_err(&err)?;
            gone += tx
                .execute("DELETE FROM events WHERE t_ms < ?1", [before.history_ms])
                .map_err(&err)?;
            let ended = "SELECT id FROM jobs WHERE state IN ('succeeded', 'failed', 'cancelled', 'rejected')
                           AND COALESCE(finished_ms, submitted_ms) < ?1";
            gone += tx
                .execute(&format!("DELETE FROM tasks WHERE job_id IN ({ended})"), [before.jobs_ms])
                .map_err(&err)?;
            gone += tx
                .execute(&format!("DELETE FROM jobs WHERE id IN ({ended})"), [before.jobs_ms])
                .map_err(&err)?;
            Ok(gone)
        })
    }
}

/// Folds each node's samples from before the start of the slot holding
/// `raw_before_ms` into its slots, deletes them, and deletes the slots that
/// start before `history_before_ms`; returns the rows deleted. Node by node,
/// so that each statement reads one node's rows through its index.
fn downsample(
    tx: &Transaction<'_>,
    raw_before_ms: i64,
    history_before_ms: i64,
) -> db::Result<usize> {
    let default_len_s = i64::from(tidemill_forecast::ForecastConfig::default().slot_len_s);
    let nodes: Vec<(String, Option<i64>)> = tx
        .prepare("SELECT id, slot_len_s FROM nodes")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut fold = tx.prepare_cached(
        "INSERT INTO sample_slots
             (node_id, slot_ms, slot_len_s, n, cpu_sum, cpu_max, mem_sum, mem_max,
              gpu_n, gpu_sum, gpu_max, net_rx, net_tx)
         SELECT node_id, (t_ms / ?4) * ?4, ?3, COUNT(*), SUM(cpu), MAX(cpu), SUM(mem), MAX(mem),
                COUNT(gpu), SUM(gpu), MAX(gpu), SUM(net_rx), SUM(net_tx)
         FROM samples WHERE node_id = ?1 AND t_ms < ?2
         GROUP BY node_id, (t_ms / ?4) * ?4
         ON CONFLICT (node_id, slot_ms, slot_len_s) DO UPDATE SET
             n = sample_slots.n + excluded.n,
             cpu_sum = sample_slots.cpu_sum + excluded.cpu_sum,
             cpu_max = CASE WHEN excluded.cpu_max > sample_slots.cpu_max
                            THEN excluded.cpu_max ELSE sample_slots.cpu_max END,
             mem_sum = sample_slots.mem_sum + excluded.mem_sum,
             mem_max = CASE WHEN excluded.mem_max > sample_slots.mem_max
                            THEN excluded.mem_max ELSE sample_slots.mem_max END,
             gpu_n = sample_slots.gpu_n + excluded.gpu_n,
             gpu_sum = COALESCE(sample_slots.gpu_sum + excluded.gpu_sum,
                                sample_slots.gpu_sum, excluded.gpu_sum),
             gpu_max = CASE WHEN sample_slots.gpu_max IS NULL OR excluded.gpu_max > sample_slots.gpu_max
                            THEN excluded.gpu_max ELSE sample_slots.gpu_max END,
             net_rx = sample_slots.net_rx + excluded.net_rx,
             net_tx = sample_slots.net_tx + excluded.net_tx",
    )?;
    let mut forget_samples =
        tx.prepare_cached("DELETE FROM samples WHERE node_id = ?1 AND t_ms < ?2")?;
    let mut forget_slots =
        tx.prepare_cached("DELETE FROM sample_slots WHERE node_id = ?1 AND slot_ms < ?2")?;
    let mut gone = 0;
    for (node_id, len_s) in nodes {
        let len_s = len_s.unwrap_or(default_len_s);
        let len_ms = len_s * 1_000;
        let cut_ms = raw_before_ms.div_euclid(len_ms) * len_ms;
        fold.execute(params![node_id, cut_ms, len_s, len_ms])?;
        gone += forget_samples.execute(params![node_id, cut_ms])?;
        gone += forget_slots.execute(params![node_id, history_before_ms])?;
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use crate::store::testkit::{TestDb, on_both_backends};
    use tidemill_proto::{Report, ReportBody, Sample};

    use super::*;
    use crate::store::testkit::{hello, samples};

    const SLOT_MS: i64 = 900_000;

    /// One slot as stored.
    #[derive(Debug, Clone, PartialEq)]
    struct Slot {
        slot_ms: i64,
        len_s: i64,
        n: i64,
        /// Sum and maximum.
        cpu: (f64, f64),
        mem: (f64, f64),
        /// Count, sum and maximum.
        gpu: (i64, Option<f64>, Option<f64>),
        /// Received and sent bytes.
        net: (i64, i64),
    }

    fn slots(store: &Store, node_id: &str) -> Vec<Slot> {
        store
            .conn
            .prepare(
                "SELECT slot_ms, slot_len_s, n, cpu_sum, cpu_max, mem_sum, mem_max, gpu_n, gpu_sum,
                        gpu_max, net_rx, net_tx
                 FROM sample_slots WHERE node_id = ?1 ORDER BY slot_ms",
            )
            .unwrap()
            .query_map([node_id], |r| {
                Ok(Slot {
                    slot_ms: r.get(0)?,
                    len_s: r.get(1)?,
                    n: r.get(2)?,
                    cpu: (r.get(3)?, r.get(4)?),
                    mem: (r.get(5)?, r.get(6)?),
                    gpu: (r.get(7)?, r.get(8)?, r.get(9)?),
                    net: (r.get(10)?, r.get(11)?),
                })
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn raw_times(store: &Store, node_id: &str) -> Vec<i64> {
        store
            .conn
            .prepare("SELECT t_ms FROM samples WHERE node_id = ?1 ORDER BY t_ms")
            .unwrap()
            .query_map([node_id], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// (t_ms, cpu, mem, gpu, net_rx, net_tx): values exact in binary, so
    /// their sums are too.
    type Raw = (i64, f32, f32, Option<f32>, u64, u64);

    /// Two slots of samples, and one in a third slot, with and without a
    /// GPU reading.
    const RAW: [Raw; 6] = [
        (100_000, 10.5, 40.0, Some(50.0), 1_000, 10),
        (400_000, 30.25, 41.0, None, 2_000, 20),
        (899_999, 20.0, 42.5, Some(70.5), 3_000, 30),
        (900_000, 80.0, 60.0, None, 4_000, 40),
        (1_500_000, 60.5, 61.0, None, 5_000, 50),
        (1_800_000, 5.0, 62.0, Some(1.0), 6_000, 60),
    ];

    fn report(seq: u64, (t_ms, cpu, mem, gpu, rx, tx): Raw) -> Report {
        Report {
            seq,
            body: ReportBody::Samples(vec![Sample {
                t_ms,
                cpu_pct: cpu,
                per_core_pct: vec![],
                mem_pct: mem,
                net_rx_bytes: rx,
                net_tx_bytes: tx,
                gpu_pct: gpu,
            }]),
        }
    }

    /// A store with node n1 and the samples of [`RAW`], received at 2 000 s.
    fn filled(db: &TestDb) -> Store {
        let mut store = db.open();
        store.register(&hello("n1"), 0).unwrap();
        let reports: Vec<Report> = (1..).zip(RAW).map(|(seq, s)| report(seq, s)).collect();
        store.apply_reports("n1", &reports, 2_000_000).unwrap();
        store
    }

    /// The cutoffs for keeping raw samples from `raw_ms` on and nothing
    /// else pruned.
    fn raw_from(raw_ms: i64) -> PruneBefore {
        PruneBefore {
            raw_ms,
            history_ms: 0,
            jobs_ms: 0,
        }
    }

    /// The first two slots, by hand: slot 0 holds the samples at 100, 400
    /// and 899.999 s, slot 1 those at 900 and 1 500 s.
    fn by_hand() -> Vec<Slot> {
        vec![
            Slot {
                slot_ms: 0,
                len_s: 900,
                n: 3,
                cpu: (10.5 + 30.25 + 20.0, 30.25),
                mem: (40.0 + 41.0 + 42.5, 42.5),
                gpu: (2, Some(50.0 + 70.5), Some(70.5)),
                net: (6_000, 60),
            },
            Slot {
                slot_ms: SLOT_MS,
                len_s: 900,
                n: 2,
                cpu: (80.0 + 60.5, 80.0),
                mem: (60.0 + 61.0, 61.0),
                gpu: (0, None, None),
                net: (9_000, 90),
            },
        ]
    }

    on_both_backends! {
        fn samples_past_the_raw_window_become_their_slots_sums_counts_and_maxima(db) {
            let mut store = filled(&db);
            // The window starts inside the third slot: that slot stays raw whole.
            store.prune(raw_from(1_900_000)).unwrap();
            assert_eq!(slots(&store, "n1"), by_hand());
            assert_eq!(raw_times(&store, "n1"), vec![1_800_000]);
            // The per-slot mean is the mean of the raw samples in the slot as the
            // forecaster numbers slots (t_ms / slot length).
            let slot0 = &slots(&store, "n1")[0];
            let raw_mean = RAW
                .iter()
                .filter(|s| s.0.div_euclid(SLOT_MS) == 0)
                .map(|s| f64::from(s.1))
                .sum::<f64>()
                / 3.0;
            assert_eq!(slot0.cpu.0 / slot0.n as f64, raw_mean);
        }
    }

    on_both_backends! {
        fn slots_follow_the_slot_length_of_the_nodes_latest_forecast(db) {
            let mut store = filled(&db);
            let mut f = crate::world::tests::forecast(&[Some(10.0)]);
            f.slot_len_s = 300;
            let forecast = Report {
                seq: 7,
                body: ReportBody::Forecast(Box::new(f)),
            };
            store.apply_reports("n1", &[forecast], 1_000_000).unwrap();
            store.prune(raw_from(900_000)).unwrap();
            let got: Vec<(i64, i64, i64)> = slots(&store, "n1")
                .into_iter()
                .map(|s| (s.slot_ms, s.len_s, s.n))
                .collect();
            assert_eq!(got, vec![(0, 300, 1), (300_000, 300, 1), (600_000, 300, 1)]);
        }
    }

    on_both_backends! {
        fn pruning_again_changes_nothing_and_a_late_sample_joins_its_slot(db) {
            let mut store = filled(&db);
            store.prune(raw_from(1_900_000)).unwrap();
            assert_eq!(
                store.prune(raw_from(1_900_000)).unwrap(),
                0,
                "nothing left to go"
            );
            assert_eq!(slots(&store, "n1"), by_hand(), "nothing counted twice");
            // An edge that was away sends samples of slots 0 and 1 late, the
            // second with the first GPU reading of its slot.
            let late = [
                report(7, (500_000, 90.0, 10.0, Some(2.0), 7, 1)),
                report(8, (1_000_000, 1.0, 1.0, Some(3.0), 0, 0)),
            ];
            store.apply_reports("n1", &late, 2_100_000).unwrap();
            store.prune(raw_from(1_900_000)).unwrap();
            let mut want = by_hand();
            let s = &mut want[0];
            (s.n, s.cpu, s.mem.0) = (4, (s.cpu.0 + 90.0, 90.0), s.mem.0 + 10.0);
            (s.gpu, s.net) = ((3, Some(122.5), Some(70.5)), (6_007, 61));
            let s = &mut want[1];
            (s.n, s.cpu.0, s.mem.0, s.gpu) =
                (3, s.cpu.0 + 1.0, s.mem.0 + 1.0, (1, Some(3.0), Some(3.0)));
            assert_eq!(slots(&store, "n1"), want);
        }
    }

    #[test]
    fn a_prune_that_fails_midway_loses_and_counts_nothing() {
        let db = TestDb::sqlite();
        let mut store = filled(&db);
        // The slots are written, then deleting the samples fails: a crash
        // between the two.
        store
            .conn
            .execute_batch(
                "CREATE TEMP TRIGGER crash BEFORE DELETE ON samples
                 BEGIN SELECT RAISE(ABORT, 'crash'); END;",
            )
            .unwrap();
        assert!(store.prune(raw_from(1_900_000)).is_err());
        assert_eq!(slots(&store, "n1"), vec![], "no slot written");
        assert_eq!(raw_times(&store, "n1").len(), RAW.len(), "no sample lost");
        store.conn.execute_batch("DROP TRIGGER crash").unwrap();
        store.prune(raw_from(1_900_000)).unwrap();
        assert_eq!(slots(&store, "n1"), by_hand());
    }

    on_both_backends! {
        fn slots_ledger_entries_and_events_go_at_their_own_cutoffs(db) {
            let mut store = db.open();
            store.register(&hello("n1"), 0).unwrap();
            // samples(seq, _) is taken at seq seconds; reports are received at `now`.
            store.apply_report("n1", &samples(1, 5.0), 1_000).unwrap();
            store
                .apply_report("n1", &samples(2, 6.0), 2 * SLOT_MS)
                .unwrap();
            store.prune(raw_from(SLOT_MS)).unwrap();
            assert_eq!(store.report_seqs("n1").unwrap(), vec![2], "ledger");
            assert_eq!(slots(&store, "n1").len(), 1);
            let events = |store: &Store| -> i64 {
                store
                    .conn
                    .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
                    .unwrap()
            };
            assert_eq!(events(&store), 1, "the registration, within retention");
            // Past retention, the slot and the registration event go too.
            let gone = store
                .prune(PruneBefore {
                    raw_ms: SLOT_MS,
                    history_ms: 1,
                    jobs_ms: 0,
                })
                .unwrap();
            assert_eq!((gone, slots(&store, "n1").len(), events(&store)), (2, 0, 0));
            let node = &store.nodes().unwrap()[0];
            assert_eq!(
                (node.last_seq, node.cpu_util),
                (2, Some(6.0)),
                "the node's state is kept"
            );
        }
    }

    on_both_backends! {
        fn prune_forgets_jobs_that_ended_long_enough_ago_and_only_those(db) {
            let mut store = db.open();
            let ended = store.submit(&crate::store::testkit::spec(), 1_000).unwrap();
            store.request_cancel(ended, 2_000).unwrap();
            let waiting = store.submit(&crate::store::testkit::spec(), 1_000).unwrap();
            let recent = store.submit(&crate::store::testkit::spec(), 1_000).unwrap();
            store.request_cancel(recent, 9_000).unwrap();
            store
                .prune(PruneBefore {
                    raw_ms: 0,
                    history_ms: 0,
                    jobs_ms: 5_000,
                })
                .unwrap();
            assert!(
                store.job(ended).unwrap().is_none(),
                "ended at 2 s, before 5 s"
            );
            assert!(store.job(waiting).unwrap().is_some(), "a queued job stays");
            assert!(store.job(recent).unwrap().is_some(), "ended at 9 s");
        }
    }
}
