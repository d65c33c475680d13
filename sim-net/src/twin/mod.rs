//! `tidemill-sim twin`: a scenario's world run live. A real `tidemill-cloud
//! serve` ([`cloud`]) on the accelerated clock, one emulated edge per node
//! of the scenario ([`edge`]) that replays its box's load, forecasts with
//! the real forecaster and runs its tasks in emulation ([`tasks`]), and the
//! trace's jobs submitted through the HTTP API at their submission times.
//! At the end the coordinator's jobs are summarised as `simulate` summarises
//! its own ([`report`]), and with `--compare` set beside the simulator's run
//! of the same slice.

pub mod chart;
pub mod cloud;
pub mod edge;
pub mod lag;
pub mod report;
pub mod tasks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use thiserror::Error;
use tidemill_cloud::client::ClientError;
use tidemill_cloud::job::{JobFile, JobPhase, JobRecord, Work};
use tidemill_runtime::clock::{self, SharedClock};
use tidemill_runtime::identity::JoinToken;
use tidemill_runtime::quic::{self, Timing};
use tidemill_sched::DataSite;

use crate::edge_link::Dialer;
use crate::simulate::engine::World;
use crate::simulate::jobs::TraceJob;
use crate::simulate::policies::JobRun;
use crate::simulate::policies::PolicyName;
use crate::simulate::variants::Variant;
use crate::simulate::{self, SimError, policy_parser};
use cloud::Cloud;
use edge::{Edge, Shared};
use lag::LivePath;
use report::{LiveRow, TwinReport};
use tasks::{Event, Registry};

/// Emulated edges that share one UDP socket.
const EDGES_PER_SOCKET: usize = 250;

/// Wall seconds of tide the edges get to connect and forecast before the
/// first job's submission.
const LEAD_WALL_S: f64 = 5.0;

/// Options of `twin`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The scenario (TOML), as `simulate --topology` takes it.
    #[arg(long)]
    pub topology: PathBuf,
    /// Job trace (overrides the scenario's `jobs`).
    #[arg(long)]
    pub jobs: Option<PathBuf>,
    /// Run only the first N jobs (by submission).
    #[arg(long, conflicts_with = "days")]
    pub max_jobs: Option<usize>,
    /// Run only the jobs submitted in the first N days of the trace.
    #[arg(long)]
    pub days: Option<f64>,
    /// Accelerated seconds per wall second, for the coordinator and the edges.
    #[arg(long, default_value_t = 600.0)]
    pub speed: f64,
    /// The policy the coordinator runs.
    #[arg(long, default_value = "tidemill", value_parser = policy_parser())]
    pub policy: PolicyName,
    /// The coordinator binary (default: the `tidemill-cloud` beside this one).
    #[arg(long)]
    pub cloud_bin: Option<PathBuf>,
    /// Seed of the deadline generator and the per-box load variation, as
    /// for `simulate`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also run the simulator on the same slice and list the jobs whose
    /// outcome differs.
    #[arg(long)]
    pub compare: bool,
    /// Skip the second live run, on the same world with no edge boxes, that
    /// `edge_gain` needs: about half the wall time, and the live row's
    /// `edge_gain` is then not measured (null in JSON).
    #[arg(long)]
    pub no_edge_gain: bool,
    /// Write an SVG chart of the deadline satisfaction ratio over the
    /// slice here: one line per live run, and the simulator's with
    /// `--compare`.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Keep the coordinator's data dir, config and log here (default: a
    /// temporary dir, removed after a run that succeeded).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// Why `twin` could not run.
