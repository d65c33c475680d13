//! `tidemill-sim demo`: a whole tidemill cluster on loopback, in one process and
//! with no outside data. A coordinator and several edges run the real daemon
//! code; the edges replay a freshly generated tidal trace in accelerated time,
//! so a day of tide passes in under a minute. Jobs are submitted through the
//! operator API and placed on edges while the tide is out.

mod printing;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tidemill_cloud::client::{Client, ClientError};
use tidemill_cloud::config::{ClockConfig, CloudConfig, SchedulerConfig};
use tidemill_cloud::job::{JobFile, JobPhase, Work};
use tidemill_edge::config::{EdgeConfig, ReplayConfig};
use tidemill_runtime::clock::{self, Clock, SharedClock, SystemClock};
use tidemill_runtime::identity::JoinToken;
use tidemill_sched::{JobClass, OnInfeasible};
use tokio::sync::watch;

use crate::gen_trace;
use printing::{Printed, TideClock, forecast_text, node_text, print_change, print_jobs, report};

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
        /// Its error, boxed: an edge's error is large and rare, and the
        /// demo's other errors need not carry its size.
        source: Box<tidemill_edge::daemon::EdgeError>,
    },
    /// The API refused a call.
    #[error(transparent)]
    Api(#[from] ClientError),
    /// The coordinator's admin token could not be read.
    #[error(transparent)]
    AdminToken(#[from] tidemill_cloud::local_admin::LocalAdminError),
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

/// The shell that saves a job's checkpoint (the epoch it reached) where its
/// edge looks for it, `$TIDEMILL_CHECKPOINT_DIR`, and says so.
macro_rules! checkpoint {
    ($epoch:literal) => {
        concat!(
            "echo ",
            $epoch,
            " > \"$TIDEMILL_CHECKPOINT_DIR/epoch\" && echo checkpoint saved"
        )
    };
}

/// The jobs submitted: night jobs planned into the tide, one that fails on
/// purpose, and noon jobs that wait for the next night.
const JOBS: &[DemoJob] = &[
    DemoJob {
        name: "resnet50-night-1",
        command: concat!(
            "echo epoch 1; sleep 1; echo epoch 2; sleep 1; ",
            checkpoint!(2)
        ),
        expect: JobPhase::Succeeded,
        at_hour: 0.0,
        epochs: Some(2.0),
    },
    DemoJob {
        name: "bert-night-2",
        command: concat!("echo epoch 1; sleep 2; ", checkpoint!(1)),
        expect: JobPhase::Succeeded,
        at_hour: 0.0,
        epochs: Some(2.0),
    },
    DemoJob {
        name: "vgg16-night-3",
        command: concat!("echo epoch 1; sleep 1; ", checkpoint!(1)),
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
        command: concat!("echo epoch 1; sleep 1; ", checkpoint!(1)),
        expect: JobPhase::Succeeded,
        at_hour: 12.0,
        epochs: Some(1.0),
    },
    DemoJob {
        name: "gpt2-noon-2",
        command: concat!("echo epoch 1; sleep 1; ", checkpoint!(1)),
        expect: JobPhase::Succeeded,
        at_hour: 12.0,
        epochs: Some(1.0),
    },
];

/// The demo's log, in its data dir.
const LOG_FILE: &str = "demo.log";

/// How a job without `[work]` is scheduled, and why: with no work to plan
/// against its deadline, it runs best-effort wherever first-fit finds an idle node.
const UNPLANNED: &str = "no [work], so not planned: first-fit, best-effort";

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
    prepare_dir(&args.data_dir)?;
    // Logs go to a file, so that they do not break into the story on stdout.
    let log = args.data_dir.join(LOG_FILE);
    tidemill_runtime::lifecycle::init_logging_to_file("info", &log).map_err(|source| {
        DemoError::Io {
            path: log.clone(),
            source,
        }
    })?;
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
            phases: Vec::new(),
        },
        ..CloudConfig::default()
    };
    let scheduler = cloud_cfg.scheduler.clone();
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
            coordinator: server.quic_addr.to_string().as_str().into(),
            token: token.reveal(),
            data_dir: args.data_dir.join(&node),
            sample_interval_secs: 300.0,
            // A forecast an hour of tide: one a wall second at 3600x.
            forecast_refresh_secs: 3600.0,
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
            result.map_err(|source| DemoError::Edge {
                node,
                source: Box::new(source),
            })
        });
    }
    println!(
        "started {} edges replaying the trace at {}x (an hour of tide every {:.1} s)",
        args.edges,
        args.speed,
        3600.0 / args.speed
    );
    println!("all times below are tide time: dN HH:MM on the trace's clock, d1 00:00 its start\n");

    // The demo is the local operator: it reads the coordinator's admin token.
    let admin = tidemill_cloud::local_admin::read_token(&args.data_dir.join("cloud"))?;
    let client = Arc::new(Client::new(&format!("http://{}", server.api_addr), &admin));
    let tide = TideClock { anchor_ms: anchor };
    let outcome = watch_jobs(args, &client, &coordinator_clock, tide, &scheduler).await;
    stop_tx.send_replace(true);
    while let Some(joined) = edges.join_next().await {
        if let Ok(Err(e)) = joined {
            eprintln!("{e}");
        }
    }
    server.stop().await;
    println!(
        "\ndata kept in {} (coordinator database: cloud/tidemill.db; the log: {LOG_FILE})",
        args.data_dir.display()
    );
    outcome
}

