//! A moved job keeps its progress with no shared storage: three edges, each
//! with its own checkpoint dir under its own data dir, replay tidal traces
//! on one accelerated clock; a job whose trainer writes a multi-megabyte
//! checkpoint each step is moved once by the tide coming in and once by a
//! drain, and each time resumes on the new node from the step its last
//! checkpoint recorded, its files brought there through the coordinator;
//! and an upload cut halfway by a dead WAN relay resumes and completes, a
//! chunk that rotted on the coordinator's disk meanwhile sent again.

mod support;

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::PATIENCE;
use support::cluster::{Cluster, Net, job};
use support::trainer::{self, started};
use tidemill_sim::wan::impair::PathSwitch;
use tidemill_sim::wan::relay::Relay;
use tidemill_sim::wan::scenario::{Impairment, PathSpec};

/// Iterations the job declares.
const ITERATIONS: u64 = 42;

/// Eight days of three edges. `ebb` is idle 0-3 h on the first day and 0-8 h
/// on the others, so its forecast (primed with the days before) expects 8 h
/// and the tide comes in early; `flood` and `spare` are busy until 2 h.
fn write_tides(dir: &Path) -> std::path::PathBuf {
    let mut csv = String::from("node,time_s,cpu,mem,gpu\n");
    for i in 0..8 * 288 {
        let hour = f64::from(i % 288) / 12.0;
        let ebb_until = if i < 288 { 3.0 } else { 8.0 };
        let ebb = if hour < ebb_until { 8.0 } else { 85.0 };
        let other = if hour < 2.0 { 85.0 } else { 8.0 };
        csv.push_str(&format!(
            "ebb,{t},{ebb},30,\nflood,{t},{other},30,\nspare,{t},{other},30,\n",
            t = i * 300
        ));
    }
    let path = dir.join("trace.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

/// Iterations the trainer counted itself, over every task on every node.
fn trained_in_total(dir: &Path, nodes: &[&str]) -> u64 {
    nodes
        .iter()
        .filter_map(|n| std::fs::read_dir(dir.join(n).join("tasks")).ok())
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("trained")).ok())
        .map(|n| n.trim().parse::<u64>().unwrap())
        .sum()
}

