//! A checkpointing trainer for the live checkpoint tests, and the steps they
//! share: wait until a job trains, then drain its node.

use std::path::{Path, PathBuf};

use super::PATIENCE;
use super::cluster::{Cluster, JOB_PATIENCE, Net, job, write_idle_trace};

/// A trainer, run as `sh trainer.sh ITERATIONS SECONDS_A_STEP`, that saves a
/// model of `model_bytes` headed by its step after every iteration, as
/// `model-STEP.bin`, then the step in `tidemill-step` (the convention the
/// edge reads), resumes from them, refuses a model that does not match its
/// step, and counts in its work dir the iterations this task trained. Asked
/// to stop, it finishes the step it is in, as a real trainer does within its
/// grace period. The stop reaches the whole process group, so any child may
/// die: a model write cut short is never named by the step file, and the
/// step file is written by the shell itself (which traps the stop), never by
/// a child such as `mv`, which could die between the model and the step.
pub fn script(model_bytes: u64) -> String {
    r#"ck="$TIDEMILL_CHECKPOINT_DIR"
i=$(cat "$ck/tidemill-step" 2>/dev/null || echo 0)
if [ "$i" -gt 0 ]; then
  head -n 1 "$ck/model-$i.bin" | grep -qx "step $i" || { echo "model does not match step $i: $(head -c 12 "$ck/model-$i.bin" | od -An -c)"; exit 1; }
  echo "resumed at $i on $TIDEMILL_NODE_ID"
fi
n=0 stop=
trap 'stop=1' TERM
while [ "$i" -lt "$1" ]; do
  sleep "$2" & wait $!
  [ -z "$stop" ] || break
  n=$((n+1)); echo "$n" > trained
  { echo "step $((i+1))"; head -c MODEL_BYTES /dev/urandom; } > "$ck/model-$((i+1)).bin" || break
  i=$((i+1)); echo "$i" > "$ck/tidemill-step"
  rm -f "$ck/model-$((i-1)).bin"
  [ -z "$stop" ] || break
done
[ -z "$stop" ] || { echo "checkpointed at $i"; exit 0; }
echo "trained $i iterations on $TIDEMILL_NODE_ID"
"#
    .replace("MODEL_BYTES", &model_bytes.to_string())
}

/// Writes [`script`] as `dir/trainer.sh`, the command of [`super::cluster::job`].
pub fn write(dir: &Path, model_bytes: u64) -> PathBuf {
    let path = dir.join("trainer.sh");
    std::fs::write(&path, script(model_bytes)).unwrap();
    path
}

/// Waits until job `id` has started `n` times; returns the node it runs on.
/// A start after a move waits for the tide to turn, the checkpoint's trip
/// up to the coordinator and down to the next node, and its start: on a
/// loaded 2-core box (CI runs two such clusters at once) that took longer
/// than [`PATIENCE`], so it gets [`JOB_PATIENCE`].
pub fn started(cluster: &Cluster, id: u64, n: usize) -> String {
    let job_line = format!("job_id={id} ");
    cluster
        .cloud
        .wait_until("the job to start", n, JOB_PATIENCE, |l| {
            l.contains(&job_line) && l.contains("state=running")
        });
    cluster.coord.job(id)["node"].as_str().unwrap().to_string()
}

/// Waits until `node` has reported four more samples (the job there trains
/// past its start), then drains it.
pub fn drain_after_training(cluster: &Cluster, node: &str) {
    let seen = |l: &str| l.contains(&format!("node_id={node} ")) && l.contains("kind=samples");
    let samples = cluster.cloud.log().iter().filter(|l| seen(l)).count();
    cluster
        .cloud
        .wait_until("training", samples + 4, PATIENCE, seen);
    let said = cluster.coord.cli(&["nodes", "drain", node]);
    assert!(said.contains(&format!("node {node} drained")), "{said}");
}

/// Starts edges `near` and `far` on idle traces under `dir` through `net`,
/// submits a best-effort job `name` of [`script`] with `model_bytes`
/// checkpoints, and drains the node it starts on once it trains; returns
/// the cluster, the job and that node.
pub fn drained_from_one_of_two(
    dir: &Path,
    net: Net,
    model_bytes: u64,
    name: &'static str,
) -> (Cluster, u64, String) {
    let names = ["near", "far"];
    let trace = write_idle_trace(dir, &names);
    let nodes = [("near", "near"), ("far", "far")];
    let cluster = Cluster::start_on(dir, &trace, &nodes, &[], &names, "", None, net);
    write(dir, model_bytes);
    let id = cluster.submit(dir, &job(name, 24, 48.0, "best-effort", "best-effort"));
    let first = started(&cluster, id, 1);
    drain_after_training(&cluster, &first);
    (cluster, id, first)
}

/// Files under each of the coordinator's checkpoint dirs of job `id`
/// (chunks, manifests, markers).
pub fn held_by_coordinator(data_dir: &Path, id: u64) -> Vec<PathBuf> {
    let job = data_dir.join("checkpoints").join(format!("job-{id}"));
    std::fs::read_dir(job)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .flatten()
        .flatten()
        .map(|f| f.path())
        .collect()
}
