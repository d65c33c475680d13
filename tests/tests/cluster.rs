//! A coordinator and three edges on loopback: registration, a failing job, and
//! a coordinator crash that must lose nothing.

use std::time::Instant;

mod support;

use support::{Coordinator, PATIENCE, host_cores_and_memory, start_edge, write_trace};

const NODES: [&str; 3] = ["host", "r1", "r2"];

fn online_ids(coord: &Coordinator) -> Vec<String> {
    coord
        .nodes()
        .iter()
        .filter(|n| n["online"] == true)
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

/// Starts the three edges: `host` samples this machine, the others replay `trace`.
fn start_edges(
    coord: &Coordinator,
    dir: &std::path::Path,
    trace: &std::path::Path,
) -> Vec<support::Proc> {
    NODES
        .iter()
        .map(|n| start_edge(coord, dir, n, (*n != "host").then_some(trace)))
        .collect()
}

#[test]
fn three_edges_register_and_a_failing_job_is_reported() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_trace(dir.path(), &["r1", "r2"]);
    let started = Instant::now();
    let _edges = start_edges(&coord, dir.path(), &trace);
    cloud.wait_for("edge connected", 3, PATIENCE);
    cloud.wait_until("a sample from each node", 3, PATIENCE, |l| {
        l.contains("report stored") && l.contains("seq=1 ")
    });
    let up = started.elapsed();
    println!(
        "3 edges online and reporting {:.2} s after they started",
        up.as_secs_f64()
    );

    let (cores, mem) = host_cores_and_memory();
    let nodes = coord.nodes();
    assert_eq!(nodes.len(), 3, "{nodes:#?}");
    for n in &nodes {
        assert_eq!(n["online"], true, "{n}");
        assert_eq!(n["cpu_cores"].as_u64(), Some(cores), "{n}");
        assert_eq!(n["mem_bytes"].as_u64(), Some(mem), "{n}");
        assert!(n["last_seq"].as_u64().unwrap() >= 1, "{n}");
        assert!(n["cpu_util"].as_f64().is_some(), "{n}");
    }

    let id = coord.submit(dir.path(), "fails", &["sh", "-c", "echo hi; exit 3"]);
    cloud.wait_for(&format!("job_id={id} state=failed"), 1, PATIENCE);
    let job = coord.job(id);
    assert_eq!(job["state"], "failed", "{job}");
    assert_eq!(job["exit_code"], 3, "{job}");
    assert_eq!(job["output_tail"], serde_json::json!(["hi"]), "{job}");
    assert_eq!(job["reason"], "exited with code 3", "{job}");
    assert!(NODES.contains(&job["node"].as_str().unwrap()), "{job}");

    // Every task learns its rendezvous, as torchrun expects.
    let echo = "echo $RANK/$LOCAL_RANK/$WORLD_SIZE/$MASTER_ADDR/$MASTER_PORT";
    let id = coord.submit(dir.path(), "rendezvous", &["sh", "-c", echo]);
    cloud.wait_for(&format!("job_id={id} state=succeeded"), 1, PATIENCE);
    assert_eq!(
        coord.job(id)["output_tail"],
        serde_json::json!(["0/0/1/127.0.0.1/29500"])
    );
}

#[test]
fn a_coordinator_killed_mid_run_loses_no_report_and_no_job_state() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let mut cloud = coord.start();
    let trace = write_trace(dir.path(), &["r1", "r2"]);
    let _edges = start_edges(&coord, dir.path(), &trace);
    cloud.wait_for("edge connected", 3, PATIENCE);
    let id = coord.submit(
        dir.path(),
        "long",
        &["sh", "-c", "echo started; exec sleep 600"],
    );
    cloud.wait_for(&format!("job_id={id} state=running"), 1, PATIENCE);
    let before: Vec<(String, u64)> = coord
        .nodes()
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap().into(),
                n["last_seq"].as_u64().unwrap(),
            )
        })
        .collect();

    cloud.kill9();
    let restarted = Instant::now();
    let cloud = coord.start();
    cloud.wait_for("edge connected", 3, PATIENCE);
    let back = restarted.elapsed();
    println!(
        "all 3 edges reconnected {:.2} s after the coordinator restarted",
        back.as_secs_f64()
    );
    assert_eq!(online_ids(&coord), NODES, "every edge is online again");

    // Each node's sequence continues past where it was when the coordinator died.
    for (node, seq) in &before {
        cloud.wait_until(
            &format!("{node} reporting past seq {seq}"),
            1,
            PATIENCE,
            |l| {
                l.contains("report stored")
                    && l.contains(&format!("node_id={node} "))
                    && l.split("seq=")
                        .nth(1)
                        .and_then(|s| s.split(' ').next())
                        .and_then(|s| s.parse::<u64>().ok())
                        > Some(*seq)
            },
        );
    }
    for (node, last, seqs) in coord.stored_report_seqs() {
        let expected: Vec<u64> = (1..=last).collect();
        assert_eq!(
            seqs, expected,
            "node {node}: the stored reports must run 1..={last} without a gap"
        );
        let pre = before.iter().find(|(n, _)| *n == node).unwrap().1;
        assert!(
            last > pre,
            "node {node}: last_seq {last} did not continue past {pre}"
        );
    }

    let job = coord.job(id);
    assert_eq!(
        job["state"], "running",
        "the job's state survives the crash: {job}"
    );
    let on = job["node"].as_str().unwrap().to_string();
    let cancelled = coord.cli(&["jobs", "cancel", &id.to_string(), "--json"]);
    assert!(
        cancelled.contains("\"cancel_requested\": true"),
        "{cancelled}"
    );
    cloud.wait_for(&format!("job_id={id} state=cancelled"), 1, PATIENCE);
    let job = coord.job(id);
    assert_eq!(
        (job["state"].as_str(), job["node"].as_str()),
        (Some("cancelled"), Some(on.as_str())),
        "{job}"
    );
}
