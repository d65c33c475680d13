//! Plans that change shape or place over time, end to end on loopback: an
//! elastic job that grows from one cloud node to two, and a hybrid job that
//! gains ground on an idle edge while the cloud is busy, then finishes on the
//! cloud.

mod support;

use std::path::Path;

use support::cluster::{
    Cluster, assert_met_deadline, resumed_at, write_ddp_job, write_ddp_table, write_idle_trace,
};

/// Like the shared trainer, but the ranks share one checkpoint (rank 0
/// writes it), as a data-parallel job's replicas do, so a resize resumes
/// every rank from the same step.
const SHARED_CHECKPOINT_TRAINER: &str = r#"ck="$TIDEMILL_CHECKPOINT_DIR/step"; mkdir -p "$TIDEMILL_CHECKPOINT_DIR"
echo "rank=$RANK world=$WORLD_SIZE node=$TIDEMILL_NODE_ID" >> "$TIDEMILL_CHECKPOINT_DIR/ranks.log"
step=$(awk "BEGIN { print $2 / $WORLD_SIZE }")
i=$(cat "$ck" 2>/dev/null || echo 0)
if [ "$i" -gt 0 ]; then echo "resumed at $i on $TIDEMILL_NODE_ID with world $WORLD_SIZE"; fi
save() { if [ "$RANK" = 0 ]; then echo "$i" > "$ck"; fi; }
trap 'save; echo "checkpointed at $i"; exit 0' TERM
while [ "$i" -lt "$1" ]; do sleep "$step" & wait $!; i=$((i+1)); save; done
echo "trained $i iterations on $TIDEMILL_NODE_ID"
"#;

/// Writes and submits job `name` of the `ddp` model running the shared-checkpoint
/// trainer: `iterations` on 1 to `workers` workers, due `deadline_h` hours of
/// tide after `now_ms`, with `extra` lines appended to its `[work]` table;
/// returns its id.
#[allow(clippy::too_many_arguments)]
fn submit(
    cluster: &Cluster,
    dir: &Path,
    name: &str,
    iterations: u32,
    workers: u32,
    now_ms: i64,
    deadline_h: f64,
    extra: &str,
) -> u64 {
    let trainer = dir.join("trainer.sh");
    if !trainer.exists() {
        std::fs::write(&trainer, SHARED_CHECKPOINT_TRAINER).unwrap();
    }
    let file = write_ddp_job(
        dir,
        name,
        &trainer,
        iterations,
        workers,
        now_ms + (deadline_h * 3.6e6) as i64,
        extra,
    );
    cluster.coord.submit_file(&file)
}

#[test]
fn a_job_grows_from_one_cloud_node_to_two_when_the_other_frees() {
    let dir = support::tempdir();
    let names = ["c1", "c2"];
    let trace = write_idle_trace(dir.path(), &names);
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let throughput = write_ddp_table(dir.path());
    let cluster = Cluster::start(dir.path(), &trace, &nodes, &names, &[], &throughput, None);
    // `holder`: 32 iterations on one worker (2.9 h planned) takes one node.
    // `grower`: 96 iterations due in 7.4 h. One worker alone needs 8.8 h; two
    // after `holder` need 2.9 h + 96 × 174 s = 7.6 h. One worker now and two
    // once `holder` is done: 2.9 h + 64 iterations × 174 s = 6.0 h. The 1.4 h
    // to spare are 4 s of wall time, so a round that a loaded machine delays
    // by a second or two does not make the job infeasible (with a quarter of
    // these figures it once did).
    let now = cluster.tide_now();
    let holder = submit(&cluster, dir.path(), "holder", 32, 1, now, 16.0, "");
    let grower = submit(&cluster, dir.path(), "grower", 96, 2, now, 7.4, "");
    cluster.wait_until_ended(holder);
    cluster.wait_until_ended(grower);
    let log = cluster.job_log(grower);

    let job = cluster.coord.job(grower);
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_met_deadline(&job);
    assert_eq!(cluster.coord.job(holder)["state"], "succeeded");
    assert!(
        log.iter()
            .any(|l| l.contains("no fixed worker count fits") && l.contains("resize")),
        "its first plan was elastic"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("asked to checkpoint and stop")),
        "it was checkpointed to resize"
    );
    // One task with world 1, then two ranks with world 2 on both nodes.
    let ranks =
        std::fs::read_to_string(support::checkpoint_dir(dir.path(), grower).join("ranks.log"))
            .unwrap();
    let lines: Vec<&str> = ranks.lines().collect();
    assert_eq!(lines.len(), 3, "{ranks}");
    assert!(lines[0].starts_with("rank=0 world=1 "), "{ranks}");
    let mut grown: Vec<&str> = lines[1..].to_vec();
    grown.sort();
    assert!(
        grown[0].starts_with("rank=0 world=2 ") && grown[1].starts_with("rank=1 world=2 "),
        "{ranks}"
    );
    let on: Vec<&str> = grown
        .iter()
        .map(|l| l.rsplit_once("node=").unwrap().1)
        .collect();
    assert!(on.contains(&"c1") && on.contains(&"c2"), "{ranks}");
    let tail = job["output_tail"].to_string();
    assert!((1..96).contains(&resumed_at(&tail)), "{tail}");
    assert!(tail.contains("with world 2"), "{tail}");
    assert!(tail.contains("trained 96 iterations"), "{tail}");
    let shown = cluster.coord.cli(&["jobs", "show", &grower.to_string()]);
    assert!(
        shown.contains("stretch 1: ") && shown.contains("c1×1, c2×1"),
        "{shown}"
    );
}

