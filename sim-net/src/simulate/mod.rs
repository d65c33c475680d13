//! `tidemill-sim simulate`: a trace-driven discrete-event simulation of
//! tidemill's scheduler against EdgeFlow and the classic baselines, all on the
//! same jobs, nodes, edge load and cost model.
//!
//! - [`topology`]: the TOML world description;
//! - [`jobs`]: ElasticFlow-format job traces;
//! - [`edges`]: edge boxes' primary load, reports and forecasts;
//! - [`placement`]: nodes and the cost of a placement;
//! - [`engine`]: the event loop;
//! - [`policies`]: one module per policy;
//! - [`metrics`], [`report`], [`charts`]: the figures, the table and JSON, the SVGs.

pub mod charts;
pub mod edges;
pub mod engine;
pub mod jobs;
pub mod metrics;
pub mod placement;
pub mod policies;
pub mod report;
pub mod topology;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use clap::Args as ClapArgs;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use thiserror::Error;
use tidemill_forecast::{ConfigError, ForecastConfig};
use tidemill_sched::{Policy as SchedPolicy, ThroughputError, ThroughputTables};

use crate::trace::{MappingFlags, TraceError, read_trace};
use edges::EdgeWorld;
use engine::{EngineError, Outcome, World};
use jobs::{JobsError, JobsFormat, pow2_floor, read_jobs};
use metrics::PolicyMetrics;
use placement::{CostModel, SimNode};
use policies::{
    Chronus, Edf, EdgeFlow, ElasticFlow, FirstFit, Policy, PolicyName, Tidemill, TidemillConfig,
    Tiresias,
};
use topology::{Topology, TopologyError, parse_format};

/// Options of `simulate`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// The topology (TOML); see configs/topology-edgeflow-eval.toml.
    #[arg(long)]
    pub topology: PathBuf,
    /// Job trace (overrides the topology's `jobs`).
    #[arg(long)]
    pub jobs: Option<PathBuf>,
    /// Job trace layout (default: detected from the header).
    #[arg(long, value_enum)]
    pub jobs_format: Option<JobsFormat>,
    /// Throughput tables of a device class, `CLASS=DIR` (repeatable; overrides the topology's).
    #[arg(long = "throughputs", value_name = "CLASS=DIR")]
    pub throughputs: Vec<String>,
    /// Utilisation trace for the edge boxes (overrides the topology's).
    #[arg(long)]
    pub utilization: Option<PathBuf>,
    /// Column mapping of the utilisation trace.
    #[command(flatten)]
    pub mapping: MappingFlags,
    /// Policies to run, comma-separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub policies: Vec<PolicyName>,
    /// Give tidemill the true future edge load instead of its online forecasts.
    #[arg(long)]
    pub oracle_forecast: bool,
    /// Seed of the deadline generator and the best-effort draw.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write SVG charts into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Simulate only the first N jobs (by submission).
    #[arg(long)]
    pub max_jobs: Option<usize>,
    /// Number of edge boxes of the first edge site (overrides the topology's).
    #[arg(long)]
    pub edge_boxes: Option<u32>,
    /// Number of nodes of the first cloud site (overrides the topology's).
    #[arg(long)]
    pub cloud_nodes: Option<u32>,
}

