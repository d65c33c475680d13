//! An operator's lifecycle without lost work: an edge stopped by SIGTERM
//! (systemd, an upgrade) yields its jobs instead of cancelling them and is
//! offline at once; a drained node hands its jobs on with their checkpoints
//! and takes no new ones; a restarted coordinator lets its edges reconnect
//! before it calls any of them offline.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::cluster::{
    Cluster, assert_met_deadline, edge_command, job, resumed_at, write_idle_trace,
};
use support::{Coordinator, PATIENCE, Proc, start_edge};

/// How soon after its SIGTERM a stopped edge must be offline.
const OFFLINE_WITHIN: Duration = Duration::from_secs(2);

/// Stops edge `node` with SIGTERM and asserts that the coordinator (`cloud`)
/// has it offline within [`OFFLINE_WITHIN`].
fn stop_within_bound(cloud: &Proc, edge: &mut Proc, node: &str) {
    let stopped = Instant::now();
    edge.terminate(PATIENCE);
    cloud.wait_until("the stopped edge offline", 1, PATIENCE, |l| {
        l.contains("node offline: its edge stopped") && l.contains(&format!("node_id={node}"))
    });
    let offline = stopped.elapsed();
    eprintln!(
        "{node} offline {:.0} ms after its SIGTERM",
        offline.as_secs_f64() * 1e3
    );
    assert!(
        offline < OFFLINE_WITHIN,
        "{node} offline {offline:?} after its SIGTERM"
    );
}

/// Waits until job `id` runs and returns the node it runs on.
fn running_on(cluster: &Cluster, id: u64) -> String {
    let job_line = format!("job_id={id} ");
    cluster
        .cloud
        .wait_until("the job to run", 1, PATIENCE, |l| {
            l.contains(&job_line) && l.contains("state=running")
        });
    cluster.coord.job(id)["node"].as_str().unwrap().to_string()
}

/// Waits until `node` has reported `n` more samples: the job there trains on.
fn let_it_train(cluster: &Cluster, node: &str, n: usize) {
    let from = |l: &str| l.contains(&format!("node_id={node} ")) && l.contains("kind=samples");
    let seen = cluster.cloud.log().iter().filter(|l| from(l)).count();
    cluster
        .cloud
        .wait_until("training on the node", seen + n, PATIENCE, from);
}

/// Asserts that job `id` ended as it should after a move: succeeded, resumed
/// from a checkpoint part-way, by its deadline, never cancelled.
fn assert_resumed_and_met(cluster: &Cluster, id: u64, iterations: u32) {
    let (job, log) = cluster.wait_until_succeeded(id);
    let tail = job["output_tail"].to_string();
    assert!(
        (1..iterations).contains(&resumed_at(&tail)),
        "resumed part-way: {tail}"
    );
    assert!(
        tail.contains(&format!("trained {iterations} iterations")),
        "{tail}"
    );
    assert_met_deadline(&job);
    assert!(
        !log.iter().any(|l| l.contains("state=cancelled")),
        "the job was never cancelled"
    );
}

#[test]
fn an_edge_stopped_by_sigterm_yields_its_job_which_resumes_and_meets_its_deadline() {
    let dir = support::tempdir();
    let names = ["a", "b"];
    let trace = write_idle_trace(dir.path(), &names);
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let mut cluster = Cluster::start(dir.path(), &trace, &nodes, &[], &names, "", None);
    // 24 iterations: 2.2 h planned, by an 8 h deadline.
    let id = cluster.submit(dir.path(), &job("upgraded", 24, 8.0, "slo", "reject"));
    let first = running_on(&cluster, id);
    let_it_train(&cluster, &first, 6);

    let at = cluster.nodes.iter().position(|(n, _)| *n == first).unwrap();
    stop_within_bound(&cluster.cloud, &mut cluster.nodes[at].1, &first);
    let edge_log = cluster.nodes[at].1.log().join("\n");
    assert!(
        edge_log.contains("running tasks checkpoint and yield"),
        "{edge_log}"
    );
    let events = cluster.coord.job_events(id);
    assert!(
        events.iter().any(|e| e
            == &format!(
                "{first} yielded the task: its edge daemon is stopping; waiting to resume from the checkpoint"
            )),
        "{events:#?}"
    );

    // The box comes back, as after an upgrade.
    let cmd = edge_command(
        &cluster.coord,
        dir.path(),
        &trace,
        (&first, &first),
        cluster.anchor,
    );
    cluster.nodes[at].1 = Proc::spawn(&first, cmd);
    assert_resumed_and_met(&cluster, id, 24);
    cluster
        .cloud
        .wait_until("the edge back online", 2, PATIENCE, |l| {
            l.contains("edge connected") && l.contains(&format!("node_id={first} "))
        });
}

