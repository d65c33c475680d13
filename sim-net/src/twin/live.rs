//! One live run of a slice: a real coordinator, the emulated edges of its
//! world, the trace's jobs submitted on the tide clock, and the run's row.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tidemill_cloud::job::{JobFile, JobPhase, JobRecord, Work};
use tidemill_runtime::clock::{self, Phase, SharedClock};
use tidemill_runtime::identity::JoinToken;
use tidemill_runtime::quic::{self, Timing};
use tidemill_sched::DataSite;

use super::cloud::Cloud;
use super::edge::{Edge, Shared};
use super::lag::LivePath;
use super::probes::ModelLinks;
use super::report::{self, LiveRow};
use super::tasks::{Event, History, Registry, TideLoad};
use super::{Args, TwinError, chart};
use crate::edge_link::Dialer;
use crate::simulate;
use crate::simulate::engine::World;
use crate::simulate::jobs::TraceJob;
use crate::simulate::policies::JobRun;

/// Emulated edges that share one UDP socket.
const EDGES_PER_SOCKET: usize = 250;

/// Wall seconds the coordinator gets to start serving; a slower start eats
/// into the edges' lead.
const START_WALL_S: f64 = 3.0;

/// Wall seconds of tide the edges get to connect and forecast before the
/// first job's submission.
const LEAD_WALL_S: f64 = 5.0;

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
/// step before it exits), then the exit, both dated when the job finished
/// within the tick, not at the tick's end (the engine dates a finish to the
/// millisecond; a 75-s tick would make every live finish up to 75 s late).
async fn advance(shared: Arc<Shared>, edges: Vec<Arc<Edge>>) {
    let tick = Duration::from_millis((shared.sample_ms / 4).max(1) as u64);
    let mut last = shared.clock.now_ms();
    loop {
        shared.clock.sleep(tick).await;
        let now = shared.clock.now_ms();
        let dt_s = (now - last) as f64 / 1000.0;
        for Event::Finished { task, at_ms } in shared.registry.advance(last, dt_s, &shared.load) {
            let edge = &edges[task.node as usize];
            if let Some(done) = shared.registry.done(task.job_id) {
                edge.journal(tidemill_proto::ReportBody::Progress(
                    tidemill_proto::TaskProgress {
                        task_id: task.task_id,
                        job_id: task.job_id,
                        t_ms: at_ms,
                        iterations: done.floor() as u64,
                    },
                ));
            }
            edge.task_event_at(
                &task,
                tidemill_proto::TaskEvent::Exited {
                    exit_code: Some(0),
                    signal: None,
                    cancelled: false,
                },
                at_ms,
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
    stop: &AtomicBool,
) -> Result<Vec<Option<Submitted>>, TwinError> {
    let mut out = Vec::new();
    for j in &world.jobs {
        let at = j.spec.submitted_ms + shared.load.offset_ms;
        std::thread::sleep(clock.wall_until(at));
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let late_ms = (clock.now_ms() - at).max(0);
        let file = job_file(j, shared.load.offset_ms + late_ms, world.end_ms);
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
pub(super) struct Live {
    pub(super) row: LiveRow,
    pub(super) runs: Vec<JobRun>,
    pub(super) records: Vec<Option<JobRecord>>,
}

/// One live run of `world` (the scenario's, or the same with no edge box),
/// its coordinator under `dir`, its progress bar labelled `label`.
pub(super) fn run_in(
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
    // The trace starts a lead after the anchor, time for the coordinator to
    // start and the edges to connect and forecast before the first job; the
    // `--speed-from` phases count from there.
    let lead_ms = ((START_WALL_S + LEAD_WALL_S) * args.speed * 1000.0) as i64;
    let offset_ms = anchor + lead_ms - world.window.0;
    let phases: Vec<Phase> = args
        .speed_from
        .iter()
        .map(|p| Phase {
            from_ms: anchor + lead_ms + p.offset_ms(),
            speed: p.speed,
        })
        .collect();
    let clock = clock::for_phases(args.speed, Some(anchor), &phases);
    let cloud = Cloud::start(bin, dir, setup, args.policy, (args.speed, &phases), anchor)?;
    let (forecast, refresh_ms) = setup.forecast_config()?;
    let shared = Arc::new(Shared {
        registry: Registry::new(world.model.clone()),
        load: TideLoad {
            edges: world.edges.clone(),
            offset_ms,
            window_end_ms: world.window.1,
            round_ms: i64::from(setup.topology.engine.slot_s.max(1)) * 1000,
        },
        clock: clock.clone(),
        sample_ms: i64::from(setup.topology.engine.truth_bin_s.max(1)) * 1000,
        refresh_ms,
        forecast,
        probe_ms: tidemill_edge::config::EdgeConfig::default()
            .probe
            .interval_secs
            .saturating_mul(1000) as i64,
        links: ModelLinks::new(&world.model),
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
    wait_for_nodes(
        &cloud,
        edges.len(),
        clock.wall_until(offset_ms + world.window.0),
    );
    let start_tide = clock.now_ms();
    let end_tide = world.end_ms + offset_ms;
    let bar = ProgressBar::new(1000);
    bar.set_style(simulate::bar_style());
    bar.set_prefix(label.to_string());
    let stop = AtomicBool::new(false);
    let ids = std::thread::scope(|s| {
        let submitter = s.spawn(|| submit_all(world, &cloud, &clock, &shared, &stop));
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
            let sub = ids.get(k).copied().flatten();
            let history = sub.map_or_else(History::default, |s| shared.registry.history(s.id));
            report::job_run(j, record, offset_ms + late_ms(k), history)
        })
        .collect();
    let wall_s = started.elapsed().as_secs_f64();
    let row = LiveRow {
        metrics: report::live_row(
            args.policy.as_str(),
            &runs,
            &shared.registry.ledger(),
            crate::simulate::engine::edge_totals(world),
            wall_s,
        ),
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
