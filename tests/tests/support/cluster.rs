//! A coordinator and replaying nodes on one accelerated clock, and the
//! checkpointing trainer and job files that the scheduling tests submit to it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Coordinator, EDGE, PATIENCE, Proc, replaying_edge};

/// Accelerated seconds per wall second: an hour of tide every 3 s.
pub const SPEED: f64 = 1200.0;
/// Wall seconds per training iteration of the test trainer: 300 s of tide.
pub const STEP_WALL_S: f64 = 0.25;
/// The rate each job declares, iterations per accelerated second: a little
/// slower than the trainer's 1/300, for process start-up and sh overhead.
pub const DECLARED_IPS: f64 = 1.0 / 330.0;
/// How long a job of these tests may take, wall time, from submission to
/// its end: 20 h of tide.
pub const JOB_PATIENCE: Duration = Duration::from_secs(60);

/// A trainer that checkpoints its step after each iteration and on SIGTERM,
/// and resumes from the checkpoint: what tidemill expects of a job it moves.
/// Each of `WORLD_SIZE` ranks steps `WORLD_SIZE` times faster, as data
/// parallelism would, and logs the rendezvous it was given.
pub const TRAINER: &str = r#"ck="$TIDEMILL_CHECKPOINT_DIR/step.$RANK"; mkdir -p "$TIDEMILL_CHECKPOINT_DIR"
echo "rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT workers=$TIDEMILL_WORKERS node=$TIDEMILL_NODE_ID pid=$$" >> "$TIDEMILL_CHECKPOINT_DIR/ranks.log"
step=$(awk "BEGIN { print $2 / $WORLD_SIZE }")
i=$(cat "$ck" 2>/dev/null || echo 0)
if [ "$i" -gt 0 ]; then echo "resumed at $i on $TIDEMILL_NODE_ID"; fi
trap 'echo "$i" > "$ck"; echo "checkpointed at $i"; exit 0' TERM
while [ "$i" -lt "$1" ]; do sleep "$step" & wait $!; i=$((i+1)); echo "$i" > "$ck"; done
echo "trained $i iterations on $TIDEMILL_NODE_ID"
"#;

/// A training job of the test trainer, declared at [`DECLARED_IPS`] on CPU.
pub struct Job {
    /// Its name, also the name of its job file and checkpoint directory.
    pub name: &'static str,
    /// Iterations to train.
    pub iterations: u32,
    /// Hours of tide from submission to its deadline.
    pub deadline_h: f64,
    /// `slo` or `best-effort`.
    pub class: &'static str,
    /// What the coordinator does when no plan meets the deadline.
    pub on_infeasible: &'static str,
}

/// A [`Job`], in a `const` table's shape.
pub const fn job(
    name: &'static str,
    iterations: u32,
    deadline_h: f64,
    class: &'static str,
    on_infeasible: &'static str,
) -> Job {
    Job {
        name,
        iterations,
        deadline_h,
        class,
        on_infeasible,
    }
}

/// Wall time now, Unix ms.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Writes the job file of `j`, running `trainer`, with its deadline counted
/// from `tide_now_ms`; returns its path.
pub fn write_job(dir: &Path, j: &Job, trainer: &Path, tide_now_ms: i64) -> PathBuf {
    let deadline = rfc3339(tide_now_ms + (j.deadline_h * 3.6e6) as i64);
    let file = dir.join(format!("{}.toml", j.name));
    std::fs::write(
        &file,
        format!(
            r#"name = "{name}"
command = ["sh", "{trainer}", "{iters}", "{step}"]
deadline = "{deadline}"
class = "{class}"
on_infeasible = "{on_infeasible}"
[work]
model = "trainer"
iterations = {iters}
global_batch = 32
model_bytes = 97500000
checkpoint_bytes = 1000000
[work.iters_per_s]
cpu = {rate}
"#,
            name = j.name,
            trainer = trainer.display(),
            iters = j.iterations,
            step = STEP_WALL_S,
            class = j.class,
            on_infeasible = j.on_infeasible,
            rate = DECLARED_IPS,
        ),
    )
    .unwrap();
    file
}

