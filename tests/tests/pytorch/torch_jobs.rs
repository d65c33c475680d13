//! The example trainer measured on this machine, and the jobs, deadlines and
//! clusters of the PyTorch scenarios sized to it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::PATIENCE;
use crate::support::cluster::{Cluster, Net, SPEED, job_time, write_idle_trace};

/// Global batch size of every job: big enough that a step costs more than
/// the Python loop around it.
pub(crate) const BATCH: u32 = 512;
/// The share of its measured rate a job declares: the machine's two cores
/// are shared with the edges, the coordinator and other work.
pub(crate) const DECLARED_SHARE: f64 = 0.5;
/// Iterations between a job's periodic checkpoints: the first one says that
/// it trains, past its start-up.
pub(crate) const CHECKPOINT_EVERY: u32 = 20;
/// Hours of tide each job is sized to at its declared rate
/// ([`iterations_for`]): well inside the 24 hours of forecast a plan sees.
pub(crate) const JOB_HOURS: f64 = 8.0;
/// Iterations of the standalone runs that measure the trainer.
pub(crate) const MEASURE_ITERS: u32 = 200;
/// A deadline's span over the job's declared duration, start-ups included:
/// room for a loaded box, where the trainer shares two cores with the
/// edges, the coordinator, the WAN lab's relay and other work, and is
/// slower than when it was measured alone.
pub(crate) const SLACK: f64 = 2.0;
/// Parameters of the example's model: 64·512+512 + 512·512+512 + 512·10+10.
pub(crate) const MODEL_PARAMS: u64 = 301_066;

/// The virtualenv with torch, from `TIDEMILL_TORCH_VENV`.
pub(crate) fn venv() -> PathBuf {
    let venv = std::env::var_os("TIDEMILL_TORCH_VENV").expect(
        "TIDEMILL_TORCH_VENV names the virtualenv with torch; run tests/pytorch/run.sh, which makes one",
    );
    PathBuf::from(venv)
}

pub(crate) fn python() -> PathBuf {
    venv().join("bin").join("python")
}

/// The example trainer that these tests run.
pub(crate) fn trainer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../edge/examples/pytorch/train_ddp.py")
}

/// The trainer measured on this machine: iterations per wall second with
/// its start-up included, on one worker and on two local workers, and its
/// start-up alone, wall seconds.
pub(crate) struct Rates {
    pub(crate) one: f64,
    pub(crate) two: f64,
    pub(crate) startup_s: f64,
}

/// Runs the trainer standalone for `iterations` on `workers` local workers;
/// returns the wall seconds it took.
pub(crate) fn run_standalone(workers: u32, iterations: u32) -> f64 {
    let dir = support::tempdir();
    let began = Instant::now();
    let out = Command::new(python())
        .arg(trainer())
        .env("TIDEMILL_CHECKPOINT_DIR", dir.path().join("checkpoints"))
        .env("TIDEMILL_ITERATIONS", iterations.to_string())
        .env("TIDEMILL_BATCH_SIZE", BATCH.to_string())
        .env("TIDEMILL_WORKERS", workers.to_string())
        .env("MASTER_PORT", support::free_port().to_string())
        .output()
        .expect("run the trainer");
    let wall = began.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("trained {iterations} iterations")),
        "the standalone trainer on {workers} workers: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wall
}

/// The rates, measured once per run.
pub(crate) fn rates() -> &'static Rates {
    static RATES: OnceLock<Rates> = OnceLock::new();
    RATES.get_or_init(|| {
        let rate = |workers| f64::from(MEASURE_ITERS) / run_standalone(workers, MEASURE_ITERS);
        let rates = Rates {
            one: rate(1),
            two: rate(2),
            // One step: the interpreter, torch's import, the process group.
            startup_s: run_standalone(1, 1),
        };
        eprintln!(
            "measured: {:.1} it/s on one worker, {:.1} it/s on two (start-up included); \
             start-up {:.2} s",
            rates.one, rates.two, rates.startup_s
        );
        rates
    })
}

