//! How many bytes the store takes per edge per day: a measurement, not a
//! check that runs by default (it writes 1 209 600 samples). Run it with
//!
//! ```sh
//! cargo test -p tidemill-cloud --lib store::growth -- --ignored --nocapture --test-threads 1
//! ```
//!
//! It fills a store through the same calls the coordinator makes (register,
//! apply_reports, the hourly prune) with edges reporting at `configs/edge.toml`'s
//! defaults, once keeping raw samples for the whole run (as before
//! `raw_sample_hours`) and once for 48 h, and prints the bytes in use per
//! edge at the end of each day, by table: on SQLite and on PostgreSQL (a
//! throwaway cluster; SKIPPED without one).

use std::collections::BTreeMap;

use tidemill_proto::{LinkSample, Report, ReportBody, Sample};

use super::db::Query;
use super::testkit::{TestDb, hello};
use super::{PruneBefore, Store};

/// Edges reporting.
const EDGES: usize = 10;
/// Days filled.
const DAYS: i64 = 7;
const HOUR_MS: i64 = 3_600_000;
/// `sample_interval_secs`: each sample its own report, as the edge journals them.
const SAMPLE_MS: i64 = 10_000;
/// `forecast_refresh_secs`.
const FORECAST_MS: i64 = 900_000;
/// cloud.toml's `retention_hours`.
const RETENTION_H: i64 = 336;
/// 2026-01-01, Unix ms.
const START_MS: i64 = 1_767_225_600_000;

/// Bytes in use at the end of one day: in all, and by table or index.
struct Day {
    total: i64,
    tables: BTreeMap<String, i64>,
}

/// A deterministic utilisation in 0-100, with a daily cycle and noise.
fn pct(t_ms: i64, edge: usize, salt: u64) -> f32 {
    let mut x = (t_ms as u64 / 1000) ^ ((edge as u64) << 40) ^ (salt << 56);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    let noise = (x % 1000) as f32 / 100.0;
    let day = (t_ms % 86_400_000) as f32 / 86_400_000.0;
    (40.0 + 35.0 * (day * std::f32::consts::TAU).sin() + noise).clamp(0.0, 100.0)
}

/// One edge's hour of reports from `from_ms`: a sample every 10 s, a
/// forecast every 15 min, and its link measurements (hourly probe rounds).
fn hour(edge: usize, from_ms: i64, seq: &mut u64) -> Vec<Report> {
    let mut out = Vec::new();
    let mut push = |body| {
        *seq += 1;
        out.push(Report { seq: *seq, body });
    };
    for t_ms in (from_ms..from_ms + HOUR_MS).step_by(SAMPLE_MS as usize) {
        push(ReportBody::Samples(vec![Sample {
            t_ms,
            cpu_pct: pct(t_ms, edge, 1),
            per_core_pct: vec![],
            mem_pct: pct(t_ms, edge, 2),
            net_rx_bytes: (pct(t_ms, edge, 3) * 10_000.0) as u64,
            net_tx_bytes: (pct(t_ms, edge, 4) * 1_000.0) as u64,
            gpu_pct: edge.is_multiple_of(2).then(|| pct(t_ms, edge, 5)),
        }]));
        if t_ms % FORECAST_MS == 0 {
            let slots: Vec<Option<f64>> = (0..192).map(|i| Some(f64::from(i % 50))).collect();
            let mut f = crate::world::tests::forecast(&slots);
            (f.issued_ms, f.start_ms) = (t_ms, t_ms + FORECAST_MS);
            push(ReportBody::Forecast(Box::new(f)));
        }
    }
    push(ReportBody::Links(vec![LinkSample {
        peer: "cloud".into(),
        t_ms: from_ms,
        rtt_ms: 41.5,
        bandwidth_bps: 1.25e6,
        loss: 0.001,
        probe_sent_bytes: 1_200,
        probe_received_bytes: 1_100,
    }]));
    out
}

