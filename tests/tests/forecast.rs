//! An edge replaying a tidal trace forecasts its own tide; the coordinator
//! stores the forecast and serves it.

mod support;

use std::process::Command;

use support::{Coordinator, EDGE, PATIENCE, Proc, write_trace};

#[test]
fn the_coordinator_serves_a_replaying_edges_forecast() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_trace(dir.path(), &["r1"]);
    // An hour of trace per wall second, a sample every 5 trace minutes and a
    // forecast every trace hour.
    let config = dir.path().join("edge.toml");
    let mut toml = String::from_utf8(
        Command::new(EDGE)
            .arg("print-default-config")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    toml = toml.replace(
        "forecast_refresh_secs = 300.0",
        "forecast_refresh_secs = 3600.0",
    );
    std::fs::write(&config, toml).unwrap();
    let mut cmd = support::replaying_edge(&coord, &config, dir.path(), "r1", &trace, "r1");
    cmd.args(["--sample-interval", "300", "--speed", "3600"]);
    let _edge = Proc::spawn("r1", cmd);

    // Two forecasts: the first at start, the next after a trace hour of history.
    cloud.wait_until("two forecasts from r1", 2, PATIENCE, |l| {
        l.contains("forecast stored") && l.contains("node_id=r1 ")
    });
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
    assert_eq!(slots.len(), 96, "24 h of 15-minute slots");
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
}
