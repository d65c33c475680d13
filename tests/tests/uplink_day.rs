//! A simulated day of a real coordinator and four real edges probing one
//! another with the default settings, on a clock 1 440 times faster than the
//! wall (a day in a minute): the uplink of each edge, probes included, stays
//! at or under 0.5 kbit/s, and the link matrix still holds every link the
//! scheduler uses, each measured within the configured staleness.
//!
//! Each edge reaches the coordinator through its own relay
//! (`tidemill_sim::wan::relay`, 20 ms each way at 10 Mb/s, an LTE uplink),
//! which counts every UDP byte the edge sends it: reports, forecasts,
//! handshakes, acknowledgements, keep-alives and the coordinator-link probes.
//! Peer probes go from edge to edge directly; QUIC's own count of them, which
//! the edges report with their link samples and the coordinator keeps, adds
//! them. Sampling, forecasts, probe rounds and the probe budget run on the
//! accelerated clock; QUIC keep-alives stay on the wall clock, so the test
//! states their real-time share separately and checks the day with it too.
//!
//! `cargo test -p tidemill-tests --test uplink_day -- --nocapture` prints the
//! figures.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{Coordinator, EDGE, PATIENCE, Proc, write_trace};
use tidemill_sim::wan::relay::{Relay, Traffic};
use tidemill_sim::wan::scenario::{Impairment, PathSpec};

/// Simulated seconds per wall second: a day in 60 s.
const SPEED: f64 = 1440.0;

/// The acceptance bound: 0.5 kbit/s over a day, in bytes.
const DAY_BYTES: f64 = 500.0 * 86_400.0 / 8.0;

const NODES: [&str; 4] = ["e1", "e2", "e3", "e4"];

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// One relay per edge towards `upstream`, on a runtime of their own.
fn relays(upstream: SocketAddr) -> (tokio::runtime::Runtime, Vec<(SocketAddr, Traffic)>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lte = Impairment {
        delay_ms: 20.0,
        rate_mbps: Some(10.0),
        ..Impairment::default()
    };
    let relays = NODES
        .iter()
        .enumerate()
        .map(|(k, node)| {
            let spec = PathSpec {
                name: (*node).to_string(),
                listen: "127.0.0.1:0".parse().unwrap(),
                upstream,
                up: lte.clone(),
                down: lte.clone(),
                outage: Vec::new(),
                flap: Vec::new(),
            };
            let relay = rt
                .block_on(Relay::bind(spec, 31 + 2 * k as u64))
                .expect("bind a relay");
            let out = (relay.local_addr(), relay.traffic());
            rt.spawn(relay.run());
            out
        })
        .collect();
    (rt, relays)
}

/// Probe bytes `node` sent, from the coordinator's link table: to the
/// coordinator (which the relay saw too), and directly to its peers as
/// prober and as responder (which it did not).
fn probe_bytes_sent(data_dir: &Path, node: &str) -> (u64, u64) {
    let db = rusqlite::Connection::open_with_flags(
        data_dir.join(tidemill_cloud::store::DB_FILE),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the coordinator's database");
    db.query_row(
        "SELECT (SELECT COALESCE(SUM(probe_sent), 0) FROM links WHERE from_node = ?1 AND to_node = 'cloud'),
                (SELECT COALESCE(SUM(probe_sent), 0) FROM links WHERE from_node = ?1 AND to_node != 'cloud')
              + (SELECT COALESCE(SUM(probe_received), 0) FROM links WHERE to_node = ?1)",
        [node],
        |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)),
    )
    .unwrap()
}

/// A default config value, read from the printed defaults.
fn default_value(program: &str, key: &str) -> f64 {
    let out = Command::new(program)
        .arg("print-default-config")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in the defaults"))
        .parse()
        .unwrap()
}