/// Bytes in use, in all and by table: on PostgreSQL each table's size with
/// its indexes and TOAST after a `VACUUM FULL` (which returns the space
/// deleted rows held), on SQLite [`sqlite_in_use`].
fn in_use(store: &Store) -> Day {
    if store.conn.as_sqlite_ref().is_some() {
        return sqlite_in_use(store);
    }
    store.conn.execute_batch("VACUUM FULL").unwrap();
    let tables: BTreeMap<String, i64> = store
        .conn
        .prepare(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind = 'r'",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    Day {
        total: tables.values().sum(),
        tables,
    }
}

/// Pages in use (the file's pages less its free list, after a WAL
/// checkpoint), in bytes, in all and by table or index.
fn sqlite_in_use(store: &Store) -> Day {
    let c = store.conn.as_sqlite_ref().expect("a SQLite store");
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    let pragma = |name: &str| -> i64 { c.pragma_query_value(None, name, |r| r.get(0)).unwrap() };
    let total = (pragma("page_count") - pragma("freelist_count")) * pragma("page_size");
    let tables = c
        .prepare("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    Day { total, tables }
}

/// Fills a store for [`DAYS`] with raw samples kept `raw_h` hours and
/// returns the bytes in use at the end of each day.
fn fill(db: &TestDb, raw_h: i64) -> Vec<Day> {
    let mut store = db.open();
    let ids: Vec<String> = (1..=EDGES).map(|i| format!("edge-{i:05}")).collect();
    for id in &ids {
        store.register(&hello(id), START_MS).unwrap();
    }
    let mut seqs = [0; EDGES];
    let mut days = Vec::new();
    for h in 0..DAYS * 24 {
        let from_ms = START_MS + h * HOUR_MS;
        let now = from_ms + HOUR_MS;
        for (edge, id) in ids.iter().enumerate() {
            let reports = hour(edge, from_ms, &mut seqs[edge]);
            store.apply_reports(id, &reports, now).unwrap();
        }
        store
            .prune(PruneBefore {
                raw_ms: now - raw_h * HOUR_MS,
                history_ms: now - RETENTION_H * HOUR_MS,
                jobs_ms: now - 90 * 24 * HOUR_MS,
            })
            .unwrap();
        if (h + 1) % 24 == 0 {
            days.push(in_use(&store));
        }
    }
    days
}

fn report(name: &str, days: &[Day]) -> i64 {
    let per_edge = |b: i64| b / EDGES as i64;
    println!("{name}: bytes in use per edge at the end of each day");
    for (d, day) in days.iter().enumerate() {
        println!("  day {}: {}", d + 1, per_edge(day.total));
    }
    let (last, prev) = (&days[days.len() - 1], &days[days.len() - 2]);
    let growth = per_edge(last.total - prev.total);
    println!("  growth on the last day: {growth} bytes per edge; by table, at its end (growth):");
    for (table, bytes) in last.tables.iter().filter(|(_, b)| **b > 4096) {
        let grew = bytes - prev.tables.get(table).unwrap_or(&0);
        println!("    {table}: {} ({})", per_edge(*bytes), per_edge(grew));
    }
    growth
}

/// Measures on the databases `db` makes, one per fill.
fn before_and_after(backend: &str, db: impl Fn() -> TestDb) {
    let before = report(
        &format!("{backend}, raw samples kept 14 days (before)"),
        &fill(&db(), RETENTION_H),
    );
    let after = report(
        &format!("{backend}, raw samples kept 48 h (raw_sample_hours)"),
        &fill(&db(), 48),
    );
    assert!(
        after <= 100_000,
        "past the raw window the store grows {after} bytes per edge per day, over the 100 KB target"
    );
    assert!(after < before / 10, "{after} against {before}");
}

#[test]
#[ignore = "a measurement: about a minute; run with --ignored --nocapture"]
fn bytes_per_edge_per_day_before_and_after_downsampling_on_sqlite() {
    before_and_after("SQLite", TestDb::sqlite);
}

#[test]
#[ignore = "a measurement: a few minutes; run with --ignored --nocapture"]
fn bytes_per_edge_per_day_before_and_after_downsampling_on_postgres() {
    if TestDb::postgres().is_some() {
        before_and_after("PostgreSQL", || TestDb::postgres().unwrap());
    }
}