/// Tide hours since the cluster's clock anchor.
fn tide_h(cluster: &Cluster) -> f64 {
    (cluster.tide_now() - cluster.anchor) as f64 / 3.6e6
}

#[test]
fn a_job_gains_ground_on_an_idle_edge_then_finishes_on_the_cloud() {
    let dir = support::tempdir();
    // Eight days; `e1` is idle 0-4 h every day, busy the rest, so its
    // forecaster (primed with the days before: the replay cycles) expects
    // that window. The cloud node's load does not matter.
    const WINDOW_END_H: f64 = 4.0;
    let mut csv = String::from("node,time_s,cpu,mem,gpu\n");
    for i in 0..8 * 288 {
        let hour = f64::from(i % 288) / 12.0;
        let e1 = if hour < WINDOW_END_H { 8.0 } else { 85.0 };
        csv.push_str(&format!("e1,{t},{e1},30,\nc1,{t},8,30,\n", t = i * 300));
    }
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, csv).unwrap();
    let throughput = write_ddp_table(dir.path());
    let nodes = [("e1", "e1"), ("c1", "c1")];
    let cluster = Cluster::start(
        dir.path(),
        &trace,
        &nodes,
        &["c1"],
        &["e1"],
        &throughput,
        None,
    );
    let now = cluster.tide_now();
    let t0 = tide_h(&cluster);
    assert!(t0 < 2.0, "the cluster came up {t0:.1} h into the tide");

    // `holder`: 8 iterations (44 min) due in 1 h, its 20 GB of data in the
    // cloud: staging it to e1 over the 100 Mb/s cloud-edge link would take
    // 27 min, so it runs on c1 and holds it for 44 min.
    // `hybrid`: one worker needs longer than e1's window has left, and the
    // cloud after `holder` finishes 44 min too late for its deadline; on e1
    // now, then on c1 once it frees, it finishes 24 min early.
    let step_h = 1.0 / 3600.0 / support::cluster::DECLARED_IPS;
    let iterations = ((WINDOW_END_H - t0) / step_h).ceil() as u32 + 4;
    let deadline_h = iterations as f64 * step_h + 0.4;
    let big_data = "dataset_bytes = 20000000000\n";
    let holder = submit(&cluster, dir.path(), "holder", 8, 1, now, 1.0, big_data);
    let hybrid = submit(
        &cluster,
        dir.path(),
        "hybrid",
        iterations,
        1,
        now,
        deadline_h,
        "",
    );
    cluster.wait_until_ended(holder);
    cluster.wait_until_ended(hybrid);
    let log = cluster.job_log(hybrid);

    let job = cluster.coord.job(hybrid);
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_met_deadline(&job);
    let holder = cluster.coord.job(holder);
    assert_eq!(holder["node"], "c1", "{holder:#}");
    assert!(
        log.iter()
            .any(|l| l.contains("action=started on e1") && l.contains("then cloud c1")),
        "it started on e1 on an edge-then-cloud plan"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("asked to checkpoint and stop")),
        "it was checkpointed to move"
    );
    assert_eq!(job["node"], "c1", "it finished on the cloud: {job:#}");
    let tail = job["output_tail"].to_string();
    assert!((1..iterations).contains(&resumed_at(&tail)), "{tail}");
    assert!(
        tail.contains(&format!("trained {iterations} iterations on c1")),
        "{tail}"
    );
}
