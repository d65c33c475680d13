//! Attacks on the coordinator's QUIC side (issue 28, findings 4, 5 and 8)
//! against a real coordinator: unauthenticated connections with partial
//! 1 MiB frames, a joined edge opening 100 streams of 1 MiB, a report flood,
//! a copied credential, and a renewal storm. Each is refused, bounded or
//! detected. Measured figures are printed (run with --nocapture).

mod support;

use std::time::{Duration, Instant};

use support::rogue::{self, Rogue, modest_capabilities};
use support::{Coordinator, PATIENCE, Proc};
use tidemill_proto::{CloudMsg, EdgeMsg, Report, ReportBody, Sample};
use tidemill_runtime::identity::NodeKeyPair;
use tidemill_runtime::quic::{self, Timing};

const MB: f64 = 1024.0 * 1024.0;

/// The bound the issue sets on memory during and after the attack.
const RSS_BOUND: f64 = 64.0 * MB;

/// Resident memory of process `pid`, bytes (VmRSS in /proc/PID/status).
fn rss(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024.0
}

/// A counter's value in the coordinator's /metrics; NaN, which no assert
/// accepts, if it has no such family.
fn counter(coord: &Coordinator, family: &str) -> f64 {
    let page = coord.http_get("/metrics");
    page.lines()
        .find_map(|l| l.strip_prefix(family)?.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// A frame header declaring a 1 MiB payload, and `partial` bytes of it.
fn partial_frame(partial: usize) -> Vec<u8> {
    let mut frame = (tidemill_proto::MAX_FRAME_LEN as u32)
        .to_be_bytes()
        .to_vec();
    frame.resize(4 + partial, 7);
    frame
}

/// Writes `bytes` on a new stream of `conn` for at most `within`; whether a
/// stream was opened at all.
async fn send_partial(conn: &quinn::Connection, bytes: &[u8], within: Duration) -> bool {
    let Ok(Ok((mut send, _recv))) = tokio::time::timeout(within, conn.open_bi()).await else {
        return false;
    };
    let _ = tokio::time::timeout(within, send.write_all(bytes)).await;
    // The stream stays open, unfinished, while the connection lives.
    std::mem::forget(send);
    true
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn unauthenticated_connections_with_partial_megabyte_frames_leave_memory_bounded() {
    const CONNECTIONS: usize = 500;
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let pid = cloud.pid();
    let before = rss(pid);
    let rt = runtime();
    let (established, during, endpoint) = rt.block_on(async {
        // No certificate, and the server's is not what keeps anyone out:
        // ca.pem is public.
        let endpoint = quic::anonymous_client(&coord.ca(), Timing::default(), tidemill_proto::ALPN)
            .expect("a client endpoint");
        // All of a 1 MiB frame but its last byte.
        let frame = std::sync::Arc::new(partial_frame(tidemill_proto::MAX_FRAME_LEN - 1));
        let attempts: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let (endpoint, frame, addr) = (endpoint.clone(), frame.clone(), coord.quic);
                tokio::spawn(async move {
                    let connecting = endpoint.connect(addr, "localhost").ok()?;
                    let conn = tokio::time::timeout(Duration::from_secs(20), connecting)
                        .await
                        .ok()?
                        .ok()?;
                    send_partial(&conn, &frame, Duration::from_secs(15)).await;
                    Some(conn)
                })
            })
            .collect();
        let mut conns = Vec::new();
        for a in attempts {
            conns.extend(a.await.unwrap());
        }
        let during = rss(pid);
        let established = conns.len();
        drop(conns);
        endpoint.close(0u32.into(), b"done");
        (established, during, endpoint)
    });
    rt.block_on(async {
        let _ = tokio::time::timeout(PATIENCE, endpoint.wait_idle()).await;
    });
    // The spec's measured wait: memory 30 s after every connection closed.
    let closed = Instant::now();
    std::thread::sleep(Duration::from_secs(30));
    let after = rss(pid);
    let refused = counter(&coord, "tidemill_refused_admission_total");
    println!(
        "{CONNECTIONS} unauthenticated connections with partial 1 MiB frames: {established} got past the handshake, {refused} refused before it; coordinator RSS {:.1} MB before, {:.1} MB during, {:.1} MB {:.0} s after they closed",
        before / MB,
        during / MB,
        after / MB,
        closed.elapsed().as_secs_f64()
    );
    assert!(
        during - before < RSS_BOUND,
        "RSS grew {:.1} MB during the attack",
        (during - before) / MB
    );
    assert!(
        after - before < RSS_BOUND,
        "RSS stayed {:.1} MB above the baseline after the attack",
        (after - before) / MB
    );
    assert!(refused > 0.0, "the per-address cap refused none");
}

#[test]
fn a_joined_edge_cannot_open_a_hundred_megabyte_streams() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let pid = cloud.pid();
    let rt = runtime();
    let (opened, before, during) = rt.block_on(async {
        let rogue = Rogue::join(&coord, "greedy").await;
        let (conn, welcome) = rogue.hello(modest_capabilities()).await;
        assert!(matches!(welcome, CloudMsg::Welcome(_)), "{welcome:?}");
        let before = rss(pid);
        let frame = std::sync::Arc::new(partial_frame(tidemill_proto::MAX_FRAME_LEN - 1));
        // Every stream is tried at once, well within the stream timeout, so
        // none has been closed for its silence yet.
        let streams: Vec<_> = (0..100)
            .map(|_| {
                let (conn, frame) = (conn.clone(), frame.clone());
                tokio::spawn(
                    async move { send_partial(&conn, &frame, Duration::from_secs(4)).await },
                )
            })
            .collect();
        let mut opened = 0;
        for s in streams {
            opened += usize::from(s.await.unwrap());
        }
        let during = rss(pid);
        conn.close(0u32.into(), b"done");
        (opened, before, during)
    });
    println!(
        "a joined edge trying 100 streams of 1 MiB: {opened} opened; coordinator RSS {:.1} MB before, {:.1} MB during",
        before / MB,
        during / MB
    );
    assert!(
        opened <= 16,
        "{opened} streams opened at once, over [quic] max_streams_per_connection"
    );
    assert!(
        during - before < RSS_BOUND,
        "RSS grew {:.1} MB",
        (during - before) / MB
    );
}

