//! `tidemill-sim demo`: a whole tidemill cluster on loopback, in one process and
//! with no outside data. A coordinator and several edges run the real daemon
//! code; the edges replay a freshly generated tidal trace in accelerated time,
//! so a day of tide passes in under a minute. Jobs are submitted through the
//! operator API and placed on edges while the tide is out.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tidemill_cloud::client::{Client, ClientError};
use tidemill_cloud::config::{ClockConfig, CloudConfig};
use tidemill_cloud::job::{JobFile, JobPhase, JobRecord, Work};
use tidemill_edge::config::{EdgeConfig, ReplayConfig};
use tidemill_runtime::clock::{self, Clock, SharedClock, SystemClock};
use tidemill_runtime::identity::JoinToken;
use tidemill_sched::{JobClass, OnInfeasible};
use tokio::sync::watch;

use crate::gen_trace;

/// Marks a directory as the demo's own, so a rerun may wipe it.
const MARKER: &str = ".tidemill-demo";

/// Options of `demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Where the demo keeps its data: trace, coordinator database, edge journals.
    /// Wiped at start if an earlier demo made it.
    #[arg(long, default_value = "tidemill-demo")]
    pub data_dir: PathBuf,
    /// Edge boxes to run.
    #[arg(long, default_value_t = 3)]
    pub edges: u32,
    /// Trace seconds per wall second (3600: an hour of tide per second).
    #[arg(long, default_value_t = 3600.0)]
    pub speed: f64,
    /// Seed of the generated trace.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Give up after this many wall seconds.
    #[arg(long, default_value_t = 180)]
    pub timeout_secs: u64,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// An option is out of range.
    #[error("--{flag} {value}: {rule}")]
    BadOption {
        /// The option.
        flag: &'static str,
        /// Its value.
        value: String,
        /// The rule.
        rule: &'static str,
    },
    /// The data dir belongs to something else.
    #[error("{0} exists and was not made by the demo; pass another --data-dir")]
    ForeignDir(PathBuf),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The trace could not be generated.
    #[error(transparent)]
    Trace(#[from] gen_trace::GenError),
    /// The coordinator failed.
    #[error(transparent)]
    Cloud(#[from] tidemill_cloud::server::CloudError),
    /// An edge failed.
    #[error("edge {node}: {source}")]
    Edge {
        /// The edge.
        node: String,
        /// Its error.
        source: tidemill_edge::daemon::EdgeError,
    },
    /// The API refused a call.
    #[error(transparent)]
    Api(#[from] ClientError),
    /// Jobs did not end as expected.
    #[error("{0}")]
    Outcome(String),
}

/// One demo job.
struct DemoJob {
    name: &'static str,
    command: &'static str,
    expect: JobPhase,
    /// The trace hour at which it is submitted.
    at_hour: f64,
    /// Its training work in one-second epochs, which lets the tidal scheduler
    /// plan it; `None` for a job without a `[work]` section.
    epochs: Option<f64>,
}

/// The jobs submitted: night jobs planned into the tide, one that fails on
/// purpose, and noon jobs that wait for the next night.
const JOBS: &[DemoJob] = &[
    DemoJob {
        name: "resnet50-night-1",
        command: "echo epoch 1; sleep 1; echo epoch 2; sleep 1; echo checkpoint saved",
        expect: JobPhase::Succeeded,
        at_hour: 0.0,
        epochs: Some(2.0),
    },
    DemoJob {
        name: "bert-night-2",
        command: "echo epoch 1; sleep 2; echo checkpoint saved",
        expect: JobPhase::Succeeded,
        at_hour: 0.0,
        epochs: Some(2.0),
    },
    DemoJob {
        name: "vgg16-night-3",
        command: "echo epoch 1; sleep 1; echo checkpoint saved",
        expect: JobPhase::Succeeded,
        at_hour: 0.0,
        epochs: Some(1.0),
    },
    DemoJob {
        name: "broken-config",
        command: "echo loading config; echo 'no such dataset' >&2; exit 3",
        expect: JobPhase::Failed,
        at_hour: 0.0,
        epochs: None,
    },
    DemoJob {
        name: "gpt2-noon-1",
        command: "echo epoch 1; sleep 1; echo checkpoint saved",
        expect: JobPhase::Succeeded,
        at_hour: 12.0,
        epochs: Some(1.0),
    },
    DemoJob {
        name: "gpt2-noon-2",
        command: "echo epoch 1; sleep 1; echo checkpoint saved",
        expect: JobPhase::Succeeded,
        at_hour: 12.0,
        epochs: Some(1.0),
    },
];

/// Hours of tide from submission to each job's deadline.
const DEADLINE_HOURS: i64 = 14;

/// Runs the demo; see the module docs.
pub fn run(args: &Args) -> Result<(), DemoError> {
    if args.edges == 0 || args.edges > 64 {
        return Err(DemoError::BadOption {
            flag: "edges",
            value: args.edges.to_string(),
            rule: "must be 1 to 64",
        });
    }
    if !(args.speed.is_finite() && (1.0..=100_000.0).contains(&args.speed)) {
        return Err(DemoError::BadOption {
            flag: "speed",
            value: args.speed.to_string(),
            rule: "must be between 1 and 100000",
        });
    }
    tidemill_runtime::lifecycle::init_logging("warn");
    prepare_dir(&args.data_dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| DemoError::Io {
            path: args.data_dir.clone(),
            source,
        })?;
    rt.block_on(cluster(args))
}

fn prepare_dir(dir: &Path) -> Result<(), DemoError> {
    let io = |source| DemoError::Io {
        path: dir.to_owned(),
        source,
    };
    if dir.exists() {
        if !dir.join(MARKER).exists() {
            return Err(DemoError::ForeignDir(dir.to_owned()));
        }
        std::fs::remove_dir_all(dir).map_err(io)?;
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(
        dir.join(MARKER),
        "made by tidemill-sim demo; safe to delete\n",
    )
    .map_err(io)
}

async fn cluster(args: &Args) -> Result<(), DemoError> {
    let trace = args.data_dir.join("trace.csv");
    gen_trace::run(&gen_trace::Args {
        nodes: args.edges,
        days: 2,
        seed: args.seed,
        step_s: 300,
        start_s: 1_704_067_200,
        gpu_share: 0.5,
        acyclic_share: 0.0,
        out: trace.clone(),
    })?;
    println!(
        "generated a 2-day tidal trace for {} edges: {}",
        args.edges,
        trace.display()
    );

    // The coordinator and the edges share one accelerated clock from here.
    let anchor = SystemClock.now_ms();
    let cloud_cfg = CloudConfig {
        quic_listen: "127.0.0.1:0".parse().expect("valid address"),
        api_listen: "127.0.0.1:0".parse().expect("valid address"),
        data_dir: args.data_dir.join("cloud"),
        // A round every quarter of a wall second, in accelerated seconds.
        round_interval_secs: 0.25 * args.speed,
        clock: ClockConfig {
            speed: args.speed,
            anchor_ms: Some(anchor),
        },
        ..CloudConfig::default()
    };
    let coordinator_clock = clock::for_speed(args.speed, Some(anchor));
    let server = tidemill_cloud::server::start(cloud_cfg, coordinator_clock.clone()).await?;
    println!(
        "coordinator: QUIC {}  API http://{}",
        server.quic_addr, server.api_addr
    );

    // The edges join with a token, as real ones do.
    let token = JoinToken::generate(&server.coordinator.authority().pin());
    server
        .coordinator
        .store
        .lock()
        .unwrap()
        .create_token(
            &token,
            "demo edges",
            SystemClock.now_ms(),
            None,
            Some(args.edges as i64),
        )
        .map_err(tidemill_cloud::server::CloudError::from)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut edges = tokio::task::JoinSet::new();
    for i in 0..args.edges {
        let node = format!("node-{i:03}");
        let mut cfg = EdgeConfig {
            node_id: node.clone(),
            coordinator: server.quic_addr.to_string(),
            token: token.reveal(),
            data_dir: args.data_dir.join(&node),
            sample_interval_secs: 300.0,
            replay: Some(ReplayConfig {
                file: trace.clone(),
                node: node.clone(),
                speed: args.speed,
                clock_anchor_ms: Some(anchor),
                prime_history: true,
            }),
            ..EdgeConfig::default()
        };
        cfg.accelerators.nvidia_smi = String::new();
        let mut stop = stop_rx.clone();
        edges.spawn(async move {
            let result = tidemill_edge::daemon::run(cfg, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
            result.map_err(|source| DemoError::Edge { node, source })
        });
    }
    println!(
        "started {} edges replaying the trace at {}x (an hour of tide every {:.1} s)\n",
        args.edges,
        args.speed,
        3600.0 / args.speed
    );

    let client = Arc::new(Client::new(&format!("http://{}", server.api_addr)));
    let outcome = watch_jobs(args, &client, &coordinator_clock, anchor).await;
    stop_tx.send_replace(true);
    while let Some(joined) = edges.join_next().await {
        if let Ok(Err(e)) = joined {
            eprintln!("{e}");
        }
    }
    server.stop().await;
    println!(
        "\ndata kept in {} (coordinator database: cloud/tidemill.db)",
        args.data_dir.display()
    );
    outcome
}

/// Submits the jobs at their trace hours and prints progress until all end.
async fn watch_jobs(
    args: &Args,
    client: &Arc<Client>,
    coordinator_clock: &SharedClock,
    anchor: i64,
) -> Result<(), DemoError> {
    let mut submitted: Vec<(u64, JobPhase)> = Vec::new();
    let mut reasons: std::collections::HashMap<u64, String> = std::collections::HashMap::new();
    let wall = SystemClock;
    let started = wall.now_ms();
    loop {
        let hour = (coordinator_clock.now_ms() - anchor) as f64 / 3_600_000.0;
        // Jobs go in once every edge has sent its first forecast, so that
        // admission sees the tide.
        let c = client.clone();
        let nodes = blocking(move || c.nodes()).await?;
        let forecasting = nodes.iter().filter(|n| n.forecast.is_some()).count();
        for job in JOBS.iter().skip(submitted.len()) {
            if hour < job.at_hour || forecasting < args.edges as usize {
                break;
            }
            let spec = job_spec(job, args.speed, coordinator_clock.now_ms());
            let c = client.clone();
            let id = blocking(move || c.submit(&spec)).await?;
            println!(
                "[tide {:>5}] submitted job {id} {}",
                clock_text(hour),
                job.name
            );
            submitted.push((id, job.expect));
        }
        let c = client.clone();
        let jobs = blocking(move || c.jobs()).await?;
        let loads: Vec<String> = nodes
            .iter()
            .map(|n| {
                format!(
                    "{} {:>3}",
                    n.id,
                    n.cpu_util.map_or("-".into(), |c| format!("{c:.0}%"))
                )
            })
            .collect();
        for j in jobs
            .iter()
            .filter(|j| j.state == JobPhase::Queued && j.node.is_none())
        {
            let reason = j.reason.clone().unwrap_or_default();
            if reasons.get(&j.id) != Some(&reason) {
                println!(
                    "[tide {:>5}] job {} waits: {reason}",
                    clock_text(hour),
                    j.id
                );
                reasons.insert(j.id, reason);
            }
        }
        let count = |s: JobPhase| jobs.iter().filter(|j| j.state == s).count();
        println!(
            "[tide {:>5}] cpu: {} | jobs queued {} running {} succeeded {} failed {}",
            clock_text(hour),
            loads.join("  "),
            count(JobPhase::Queued),
            count(JobPhase::Running),
            count(JobPhase::Succeeded),
            count(JobPhase::Failed),
        );
        if submitted.len() == JOBS.len() && jobs.iter().all(|j| j.state.is_terminal()) {
            return report(&jobs, &submitted);
        }
        if wall.now_ms() - started > args.timeout_secs as i64 * 1000 {
            print_jobs(&jobs);
            return Err(DemoError::Outcome(format!(
                "jobs did not finish within {} s; raise --timeout-secs on a slow machine",
                args.timeout_secs
            )));
        }
        wall.sleep(Duration::from_millis(1000)).await;
    }
}

/// The job file of a demo job. An epoch is a second of wall time, `speed`
/// seconds of tide; the declared rate is 10 % slower, for process start-up.
fn job_spec(job: &DemoJob, speed: f64, now_ms: i64) -> JobFile {
    JobFile {
        name: job.name.to_string(),
        command: vec!["sh".into(), "-c".into(), job.command.to_string()],
        env: Default::default(),
        secret_env: Default::default(),
        allow_past_deadline: false,
        deadline: chrono::DateTime::from_timestamp_millis(now_ms).unwrap_or_default()
            + chrono::Duration::hours(DEADLINE_HOURS),
        class: JobClass::Slo,
        on_infeasible: OnInfeasible::BestEffort,
        work: job.epochs.map(|epochs| Work {
            model: job.name.to_string(),
            iterations: epochs,
            global_batch: 32,
            model_bytes: 0,
            dataset_bytes: 0,
            dataset_site: "cloud".into(),
            min_workers: 1,
            max_workers: 1,
            memory_per_worker_bytes: 0,
            checkpoint_bytes: 0,
            iters_per_s: [("cpu".to_string(), 1.0 / (1.1 * speed))].into(),
        }),
    }
}

fn clock_text(hour: f64) -> String {
    let minutes = (hour * 60.0) as i64;
    format!(
        "d{} {:02}:{:02}",
        minutes / 1440 + 1,
        minutes / 60 % 24,
        minutes % 60
    )
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ClientError> + Send + 'static,
) -> Result<T, DemoError> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .expect("API call does not panic")?)
}

fn print_jobs(jobs: &[JobRecord]) {
    println!(
        "\n{:>4} {:<18} {:<10} {:<9} {:<5} {:<11} REASON / LAST OUTPUT",
        "ID", "NAME", "STATE", "NODE", "EXIT", "VERDICT"
    );
    for j in jobs.iter().rev() {
        let tail = j
            .output_tail
            .last()
            .map_or(String::new(), |l| format!(" / {l}"));
        let verdict = j.plan.as_ref().map_or("first-fit", |p| p.verdict.as_str());
        println!(
            "{:>4} {:<18} {:<10} {:<9} {:<5} {:<11} {}{tail}",
            j.id,
            j.name,
            j.state.as_str(),
            j.node.as_deref().unwrap_or("-"),
            j.exit_code.map_or("-".into(), |c| c.to_string()),
            verdict,
            j.plan
                .as_ref()
                .map_or(j.reason.as_deref().unwrap_or(""), |p| &p.reason),
        );
    }
}

fn report(jobs: &[JobRecord], expected: &[(u64, JobPhase)]) -> Result<(), DemoError> {
    print_jobs(jobs);
    let wrong: Vec<String> = expected
        .iter()
        .filter_map(|(id, want)| {
            let got = jobs.iter().find(|j| j.id == *id).map(|j| j.state)?;
            (got != *want).then(|| {
                format!(
                    "job {id} ended {} instead of {}",
                    got.as_str(),
                    want.as_str()
                )
            })
        })
        .collect();
    if wrong.is_empty() {
        println!(
            "\nall {} jobs ended as expected (one fails on purpose, to show failure reporting)",
            expected.len()
        );
        Ok(())
    } else {
        Err(DemoError::Outcome(wrong.join("; ")))
    }
}