/// Writes the `ddp` model's throughput table for the `cpu` class (one worker
/// at [`DECLARED_IPS`], two at 1.9 times that) under `dir`; returns the
/// `[scheduler.throughput]` line that points the coordinator at it.
pub fn write_ddp_table(dir: &Path) -> String {
    let tables = dir.join("throughputs");
    std::fs::create_dir_all(&tables).unwrap();
    std::fs::write(
        tables.join("ddp.csv"),
        format!(
            "global_batch_size,1,2\n32,{},{}\n",
            DECLARED_IPS,
            1.9 * DECLARED_IPS
        ),
    )
    .unwrap();
    format!("cpu = {:?}\n", tables.display().to_string())
}

/// Unix ms as the RFC 3339 time a job file's `deadline` takes.
fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339()
}

/// Writes job `name` of the `ddp` model ([`write_ddp_table`]): `iterations`
/// of `trainer`, on 1 to `max_workers` workers, due at `deadline_ms`, with
/// `extra_work` lines appended to its `[work]` table; returns the job file's
/// path. Its checkpoints go where the edges put them
/// ([`super::checkpoint_dir`]).
pub fn write_ddp_job(
    dir: &Path,
    name: &str,
    trainer: &Path,
    iterations: u32,
    max_workers: u32,
    deadline_ms: i64,
    extra_work: &str,
) -> PathBuf {
    let deadline = rfc3339(deadline_ms);
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(
        &file,
        format!(
            "name = \"{name}\"\ncommand = [\"sh\", {trainer:?}, \"{iterations}\", \"{STEP_WALL_S}\"]\n\
             deadline = \"{deadline}\"\non_infeasible = \"reject\"\n\
             [work]\nmodel = \"ddp\"\niterations = {iterations}\nglobal_batch = 32\n\
             model_bytes = 97500000\ncheckpoint_bytes = 1000000\nmin_workers = 1\nmax_workers = {max_workers}\n{extra_work}",
            trainer = trainer.display().to_string(),
        ),
    )
    .unwrap();
    file
}

/// The step a resumed trainer says it resumed at (`resumed at N`) in a
/// job's output tail; panics naming the tail when it did not resume.
pub fn resumed_at(tail: &str) -> u32 {
    tail.split("resumed at ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the job resumed from its checkpoint: {tail}"))
}

/// Writes a day-long trace (`tidemill` CSV format) in which every one of
/// `nodes` sits at 8 % CPU, well under any idle threshold; returns its path.
pub fn write_idle_trace(dir: &Path, nodes: &[&str]) -> PathBuf {
    let mut csv = String::from("node,time_s,cpu,mem,gpu\n");
    for i in 0..288 {
        for node in nodes {
            csv.push_str(&format!("{node},{t},8,30,\n", t = i * 300));
        }
    }
    let path = dir.join("trace.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

/// Whether a coordinator log line says a job ran to an end.
pub fn ran_to_an_end(l: &str) -> bool {
    l.contains("job state changed")
        && ["succeeded", "failed", "cancelled"]
            .iter()
            .any(|s| l.contains(&format!("state={s}")))
}

/// Time `k` (`deadline`, `finished_at`, ...) of `job` as `jobs show --json`
/// gives it.
pub fn job_time(job: &serde_json::Value, k: &str) -> chrono::DateTime<chrono::FixedOffset> {
    let at = job[k]
        .as_str()
        .unwrap_or_else(|| panic!("the job has no {k}: {job:#}"));
    chrono::DateTime::parse_from_rfc3339(at).unwrap()
}

/// Asserts that `job` (as `jobs show --json` gives it) finished by its deadline.
pub fn assert_met_deadline(job: &serde_json::Value) {
    assert!(
        job_time(job, "finished_at") <= job_time(job, "deadline"),
        "it finished after its deadline: {job:#}"
    );
}

/// Where a [`Cluster`] runs: its coordinator's addresses, and how an edge's
/// command becomes one that runs on the edge's own host (a network namespace,
/// say).
pub struct Net<'a> {
    /// The coordinator, at addresses the edges can reach.
    pub coord: Coordinator,
    /// Wraps edge `node`'s command.
    pub edge: &'a dyn Fn(&str, Command) -> Command,
    /// Wall seconds between an edge's rounds of link probes (SPEED times as
    /// many on its accelerated clock).
    pub probe_interval_secs: u64,
}

/// The command of a [`Cluster`]'s edge `node`, replaying `series` of `trace`
/// on the cluster's clock (started at `anchor`), under `dir`'s edge config.
pub fn edge_command(
    coord: &Coordinator,
    dir: &Path,
    trace: &Path,
    (node, series): (&str, &str),
    anchor: i64,
) -> Command {
    let mut cmd = replaying_edge(coord, &dir.join("edge.toml"), dir, node, trace, series);
    cmd.args(["--sample-interval", "300"])
        .args(["--speed", &SPEED.to_string()])
        .args(["--clock-anchor", &anchor.to_string()]);
    cmd
}

/// `cmd` run in node `node`'s namespace of `lab`, with its arguments and
/// environment: a [`Net`]'s `edge` for a WAN lab.
pub fn in_lab(lab: &tidemill_sim::wan::netns::Lab, node: &str, cmd: Command) -> Command {
    let mut wrapped = lab.command(node, Path::new(cmd.get_program()));
    wrapped.args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            wrapped.env(key, value);
        }
    }
    wrapped
}

