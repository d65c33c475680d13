//! A box's first hours: a fresh edge at a site whose peers have history
//! forecasts from their tide from its first report after the welcome and is
//! planned on at once; a fresh edge with no peers still takes best-effort
//! work while it is idle.

mod support;

use std::process::Command;

use support::cluster::{Cluster, JOB_PATIENCE, Net, edge_command, job, write_idle_trace};
use support::{Coordinator, PATIENCE, Proc};

/// The site the peers and the newcomer stand at.
const SITE: &str = "mec-1";

/// `cmd` standing at [`SITE`].
fn at_site(cmd: Command) -> Command {
    let mut cmd = cmd;
    cmd.env("TIDEMILL_SITE", SITE);
    cmd
}

/// `cmd` replaying `node`'s series with no primed history: a box installed
/// now, with nothing in its journal.
fn fresh(mut cmd: Command, trace: &std::path::Path, node: &str) -> Command {
    cmd.env(
        "TIDEMILL_REPLAY",
        format!(
            "{{ file = {:?}, node = {node:?}, prime_history = false }}",
            trace.display().to_string()
        ),
    );
    cmd
}

/// The scheduling rounds the coordinator has run, from its metrics.
fn rounds(coord: &Coordinator) -> u64 {
    coord
        .http_get("/metrics")
        .lines()
        .find_map(|l| l.strip_prefix("tidemill_round_duration_seconds_count "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_fresh_edge_at_a_site_with_history_forecasts_its_peers_tide_and_is_planned_on() {
    let dir = support::tempdir();
    let trace = write_idle_trace(dir.path(), &["p1", "p2", "n3"]);
    let net = Net {
        coord: Coordinator::new(dir.path()),
        edge: &|_, cmd| at_site(cmd),
        probe_interval_secs: 1,
    };
    let peers = [("p1", "p1"), ("p2", "p2")];
    let cluster = Cluster::start_on(
        dir.path(),
        &trace,
        &peers,
        &[],
        &["p1", "p2"],
        "",
        None,
        net,
    );
    let (coord, cloud) = (&cluster.coord, &cluster.cloud);

    let cmd = edge_command(coord, dir.path(), &trace, ("n3", "n3"), cluster.anchor);
    let mut newcomer = Proc::spawn("n3", fresh(at_site(cmd), &trace, "n3"));
    newcomer.wait_for("the coordinator sent its peers' tide", 1, PATIENCE);
    cloud.wait_until("a forecast of n3 from its peers' tide", 1, PATIENCE, |l| {
        l.contains("sending the peers' tide") && l.contains("node_id=n3 ")
    });
    // The forecast n3 reports after its welcome leans on the prior, and says
    // so: the first one went out with the first sample, before the welcome.
    let mut shown = serde_json::Value::Null;
    for stored in 1..=20 {
        cloud.wait_until("a forecast from n3", stored, PATIENCE, |l| {
            l.contains("forecast stored") && l.contains("node_id=n3 ")
        });
        shown = coord.node("n3");
        if !shown["forecast"]["prior"].is_null() {
            break;
        }
    }
    let prior = &shown["forecast"]["prior"];
    assert_eq!(prior["source"], "site", "{shown:#}");
    assert_eq!(prior["peers"], 2, "{shown:#}");
    assert!(prior["weight"].as_f64().unwrap() > 0.9, "{shown:#}");
    assert!(
        shown["forecast"]["history"]["observed_h"].as_f64().unwrap() < 2.0,
        "n3 is fresh: {shown:#}"
    );
    let rounds_at_forecast = rounds(coord);

    // A job only n3 may take, which needs a promise: on n3's own hours it
    // would earn none ([trust]), so it is planned on the peers' tide.
    coord.cli(&["nodes", "label", "n3", "fresh"]);
    let trainer = dir.path().join("trainer.sh");
    std::fs::write(&trainer, support::cluster::TRAINER).unwrap();
    let spec = job("newcomer", 4, 6.0, "slo", "reject");
    let file = support::cluster::write_job(dir.path(), &spec, &trainer, cluster.tide_now());
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("[work]", "requires = [\"fresh\"]\n[work]"),
    )
    .unwrap();
    let id = coord.submit_file(&file);
    cloud.wait_until("the job to start on n3", 1, JOB_PATIENCE, |l| {
        l.contains(&format!("job_id={id} ")) && l.contains("action=started on n3")
    });
    eprintln!(
        "rounds from n3's first forecast on its peers' tide to the start: at most {}",
        rounds(coord) - rounds_at_forecast
    );
    let (job, _) = cluster.wait_until_succeeded(id);
    assert_eq!(job["plan"]["verdict"]["verdict"], "guaranteed", "{job:#}");
    assert_eq!(job["node"], "n3", "{job:#}");
    newcomer.terminate(PATIENCE);
}

#[test]
fn a_fresh_edge_with_no_peers_takes_best_effort_work_while_idle() {
    let dir = support::tempdir();
    let trace = write_idle_trace(dir.path(), &["solo"]);
    let net = Net {
        coord: Coordinator::new(dir.path()),
        edge: &|node, cmd| fresh(cmd, &dir.path().join("trace.csv"), node),
        probe_interval_secs: 1,
    };
    let cluster = Cluster::start_on(
        dir.path(),
        &trace,
        &[("solo", "solo")],
        &[],
        &["solo"],
        "",
        None,
        net,
    );
    let shown = cluster.coord.node("solo");
    assert!(
        shown["forecast"]["prior"].is_null(),
        "no peer, no prior: {shown:#}"
    );
    assert!(
        shown["forecast"]["history"]["observed_h"].as_f64().unwrap() < 2.0,
        "solo is fresh: {shown:#}"
    );
    let id = cluster.submit(
        dir.path(),
        &job("spare", 4, 6.0, "best-effort", "best-effort"),
    );
    let (job, _) = cluster.wait_until_succeeded(id);
    assert_eq!(job["node"], "solo", "{job:#}");
    assert_eq!(job["plan"]["verdict"]["verdict"], "best-effort", "{job:#}");
}