/// Submits the jobs at their trace hours and prints progress until all end.
async fn watch_jobs(
    args: &Args,
    client: &Arc<Client>,
    coordinator_clock: &SharedClock,
    tide: TideClock,
    scheduler: &SchedulerConfig,
) -> Result<(), DemoError> {
    let mut submitted: Vec<(u64, &DemoJob)> = Vec::new();
    let mut printed = Printed::default();
    let wall = SystemClock;
    let started = wall.now_ms();
    loop {
        let now_ms = coordinator_clock.now_ms();
        let hour = (now_ms - tide.anchor_ms) as f64 / 3_600_000.0;
        let stamp = format!("[tide {}]", tide.at(now_ms));
        let c = client.clone();
        let nodes = blocking(move || c.nodes()).await?;
        if !printed.nodes && nodes.len() == args.edges as usize {
            let listed: Vec<String> = nodes.iter().map(|n| node_text(n, scheduler)).collect();
            println!("{stamp} nodes: {}", listed.join(", "));
            printed.nodes = true;
        }
        // Forecasts follow the node list, even when one edge forecasts
        // before the last has joined (seen on a loaded box).
        for n in nodes
            .iter()
            .filter(|n| printed.nodes && n.forecast.is_some())
        {
            if printed.forecasts.insert(n.id.clone()) {
                let (c, id) = (client.clone(), n.id.clone());
                let f = blocking(move || c.forecast(&id)).await?;
                println!("{stamp} {}", forecast_text(&n.id, &f, tide));
            }
        }
        // Jobs go in once every edge has sent its first forecast, so that
        // admission sees the tide.
        let forecasting = printed.forecasts.len() == args.edges as usize;
        for job in JOBS.iter().skip(submitted.len()) {
            if hour < job.at_hour || !forecasting {
                break;
            }
            let spec = job_spec(job, args.speed, now_ms);
            let deadline = tide.at_time(spec.deadline);
            let c = client.clone();
            let id = blocking(move || c.submit(&spec)).await?;
            println!(
                "{stamp} submitted job {id} {}, deadline {deadline}",
                job.name
            );
            submitted.push((id, job));
        }
        let c = client.clone();
        let jobs = blocking(move || c.jobs()).await?;
        for j in &jobs {
            print_change(j, &stamp, tide, &mut printed);
        }
        if printed.nodes {
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
            let count = |s: JobPhase| jobs.iter().filter(|j| j.state == s).count();
            println!(
                "{stamp} cpu: {} | jobs queued {} running {} succeeded {} failed {}",
                loads.join("  "),
                count(JobPhase::Queued),
                count(JobPhase::Running),
                count(JobPhase::Succeeded),
                count(JobPhase::Failed),
            );
        }
        if submitted.len() == JOBS.len() && jobs.iter().all(|j| j.state.is_terminal()) {
            return report(&jobs, &submitted, tide);
        }
        if wall.now_ms() - started > args.timeout_secs as i64 * 1000 {
            print_jobs(&jobs, &submitted, tide);
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
        requires: Vec::new(),
        checkpoint_interval_min: None,
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

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ClientError> + Send + 'static,
) -> Result<T, DemoError> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .expect("API call does not panic")?)
}

