//! Progress from the job, end to end: a trainer that prints
//! `TIDEMILL_PROGRESS iter=N` and runs twice as slow as its job file
//! declares. The coordinator must show the reported iterations rather than
//! its estimate, correct the job's rate from the reports, and move the plan's
//! predicted finish out accordingly; and a job that its reports show cannot
//! meet its deadline, and asked to be rejected, must be turned away with its
//! task stopped.

mod support;

use std::path::Path;

use support::cluster::{Cluster, DECLARED_IPS, STEP_WALL_S, job, write_idle_trace, write_job};

/// The test trainer of `support::cluster`, at half the speed its job declares,
/// printing its count after each iteration with another key after it.
const SLOW_TRAINER: &str = r#"ck="$TIDEMILL_CHECKPOINT_DIR/step.$RANK"; mkdir -p "$TIDEMILL_CHECKPOINT_DIR"
step=$(awk "BEGIN { print 2 * $2 / $WORLD_SIZE }")
i=$(cat "$ck" 2>/dev/null || echo 0)
trap 'echo "$i" > "$ck"; exit 0' TERM
while [ "$i" -lt "$1" ]; do sleep "$step" & wait $!; i=$((i+1)); echo "$i" > "$ck"; echo "TIDEMILL_PROGRESS iter=$i loss=0.5"; done
echo "trained $i iterations"
"#;

/// Iterations of the job: 40 at 600 s of tide each, 20 s of wall time.
const ITERATIONS: u32 = 40;

/// Progress reports to wait for before judging the rate: each is at least
/// 1800 s of tide after the last, so the rate has been corrected several times.
const REPORTS: usize = 6;

/// Starts a cluster of one idle edge under `dir` and submits job `name`
/// of the slow trainer, due `deadline_h` of tide from now, asking to be
/// rejected if it cannot meet that; returns the cluster and the job's id.
fn submit_slow(dir: &Path, name: &'static str, deadline_h: f64) -> (Cluster, u64) {
    let trace = write_idle_trace(dir, &["a"]);
    let cluster = Cluster::start(dir, &trace, &[("a", "a")], &[], &["a"], "", None);
    let trainer = dir.join("slow-trainer.sh");
    std::fs::write(&trainer, SLOW_TRAINER).unwrap();
    let file = write_job(
        dir,
        &job(name, ITERATIONS, deadline_h, "slo", "reject"),
        &trainer,
        cluster.tide_now(),
    );
    let id = cluster.coord.submit_file(&file);
    (cluster, id)
}

fn finish_ms(job: &serde_json::Value) -> i64 {
    let at = job["plan"]["expected_finish"]
        .as_str()
        .unwrap_or_else(|| panic!("the plan predicts a finish: {job:#}"));
    chrono::DateTime::parse_from_rfc3339(at)
        .unwrap()
        .timestamp_millis()
}

#[test]
fn reported_progress_corrects_the_rate_and_the_predicted_finish() {
    let dir = support::tempdir();
    let (cluster, id) = submit_slow(dir.path(), "slow", 20.0);
    let job_line = format!("job_id={id} ");
    cluster
        .cloud
        .wait_until("the job to run", 1, support::PATIENCE, |l| {
            l.contains(&job_line) && l.contains("state=running")
        });
    let planned = cluster.coord.job(id);
    assert_eq!(planned["progress"], "estimated", "{planned:#}");
    let planned_finish = finish_ms(&planned);

    let progress = |l: &str| l.contains("node_id=a ") && l.contains("kind=progress");
    cluster
        .cloud
        .wait_until("progress reports", REPORTS, support::PATIENCE, progress);
    let measured = cluster.coord.job(id);
    assert_eq!(measured["progress"], "reported", "{measured:#}");
    let done = measured["done_iters"].as_f64().unwrap();
    assert!(
        done >= (REPORTS - 1) as f64 && done < f64::from(ITERATIONS),
        "the reported count, not the plan's: {measured:#}"
    );
    // The trainer steps every 2 × STEP_WALL_S of wall time, SPEED times as
    // much tide: half the declared rate. Half of the planned rate's weight is
    // gone with each correction, and sh adds a little to each step.
    let actual_ips = 1.0 / (2.0 * STEP_WALL_S * support::cluster::SPEED);
    let rate = measured["measured_ips"].as_f64().unwrap();
    assert!(
        rate > 0.6 * actual_ips && rate < 0.75 * DECLARED_IPS,
        "measured {rate} it/s, the trainer runs at {actual_ips}, declared {DECLARED_IPS}: {measured:#}"
    );
    // The plan now finishes the rest at the measured rate: later than first
    // planned by about the extra time per iteration.
    let moved_s = (finish_ms(&measured) - planned_finish) as f64 / 1000.0;
    let extra_s = f64::from(ITERATIONS) * (1.0 / actual_ips - 1.0 / DECLARED_IPS);
    assert!(
        moved_s > 0.5 * extra_s,
        "the predicted finish moved {moved_s} s, the slow trainer needs {extra_s} s more: before {planned:#}, after {measured:#}"
    );

    eprintln!(
        "measured {rate:.6} it/s (trainer {actual_ips:.6}, declared {DECLARED_IPS:.6}); \
         the predicted finish moved {moved_s:.0} s of {extra_s:.0} s"
    );
    let (ended, _) = cluster.wait_until_succeeded(id);
    assert_eq!(
        ended["done_iters"].as_f64(),
        Some(f64::from(ITERATIONS)),
        "the last count is reported at the task's end: {ended:#}"
    );
    let text = cluster.coord.cli(&["jobs", "show", &id.to_string()]);
    assert!(
        text.contains(&format!(
            "progress: {ITERATIONS} of {ITERATIONS} iterations (reported)"
        )),
        "{text}"
    );
}

#[test]
fn a_job_its_reports_show_hopeless_is_turned_away_and_its_task_stopped() {
    let dir = support::tempdir();
    // 40 iterations at the declared 330 s are 3.7 h, inside the 5 h to the
    // deadline; at the trainer's real 600 s they are 6.7 h.
    let (cluster, id) = submit_slow(dir.path(), "behind", 5.0);
    let job_line = format!("job_id={id} ");
    cluster
        .cloud
        .wait_until("the job to be turned away", 1, support::PATIENCE, |l| {
            l.contains(&job_line) && l.contains("action=rejected")
        });
    let (_, edge) = &cluster.nodes[0];
    edge.wait_until("its task to stop", 1, support::PATIENCE, |l| {
        l.contains(&job_line) && l.contains("task ended") && l.contains("cancelled: true")
    });
    cluster.job_log(id);
    let shown = cluster.coord.job(id);
    assert_eq!(shown["state"], "rejected", "{shown:#}");
    let reason = shown["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("turned away after it started, its tasks cancelled:")
            && reason.contains("cannot finish its"),
        "{shown:#}"
    );
    let done = shown["done_iters"].as_f64().unwrap();
    assert!(
        shown["progress"] == "reported" && done > 0.0 && done < f64::from(ITERATIONS),
        "turned away part-way, on its reports: {shown:#}"
    );
    eprintln!("turned away at {done} of {ITERATIONS} iterations: {reason}");
}