#[test]
fn a_drained_node_hands_its_job_on_with_the_checkpoint_and_takes_no_new_one() {
    let dir = support::tempdir();
    let names = ["a", "b"];
    let trace = write_idle_trace(dir.path(), &names);
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let cluster = Cluster::start(dir.path(), &trace, &nodes, &[], &names, "", None);
    let id = cluster.submit(dir.path(), &job("moved", 24, 8.0, "slo", "reject"));
    let first = running_on(&cluster, id);
    assert_headline(&cluster, id, &format!("running on {first} since"));
    let_it_train(&cluster, &first, 6);

    let said = cluster.coord.cli(&["nodes", "drain", &first]);
    assert!(
        said.contains(&format!("node {first} drained")) && said.contains(&id.to_string()),
        "{said}"
    );
    let listed = cluster.coord.nodes();
    let drained = listed.iter().find(|n| n["id"] == first.as_str()).unwrap();
    assert_eq!(drained["drained"], true, "{drained}");

    // A job submitted now goes elsewhere.
    let other = cluster.submit(dir.path(), &job("fresh", 6, 8.0, "slo", "reject"));
    cluster.wait_until_ended(other);
    let fresh = cluster.coord.job(other);
    assert_eq!(fresh["state"], "succeeded", "{fresh:#}");
    assert_ne!(fresh["node"].as_str(), Some(first.as_str()), "{fresh:#}");

    assert_resumed_and_met(&cluster, id, 24);
    let moved = cluster.coord.job(id);
    assert_ne!(moved["node"].as_str(), Some(first.as_str()), "{moved:#}");
    // Its last start, on the node it moved to, is after its first.
    let time = |k: &str| chrono::DateTime::parse_from_rfc3339(moved[k].as_str().unwrap()).unwrap();
    assert!(time("last_started_at") > time("started_at"), "{moved:#}");
    assert_headline(&cluster, id, "succeeded at ");

    let said = cluster.coord.cli(&["nodes", "uncordon", &first]);
    assert!(said.contains("uncordoned"), "{said}");
    let listed = cluster.coord.nodes();
    let back = listed.iter().find(|n| n["id"] == first.as_str()).unwrap();
    assert_eq!(back["drained"], false, "{back}");
}

/// Checks that `jobs show` leads with a plain sentence that starts with
/// `starts`, with no Rust `None`, negative zero or admission terms in it.
fn assert_headline(cluster: &Cluster, id: u64, starts: &str) {
    let shown = cluster.coord.cli(&["jobs", "show", &id.to_string()]);
    let first = shown.lines().next().unwrap_or_default();
    assert!(first.starts_with(starts), "{shown}");
    for jargon in ["None", "-0.00", "admission", "promise_lead_h"] {
        assert!(!first.contains(jargon), "{jargon} in: {first}");
    }
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -s {signal} {pid}");
}

#[test]
fn a_restarted_coordinator_waits_for_its_edges_before_calling_them_offline() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    // No grace after a disconnect: without the restart's grace, every edge
    // not back by the first round would be offline.
    let config = [
        ("offline_after_secs = 20", "offline_after_secs = 0"),
        ("restart_grace_secs = 120", "restart_grace_secs = 5"),
        ("round_interval_secs = 2", "round_interval_secs = 0.2"),
    ];
    let mut cloud = coord.start_with(&config);
    let edges: Vec<Proc> = ["back1", "back2", "gone"]
        .iter()
        .map(|n| start_edge(&coord, dir.path(), n, None))
        .collect();
    cloud.wait_for("edge connected", 3, PATIENCE);

    // The edges are frozen while the coordinator restarts, so none can
    // reconnect before it has run its first rounds.
    for e in &edges {
        signal(e.pid(), "STOP");
    }
    cloud.terminate(PATIENCE);
    let cloud = coord.start_with(&config);
    for e in &edges[..2] {
        signal(e.pid(), "CONT");
    }
    // The one that never returns goes offline once the grace is over: the
    // grace is a delay, not immunity.
    cloud.wait_until("the missing edge offline", 1, PATIENCE, |l| {
        l.contains("node offline") && l.contains("node_id=gone")
    });
    cloud.wait_for("edge connected", 2, PATIENCE);
    let log = cloud.log();
    let offline: Vec<&String> = log.iter().filter(|l| l.contains("node offline")).collect();
    assert_eq!(
        offline.len(),
        1,
        "only the missing edge went offline: {offline:#?}"
    );
    let nodes = coord.nodes();
    for n in &nodes {
        assert_eq!(n["online"], n["id"] != "gone", "{n}");
    }
    signal(edges[2].pid(), "CONT");
}

#[test]
fn an_edge_stopped_at_any_moment_is_offline_within_two_seconds() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    // Stopped at once after it connects, and after it has settled in.
    for (round, settle) in [(1, 0), (2, 5)] {
        let node = format!("e{round}");
        let mut edge = start_edge(&coord, dir.path(), &node, None);
        cloud.wait_until("the edge connected", 1, PATIENCE, |l| {
            l.contains("edge connected") && l.contains(&format!("node_id={node} "))
        });
        if settle > 0 {
            let from =
                |l: &str| l.contains(&format!("node_id={node} ")) && l.contains("kind=samples");
            cloud.wait_until("a few reports", settle, PATIENCE, from);
        }
        stop_within_bound(&cloud, &mut edge, &node);
    }
}