/// A coordinator and replaying nodes on one accelerated clock.
pub struct Cluster {
    /// The coordinator's addresses, for its client commands.
    pub coord: Coordinator,
    /// The coordinator process, whose log the tests wait on.
    pub cloud: Proc,
    /// Each node's id and its edge daemon.
    pub nodes: Vec<(String, Proc)>,
    /// Wall time, Unix ms, at which the shared accelerated clock starts.
    pub anchor: i64,
}

impl Cluster {
    /// Starts the coordinator under `policy` (`tidemill-cloud serve --policy`;
    /// `None`: the default config's) with `cloud_nodes` as rented nodes and
    /// `throughput` as its `[scheduler.throughput]` lines, then each (node,
    /// trace series) of `nodes`, and waits until every node in `forecasting`
    /// has sent a forecast and a link report.
    pub fn start(
        dir: &Path,
        trace: &Path,
        nodes: &[(&str, &str)],
        cloud_nodes: &[&str],
        forecasting: &[&str],
        throughput: &str,
        policy: Option<&str>,
    ) -> Cluster {
        let net = Net {
            coord: Coordinator::new(dir),
            edge: &|_, cmd| cmd,
            probe_interval_secs: 1,
        };
        Cluster::start_on(
            dir,
            trace,
            nodes,
            cloud_nodes,
            forecasting,
            throughput,
            policy,
            net,
        )
    }

    /// [`Cluster::start`] on the network `net` gives: the coordinator at its
    /// addresses, each edge's command as `net` wraps it.
    #[allow(clippy::too_many_arguments)]
    pub fn start_on(
        dir: &Path,
        trace: &Path,
        nodes: &[(&str, &str)],
        cloud_nodes: &[&str],
        forecasting: &[&str],
        throughput: &str,
        policy: Option<&str>,
        net: Net,
    ) -> Cluster {
        let anchor = now_ms();
        let coord = net.coord;
        let rented: String = cloud_nodes
            .iter()
            .map(|n| format!("{n} = {{ price_per_gpu_hour = 2.0 }}\n"))
            .collect();
        let tables = format!("[scheduler.throughput]\n{throughput}");
        let policy_args: Vec<&str> = policy.map_or(Vec::new(), |p| vec!["--policy", p]);
        // The server certificate names the address edges dial.
        let tls_names = format!(
            "tls_names = [\"localhost\", \"127.0.0.1\", \"{}\"]",
            coord.quic.ip()
        );
        let cloud = coord.start_with_args(
            &[
                ("tls_names = [\"localhost\", \"127.0.0.1\"]", &tls_names),
                ("speed = 1.0", &format!("speed = {SPEED}")),
                (
                    "# anchor_ms = 1767225600000",
                    &format!("anchor_ms = {anchor}"),
                ),
                ("round_interval_secs = 2", "round_interval_secs = 120"),
                // A dead edge is noticed within seconds.
                ("keep_alive_secs = 5", "keep_alive_secs = 1"),
                ("idle_timeout_secs = 30", "idle_timeout_secs = 4"),
                ("offline_after_secs = 20", "offline_after_secs = 3600"),
                (
                    "[scheduler.cloud_nodes]\n",
                    &format!("[scheduler.cloud_nodes]\n{rented}"),
                ),
                ("[scheduler.throughput]\n", &tables),
            ],
            &policy_args,
        );
        let config = dir.join("edge.toml");
        let defaults = Command::new(EDGE)
            .arg("print-default-config")
            .output()
            .unwrap();
        let toml = String::from_utf8(defaults.stdout)
            .unwrap()
            // Probe rounds follow the accelerated clock.
            .replace(
                "interval_secs = 3600",
                &format!(
                    "interval_secs = {}",
                    (net.probe_interval_secs as f64 * SPEED) as u64
                ),
            )
            .replace("keep_alive_secs = 5", "keep_alive_secs = 1")
            .replace("idle_timeout_secs = 30", "idle_timeout_secs = 4")
            .replace(
                "forecast_refresh_secs = 900.0",
                "forecast_refresh_secs = 1800.0",
            );
        std::fs::write(&config, toml).unwrap();
        let procs: Vec<(String, Proc)> = nodes
            .iter()
            .map(|(node, series)| {
                let cmd = edge_command(&coord, dir, trace, (node, series), anchor);
                (node.to_string(), Proc::spawn(node, (net.edge)(node, cmd)))
            })
            .collect();
        cloud.wait_for("edge connected", nodes.len(), PATIENCE);
        for node in forecasting {
            for (what, kind) in [("a forecast", "forecast stored"), ("links", "kind=links")] {
                cloud.wait_until(&format!("{what} from {node}"), 1, PATIENCE, |l| {
                    l.contains(kind) && l.contains(&format!("node_id={node} "))
                });
            }
        }
        Cluster {
            coord,
            cloud,
            nodes: procs,
            anchor,
        }
    }