#[cfg(test)]
mod tests {
    use super::printing::{slack_of, verdict};
    use super::*;
    use chrono::DateTime;
    use tidemill_cloud::job::{JobRecord, signed_span};

    /// 2026-01-01 00:00:00 UTC, Unix ms.
    const ANCHOR: i64 = 1_767_225_600_000;
    const HOUR: i64 = 3_600_000;

    #[test]
    fn the_tide_clock_counts_days_from_the_anchor() {
        let tide = TideClock { anchor_ms: ANCHOR };
        assert_eq!(tide.at(ANCHOR), "d1 00:00");
        assert_eq!(tide.at(ANCHOR + 3 * HOUR + 10 * 60_000), "d1 03:10");
        assert_eq!(tide.at(ANCHOR + 26 * HOUR + 5 * 60_000), "d2 02:05");
        assert_eq!(tide.at(ANCHOR - 60_000), "d0 23:59");
    }

    #[test]
    fn explanation_times_are_rewritten_onto_the_tide_clock() {
        let tide = TideClock { anchor_ms: ANCHOR };
        let reason = tidemill_sched::Reason::EdgeFinishes {
            place: vec![tidemill_sched::Share {
                node: "node-000".into(),
                workers: 1,
                class: "cpu".into(),
            }],
            finish_ms: ANCHOR + 27 * HOUR + 30 * 60_000,
        };
        let prose = format!("queued (admission = queue); {reason}; ×≥ unchanged");
        assert!(prose.contains("UTC"), "{prose}");
        assert_eq!(
            tide.rewrite(&prose),
            "queued (admission = queue); node-000×1 cpu finishes on idle edge capacity at d2 03:30 with no cloud cost; ×≥ unchanged"
        );
        assert_eq!(tide.rewrite("no time here"), "no time here");
    }

    #[test]
    fn slack_is_signed_hours_and_minutes() {
        assert_eq!(signed_span(2 * HOUR + 10 * 60_000), "+2h10m");
        assert_eq!(signed_span(-20 * 60_000), "-0h20m");
        assert_eq!(signed_span(0), "+0h00m");
    }

    fn ended(state: JobPhase, finish_h: Option<i64>) -> JobRecord {
        let time = |h: i64| DateTime::from_timestamp_millis(ANCHOR + h * HOUR).unwrap();
        JobRecord {
            id: 1,
            name: "j".into(),
            state,
            node: Some("node-000".into()),
            exit_code: None,
            output_tail: Vec::new(),
            output_hidden: None,
            reason: Some("exited with code 0".into()),
            command: vec!["true".into()],
            env: Default::default(),
            secret_env: Vec::new(),
            deadline: time(14),
            submitted_at: time(0),
            started_at: Some(time(1)),
            last_started_at: Some(time(1)),
            finished_at: finish_h.map(time),
            cancel_requested: false,
            class: JobClass::Slo,
            work: None,
            done_iters: 0.0,
            progress: Default::default(),
            measured_ips: None,
            checkpoint: None,
            attained_s: 0.0,
            plan: None,
            start_window: None,
            checkpoint_transfers: Vec::new(),
        }
    }

    #[test]
    fn verdicts_judge_the_finish_against_the_deadline() {
        let ok = JobPhase::Succeeded;
        assert_eq!(verdict(&ended(JobPhase::Succeeded, Some(3)), ok), "met");
        assert_eq!(verdict(&ended(JobPhase::Succeeded, Some(15)), ok), "missed");
        assert_eq!(
            verdict(&ended(JobPhase::Failed, Some(2)), JobPhase::Failed),
            "failed as intended"
        );
        assert_eq!(
            verdict(&ended(JobPhase::Failed, Some(2)), ok),
            "failed (unexpected)"
        );
        assert_eq!(verdict(&ended(JobPhase::Running, None), ok), "not ended");
        let j = ended(JobPhase::Succeeded, Some(16));
        assert_eq!(slack_of(&j, j.finished_at.unwrap()), "-2h00m");
    }
}
