//! Real PyTorch under tidemill: `edge/examples/pytorch/train_ddp.py` run by
//! a live coordinator and edges (child processes on one accelerated clock),
//! with Gloo on CPU. Ignored by default, since it needs a virtualenv with
//! torch (5.3 GB); `tests/pytorch/run.sh` makes one and runs these with
//! `TIDEMILL_TORCH_VENV` pointing at it.
//!
//! Every job declares the rate that the trainer was measured at on this
//! machine at the start of the run, a good deal slower, in accelerated
//! seconds, and the coordinator's `restart_s` is the trainer's measured
//! start-up, so that its plan and deadline mean something: each job's
//! iterations are sized to [`JOB_HOURS`] of tide at its declared rate, and
//! each deadline is [`SLACK`] times the declared duration, start-ups
//! included. A loaded box measures a slower trainer and so runs shorter jobs
//! with the same room.

mod support;
#[path = "pytorch/torch_jobs.rs"]
mod torch_jobs;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::PATIENCE;
use support::cluster::{Cluster, Net, assert_met_deadline, resumed_at, write_idle_trace};
use torch_jobs::*;

#[test]
#[ignore = "needs torch: run tests/pytorch/run.sh"]
fn scenario_1_a_single_edge_job_trains_to_completion_by_its_deadline() {
    let dir = support::tempdir();
    let cluster = idle_cluster(dir.path(), &["solo"], "");
    let n = iterations_for(rates().one, 1);
    let job = TorchJob {
        name: "single",
        iterations: n,
        deadline_in_ms: deadline_ms(n, rates().one, 1, SLACK),
        min_workers: 1,
        max_workers: 1,
        on_infeasible: "reject",
        own_rate: true,
    };
    let id = submit(&cluster, dir.path(), &job);
    let (shown, _) = succeeded(&cluster, id, &job);
    assert_eq!(
        shown["plan"]["verdict"]["verdict"], "guaranteed",
        "{shown:#}"
    );
    assert_met_deadline(&shown);
    let tail = shown["output_tail"].to_string();
    assert!(tail.contains(&format!("trained {n} iterations")), "{tail}");
    let (first, last) = first_and_last_loss(&tail);
    eprintln!(
        "scenario 1: loss {first} at step 1 -> {last} at step {n}; {}",
        deadline_use(&shown)
    );
    assert!(last < 0.8 * first, "the loss went down: {tail}");
}

#[test]
#[ignore = "needs torch: run tests/pytorch/run.sh"]
fn scenario_2_a_job_runs_data_parallel_on_two_edges() {
    let dir = support::tempdir();
    let r = rates();
    let throughput = write_torch_table(dir.path(), r.one, r.two);
    let cluster = idle_cluster(dir.path(), &["left", "right"], &throughput);
    // Two workers or none: the plan has to span both edges.
    let n = iterations_for(r.two, 1);
    let job = TorchJob {
        name: "ddp",
        iterations: n,
        deadline_in_ms: deadline_ms(n, r.two, 1, SLACK),
        min_workers: 2,
        max_workers: 2,
        on_infeasible: "reject",
        own_rate: false,
    };
    let id = submit(&cluster, dir.path(), &job);
    let (shown, _) = succeeded(&cluster, id, &job);
    let plan = &shown["plan"];
    assert_eq!(plan["shape"], "multi-edge", "{shown:#}");
    assert_eq!(plan["nodes"].as_array().map(Vec::len), Some(2), "{shown:#}");
    assert_met_deadline(&shown);
    // The ranks met through Gloo and stopped at the same step (the trainer
    // checks that across ranks before it says so).
    let tail = shown["output_tail"].to_string();
    assert!(
        tail.contains(&format!("trained {n} iterations, 2 ranks agree")),
        "{tail}"
    );
    eprintln!(
        "scenario 2: on {} with step {} s planned; {}; {}",
        plan["nodes"],
        plan["step"]["total_s"],
        deadline_use(&shown),
        tail.split("\",\"")
            .filter(|l| l.contains("loss"))
            .last()
            .unwrap_or("")
    );
}