/// Why `simulate` failed.
#[derive(Debug, Error)]
pub enum SimError {
    /// The topology is unusable.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The job trace is unusable.
    #[error(transparent)]
    Jobs(#[from] JobsError),
    /// The utilisation trace is unusable.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A throughput table is unusable.
    #[error(transparent)]
    Throughput(#[from] ThroughputError),
    /// An input is named nowhere.
    #[error("no {what} given; pass {flag} or set it in the topology")]
    Missing {
        /// What is missing.
        what: &'static str,
        /// The flag.
        flag: &'static str,
    },
    /// `--throughputs` is not `CLASS=DIR`.
    #[error(
        "--throughputs {0}: expected CLASS=DIR, e.g. A100=../shared/data/elasticflow/throughputs_A100"
    )]
    ThroughputFlag(String),
    /// A node's class has no tables.
    #[error(
        "device class {class} (of node site {site}) has no throughput tables; pass --throughputs {class}=DIR or add it under [throughputs]"
    )]
    NoClass {
        /// The class.
        class: String,
        /// The site.
        site: String,
    },
    /// A job's model has no table on a class, even estimated.
    #[error(
        "job {job} uses model {model}, which has no throughput table for class {class} (measured or estimated); add {model}.csv to that class's directory or drop the job"
    )]
    UnknownModel {
        /// The trace's job id.
        job: String,
        /// The model.
        model: String,
        /// The class.
        class: String,
    },
    /// Forecaster settings are invalid.
    #[error("{0} (from the topology's [forecast] table)")]
    Forecast(#[from] ConfigError),
    /// A policy broke the world's rules.
    #[error("{policy}: {source}")]
    Engine {
        /// The policy.
        policy: &'static str,
        /// The error.
        source: EngineError,
    },
    /// A chart could not be written.
    #[error(transparent)]
    Chart(#[from] charts::ChartError),
    /// Writing the report failed.
    #[error("cannot write the report to stdout: {0}")]
    Stdout(std::io::Error),
}

/// The inputs, loaded and checked.
pub struct Setup {
    /// The world every policy runs in.
    pub world: World,
    /// The topology.
    pub topology: Topology,
    /// The job trace.
    pub jobs_path: PathBuf,
    /// Policies to run.
    pub policies: Vec<PolicyName>,
    /// Oracle forecasts.
    pub oracle: bool,
    /// The seed.
    pub seed: u64,
}

/// Loads and checks every input.
pub fn setup(args: &Args) -> Result<Setup, SimError> {
    let mut topology = Topology::load(&args.topology)?;
    if let (Some(n), Some(site)) = (args.edge_boxes, topology.edge.first_mut()) {
        site.nodes = n;
    }
    if let (Some(n), Some(site)) = (args.cloud_nodes, topology.cloud.first_mut()) {
        site.nodes = n;
    }
    let jobs_path =
        args.jobs
            .clone()
            .or_else(|| topology.jobs.clone())
            .ok_or(SimError::Missing {
                what: "job trace",
                flag: "--jobs",
            })?;
    let jobs_format = match (args.jobs_format, &topology.jobs_format) {
        (Some(f), _) => Some(f),
        (None, Some(name)) => Some(
            <JobsFormat as clap::ValueEnum>::from_str(name, true).map_err(|_| {
                SimError::Jobs(JobsError::UnknownFormat {
                    path: args.topology.clone(),
                    header: format!("jobs_format = {name:?} (use elasticflow or philly-ef)"),
                })
            })?,
        ),
        (None, None) => None,
    };

    let mut dirs = topology.throughputs.clone();
    for t in &args.throughputs {
        let (class, dir) = t
            .split_once('=')
            .filter(|(c, d)| !c.is_empty() && !d.is_empty())
            .ok_or_else(|| SimError::ThroughputFlag(t.clone()))?;
        dirs.insert(class.to_string(), PathBuf::from(dir));
    }
    let mut tables = ThroughputTables::default();
    for (class, dir) in &dirs {
        tables.load_dir(class, dir)?;
    }
    tables.fill_missing();

    let mut nodes = Vec::new();
    for c in &topology.cloud {
        if !tables.classes.contains_key(&c.class) {
            return Err(SimError::NoClass {
                class: c.class.clone(),
                site: c.name.clone(),
            });
        }
        for i in 0..c.nodes {
            nodes.push(SimNode {
                id: format!("{}-{i:03}", c.name),
                class: c.class.clone(),
                devices: c.gpus_per_node,
                price_per_gpu_hour: Some(c.price_per_gpu_hour),
                edge: None,
            });
        }
    }
    let mut boxes = Vec::new();
    for e in &topology.edge {
        if !tables.classes.contains_key(&e.class) {
            return Err(SimError::NoClass {
                class: e.class.clone(),
                site: e.name.clone(),
            });
        }
        for i in 0..e.nodes {
            nodes.push(SimNode {
                id: format!("{}-{i:04}", e.name),
                class: e.class.clone(),
                devices: e.devices,
                price_per_gpu_hour: None,
                edge: Some(boxes.len()),
            });
            boxes.push((e.idle_threshold_pct, e.devices));
        }
    }
    let cloud_gpus: u32 = nodes
        .iter()
        .filter(|n| n.is_cloud())
        .map(|n| n.devices)
        .sum();
    let max_gpus = pow2_floor(topology.engine.max_gpus_per_job.min(cloud_gpus.max(1)));
    let mut trace = read_jobs(&jobs_path, jobs_format, &topology, max_gpus, args.seed)?;
    if let Some(n) = args.max_jobs {
        trace.truncate(n.max(1));
    }
    for j in &trace {
        for n in &nodes {
            if tables.model(&n.class, &j.spec.model).is_none() {
                return Err(SimError::UnknownModel {
                    job: j.name.clone(),
                    model: j.spec.model.clone(),
                    class: n.class.clone(),
                });
            }
        }
    }

    let e = &topology.engine;
    let first = trace.first().map_or(0, |j| j.spec.submitted_ms);
    let last = trace
        .iter()
        .map(|j| {
            if j.spec.class == tidemill_sched::JobClass::Slo {
                j.spec.deadline_ms.max(j.spec.submitted_ms)
            } else {
                j.spec.submitted_ms
            }
        })
        .max()
        .unwrap_or(first);
    let origin = first - (topology.forecast.warmup_days * 86_400_000.0) as i64;
    let series = if boxes.is_empty() {
        Vec::new()
    } else {
        let (file, preset) = match (&args.utilization, &topology.utilization) {
            (Some(f), _) => (
                f.clone(),
                topology.utilization.as_ref().and_then(|u| u.format.clone()),
            ),
            (None, Some(u)) => (u.file.clone(), u.format.clone()),
            (None, None) => {
                return Err(SimError::Missing {
                    what: "utilisation trace for the edge boxes",
                    flag: "--utilization",
                });
            }
        };
        let preset = preset.and_then(|p| parse_format(&p).ok());
        read_trace(&file, &args.mapping.resolve(&file, preset)?)?
    };
    let reuse_offset_ms = topology
        .utilization
        .as_ref()
        .map_or(7.0, |u| u.reuse_offset_h)
        * 3_600_000.0;
    let edges = EdgeWorld::new(
        &series,
        &boxes,
        origin,
        i64::from(e.truth_bin_s) * 1000,
        i64::from(e.detect_delay_s) * 1000,
        reuse_offset_ms as i64,
    );
    let model = CostModel {
        nodes,
        tables,
        links: topology.links.table(Vec::new()),
        gamma: tidemill_sched::cost::DEFAULT_GAMMA,
        restart_s: e.restart_s,
    };
    let world = World {
        jobs: trace,
        model,
        edges,
        slot_ms: i64::from(e.slot_s) * 1000,
        window: (first, last),
        end_ms: last + (e.drain_h * 3_600_000.0) as i64,
    };
    let policies = if args.policies.is_empty() {
        PolicyName::ALL.to_vec()
    } else {
        let mut p = args.policies.clone();
        p.dedup();
        p
    };
    Ok(Setup {
        world,
        topology,
        jobs_path,
        policies,
        oracle: args.oracle_forecast,
        seed: args.seed,
    })
}

impl Setup {
    /// A fresh instance of `name`.
    pub fn policy(&self, name: PolicyName) -> Result<Box<dyn Policy>, SimError> {
        Ok(match name {
            PolicyName::Tidemill | PolicyName::CloudOnly => {
                let t = &self.topology.tidemill;
                let f = &self.topology.forecast;
                let forecast = ForecastConfig {
                    slot_len_s: f.slot_s,
                    horizon_s: f.horizon_h * 3600,
                    idle_threshold_pct: self
                        .topology
                        .edge
                        .first()
                        .map_or(30.0, |e| e.idle_threshold_pct),
                    ..ForecastConfig::default()
                };
                forecast.validate()?;
                let config = TidemillConfig {
                    policy: SchedPolicy {
                        slot_ms: i64::from(t.slot_s) * 1000,
                        horizon_ms: i64::from(t.horizon_h) * 3_600_000,
                        restart_s: self.topology.engine.restart_s,
                        grace_ms: i64::from(t.grace_s) * 1000,
                        edge_candidates: t.edge_candidates,
                        max_edge_nodes: t.max_edge_nodes,
                        best_effort_cloud: t.best_effort_cloud,
                        best_effort_order: t.best_effort_order,
                        admission: t.admission,
                        ..SchedPolicy::default()
                    },
                    on_infeasible: t.on_infeasible,
                    use_edge: name == PolicyName::Tidemill,
                    oracle: self.oracle,
                    forecast,
                    refresh_ms: i64::from(f.refresh_s.max(1)) * 1000,
                };
                Box::new(Tidemill::new(config, &self.world.model)?)
            }
            PolicyName::Edgeflow => Box::new(EdgeFlow::default()),
            PolicyName::Elasticflow => Box::new(ElasticFlow::default()),
            PolicyName::Edf => Box::new(Edf),
            PolicyName::Chronus => Box::new(Chronus::default()),
            PolicyName::Tiresias => Box::new(Tiresias),
            PolicyName::FirstFit => Box::new(FirstFit),
        })
    }

    /// Runs one policy; `record` keeps stints and usage.
    pub fn run_one(
        &self,
        name: PolicyName,
        record: bool,
        progress: &mut dyn FnMut(f64),
    ) -> Result<(PolicyMetrics, Outcome), SimError> {
        let started = Instant::now();
        let mut policy = self.policy(name)?;
        let outcome =
            engine::run(&self.world, policy.as_mut(), record, progress).map_err(|source| {
                SimError::Engine {
                    policy: name.as_str(),
                    source,
                }
            })?;
        let metrics = metrics::summarise(
            name.as_str(),
            &outcome.jobs,
            &outcome.acc,
            engine::edge_totals(&self.world),
            policy.forecast_counts(),
            started.elapsed().as_secs_f64(),
        );
        Ok((metrics, outcome))
    }
}

/// One policy's figures and outcome, or why it failed.
type RunResult = Result<(PolicyMetrics, Outcome), SimError>;

/// Runs every policy asked for (spread over the cores), with a progress bar
/// per policy on stderr, and prints the table or JSON; writes charts with `--plot`.
pub fn run(args: &Args) -> Result<(), SimError> {
    let started = Instant::now();
    let setup = setup(args)?;
    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template("{prefix:>12} [{bar:30}] {percent:>3}% {elapsed}")
        .expect("the template is valid")
        .progress_chars("=> ");
    let record = args.plot.is_some();
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<RunResult>>> =
        Mutex::new((0..setup.policies.len()).map(|_| None).collect());
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(setup.policies.len())
        .max(1);
    let bar_of: Vec<ProgressBar> = setup
        .policies
        .iter()
        .map(|p| {
            let b = bars.add(ProgressBar::new(1000));
            b.set_style(style.clone());
            b.set_prefix(p.as_str());
            b
        })
        .collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().expect("no thread panics holding it");
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(&name) = setup.policies.get(i) else {
                        break;
                    };
                    let bar = &bar_of[i];
                    let r = setup.run_one(name, record, &mut |f| {
                        bar.set_position((f * 1000.0) as u64);
                    });
                    bar.finish();
                    results.lock().expect("no thread panics holding it")[i] = Some(r);
                }
            });
        }
    });
    bars.clear().ok();
    let mut metrics = Vec::new();
    let mut outcomes = Vec::new();
    for r in results
        .into_inner()
        .expect("no thread panicked")
        .into_iter()
        .flatten()
    {
        let (m, o) = r?;
        metrics.push(m);
        outcomes.push(o);
    }
    if let Some(dir) = &args.plot {
        charts::write_all(dir, &setup, &metrics, &outcomes)?;
        eprintln!("wrote charts to {}", dir.display());
    }
    let report = report::Report::new(&setup, metrics, started.elapsed().as_secs_f64());
    let mut out = std::io::stdout().lock();
    if args.json {
        report.write_json(&mut out)
    } else {
        report.write_table(&mut out)
    }
    .map_err(SimError::Stdout)
}