#[test]
fn a_job_moved_by_the_tide_and_by_a_drain_resumes_each_time_from_its_last_checkpoint() {
    let dir = support::tempdir();
    let trace = write_tides(dir.path());
    let names = ["ebb", "flood", "spare"];
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    // No shared checkpoint root: each edge keeps its own under its data dir.
    let own_dirs = |_: &str, mut cmd: std::process::Command| {
        cmd.env_remove("TIDEMILL_TASKS__CHECKPOINT_DIR");
        cmd
    };
    let net = Net {
        coord: support::Coordinator::new(dir.path()),
        edge: &own_dirs,
        probe_interval_secs: 1,
    };
    let cluster = Cluster::start_on(dir.path(), &trace, &nodes, &[], &names, "", None, net);
    trainer::write(dir.path(), 4 << 20);
    let id = cluster.submit(
        dir.path(),
        &job("carried", ITERATIONS as u32, 12.0, "slo", "reject"),
    );
    assert_eq!(started(&cluster, id, 1), "ebb");
    // The tide comes in on ebb at 3 h: the job moves.
    let second = started(&cluster, id, 2);
    assert_ne!(second, "ebb");
    // It trains a while there, then its node is drained.
    trainer::drain_after_training(&cluster, &second);
    let (job, log) = cluster.wait_until_succeeded(id);
    let third = job["node"].as_str().unwrap().to_string();
    assert!(
        ![second.as_str(), "ebb"].contains(&third.as_str()),
        "{job:#}"
    );
    assert!(
        log.iter().any(
            |l| l.contains("asked to checkpoint and stop") && l.contains("tide came in on ebb")
        ),
        "the first move was the tide's"
    );

    // Each leg: up from the node the job left, down to the one it went
    // to, carrying the same step, which the new task resumed from.
    let legs: Vec<(String, String, u64)> = job["checkpoint_transfers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert!(t["bytes"].as_u64().unwrap() > 4 << 20, "{t}");
            (
                t["from"].as_str().unwrap().to_string(),
                t["to"].as_str().unwrap().to_string(),
                t["step"].as_u64().unwrap(),
            )
        })
        .collect();
    let [(a, _, s1), (_, b, s1_down), (c, _, s2), (_, d, s2_down)] = &legs[..] else {
        panic!("two moves of two legs each: {legs:#?}")
    };
    assert_eq!(
        (a.as_str(), b, c, d),
        ("ebb", &second, &second, &third),
        "{legs:#?}"
    );
    assert_eq!((s1, s2), (s1_down, s2_down), "{legs:#?}");
    assert!(0 < *s1 && s1 < s2 && *s2 < ITERATIONS, "{legs:#?}");
    let events = cluster.coord.job_events(id);
    for step in [s1, s2] {
        let resumed = format!("resumed from the checkpoint of step {step}");
        assert!(events.iter().any(|e| e.contains(&resumed)), "{events:#?}");
    }
    let tail = job["output_tail"].to_string();
    assert!(
        tail.contains(&format!("resumed at {s2} on {third}")),
        "{tail}"
    );
    assert!(
        tail.contains(&format!("trained {ITERATIONS} iterations on {third}")),
        "{tail}"
    );

    // The trainer's own count: the moves cost at most a step each.
    let trained = trained_in_total(dir.path(), &names);
    assert!(
        (ITERATIONS..=ITERATIONS * 12 / 10).contains(&trained),
        "trained {trained} iterations for {ITERATIONS}"
    );
    let shown = cluster.coord.cli(&["jobs", "show", &id.to_string()]);
    assert!(
        shown.contains("checkpoint transfers:")
            && shown.contains(&format!("{second} → cloud: step {s2}")),
        "{shown}"
    );
}

/// `cmd` with the coordinator address it dials replaced by `via`, the
/// shared checkpoint root dropped (each edge keeps its own), and `env` set.
fn dialling(cmd: &Command, via: SocketAddr, env: &[(&str, &str)]) -> Command {
    let mut out = Command::new(cmd.get_program());
    let args: Vec<OsString> = cmd.get_args().map(OsString::from).collect();
    for (k, arg) in args.iter().enumerate() {
        if k > 0 && args[k - 1] == "--coordinator" {
            out.arg(via.to_string());
        } else {
            out.arg(arg);
        }
    }
    for (key, value) in cmd.get_envs() {
        match value {
            Some(v) if key != "TIDEMILL_TASKS__CHECKPOINT_DIR" => out.env(key, v),
            _ => out.env_remove(key),
        };
    }
    out.env_remove("TIDEMILL_TASKS__CHECKPOINT_DIR");
    for (key, value) in env {
        out.env(key, value);
    }
    out
}

/// Chunk files the coordinator holds of job `id`'s checkpoints.
fn held_chunks(data_dir: &Path, id: u64) -> Vec<std::path::PathBuf> {
    trainer::held_by_coordinator(data_dir, id)
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with('c') && !name.ends_with(".part")
        })
        .collect()
}

fn chunks_held(data_dir: &Path, id: u64) -> usize {
    held_chunks(data_dir, id).len()
}

/// Flips the bytes of one chunk the coordinator holds of job `id`, as a
/// disk might.
fn corrupt_a_held_chunk(data_dir: &Path, id: u64) {
    let chunk = held_chunks(data_dir, id)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "c0"))
        .expect("the coordinator holds the first chunk");
    let mut data = std::fs::read(&chunk).unwrap();
    for b in &mut data {
        *b ^= 0xFF;
    }
    std::fs::write(&chunk, &data).unwrap();
}