/// A batch of `reports` sample reports from `seq` on, `samples` samples each.
fn flood_batch(seq: u64, reports: u64, samples: usize) -> Vec<Report> {
    let now = chrono::Utc::now().timestamp_millis();
    (seq..seq + reports)
        .map(|seq| Report {
            seq,
            body: ReportBody::Samples(
                (0..samples)
                    .map(|i| Sample {
                        t_ms: now - i as i64,
                        cpu_pct: 50.0,
                        per_core_pct: vec![50.0; 4],
                        mem_pct: 50.0,
                        net_rx_bytes: 1,
                        net_tx_bytes: 1,
                        gpu_pct: None,
                    })
                    .collect(),
            ),
        })
        .collect()
}

/// The count that `sql` selects from the coordinator's database, read-only.
fn count(coord: &Coordinator, sql: &str) -> u64 {
    let db = rusqlite::Connection::open_with_flags(
        coord.data_dir.join("tidemill.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the coordinator database");
    db.query_row(sql, [], |r| r.get::<_, i64>(0))
        .expect("count rows") as u64
}

/// Bytes of the coordinator's database and its WAL.
fn db_bytes(coord: &Coordinator) -> u64 {
    ["tidemill.db", "tidemill.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(coord.data_dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

#[test]
fn a_report_flood_is_held_to_the_nodes_hourly_budget() {
    const BUDGET: u64 = 1 << 20;
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start_with(&[(
        "report_bytes_per_hour = 8388608",
        "report_bytes_per_hour = 1048576",
    )]);
    let rt = runtime();
    let db_before = db_bytes(&coord);
    let hour = |ms: i64| ms.div_euclid(3_600_000);
    let started_ms = chrono::Utc::now().timestamp_millis();
    let (sent_bytes, acked_bytes, acked, refused, elapsed) = rt.block_on(async {
        let rogue = Rogue::join(&coord, "flood").await;
        let (conn, welcome) = rogue.hello(modest_capabilities()).await;
        assert!(matches!(welcome, CloudMsg::Welcome(_)), "{welcome:?}");
        let (mut seq, mut sent_bytes, mut acked_bytes, mut acked, mut refused) = (1, 0, 0, 0, 0);
        let start = Instant::now();
        // As fast as the coordinator answers, for a bounded time.
        while start.elapsed() < Duration::from_secs(6) {
            let msg = EdgeMsg::Reports(flood_batch(seq, 40, 100));
            let bytes = tidemill_proto::encode(&msg).unwrap().len() as u64;
            sent_bytes += bytes;
            seq += 40;
            match rogue::ask(&conn, &msg).await {
                CloudMsg::Ack { .. } => {
                    acked += 1;
                    acked_bytes += bytes;
                }
                CloudMsg::Error(e) => {
                    assert!(e.message.contains("report budget"), "{e:?}");
                    refused += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        (sent_bytes, acked_bytes, acked, refused, start.elapsed())
    });
    let hours = 1 + (hour(chrono::Utc::now().timestamp_millis()) - hour(started_ms)) as u64;
    let samples = count(&coord, "SELECT COUNT(*) FROM samples");
    let over = counter(&coord, "tidemill_reports_over_budget_total");
    println!(
        "a report flood for {:.1} s: {:.1} MB sent in {} batches, {acked} stored ({:.2} MB, budget {:.2} MB/h), {refused} refused; {samples} sample rows; database and WAL grew {:.1} MB; tidemill_reports_over_budget_total {over}",
        elapsed.as_secs_f64(),
        sent_bytes as f64 / MB,
        acked + refused,
        acked_bytes as f64 / MB,
        BUDGET as f64 / MB,
        db_bytes(&coord).saturating_sub(db_before) as f64 / MB,
    );
    assert!(
        acked_bytes <= hours * BUDGET,
        "{acked_bytes} bytes stored, over the budget"
    );
    assert!(
        refused > 0 && over >= refused as f64,
        "the excess was not refused and counted"
    );
    let logged = cloud
        .log()
        .iter()
        .filter(|l| l.contains("over its report budget") && l.contains("node_id=flood"))
        .count() as u64;
    assert!(
        (1..=hours).contains(&logged),
        "logged {logged} times, not once an hour"
    );
    // Each stored sample took at least 20 bytes of an accepted frame.
    assert!(
        samples * 20 <= hours * BUDGET,
        "{samples} sample rows stored"
    );
}

/// Lines of `log` that say `node` connected.
fn connected(log: &[String], node: &str) -> usize {
    log.iter()
        .filter(|l| l.contains("edge connected") && l.contains(&format!("node_id={node}")))
        .count()
}

#[test]
fn a_copied_credential_is_refused_while_the_first_connection_answers() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let rt = runtime();
    rt.block_on(async {
        let rogue = Rogue::join(&coord, "twin").await;
        let (first, welcome) = rogue.hello(modest_capabilities()).await;
        assert!(matches!(welcome, CloudMsg::Welcome(_)), "{welcome:?}");
        // The copy keeps coming back, as a second edge process would.
        for _ in 0..5 {
            let (_copy, answer) = rogue.hello(modest_capabilities()).await;
            match answer {
                CloudMsg::Error(e) => assert!(e.message.contains("connected already"), "{e:?}"),
                other => panic!("the copy was let in: {other:?}"),
            }
        }
        let still = rogue::ask(&first, &EdgeMsg::PeersRequest).await;
        assert!(matches!(still, CloudMsg::Peers(_)), "{still:?}");
        assert!(
            first.close_reason().is_none(),
            "the first connection was evicted"
        );
    });
    let log = cloud.log();
    println!(
        "a copied credential, 5 tries: {} connection(s) of the node let in, tidemill_refused_duplicates_total {}",
        connected(&log, "twin"),
        counter(&coord, "tidemill_refused_duplicates_total")
    );
    assert_eq!(connected(&log, "twin"), 1, "no ping-pong");
    assert_eq!(counter(&coord, "tidemill_refused_duplicates_total"), 5.0);
}

#[test]
fn an_edge_back_from_a_crash_replaces_its_dead_connection() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = support::write_trace(dir.path(), &["phoenix"]);
    let mut edge: Proc = support::start_edge(&coord, dir.path(), "phoenix", Some(&trace));
    cloud.wait_for("edge connected", 1, PATIENCE);
    edge.kill9();
    let _back = support::start_edge(&coord, dir.path(), "phoenix", Some(&trace));
    // Not locked out until the idle timeout: its dead connection is found
    // silent and replaced.
    cloud.wait_for("no longer answers; replacing it", 1, PATIENCE);
    cloud.wait_for("edge connected", 2, PATIENCE);
    assert_eq!(counter(&coord, "tidemill_refused_duplicates_total"), 0.0);
}

#[test]
fn a_renewal_storm_is_cut_off_and_a_node_holds_two_certificates() {
    const RENEWALS: usize = 25;
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start();
    let rt = runtime();
    let (granted, refused) = rt.block_on(async {
        let rogue = Rogue::join(&coord, "minter").await;
        let (conn, welcome) = rogue.hello(modest_capabilities()).await;
        assert!(matches!(welcome, CloudMsg::Welcome(_)), "{welcome:?}");
        let (mut granted, mut refused) = (0, 0);
        for _ in 0..RENEWALS {
            let key = NodeKeyPair::generate().unwrap();
            let renew = EdgeMsg::Renew {
                public_key: key.public_key(),
            };
            match rogue::ask(&conn, &renew).await {
                CloudMsg::Renewed(_) => granted += 1,
                CloudMsg::Error(e) => {
                    assert!(e.message.contains("renewals_per_hour"), "{e:?}");
                    refused += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        (granted, refused)
    });
    let valid = count(
        &coord,
        "SELECT COUNT(*) FROM node_certs WHERE node_id = 'minter' AND revoked_ms IS NULL",
    );
    println!(
        "{RENEWALS} renewals in a row: {granted} granted, {refused} refused; {valid} valid certificates; tidemill_refused_renewals_total {}",
        counter(&coord, "tidemill_refused_renewals_total")
    );
    assert_eq!(granted, 6, "[ingest] renewals_per_hour");
    assert_eq!(refused, RENEWALS - 6);
    assert!(valid <= 2, "{valid} valid certificates");
}