#[derive(Debug, Error)]
pub enum TwinError {
    /// The scenario could not be loaded or simulated.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A flag is out of range.
    #[error("--{flag} {value}: {rule}")]
    BadOption {
        /// The flag, without dashes.
        flag: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
    /// A file or process could not be handled.
    #[error("twin: {0}")]
    Io(std::io::Error),
    /// The coordinator's config could not be made.
    #[error("cannot make the coordinator's config: {0}")]
    Config(String),
    /// The coordinator binary could not run.
    #[error(
        "cannot run the coordinator {0}: {1}; build it (cargo build -p tidemill-cloud) or pass --cloud-bin"
    )]
    CloudBin(PathBuf, std::io::Error),
    /// The coordinator exited.
    #[error("the coordinator exited ({0}); its log is {1}")]
    CloudExited(String, PathBuf),
    /// The coordinator did not start serving in time.
    #[error("the coordinator did not serve within {0:?}; its log is {1}")]
    CloudSlow(Duration, PathBuf),
    /// The API refused a call.
    #[error("the coordinator's API: {0}")]
    Api(#[from] ClientError),
    /// The QUIC client could not be made.
    #[error("cannot make the QUIC client: {0}")]
    Endpoint(#[from] quic::EndpointError),
    /// The join token the coordinator gave is malformed.
    #[error(transparent)]
    Token(#[from] tidemill_runtime::identity::TokenError),
    /// The chart could not be drawn or written.
    #[error("--svg {0}: cannot write the chart: {1}")]
    Svg(PathBuf, String),
    /// Writing the report failed.
    #[error("cannot write the report to stdout: {0}")]
    Stdout(std::io::Error),
}

/// The options `simulate` takes for the same slice.
fn sim_args(args: &Args, max_jobs: Option<usize>) -> simulate::Args {
    simulate::Args {
        topology: args.topology.clone(),
        jobs: args.jobs.clone(),
        jobs_format: None,
        throughputs: Vec::new(),
        utilization: None,
        mapping: Default::default(),
        policies: vec![args.policy],
        oracle_forecast: false,
        seed: args.seed,
        json: false,
        plot: None,
        max_jobs,
        edge_boxes: None,
        cloud_nodes: None,
        arrival_scale: None,
        upper_bound: false,
        lp_bound: false,
    }
}

/// The scenario, cut to the slice asked for.
fn load(args: &Args) -> Result<simulate::Setup, TwinError> {
    let Some(days) = args.days else {
        return Ok(simulate::setup(&sim_args(args, args.max_jobs))?);
    };
    if !(days.is_finite() && days > 0.0) {
        return Err(TwinError::BadOption {
            flag: "days",
            value: days.to_string(),
            rule: "must be a positive number of days",
        });
    }
    let whole = simulate::setup(&sim_args(args, None))?;
    let first = whole.world.window.0;
    let n = whole
        .world
        .jobs
        .iter()
        .take_while(|j| j.spec.submitted_ms < first + (days * 86_400_000.0) as i64)
        .count();
    Ok(simulate::setup(&sim_args(args, Some(n)))?)
}

/// The coordinator binary: `--cloud-bin`, else `tidemill-cloud` beside this program.
fn cloud_bin(args: &Args) -> Result<PathBuf, TwinError> {
    if let Some(b) = &args.cloud_bin {
        return Ok(b.clone());
    }
    let me = std::env::current_exe().map_err(TwinError::Io)?;
    Ok(me.with_file_name("tidemill-cloud"))
}

/// The job file the twin submits for trace job `j`, on the tide clock.
fn job_file(j: &TraceJob, offset_ms: i64, end_ms: i64) -> JobFile {
    let s = &j.spec;
    // A best-effort job's trace deadline may be unset (far past the run, or
    // before its submission): it gets the run's end.
    let deadline_ms = chart::due_ms(s, end_ms);
    JobFile {
        name: format!("trace-{}", j.spec.id),
        command: vec!["emulated".into()],
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        deadline: chrono::DateTime::from_timestamp_millis(deadline_ms + offset_ms)
            .unwrap_or_default(),
        class: s.class,
        on_infeasible: s.on_infeasible,
        work: Some(Work {
            model: s.model.clone(),
            iterations: s.iterations,
            global_batch: s.global_batch,
            model_bytes: s.model_bytes,
            dataset_bytes: s.dataset_bytes,
            dataset_site: match &s.dataset_site {
                DataSite::Cloud => "cloud".into(),
                DataSite::Node(n) => n.clone(),
            },
            min_workers: s.min_workers,
            max_workers: s.max_workers,
            memory_per_worker_bytes: s.memory_per_worker_bytes,
            checkpoint_bytes: s.checkpoint_bytes,
            iters_per_s: BTreeMap::new(),
        }),
        // Submission lags the trace by a little on a loaded box; the
        // coordinator decides what a late deadline means.
        allow_past_deadline: true,
        requires: Vec::new(),
        checkpoint_interval_min: Some(s.checkpoint_interval_s / 60.0),
    }
}

/// Whether a job is over, as far as the coordinator is concerned.
fn ended(r: &JobRecord) -> bool {
    !matches!(r.state, JobPhase::Queued | JobPhase::Running)
}

/// Starts every node's emulated edge on the current runtime.
fn start_edges(
    world: &World,
    cloud: &Cloud,
    shared: &Arc<Shared>,
) -> Result<Vec<Arc<Edge>>, TwinError> {
    let nodes = world.model.nodes();
    let endpoints: Vec<quinn::Endpoint> = (0..nodes.len().div_ceil(EDGES_PER_SOCKET))
        .map(|_| quic::bare_client())
        .collect::<Result<_, _>>()?;
    let token: JoinToken = cloud.join_token.parse()?;
    let joiner = quic::joiner_config(&token.ca_sha256, Timing::default())?;
    let join = Arc::new((token, joiner));
    let mut edges = Vec::new();
    for (k, n) in nodes.iter().enumerate() {
        let dialer = Dialer::new(
            endpoints[k / EDGES_PER_SOCKET].clone(),
            cloud.quic,
            "localhost".into(),
            join.clone(),
        );
        let e = Arc::new(Edge::new(
            k as u32,
            n.id.clone(),
            n.edge,
            n.class.clone(),
            n.devices,
            n.site.clone(),
            dialer,
            shared.clone(),
        ));
        tokio::spawn(e.clone().sample());
        tokio::spawn(e.clone().link());
        edges.push(e);
    }
    Ok(edges)
}

/// Advances the emulated tasks on the tide clock and reports the ends of
/// those whose job finished, until the runtime stops: the last progress
/// count (all the job's iterations, as a training script prints its last
/// step before it exits), then the exit.
async fn advance(shared: Arc<Shared>, edges: Vec<Arc<Edge>>) {
    let tick = Duration::from_millis((shared.sample_ms / 4).max(1) as u64);
    let mut last = shared.clock.now_ms();
    loop {
        shared.clock.sleep(tick).await;
        let now = shared.clock.now_ms();
        for Event::Finished(task) in shared.registry.advance((now - last) as f64 / 1000.0) {
            let edge = &edges[task.node as usize];
            if let Some(done) = shared.registry.done(task.job_id) {
                edge.journal(tidemill_proto::ReportBody::Progress(
                    tidemill_proto::TaskProgress {
                        task_id: task.task_id,
                        job_id: task.job_id,
                        t_ms: now,
                        iterations: done.floor() as u64,
                    },
                ));
            }
            edge.task_event(
                &task,
                tidemill_proto::TaskEvent::Exited {
                    exit_code: Some(0),
                    signal: None,
                    cancelled: false,
                },
            );
        }
        last = now;
    }
}

/// A trace job the coordinator took.
#[derive(Debug, Clone, Copy)]
struct Submitted {
    /// The coordinator's id.
    id: u64,
    /// Tide ms after its trace time that it was sent; its deadline moves
    /// by as much, so that it keeps the window the trace gives it.
    late_ms: i64,
}

/// Submits each trace job at its submission time on the tide clock;
/// returns what the coordinator took (`None` where the API refused it).
/// A job sent late (the API answers slowly on a loaded box, and every wall
/// ms is `speed` ms of tide) keeps its trace window from submission to
/// deadline.
fn submit_all(
    world: &World,
    cloud: &Cloud,
    clock: &SharedClock,
    shared: &Shared,
    speed: f64,
    stop: &AtomicBool,
) -> Result<Vec<Option<Submitted>>, TwinError> {
    let mut out = Vec::new();
    for j in &world.jobs {
        let at = j.spec.submitted_ms + shared.offset_ms;
        let wait_ms = ((at - clock.now_ms()) as f64 / speed).max(0.0);
        std::thread::sleep(Duration::from_secs_f64(wait_ms / 1000.0));
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let late_ms = (clock.now_ms() - at).max(0);
        let file = job_file(j, shared.offset_ms + late_ms, world.end_ms);
        match cloud.client.submit(&file) {
            Ok(id) => {
                shared.registry.submitted(id, j.spec.clone());
                out.push(Some(Submitted { id, late_ms }));
            }
            Err(e) => {
                tracing::warn!(job = %j.name, error = %e, "the coordinator refused a trace job");
                out.push(None);
            }
        }
    }
    Ok(out)
}

/// Waits until the coordinator lists `n` nodes online, `patience` at most;
/// warns if they are not all there by then (the first jobs then see fewer).
fn wait_for_nodes(cloud: &Cloud, n: usize, patience: Duration) {
    let started = Instant::now();
    loop {
        let online = cloud
            .client
            .nodes()
            .map_or(0, |ns| ns.iter().filter(|n| n.online).count());
        if online >= n {
            return;
        }
        if started.elapsed() >= patience {
            tracing::warn!(
                online,
                nodes = n,
                "not every emulated edge is connected by the first job's submission; the first rounds see fewer nodes"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One live run: its row, its jobs as the engine would have left them (on
/// the trace's clock), and the coordinator's records of them.
struct Live {
    row: LiveRow,
    runs: Vec<JobRun>,
    records: Vec<Option<JobRecord>>,
}

/// Runs the twin and returns its report.
pub fn twin(args: &Args) -> Result<TwinReport, TwinError> {
    if !(args.speed.is_finite() && (1.0..=100_000.0).contains(&args.speed)) {
        return Err(TwinError::BadOption {
            flag: "speed",
            value: args.speed.to_string(),
            rule: "must be between 1 and 100000 (the coordinator's clock.speed range)",
        });
    }
    if let Some(svg) = &args.svg {
        let parent = svg.parent().filter(|p| !p.as_os_str().is_empty());
        if parent.is_some_and(|p| !p.is_dir()) {
            return Err(TwinError::BadOption {
                flag: "svg",
                value: svg.display().to_string(),
                rule: "its directory must exist (the chart is written after the runs)",
            });
        }
    }
    let setup = load(args)?;
    let bin = cloud_bin(args)?;
    let dir = args.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tidemill-twin-{}", std::process::id()))
    });
    std::fs::create_dir_all(&dir).map_err(TwinError::Io)?;
    let result = run_all(args, &setup, &bin, &dir);
    if result.is_ok() && args.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// The live run, the live run with no edge boxes that `edge_gain` needs
/// (unless `--no-edge-gain`, or the policy never uses the edge, or there is
/// none: then, as in `simulate`, the gain is 0 without a run), and with
/// `--compare` the simulator's runs of both worlds; then the chart.
fn run_all(
    args: &Args,
    setup: &simulate::Setup,
    bin: &Path,
    dir: &Path,
) -> Result<TwinReport, TwinError> {
    let policy = args.policy.as_str();
    let mut live = run_in(
        args,
        setup,
        &setup.world,
        &format!("{policy} (live)"),
        bin,
        dir,
    )?;
    let runs = setup.runs()?;
    let without = if args.no_edge_gain || !runs.contains(&(args.policy, Variant::NoEdge)) {
        None
    } else {
        let label = format!("{policy} (live, no edge)");
        Some(run_in(
            args,
            setup,
            &setup.no_edge,
            &label,
            bin,
            &dir.join("no-edge"),
        )?)
    };
    if !args.no_edge_gain {
        live.row
            .metrics
            .set_edge_gain(without.as_ref().map(|w| &w.row.metrics));
        live.row.no_edge_wall_s = without.as_ref().map(|w| w.row.wall_s);
    }
    let (simulated, outcomes) = if args.compare {
        let results = runs
            .iter()
            .map(|&(p, v)| setup.run_one(p, v, false, &mut |_| {}))
            .collect::<Result<Vec<_>, _>>()?;
        setup.rows(&runs, results)
    } else {
        (Vec::new(), Vec::new())
    };
    let differing_jobs = outcomes.first().map_or_else(Vec::new, |o| {
        report::differing(&setup.world.jobs, &live.records, &live.runs, &o.jobs)
    });
    if let Some(path) = &args.svg {
        let mut lines: Vec<(&str, &[JobRun])> = vec![("live", &live.runs)];
        if let Some(w) = &without {
            lines.push(("live, no edge", &w.runs));
        }
        if let Some(o) = outcomes.first() {
            lines.push(("simulated", &o.jobs));
        }
        let (start, end) = (setup.world.window.0, setup.world.end_ms);
        chart::write_svg(path, policy, &lines, start, end)?;
    }
    Ok(TwinReport {
        live: vec![live.row],
        simulated,
        differing_jobs,
    })
}

/// One live run of `world` (the scenario's, or the same with no edge box),
/// its coordinator under `dir`, its progress bar labelled `label`.
fn run_in(
    args: &Args,
    setup: &simulate::Setup,
    world: &World,
    label: &str,
    bin: &Path,
    dir: &Path,
) -> Result<Live, TwinError> {
    std::fs::create_dir_all(dir).map_err(TwinError::Io)?;
    let started = Instant::now();
    let anchor = chrono::Utc::now().timestamp_millis();
    let clock = clock::for_speed(args.speed, Some(anchor));
    let cloud = Cloud::start(bin, dir, setup, args.policy, args.speed, anchor)?;
    // The trace starts a lead after the coordinator serves, whatever its
    // start-up took, so the edges connect and forecast before the first job.
    let lead_ms = (LEAD_WALL_S * args.speed * 1000.0) as i64;
    let offset_ms = clock.now_ms() + lead_ms - world.window.0;
    let (forecast, refresh_ms) = setup.forecast_config()?;
    let shared = Arc::new(Shared {
        registry: Registry::new(world.model.clone()),
        edges: world.edges.clone(),
        clock: clock.clone(),
        offset_ms,
        sample_ms: i64::from(setup.topology.engine.truth_bin_s.max(1)) * 1000,
        refresh_ms,
        forecast,
        reports: AtomicU64::new(0),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(TwinError::Io)?;
    let edges = {
        let _in_rt = rt.enter();
        let edges = start_edges(world, &cloud, &shared)?;
        rt.spawn(advance(shared.clone(), edges.clone()));
        edges
    };
    wait_for_nodes(&cloud, edges.len(), Duration::from_secs_f64(LEAD_WALL_S));
    let start_tide = clock.now_ms();
    let end_tide = world.end_ms + offset_ms;
    let bar = ProgressBar::new(1000);
    bar.set_style(simulate::bar_style());
    bar.set_prefix(label.to_string());
    let stop = AtomicBool::new(false);
    let ids = std::thread::scope(|s| {
        let submitter = s.spawn(|| submit_all(world, &cloud, &clock, &shared, args.speed, &stop));
        let span = (end_tide - start_tide).max(1) as f64;
        let done = |now: i64| (((now - start_tide) as f64 / span).clamp(0.0, 1.0) * 1000.0) as u64;
        loop {
            std::thread::sleep(Duration::from_millis(200));
            let now = clock.now_ms();
            bar.set_position(done(now));
            if now >= end_tide {
                stop.store(true, Ordering::Relaxed);
            }
            if submitter.is_finished() || now >= end_tide {
                break;
            }
        }
        let ids = submitter.join().expect("the submitter does not panic")?;
        let mut open: Vec<u64> = ids.iter().flatten().map(|s| s.id).collect();
        while !open.is_empty() && clock.now_ms() < end_tide {
            std::thread::sleep(Duration::from_millis(500));
            let now = clock.now_ms();
            bar.set_position(done(now));
            open.retain(|&id| cloud.client.job(id).map_or(true, |r| !ended(&r)));
        }
        Ok::<_, TwinError>(ids)
    })?;
    bar.finish_and_clear();
    let (cpu_s, rss_mib) = cloud.cost();
    let live_path = LivePath::measure(
        &cloud.client.metrics().unwrap_or_default(),
        &dir.join("cloud").join(tidemill_cloud::store::DB_FILE),
        (clock.now_ms().min(end_tide) - start_tide) as f64 / 1000.0,
        f64::from(setup.topology.engine.slot_s.max(1)),
    );
    let records: Vec<Option<JobRecord>> = ids
        .iter()
        .map(|sub| sub.and_then(|sub| cloud.client.job(sub.id).ok()))
        .collect();
    let late_ms = |k: usize| ids.get(k).copied().flatten().map_or(0, |s| s.late_ms);
    drop(edges);
    rt.shutdown_background();
    let runs: Vec<_> = world
        .jobs
        .iter()
        .enumerate()
        .map(|(k, j)| {
            let record = records.get(k).and_then(Option::as_ref);
            report::job_run(j, record, offset_ms + late_ms(k))
        })
        .collect();
    let wall_s = started.elapsed().as_secs_f64();
    let row = LiveRow {
        metrics: report::live_row(args.policy.as_str(), &runs, wall_s),
        coordinator_cpu_s: cpu_s,
        coordinator_rss_mib: rss_mib,
        reports_per_job: shared.reports.load(Ordering::Relaxed) as f64
            / world.jobs.len().max(1) as f64,
        submit_late_max_s: (0..ids.len()).map(late_ms).max().unwrap_or(0) as f64 / 1000.0,
        wall_s,
        no_edge_wall_s: None,
        live_path,
    };
    Ok(Live { row, runs, records })
}

/// Runs `twin` and prints its report.
pub fn run(args: &Args) -> Result<(), TwinError> {
    tidemill_runtime::lifecycle::init_logging("warn");
    let report = twin(args)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).map_err(|e| TwinError::Stdout(e.into()))?;
        writeln(&mut out)
    } else {
        report.write_table(&mut out).map_err(TwinError::Stdout)
    }
}

fn writeln(out: &mut impl std::io::Write) -> Result<(), TwinError> {
    writeln!(out).map_err(TwinError::Stdout)
}