#[test]
fn an_upload_cut_halfway_by_a_dead_relay_resumes_and_completes() {
    let dir = support::tempdir();
    let coord = support::Coordinator::new(dir.path());
    // One relay per edge: 16 Mb/s, 5 ms each way.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut via = HashMap::new();
    let mut switches: HashMap<String, PathSwitch> = HashMap::new();
    for (k, name) in ["near", "far"].iter().enumerate() {
        let imp = Impairment {
            delay_ms: 5.0,
            rate_mbps: Some(16.0),
            ..Impairment::default()
        };
        let spec = PathSpec {
            name: (*name).to_string(),
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: coord.quic,
            up: imp.clone(),
            down: imp,
            outage: Vec::new(),
            flap: Vec::new(),
        };
        let relay = rt.block_on(Relay::bind(spec, 7 + k as u64)).unwrap();
        via.insert(name.to_string(), relay.local_addr());
        switches.insert(name.to_string(), relay.switch());
        rt.spawn(relay.run());
    }
    // The whole link for the transfer, so that it lasts seconds, not tens.
    let wrap = |node: &str, cmd: Command| {
        dialling(
            &cmd,
            via[node],
            &[("TIDEMILL_CHECKPOINT__LINK_SHARE", "1.0")],
        )
    };
    let net = Net {
        coord,
        edge: &wrap,
        probe_interval_secs: 1,
    };
    // 16 MiB a checkpoint: 32 chunks, 8 s at 16 Mb/s.
    let (cluster, id, first) = trainer::drained_from_one_of_two(dir.path(), net, 16 << 20, "cut");

    // Halfway through the upload, the relay dies for longer than the
    // connection's idle timeout (4 s), then comes back. Before it: the
    // drain, the task's yield and half the upload through the relay.
    let deadline = Instant::now() + 2 * PATIENCE;
    while chunks_held(&cluster.coord.data_dir, id) < 16 {
        assert!(
            Instant::now() < deadline,
            "no half of the checkpoint arrived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    switches[&first].cut();
    let edge = &cluster.nodes.iter().find(|(n, _)| *n == first).unwrap().1;
    edge.wait_until("the link lost mid-transfer", 1, PATIENCE, |l| {
        l.contains("the link went during a checkpoint upload")
    });
    let held = chunks_held(&cluster.coord.data_dir, id);
    assert!(held < 33, "the cut came before the end: {held} chunks held");
    // While the link is down, a chunk the coordinator holds rots on its
    // disk: the commit finds it no longer matches its hash, and the edge
    // sends it again.
    corrupt_a_held_chunk(&cluster.coord.data_dir, id);
    switches[&first].heal();
    edge.wait_until("the upload resumed", 1, PATIENCE, |l| {
        l.contains("the coordinator holds part of the checkpoint already; sending the rest")
    });
    let (job, _) = cluster.wait_until_succeeded(id);
    let other = job["node"].as_str().unwrap();
    assert_ne!(other, first);
    let up = &job["checkpoint_transfers"][0];
    let step = up["step"].as_u64().unwrap();
    assert_eq!(up["from"], first.as_str(), "{job:#}");
    assert!(up["bytes"].as_u64().unwrap() > 16 << 20, "{up}");
    let tail = job["output_tail"].to_string();
    assert!(
        tail.contains(&format!("resumed at {step} on {other}")),
        "{tail}"
    );
    assert!(up["resent_chunks"].as_u64().unwrap() >= 1, "{up}");
    cluster
        .cloud
        .wait_until("the rotten chunk seen", 1, PATIENCE, |l| {
            l.contains("a stored chunk no longer matches its hash; it is sent again")
        });
    let events = cluster.coord.job_events(id);
    let resumed = format!("resumed from the checkpoint of step {step}");
    assert!(events.iter().any(|e| e.contains(&resumed)), "{events:#?}");
    eprintln!("the cut upload: {up}");
}