/// Accelerated seconds a start of the trainer is planned to take, the
/// coordinator's `restart_s`: twice its start-up alone, for the edge's start
/// of the task and the cores it shares. Left at the default 30 s, a start-up
/// of 2 wall seconds is 40 accelerated minutes the plan does not expect, and
/// the job's first report (its count, far below the estimate) can make it
/// look unable to meet its deadline.
pub(crate) fn restart_s() -> f64 {
    2.0 * rates().startup_s * SPEED
}

/// A coordinator that plans [`restart_s`] for each start.
pub(crate) fn torch_coordinator(coord: support::Coordinator) -> support::Coordinator {
    coord.with_env(
        "TIDEMILL_SCHEDULER__TIDEMILL__RESTART_S",
        &format!("{:.0}", restart_s()),
    )
}

/// A wall rate as the rate a job declares: a share of it, per accelerated second.
pub(crate) fn declared(rate: f64) -> f64 {
    DECLARED_SHARE * rate / SPEED
}

/// A job of the example trainer.
pub(crate) struct TorchJob<'a> {
    pub(crate) name: &'a str,
    pub(crate) iterations: u32,
    /// Accelerated ms from now to its deadline.
    pub(crate) deadline_in_ms: i64,
    pub(crate) min_workers: u32,
    pub(crate) max_workers: u32,
    /// What the coordinator does when no plan meets the deadline.
    pub(crate) on_infeasible: &'a str,
    /// Whether it declares its own rate, one worker's, in its `[work]`
    /// table; if not, the coordinator's `torch` table gives its rates.
    pub(crate) own_rate: bool,
}

/// Writes job `j`'s file under `dir` and submits it; returns its id. Its
/// checkpoints go where the edges put them ([`support::checkpoint_dir`]).
pub(crate) fn submit(cluster: &Cluster, dir: &Path, j: &TorchJob) -> u64 {
    let deadline = chrono::DateTime::from_timestamp_millis(cluster.tide_now() + j.deadline_in_ms)
        .unwrap()
        .to_rfc3339();
    let file = dir.join(format!("{}.toml", j.name));
    std::fs::write(
        &file,
        format!(
            r#"name = "{name}"
command = [{python:?}, {trainer:?}]
deadline = "{deadline}"
on_infeasible = "{on_infeasible}"
[env]
TIDEMILL_ITERATIONS = "{iters}"
TIDEMILL_BATCH_SIZE = "{BATCH}"
TIDEMILL_LOG_EVERY = "25"
TIDEMILL_CHECKPOINT_EVERY = "{CHECKPOINT_EVERY}"
[work]
model = "torch"
iterations = {iters}
global_batch = {BATCH}
model_bytes = {bytes}
checkpoint_bytes = {ckpt}
min_workers = {min}
max_workers = {max}
{rate}"#,
            name = j.name,
            on_infeasible = j.on_infeasible,
            python = python().display().to_string(),
            trainer = trainer().display().to_string(),
            iters = j.iterations,
            bytes = 4 * MODEL_PARAMS,
            // Model and Adam's two moments.
            ckpt = 12 * MODEL_PARAMS,
            min = j.min_workers,
            max = j.max_workers,
            rate = if j.own_rate {
                format!("[work.iters_per_s]\ncpu = {}\n", declared(rates().one))
            } else {
                String::new()
            },
        ),
    )
    .unwrap();
    cluster.coord.submit_file(&file)
}

/// Waits for job `id` (`j`) to succeed, as long as its deadline allows in
/// wall time and [`PATIENCE`] more: on a loaded box a job may take most of
/// its slack, and one that finishes late fails on its deadline, not on the
/// test's patience.
pub(crate) fn succeeded(
    cluster: &Cluster,
    id: u64,
    j: &TorchJob,
) -> (serde_json::Value, Vec<String>) {
    let to_deadline = Duration::from_secs_f64(j.deadline_in_ms as f64 / 1e3 / SPEED);
    cluster.wait_until_succeeded_within(id, to_deadline + PATIENCE)
}