#[test]
fn a_day_of_probing_keeps_each_edge_under_half_a_kilobit_per_second() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let anchor = now_ms();
    let cloud = coord.start_with(&[
        ("speed = 1.0", &format!("speed = {SPEED}")),
        (
            "# anchor_ms = 1767225600000",
            &format!("anchor_ms = {anchor}"),
        ),
    ]);
    let tide_now = || anchor + ((now_ms() - anchor) as f64 * SPEED) as i64;
    let (_rt, relays) = relays(coord.quic);
    let trace = write_trace(dir.path(), &NODES);
    // The default config, untouched: what a metered edge would run.
    let config = dir.path().join("edge.toml");
    let defaults = Command::new(EDGE)
        .arg("print-default-config")
        .output()
        .unwrap();
    std::fs::write(&config, defaults.stdout).unwrap();
    let started = Instant::now();
    let edges: Vec<Proc> = NODES
        .iter()
        .zip(&relays)
        .map(|(node, (via, _))| {
            let mut cmd = Command::new(EDGE);
            cmd.arg("run")
                .arg("--config")
                .arg(&config)
                .args(["--coordinator", &via.to_string(), "--node-id", node])
                .arg("--token")
                .arg(coord.token())
                .arg("--data-dir")
                .arg(dir.path().join(node))
                .arg("--replay")
                .arg(&trace)
                .args(["--replay-node", node])
                .args(["--speed", &SPEED.to_string()])
                .args(["--clock-anchor", &anchor.to_string()])
                .env("RUST_LOG", "info");
            Proc::spawn(node, cmd)
        })
        .collect();
    cloud.wait_for("edge connected", NODES.len(), PATIENCE);

    // The measured day: a simulated day from the edges' start, cold starts
    // (joins, first probes of every link) included. Waiting it out is the
    // experiment, not synchronisation.
    let day = Duration::from_secs_f64(86_400.0 / SPEED);
    std::thread::sleep(day.saturating_sub(started.elapsed()));
    // Everything is read at this moment: the edges keep running meanwhile.
    let wall = started.elapsed();
    let days = wall.as_secs_f64() * SPEED / 86_400.0;
    let sent: Vec<(u64, Option<u64>, (u64, u64))> = NODES
        .iter()
        .zip(&relays)
        .map(|(node, (_, traffic))| {
            let probes = probe_bytes_sent(&coord.data_dir, node);
            (traffic.up().bytes, traffic.smallest_up(), probes)
        })
        .collect();
    let links: Vec<serde_json::Value> =
        serde_json::from_str(&coord.cli(&["links", "--json"])).unwrap();
    let measured_at = tide_now();

    // Keep-alives follow the wall clock: in a real day the edge is quiet
    // between its 10 s reports and sends a PING after keep_alive_secs of
    // quiet, and acknowledges the coordinator's own PING: about two of the
    // smallest datagrams per sample interval.
    let sample_interval = default_value(EDGE, "sample_interval_secs");
    let keep_alive = default_value(EDGE, "keep_alive_secs");
    let quiet_gaps = 86_400.0 / sample_interval.max(keep_alive);
    println!(
        "{:<4} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>9}",
        "edge",
        "relay B/day",
        "cloud probe",
        "peer probe",
        "other",
        "keep-alive",
        "total B/day",
        "kbit/s"
    );
    for (node, (up, smallest, (cloud_probes, peer_probes))) in NODES.iter().zip(sent) {
        let (cloud_probes, peer_probes) = (cloud_probes as f64 / days, peer_probes as f64 / days);
        let relayed = up as f64 / days;
        let keep_alives = 2.0 * quiet_gaps * smallest.unwrap_or(0) as f64;
        let measured = relayed + peer_probes;
        let total = measured + keep_alives;
        println!(
            "{node:<4} {relayed:>12.0} {cloud_probes:>12.0} {peer_probes:>12.0} {:>12.0} {keep_alives:>12.0} {total:>12.0} {:>9.3}",
            relayed - cloud_probes,
            total * 8.0 / 86_400.0 / 1000.0
        );
        assert!(
            measured <= DAY_BYTES,
            "{node}: {measured:.0} B per simulated day measured, over {DAY_BYTES} (0.5 kbit/s)"
        );
        assert!(
            total <= DAY_BYTES,
            "{node}: {total:.0} B per day with real-time keep-alives, over {DAY_BYTES}"
        );
    }
    println!(
        "over {days:.3} simulated days in {:.1} s of wall time; relay: every UDP byte the edge sent the \
         coordinator (reports, forecasts, handshakes, acks, coordinator probes); peer probes: QUIC's \
         count, prober and responder; keep-alive: the real-time share the accelerated run cannot show \
         (2 x {quiet_gaps:.0} of the smallest datagram a day)",
        wall.as_secs_f64()
    );

    // Every link the scheduler uses: each edge's to the coordinator, and
    // each pair of edges (with four edges and three peers each, all six),
    // measured from either end within the staleness.
    let stale_ms = default_value(support::CLOUD, "link_stale_secs") * 1000.0;
    let age_ms = |from: &str, to: &str| -> Option<f64> {
        let l = links.iter().find(|l| l["from"] == from && l["to"] == to)?;
        let at = chrono::DateTime::parse_from_rfc3339(l["measured_at"].as_str().unwrap())
            .unwrap()
            .timestamp_millis();
        Some((measured_at - at) as f64)
    };
    for node in NODES {
        let age = age_ms(node, "cloud")
            .unwrap_or_else(|| panic!("no {node} -> cloud link in {links:#?}"));
        println!("{node} -> cloud: age {:.1} h", age / 3.6e6);
        assert!(age < stale_ms, "{node} -> cloud is stale: {age} ms");
    }
    for (i, a) in NODES.iter().enumerate() {
        for b in &NODES[i + 1..] {
            let age = [age_ms(a, b), age_ms(b, a)]
                .into_iter()
                .flatten()
                .reduce(f64::min)
                .unwrap_or_else(|| panic!("no {a} - {b} link in {links:#?}"));
            println!("{a} - {b}: age {:.1} h", age / 3.6e6);
            assert!(age < stale_ms, "{a} - {b} is stale: {age} ms");
        }
    }
    let spent = edges
        .iter()
        .flat_map(|e| e.log())
        .filter(|l| l.contains("daily probe budget is spent"))
        .count();
    println!("edges that spent their daily probe budget: {spent}");
}