    /// Waits until job `id` has run to an end ([`JOB_PATIENCE`] at most).
    pub fn wait_until_ended(&self, id: u64) {
        self.wait_until_ended_within(id, JOB_PATIENCE);
    }

    /// Waits until job `id` has run to an end or was turned away,
    /// `patience` at most.
    pub fn wait_until_ended_within(&self, id: u64, patience: Duration) {
        let job_line = format!("job_id={id} ");
        self.cloud.wait_until("the job to end", 1, patience, |l| {
            l.contains(&job_line) && (ran_to_an_end(l) || l.contains("action=rejected"))
        });
    }

    /// Waits until job `id` has ended, echoes its log lines and asserts
    /// that it succeeded; returns it as `jobs show --json` gives it, and
    /// those lines.
    pub fn wait_until_succeeded(&self, id: u64) -> (serde_json::Value, Vec<String>) {
        self.wait_until_succeeded_within(id, JOB_PATIENCE)
    }

    /// As [`Cluster::wait_until_succeeded`], `patience` at most.
    pub fn wait_until_succeeded_within(
        &self,
        id: u64,
        patience: Duration,
    ) -> (serde_json::Value, Vec<String>) {
        self.wait_until_ended_within(id, patience);
        let log = self.job_log(id);
        let job = self.coord.job(id);
        assert_eq!(job["state"], "succeeded", "{job:#}");
        (job, log)
    }

    /// The coordinator's log lines about job `id`, also echoed to stderr so
    /// that a failing test shows them.
    pub fn job_log(&self, id: u64) -> Vec<String> {
        let job_line = format!("job_id={id} ");
        let log: Vec<String> = self
            .cloud
            .log()
            .into_iter()
            .filter(|l| l.contains(&job_line))
            .collect();
        for l in &log {
            eprintln!("{l}");
        }
        log
    }

    /// The shared accelerated clock now, Unix ms.
    pub fn tide_now(&self) -> i64 {
        self.anchor + ((now_ms() - self.anchor) as f64 * SPEED) as i64
    }

    /// Writes and submits a job whose deadline counts from now; returns its id.
    /// The trainer script is written once: rewriting it would truncate it
    /// under a task whose `sh` is just opening it, which then runs an empty
    /// script and exits 0 with no output.
    pub fn submit(&self, dir: &Path, j: &Job) -> u64 {
        let trainer = dir.join("trainer.sh");
        if !trainer.exists() {
            std::fs::write(&trainer, TRAINER).unwrap();
        }
        let file = write_job(dir, j, &trainer, self.tide_now());
        self.coord.submit_file(&file)
    }
}