/// How much of its time to the deadline job `shown` used, from its
/// submission to its finish: `(finished − submitted) / (deadline −
/// submitted)`, as a percentage, with both spans in accelerated hours.
pub(crate) fn deadline_use(shown: &serde_json::Value) -> String {
    let h = |to: &str| {
        (job_time(shown, to) - job_time(shown, "submitted_at")).as_seconds_f64() / 3600.0
    };
    let (took, allowed) = (h("finished_at"), h("deadline"));
    format!(
        "finished {took:.1} h after submission, deadline {allowed:.1} h: {:.0} % of its time",
        100.0 * took / allowed
    )
}

/// The first and the last loss of the run, from the trainer's closing line
/// (`...; loss A at step S -> B`).
pub(crate) fn first_and_last_loss(tail: &str) -> (f64, f64) {
    let parsed = tail.split("; loss ").nth(1).and_then(|rest| {
        let first = rest.split(' ').next()?.parse().ok()?;
        let last = rest
            .split(" -> ")
            .nth(1)?
            .split(['"', ' '])
            .next()?
            .parse()
            .ok()?;
        Some((first, last))
    });
    parsed.unwrap_or_else(|| panic!("the trainer's closing line gives its losses: {tail}"))
}

/// A cluster of `names`, each idle all day.
pub(crate) fn idle_cluster(dir: &Path, names: &[&str], throughput: &str) -> Cluster {
    idle_cluster_with(dir, names, throughput, &|_, cmd| cmd)
}

/// [`idle_cluster`], each edge's command as `edge` makes it.
pub(crate) fn idle_cluster_with(
    dir: &Path,
    names: &[&str],
    throughput: &str,
    edge: &dyn Fn(&str, std::process::Command) -> std::process::Command,
) -> Cluster {
    let trace = write_idle_trace(dir, names);
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let net = Net {
        coord: torch_coordinator(support::Coordinator::new(dir)),
        edge,
        probe_interval_secs: 1,
    };
    Cluster::start_on(dir, &trace, &nodes, &[], names, throughput, None, net)
}

/// Writes the `torch` model's throughput table for the `cpu` class under
/// `dir`, one and two workers at `one` and `two` wall iterations per second
/// (declared as [`declared`] says); returns the `[scheduler.throughput]`
/// line that points the coordinator at it.
pub(crate) fn write_torch_table(dir: &Path, one: f64, two: f64) -> String {
    let tables = dir.join("throughputs");
    std::fs::create_dir_all(&tables).unwrap();
    std::fs::write(
        tables.join("torch.csv"),
        format!(
            "global_batch_size,1,2\n{BATCH},{},{}\n",
            declared(one),
            declared(two)
        ),
    )
    .unwrap();
    format!("cpu = {:?}\n", tables.display().to_string())
}

/// Iterations that take [`JOB_HOURS`] of tide at the rate declared for
/// `wall_rate`, at least `at_least`. The trainer's speed is measured on the
/// machine as it is, so a loaded box's job gets fewer iterations: at a fixed
/// count, its slower rate stretched a job past the forecast horizon, where
/// no plan can show it meets its deadline, and it was turned away.
pub(crate) fn iterations_for(wall_rate: f64, at_least: u32) -> u32 {
    ((JOB_HOURS * 3600.0 * declared(wall_rate)) as u32).max(at_least)
}

/// Accelerated ms for `starts` start-ups ([`restart_s`]) and `iterations`
/// at the rate declared for `wall_rate`, times `slack`.
pub(crate) fn deadline_ms(iterations: u32, wall_rate: f64, starts: u32, slack: f64) -> i64 {
    let declared_s = f64::from(starts) * restart_s() + f64::from(iterations) / declared(wall_rate);
    (declared_s * slack * 1e3) as i64
}
