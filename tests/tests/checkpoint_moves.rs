//! A moved job keeps its progress with no shared storage: three edges, each
//! with its own checkpoint dir under its own data dir, replay tidal traces
//! on one accelerated clock; a job whose trainer writes a multi-megabyte
//! checkpoint each step is moved once by the tide coming in and once by a
//! drain, and each time resumes on the new node from the step its last
//! checkpoint recorded, its files brought there through the coordinator.

mod support;

use std::path::Path;

use support::PATIENCE;
use support::cluster::{Cluster, Net, job};

/// Iterations the job declares.
const ITERATIONS: u64 = 42;

/// A trainer that saves a 4 MiB model headed by its step after every
/// iteration, then the step in `tidemill-step` (the convention the edge
/// reads), resumes from them, refuses a model that does not match its step,
/// and counts in its work dir the iterations this task trained.
const TRAINER: &str = r#"ck="$TIDEMILL_CHECKPOINT_DIR"
i=$(cat "$ck/tidemill-step" 2>/dev/null || echo 0)
if [ "$i" -gt 0 ]; then
  head -n 1 "$ck/model.bin" | grep -qx "step $i" || { echo "model does not match step $i"; exit 1; }
  echo "resumed at $i on $TIDEMILL_NODE_ID"
fi
n=0
trap 'echo "checkpointed at $i"; exit 0' TERM
while [ "$i" -lt "$1" ]; do
  sleep "$2" & wait $!
  i=$((i+1)); n=$((n+1)); echo "$n" > trained
  { echo "step $i"; head -c 4194304 /dev/urandom; } > "$ck/model.bin.tmp" && mv "$ck/model.bin.tmp" "$ck/model.bin"
  echo "$i" > "$ck/tidemill-step.tmp" && mv "$ck/tidemill-step.tmp" "$ck/tidemill-step"
  echo "TIDEMILL_PROGRESS iter=$i"
done
echo "trained $i iterations on $TIDEMILL_NODE_ID"
"#;

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

/// Waits until job `id` has started `n` times; returns the node it runs on.
fn started(cluster: &Cluster, id: u64, n: usize) -> String {
    let job_line = format!("job_id={id} ");
    cluster
        .cloud
        .wait_until("the job to start", n, PATIENCE, |l| {
            l.contains(&job_line) && l.contains("state=running")
        });
    cluster.coord.job(id)["node"].as_str().unwrap().to_string()
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
    std::fs::write(dir.path().join("trainer.sh"), TRAINER).unwrap();
    let id = cluster.submit(
        dir.path(),
        &job("carried", ITERATIONS as u32, 12.0, "slo", "reject"),
    );
    assert_eq!(started(&cluster, id, 1), "ebb");
    // The tide comes in on ebb at 3 h: the job moves.
    let second = started(&cluster, id, 2);
    assert_ne!(second, "ebb");
    // It trains a while there, then its node is drained.
    let seen = |l: &str| l.contains(&format!("node_id={second} ")) && l.contains("kind=samples");
    let samples = cluster.cloud.log().iter().filter(|l| seen(l)).count();
    cluster
        .cloud
        .wait_until("training on the second node", samples + 4, PATIENCE, seen);
    let said = cluster.coord.cli(&["nodes", "drain", &second]);
    assert!(said.contains(&format!("node {second} drained")), "{said}");
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
