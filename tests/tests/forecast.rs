//! An edge replaying a tidal trace forecasts its own tide; the coordinator
//! stores the forecast and serves it, and a restarted edge keeps the history
//! its forecast stands on.

mod support;

use std::path::Path;
use std::process::Command;

use support::{Coordinator, EDGE, PATIENCE, Proc, write_trace};

/// Trace seconds per wall second: an hour of trace per wall second.
const SPEED: f64 = 3600.0;

/// A coordinator and a replaying edge r1 on one accelerated clock (the same
/// speed and anchor, as the walkthrough runs them): an edge ahead of the
/// coordinator's clock by more than `[trust] report_skew_secs` has its
/// forecasts dropped. A sample every 5 trace minutes, a forecast every trace
/// hour.
struct Rig {
    dir: tempfile::TempDir,
    coord: Coordinator,
    cloud: Proc,
    anchor: i64,
}

impl Rig {
    fn new() -> Rig {
        let dir = support::tempdir();
        let coord = Coordinator::new(dir.path());
        let anchor = support::cluster::now_ms();
        let cloud = coord.start_with(&[
            ("speed = 1.0", &format!("speed = {SPEED}")),
            (
                "# anchor_ms = 1767225600000",
                &format!("anchor_ms = {anchor}"),
            ),
        ]);
        Rig {
            dir,
            coord,
            cloud,
            anchor,
        }
    }

    fn edge(&self) -> Proc {
        let dir: &Path = self.dir.path();
        let trace = dir.join("trace.csv");
        if !trace.exists() {
            assert_eq!(write_trace(dir, &["r1"]), trace);
        }
        let config = dir.join("edge.toml");
        let toml = String::from_utf8(
            Command::new(EDGE)
                .arg("print-default-config")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .replace(
            "forecast_refresh_secs = 900.0",
            "forecast_refresh_secs = 3600.0",
        );
        std::fs::write(&config, toml).unwrap();
        let mut cmd = support::replaying_edge(&self.coord, &config, dir, "r1", &trace, "r1");
        cmd.args(["--sample-interval", "300", "--speed", &SPEED.to_string()])
            .args(["--clock-anchor", &self.anchor.to_string()]);
        Proc::spawn("r1", cmd)
    }

    /// Waits until `count` forecasts of r1 are stored in all.
    fn forecasts(&self, count: usize) {
        self.cloud
            .wait_until("forecasts stored from r1", count, PATIENCE, |l| {
                l.contains("forecast stored") && l.contains("node_id=r1 ")
            });
    }

    /// The hours of history r1's latest stored forecast stands on.
    fn observed_h(&self) -> f64 {
        let nodes = self.coord.nodes();
        let summary = &nodes.iter().find(|n| n["id"] == "r1").unwrap()["forecast"];
        summary["history"]["observed_h"]
            .as_f64()
            .unwrap_or_else(|| panic!("no history in {summary}"))
    }
}

#[test]
fn the_coordinator_serves_a_replaying_edges_forecast() {
    let rig = Rig::new();
    let coord = &rig.coord;
    let _edge = rig.edge();

    // Two forecasts: the first at start, the next after a trace hour of history.
    rig.forecasts(2);
    let forecast: serde_json::Value =
        serde_json::from_str(&coord.cli(&["forecast", "r1", "--json"])).unwrap();
    assert_eq!(forecast["method"], "tidemill", "{forecast}");
    assert_eq!(forecast["slot_len_s"], 900);
    let cpu = forecast["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "cpu")
        .expect("a CPU forecast");
    let slots = cpu["slots"].as_array().unwrap();
    assert_eq!(slots.len(), 192, "48 h of 15-minute slots");
    let known: Vec<&serde_json::Value> = slots.iter().filter(|s| !s.is_null()).collect();
    assert!(!known.is_empty(), "some slots are forecast: {cpu}");
    for q in known {
        let (p10, p50, p90) = (
            q["p10"].as_f64().unwrap(),
            q["p50"].as_f64().unwrap(),
            q["p90"].as_f64().unwrap(),
        );
        assert!(
            (0.0..=100.0).contains(&p10) && p10 <= p50 && p50 <= p90 && p90 <= 100.0,
            "{q}"
        );
    }

    let nodes = coord.nodes();
    let summary = &nodes.iter().find(|n| n["id"] == "r1").unwrap()["forecast"];
    let idle_hours = summary["idle_hours_next_24h"]
        .as_f64()
        .expect("a forecast summary in nodes");
    assert!((0.0..=24.0).contains(&idle_hours), "{summary}");
    assert!(summary["issued_at"].is_string(), "{summary}");
    // The forecast says how much history it stands on, and `nodes` and
    // `forecast` label it, with the next idle window and the idle hours.
    let history = &summary["history"];
    assert!(
        history["observed_h"].as_f64().is_some_and(|h| h > 0.0)
            && history["kept_days"].as_u64().is_some_and(|d| d > 0),
        "{summary}"
    );
    let table = coord.cli(&["nodes"]);
    let header = table.lines().next().unwrap();
    for column in ["NEXT IDLE (UTC), CONFIDENCE", "IDLE/24H", "FORECAST"] {
        assert!(header.contains(column), "{table}");
    }
    let row = table
        .lines()
        .find(|l| l.starts_with("r1 "))
        .expect("r1's row");
    assert!(
        row.contains("issued ") && row.contains(" h of ") && row.contains(" d"),
        "{row}"
    );
    let view = coord.cli(&["forecast", "r1"]);
    assert!(view.lines().next().unwrap().contains(" h of "), "{view}");

    let out = coord.cli_command(&["forecast", "ghost"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no node ghost"), "{err}");
    assert!(
        !rig.cloud
            .log()
            .iter()
            .any(|l| l.contains("dropped a report value")),
        "an edge on the coordinator's clock has nothing dropped"
    );
}

/// A replaying edge primes its forecaster with the trace's past days; after
/// a restart, with hours of its own samples journaled, it keeps that history
/// (the trace's days before its journal, then its journal) rather than
/// forecasting from its own few hours.
#[test]
fn a_restarted_replaying_edge_keeps_its_forecast_history() {
    let rig = Rig::new();
    let mut edge = rig.edge();
    rig.forecasts(2);
    let first = rig.observed_h();
    let kept_h = 14.0 * 24.0;
    assert!(first > 0.9 * kept_h, "primed with 14 days: {first} h");
    edge.terminate(PATIENCE);
    let stored = rig
        .cloud
        .log()
        .iter()
        .filter(|l| l.contains("forecast stored") && l.contains("node_id=r1 "))
        .count();

    let _edge = rig.edge();
    rig.forecasts(stored + 1);
    let after = rig.observed_h();
    assert!(
        after > 0.9 * kept_h,
        "after a restart the forecast still stands on 14 days, not on the journal's hours: {after} h"
    );
}