/// Waits until job `id` runs and has written its first checkpoint, `path`
/// ([`PATIENCE`] at most each).
fn wait_for_checkpoint(cluster: &Cluster, id: u64, path: &Path) {
    let job_line = format!("job_id={id} ");
    cluster
        .cloud
        .wait_until("the job to run", 1, PATIENCE, |l| {
            l.contains(&job_line) && l.contains("state=running")
        });
    let deadline = Instant::now() + PATIENCE;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} within {PATIENCE:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs torch: run tests/pytorch/run.sh"]
fn scenario_3_a_drained_edge_yields_and_the_job_resumes_elsewhere_from_its_checkpoint() {
    let dir = support::tempdir();
    // No shared storage: each edge keeps its checkpoints under its own data
    // dir, and the checkpoint moves with the job through the coordinator.
    let own_dirs = |_: &str, mut cmd: std::process::Command| {
        cmd.env_remove("TIDEMILL_TASKS__CHECKPOINT_DIR");
        cmd
    };
    let cluster = idle_cluster_with(dir.path(), &["ebb", "flood"], "", &own_dirs);
    let n = iterations_for(rates().one, 3 * CHECKPOINT_EVERY);
    let job = TorchJob {
        name: "moved",
        iterations: n,
        deadline_in_ms: deadline_ms(n, rates().one, 2, SLACK),
        min_workers: 1,
        max_workers: 1,
        on_infeasible: "reject",
        own_rate: true,
    };
    let id = submit(&cluster, dir.path(), &job);
    let job_line = format!("job_id={id} ");
    cluster
        .cloud
        .wait_until("the job to run", 1, PATIENCE, |l| {
            l.contains(&job_line) && l.contains("state=running")
        });
    let first = cluster.coord.job(id)["node"].as_str().unwrap().to_string();
    let own = |node: &str| {
        dir.path()
            .join(node)
            .join("checkpoints")
            .join(format!("job-{id}"))
    };
    wait_for_checkpoint(&cluster, id, &own(&first).join("tidemill-step"));
    let said = cluster.coord.cli(&["nodes", "drain", &first]);
    assert!(said.contains(&format!("node {first} drained")), "{said}");

    let (shown, log) = succeeded(&cluster, id, &job);
    assert_ne!(shown["node"].as_str(), Some(first.as_str()), "{shown:#}");
    assert!(
        !log.iter().any(|l| l.contains("state=cancelled")),
        "the job was never cancelled"
    );
    let tail = shown["output_tail"].to_string();
    let at = resumed_at(&tail);
    eprintln!(
        "scenario 3: drained {first} and resumed at {at} of {n} on {}; {}",
        shown["node"],
        deadline_use(&shown)
    );
    assert!(
        (CHECKPOINT_EVERY..n).contains(&at),
        "resumed part-way, past its first checkpoint: {tail}"
    );
    assert!(tail.contains(&format!("trained {n} iterations")), "{tail}");
    assert_met_deadline(&shown);
    // It resumed from the checkpoint the drained edge saved, brought to the
    // other edge's own dir.
    let other = shown["node"].as_str().unwrap();
    assert!(own(other).join("checkpoint.pt").exists());
    let legs = shown["checkpoint_transfers"].as_array().unwrap();
    let from_first = legs
        .iter()
        .any(|t| t["from"] == first.as_str() && t["step"] == u64::from(at));
    let to_other = legs
        .iter()
        .any(|t| t["to"] == other && t["step"] == u64::from(at));
    assert!(from_first && to_other, "{legs:#?}");
}

#[test]
#[ignore = "needs torch: run tests/pytorch/run.sh"]
fn scenario_4_a_job_on_two_edges_resizes_to_one_when_an_edge_is_drained() {
    let dir = support::tempdir();
    // The table says two workers are 1.9 times as fast as one, as the tidal
    // tests' does: this scenario is about the resize, not the rate (on two
    // shared cores, two workers are not always faster).
    let one = rates().one;
    let throughput = write_torch_table(dir.path(), one, 1.9 * one);
    let cluster = idle_cluster(dir.path(), &["left", "right"], &throughput);
    // Too tight for one worker from the start, so the plan takes two; once
    // one edge is drained, it goes on on one (best effort, if it must).
    let n = iterations_for(1.9 * one, 3 * CHECKPOINT_EVERY);
    let job = TorchJob {
        name: "resized",
        iterations: n,
        deadline_in_ms: deadline_ms(n, 1.9 * one, 1, 1.5),
        min_workers: 1,
        max_workers: 2,
        on_infeasible: "best-effort",
        own_rate: false,
    };
    let id = submit(&cluster, dir.path(), &job);
    let checkpoints = support::checkpoint_dir(dir.path(), id);
    wait_for_checkpoint(&cluster, id, &checkpoints.join("checkpoint.pt"));
    let plan = cluster.coord.job(id)["plan"].clone();
    assert_eq!(plan["shape"], "multi-edge", "{plan:#}");
    let drained = plan["nodes"][1].as_str().unwrap().to_string();
    let said = cluster.coord.cli(&["nodes", "drain", &drained]);
    assert!(said.contains(&format!("node {drained} drained")), "{said}");

    let (shown, _) = succeeded(&cluster, id, &job);
    let tail = shown["output_tail"].to_string();
    let at = resumed_at(&tail);
    eprintln!(
        "scenario 4: 2 workers on {}, {drained} drained, resumed at {at} of {n} on {} with WORLD_SIZE 1",
        plan["nodes"], shown["node"]
    );
    assert!(
        (CHECKPOINT_EVERY..n).contains(&at),
        "resumed part-way: {tail}"
    );
    assert!(
        tail.contains(&format!(
            "trained {n} iterations, 1 ranks agree (rank 0); resumed at"
        )),
        "it went on on one rank (WORLD_SIZE 1) from the checkpoint: {tail}"
    );
}

/// The last training rate the trainer printed (`... (R it/s, W workers)`),
/// start-up excluded.
fn printed_rate(output: &str) -> f64 {
    output
        .rsplit(" it/s, ")
        .nth(1)
        .and_then(|before| before.rsplit('(').next()?.parse().ok())
        .unwrap_or_else(|| panic!("the trainer printed its rate: {output}"))
}

/// One worker's compute time per step, seconds, at `batch` a step.
fn compute_step_s(batch: u32) -> f64 {
    let dir = support::tempdir();
    let out = Command::new(python())
        .arg(trainer())
        .env("TIDEMILL_CHECKPOINT_DIR", dir.path().join("checkpoints"))
        .env("TIDEMILL_ITERATIONS", MEASURE_ITERS.to_string())
        .env("TIDEMILL_BATCH_SIZE", batch.to_string())
        .env("MASTER_PORT", support::free_port().to_string())
        .output()
        .expect("run the trainer");
    assert!(out.status.success(), "{out:?}");
    1.0 / printed_rate(&String::from_utf8_lossy(&out.stdout))
}

#[test]
#[ignore = "needs torch: run tests/pytorch/run.sh"]
fn scenario_5_data_parallel_over_an_impaired_link_against_the_cost_model() {
    use std::net::SocketAddr;
    use support::cluster::in_lab;
    use tidemill_sched::cost::{Congestion, ring_allreduce_s};
    use tidemill_sim::wan::netns::{self, Lab};
    use tidemill_sim::wan::scenario::Impairment;

    if let Some(why) = netns::unavailable() {
        // tests/pytorch/run.sh counts this scenario as pending, not passed.
        println!("PENDING 5 impaired link: the WAN lab needs root and /dev/net/tun ({why})");
        return;
    }
    let imp = Impairment {
        delay_ms: 30.0,
        rate_mbps: Some(100.0),
        ..Impairment::default()
    };
    let bytes = 4 * MODEL_PARAMS;
    // The cost model: one worker's compute on its half of the batch, plus
    // the ring all-reduce of the gradients over the emulated link.
    let compute = compute_step_s(BATCH / 2);
    let spec = imp
        .link_spec(Congestion::LossBased)
        .expect("a rate-limited link");
    let ring = ring_allreduce_s(2, bytes as f64, &spec);
    let predicted = compute + ring;

    let dir = support::tempdir();
    let names = ["w1", "w2"];
    let subnet = 160 + (std::process::id() % 40) as u8 * 2;
    let mut lab = Lab::create(
        "tmp",
        subnet,
        &[("cloud", false), ("w1", true), ("w2", true)],
    )
    .expect("the WAN lab");
    let ips: Vec<std::net::Ipv4Addr> = lab.nodes().iter().map(|n| n.ip).collect();
    let edge_edge = imp.clone();
    let _hub = lab
        .start_hub(
            move |a, b| {
                if a > 0 && b > 0 {
                    edge_edge.clone()
                } else {
                    Impairment::default()
                }
            },
            5,
        )
        .expect("the hub");
    let coord = torch_coordinator(support::Coordinator::at(
        SocketAddr::new(ips[0].into(), support::free_port()),
        dir.path(),
    ));
    let trace = write_idle_trace(dir.path(), &names);
    let wrap = |node: &str, cmd: Command| in_lab(&lab, node, cmd);
    let net = Net {
        coord,
        edge: &wrap,
        probe_interval_secs: 15,
    };
    let r = rates();
    let throughput = write_torch_table(dir.path(), r.one, 1.0 / predicted);
    let pairs: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let cluster = Cluster::start_on(
        dir.path(),
        &trace,
        &pairs,
        &[],
        &names,
        &throughput,
        None,
        net,
    );
    let n = iterations_for(1.0 / predicted, 1);
    let job = TorchJob {
        name: "wan",
        iterations: n,
        deadline_in_ms: deadline_ms(n, 1.0 / predicted, 1, SLACK),
        min_workers: 2,
        max_workers: 2,
        on_infeasible: "reject",
        own_rate: false,
    };
    let id = submit(&cluster, dir.path(), &job);
    let (shown, _) = succeeded(&cluster, id, &job);
    assert_eq!(shown["plan"]["shape"], "multi-edge", "{shown:#}");
    let tail = shown["output_tail"].to_string();
    assert!(
        tail.contains(&format!("trained {n} iterations, 2 ranks agree")),
        "{tail}"
    );
    assert_met_deadline(&shown);
    let measured = 1.0 / printed_rate(&tail);
    let error = measured / predicted - 1.0;
    eprintln!(
        "scenario 5: {imp}: {bytes} B of gradients over 2 ranks: measured {measured:.3} s a step; \
         predicted {predicted:.3} s (compute {compute:.3} s + ring {ring:.3} s): error {:+.1} %; {}",
        100.0 * error,
        deadline_use(&shown)
    );
    // The error is printed, not asserted: beside other work the step is
    // slower than the model of an unloaded box (docs/wan.md quotes it).
    assert!(
        measured > ring,
        "a step ({measured:.3} s) pays at least the ring term over the link ({ring:.3} s)"
    );
}
