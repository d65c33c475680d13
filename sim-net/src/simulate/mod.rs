//! `tidemill-sim simulate`: a trace-driven discrete-event simulation of
//! tidemill's scheduler against EdgeFlow and the classic baselines, all on the
//! same jobs, nodes, edge load and cost model.
//!
//! - [`topology`]: the TOML world description;
//! - [`jobs`]: ElasticFlow-format job traces;
//! - [`edges`]: edge boxes' primary load, reports and forecasts;
//! - [`placement`] and [`policies`]: the scheduler library's cost model and
//!   policies, used unchanged (re-exported);
//! - [`signals`]: what a policy may know of the edge boxes in a run;
//! - [`engine`]: the event loop, and [`checkpoints`]: what a stop keeps;
//! - [`variants`]: the same world without its edge, or with the edge's idle
//!   time as cloud GPUs;
//! - [`bound`]: the LP bound on DSR that respects each job's feasibility;
//! - [`batch`]: many runs spread over the cores;
//! - [`metrics`], [`report`], [`charts`]: the figures, the table and JSON, the SVGs.

pub use tidemill_sched::{placement, policies};

pub mod batch;
pub mod bound;
#[cfg(test)]
mod charges;
pub mod charts;
pub mod checkpoints;
pub mod csv_out;
pub mod edges;
pub mod engine;
#[cfg(test)]
mod evictions;
pub mod forecasts;
pub mod jobs;
pub mod metrics;
pub mod outcomes;
#[cfg(test)]
mod properties;
pub mod report;
pub mod signals;
#[cfg(test)]
pub(crate) mod testkit;
pub mod topology;
pub mod usage;
pub mod variants;

use std::path::PathBuf;
use std::time::Instant;

use clap::Args as ClapArgs;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use thiserror::Error;
use tidemill_forecast::{ConfigError, ForecastConfig};
use tidemill_sched::{ThroughputError, ThroughputTables};

use crate::trace::{MappingFlags, Series, TraceError, read_trace};
use edges::{EdgeWorld, SiteBox, SiteTide};
use engine::{EngineError, Outcome, World};
use jobs::{JobsError, JobsFormat, generate_deadlines, pow2_floor, read_jobs, scale_arrivals};
use metrics::PolicyMetrics;
use placement::{CostModel, CostNode};
use policies::{EdgeInterest, PolicyName, Scheduler};
use signals::RunSignals;
use topology::{ClassSpec, SiteTideSpec, Topology, TopologyError, parse_format};
use variants::{EdgeEquivalent, Variant};

/// Parses a policy name from the registry; `--help` lists every name with its summary.
pub fn policy_parser() -> impl clap::builder::TypedValueParser<Value = PolicyName> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        PolicyName::ALL.map(|p| PossibleValue::new(p.as_str()).help(p.summary())),
    )
    .try_map(|s| s.parse::<PolicyName>())
}

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
    #[arg(long, value_delimiter = ',', value_parser = policy_parser())]
    pub policies: Vec<PolicyName>,
    /// Give tidemill the true future edge load instead of its online forecasts.
    #[arg(long)]
    pub oracle_forecast: bool,
    /// Seed of the deadline generator, the best-effort draw and the per-box
    /// variation of `[utilization.by_site]`.
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
    /// Number of edge boxes of the first `[[edge]]` group, per site (overrides the topology's).
    #[arg(long)]
    pub edge_boxes: Option<u32>,
    /// Number of nodes of the first cloud site (overrides the topology's).
    #[arg(long)]
    pub cloud_nodes: Option<u32>,
    /// Multiply the jobs' inter-arrival times by this (deadlines keep their
    /// distance from submission); below 1 the load is heavier.
    #[arg(long)]
    pub arrival_scale: Option<f64>,
    /// Also run cloud-only with the edge's idle device-hours added as cloud
    /// GPUs of the cloud's class (an upper bound on what the edge could add);
    /// cloud-only is run too, for each policy's share of the gap up to it.
    #[arg(long)]
    pub upper_bound: bool,
    /// Also solve the LP bound that respects each job's window, speeds per
    /// class, sync across boxes, the edge's idle timing and that a job runs
    /// on one placement at a time, with and without the edge (minutes on a
    /// few thousand jobs: see docs/simulation.md).
    #[arg(long)]
    pub lp_bound: bool,
    /// Write each job's outcome in every run to this CSV file: whether it
    /// met its deadline, where it first ran, how often it moved.
    #[arg(long)]
    pub jobs_out: Option<PathBuf>,
    /// Write each policy's hours to this CSV file: the edge devices truly
    /// idle, and the edge devices and cloud GPUs it held, hour by hour.
    #[arg(long)]
    pub usage_out: Option<PathBuf>,
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
    /// The LP bound could not be solved.
    #[error(transparent)]
    Bound(#[from] bound::BoundError),
    /// A CSV file asked for (`--jobs-out`, `--usage-out`) could not be written.
    #[error(transparent)]
    CsvOut(#[from] csv_out::CsvOutError),
    /// Writing the report failed.
    #[error("cannot write the report to stdout: {0}")]
    Stdout(std::io::Error),
    /// `--arrival-scale` is not a positive number.
    #[error("--arrival-scale {0}: must be a positive number (1 keeps the trace's arrivals)")]
    ArrivalScale(f64),
    /// No series of the utilisation trace is left for the edge boxes.
    #[error(
        "{file}: no series id starts with `{prefix}` (utilization.series_prefix); fix the prefix or leave it out"
    )]
    NoSeries {
        /// The utilisation trace.
        file: PathBuf,
        /// The prefix.
        prefix: String,
    },
    /// A site is mapped onto a series the trace lacks.
    #[error(
        "utilization.by_site.series: site {site} names series `{series}`, which the utilisation trace does not hold (after series_prefix); use a series id of the trace"
    )]
    UnknownSeries {
        /// The site.
        site: String,
        /// The series id.
        series: String,
    },
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
    /// The same world without its edge boxes.
    pub no_edge: World,
    /// The edge's idle capacity in cloud GPUs, with `--upper-bound`.
    pub edge_equivalent: Option<EdgeEquivalent>,
    /// The world without edge and with those GPUs added, with `--upper-bound`.
    pub edge_as_cloud: Option<World>,
    /// The LP bound on the DSR of the world as described, once
    /// [`Setup::solve_lp_bound`] has run (`simulate --lp-bound`).
    pub lp_bound: Option<bound::LpBound>,
    /// The same LP on the world without its edge: the LP's own floor, so
    /// `lp_bound − lp_bound_without_edge` is the room the LP sees for the edge.
    pub lp_bound_without_edge: Option<bound::LpBound>,
}

/// Loads and checks every input.
pub fn setup(args: &Args) -> Result<Setup, SimError> {
    setup_with(args, &|_| Ok(()))
}

/// [`setup`] with the topology changed by `edit` after it is read and the
/// flags are applied (a sweep's point); an error from `edit` names the change.
pub fn setup_with(
    args: &Args,
    edit: &dyn Fn(&mut Topology) -> Result<(), TopologyError>,
) -> Result<Setup, SimError> {
    let mut topology = Topology::load(&args.topology)?;
    if let (Some(n), Some(site)) = (args.edge_boxes, topology.edge.first_mut()) {
        site.nodes = n;
    }
    if let (Some(n), Some(site)) = (args.cloud_nodes, topology.cloud.first_mut()) {
        site.nodes = n;
    }
    edit(&mut topology)?;
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

    let mut specs = topology.throughputs.clone();
    for t in &args.throughputs {
        let (class, dir) = t
            .split_once('=')
            .filter(|(c, d)| !c.is_empty() && !d.is_empty())
            .ok_or_else(|| SimError::ThroughputFlag(t.clone()))?;
        specs.insert(
            class.to_string(),
            ClassSpec::ElasticFlow(PathBuf::from(dir)),
        );
    }
    let mut tables = ThroughputTables::default();
    for (class, spec) in &specs {
        match spec {
            ClassSpec::ElasticFlow(dir) => tables.load_dir(class, dir)?,
            ClassSpec::Sia { dir, cluster } => tables.load_sia(class, dir, cluster)?,
            ClassSpec::Scale { .. } => {}
        }
    }
    for (class, spec) in &specs {
        if let ClassSpec::Scale { from, lambda } = spec {
            tables.insert_scaled(class, from, lambda)?;
        }
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
            nodes.push(CostNode {
                id: format!("{}-{i:03}", c.name),
                class: c.class.clone(),
                devices: c.gpus_per_node,
                price_per_gpu_hour: Some(c.price_per_gpu_hour),
                edge: None,
                site: None,
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
        for i in 0..e.boxes() {
            nodes.push(CostNode {
                id: format!("{}-{i:04}", e.name),
                class: e.class.clone(),
                devices: e.devices,
                price_per_gpu_hour: None,
                edge: Some(boxes.len()),
                site: e.site_of(i),
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
    if let Some(scale) = args.arrival_scale {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(SimError::ArrivalScale(scale));
        }
        scale_arrivals(&mut trace, scale);
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
    if let (Some(g), Some(cloud)) = (&topology.generator, topology.cloud.first()) {
        generate_deadlines(&mut trace, g, args.seed, |j| {
            let t = tables
                .lookup(
                    &cloud.class,
                    &j.spec.model,
                    j.spec.global_batch,
                    j.requested_gpus,
                )
                .expect("every job's model has a table on every class (checked above)");
            j.spec.iterations / t.iters_per_s
        });
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
        let mut series = read_trace(&file, &args.mapping.resolve(&file, preset)?)?;
        if let Some(prefix) = topology
            .utilization
            .as_ref()
            .and_then(|u| u.series_prefix.clone())
        {
            series.retain(|s| s.node.starts_with(&prefix));
            if series.is_empty() {
                return Err(SimError::NoSeries { file, prefix });
            }
        }
        series
    };
    let reuse_offset_ms = topology
        .utilization
        .as_ref()
        .map_or(7.0, |u| u.reuse_offset_h)
        * 3_600_000.0;
    let (bin_ms, delay_ms) = (
        i64::from(e.truth_bin_s) * 1000,
        i64::from(e.detect_delay_s) * 1000,
    );
    let by_site = topology
        .utilization
        .as_ref()
        .and_then(|u| u.by_site.as_ref());
    let edges = match by_site {
        Some(spec) if !boxes.is_empty() => EdgeWorld::by_site(
            &series,
            &site_series(&topology, spec, &series)?,
            &site_boxes(&topology, &nodes, &boxes),
            &SiteTide {
                percentile: spec.percentile,
                peak_pct: spec.peak_pct,
                gain_spread: spec.gain_spread,
                jitter_ms: (spec.jitter_h * 3_600_000.0) as i64,
                reuse_offset_ms: reuse_offset_ms as i64,
                seed: args.seed ^ edges::SITE_SEED_SALT,
            },
            origin,
            bin_ms,
            delay_ms,
        ),
        _ => EdgeWorld::new(
            &series,
            &boxes,
            origin,
            bin_ms,
            delay_ms,
            reuse_offset_ms as i64,
        ),
    };
    let links = topology.links.table(&nodes);
    let model = CostModel::new(
        nodes,
        tables,
        links,
        tidemill_sched::cost::DEFAULT_GAMMA,
        e.restart_s,
    );
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
    let no_edge = variants::without_edge(&world);
    let (edge_equivalent, edge_as_cloud) = if args.upper_bound {
        let eq = variants::edge_equivalent(&world);
        let grown = variants::edge_as_cloud(&no_edge, eq.map_or(0, |e| e.gpus));
        (eq, Some(grown))
    } else {
        (None, None)
    };
    Ok(Setup {
        world,
        topology,
        jobs_path,
        policies,
        oracle: args.oracle_forecast,
        seed: args.seed,
        no_edge,
        edge_equivalent,
        edge_as_cloud,
        lp_bound: None,
        lp_bound_without_edge: None,
    })
}

/// The series each edge site follows: `[utilization.by_site] series` names
/// it, else site k takes series k mod S (in the trace's order).
fn site_series(
    topology: &Topology,
    spec: &SiteTideSpec,
    series: &[Series],
) -> Result<Vec<usize>, SimError> {
    topology
        .edge_sites()
        .iter()
        .enumerate()
        .map(|(k, site)| match spec.series.get(site) {
            Some(id) => {
                series
                    .iter()
                    .position(|s| &s.node == id)
                    .ok_or_else(|| SimError::UnknownSeries {
                        site: site.clone(),
                        series: id.clone(),
                    })
            }
            None => Ok(k % series.len().max(1)),
        })
        .collect()
}

/// The edge boxes (`boxes`: threshold and devices, in node order) with the
/// index of their site among [`Topology::edge_sites`].
fn site_boxes(topology: &Topology, nodes: &[CostNode], boxes: &[(f64, u32)]) -> Vec<SiteBox> {
    let sites = topology.edge_sites();
    nodes
        .iter()
        .filter(|n| n.edge.is_some())
        .zip(boxes)
        .map(|(n, &(threshold_pct, devices))| SiteBox {
            threshold_pct,
            devices,
            site: sites
                .iter()
                .position(|s| n.site.as_ref() == Some(s))
                .unwrap_or(0),
        })
        .collect()
}

impl Setup {
    /// A fresh instance of `name` for `world` (one of this setup's variants),
    /// with the topology's `[tidemill]` settings.
    pub fn policy(&self, name: PolicyName, world: &World) -> Box<dyn Scheduler> {
        name.build(&self.topology.tidemill, &world.model)
    }

    /// What `name` may know of `world`'s edge boxes in one run: each box's
    /// online forecaster for the tidal scheduler (the truth with
    /// `--oracle-forecast`), reported load for every policy.
    fn signals<'w>(&self, name: PolicyName, world: &'w World) -> Result<RunSignals<'w>, SimError> {
        if name != PolicyName::Tidemill || self.oracle {
            return Ok(RunSignals::oracle(&world.edges));
        }
        let (forecast, refresh_ms) = self.forecast_config()?;
        Ok(RunSignals::forecast(&world.edges, forecast, refresh_ms)?)
    }

    /// The edges' forecaster settings from the topology's `[forecast]`
    /// table, checked, and the ms between two forecasts of a box: what
    /// `simulate` and the twin's emulated edges both forecast with.
    pub fn forecast_config(&self) -> Result<(ForecastConfig, i64), SimError> {
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
        Ok((forecast, i64::from(f.refresh_s.max(1)) * 1000))
    }

    /// Solves the LP bound ([`bound::lp_bound`]) of the world as described
    /// and of the world without its edge.
    pub fn solve_lp_bound(&mut self) -> Result<(), SimError> {
        self.lp_bound = bound::lp_bound(&self.world)?;
        self.lp_bound_without_edge = bound::lp_bound(&self.no_edge)?;
        Ok(())
    }

    /// The world of `variant`.
    pub fn world(&self, variant: Variant) -> &World {
        match variant {
            Variant::Full => &self.world,
            Variant::NoEdge => &self.no_edge,
            Variant::EdgeAsCloud => self.edge_as_cloud.as_ref().unwrap_or(&self.no_edge),
        }
    }

    /// Every run the report needs: each policy on the world as described;
    /// each policy that uses the edge again without it (for `edge_gain`);
    /// and, with `--upper-bound`, cloud-only with the edge as cloud GPUs; and
    /// with either bound, cloud-only itself if not asked for (the floor of
    /// each policy's share of the gap to the bounds).
    pub fn runs(&self) -> Result<Vec<(PolicyName, Variant)>, SimError> {
        let mut runs: Vec<(PolicyName, Variant)> =
            self.policies.iter().map(|&p| (p, Variant::Full)).collect();
        let bounded = self.lp_bound.is_some() || self.edge_as_cloud.is_some();
        if bounded && !self.policies.contains(&PolicyName::CloudOnly) {
            runs.push((PolicyName::CloudOnly, Variant::Full));
        }
        if !self.world.edges.boxes.is_empty() {
            for &p in &self.policies {
                if self.policy(p, &self.world).edge_interest() != EdgeInterest::None {
                    runs.push((p, Variant::NoEdge));
                }
            }
        }
        if self.edge_as_cloud.is_some() {
            runs.push((PolicyName::CloudOnly, Variant::EdgeAsCloud));
        }
        Ok(runs)
    }

    /// Runs one policy on one variant of the world; `record` keeps stints and usage.
    pub fn run_one(
        &self,
        name: PolicyName,
        variant: Variant,
        record: bool,
        progress: &mut dyn FnMut(f64),
    ) -> Result<(PolicyMetrics, Outcome), SimError> {
        let started = Instant::now();
        let world = self.world(variant);
        let mut policy = self.policy(name, world);
        let signals = self.signals(name, world)?;
        let outcome =
            engine::run(world, policy.as_mut(), &signals, record, progress).map_err(|source| {
                SimError::Engine {
                    policy: name.as_str(),
                    source,
                }
            })?;
        let label = match variant {
            Variant::EdgeAsCloud => EDGE_AS_CLOUD,
            _ => name.as_str(),
        };
        let metrics = metrics::summarise(
            label,
            &outcome.jobs,
            &outcome.acc,
            engine::edge_totals(world),
            signals.forecast_counts(),
            started.elapsed().as_secs_f64(),
        );
        Ok((metrics, outcome))
    }

    /// The report's rows from the runs of [`Setup::runs`]: one per policy on
    /// the world as described, with `edge_gain` and `slo_edge_gain` from its
    /// run without the edge (0 for a policy that never uses it, or when there
    /// is no edge), then the upper bound's row, if run. Outcomes are those of
    /// the first rows.
    pub fn rows(
        &self,
        runs: &[(PolicyName, Variant)],
        results: Vec<(PolicyMetrics, Outcome)>,
    ) -> (Vec<PolicyMetrics>, Vec<Outcome>) {
        let mut rows = Vec::new();
        let mut outcomes = Vec::new();
        let mut bare = Vec::new();
        let mut bound = None;
        for (&(p, variant), (m, o)) in runs.iter().zip(results) {
            match variant {
                Variant::Full => {
                    rows.push(m);
                    outcomes.push(o);
                }
                Variant::NoEdge => bare.push((p.as_str(), m)),
                Variant::EdgeAsCloud => bound = Some(m),
            }
        }
        for m in &mut rows {
            let without = bare.iter().find(|b| b.0 == m.policy).map(|b| &b.1);
            m.set_edge_gain(without);
        }
        rows.extend(bound);
        (rows, outcomes)
    }
}

/// The upper bound's row name: cloud-only with the edge's idle time as cloud GPUs.
pub const EDGE_AS_CLOUD: &str = "edge-as-cloud";

/// The style of a run's progress bar on stderr: its name, the bar, the
/// share done and the time taken (`simulate` and `twin`).
pub fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:>22} [{bar:30}] {percent:>3}% {elapsed}")
        .expect("the template is valid")
        .progress_chars("=> ")
}

/// Runs every policy asked for, and the runs `edge_gain` and the upper bound
/// need (spread over the cores), with a progress bar per run on stderr, and
/// prints the table or JSON; writes charts with `--plot`.
pub fn run(args: &Args) -> Result<(), SimError> {
    let started = Instant::now();
    let mut setup = setup(args)?;
    if args.lp_bound {
        setup.solve_lp_bound()?;
    }
    let runs = setup.runs()?;
    let bars = MultiProgress::new();
    let style = bar_style();
    let record = args.plot.is_some() || args.usage_out.is_some();
    let bar_of: Vec<ProgressBar> = runs
        .iter()
        .map(|(p, variant)| {
            let b = bars.add(ProgressBar::new(1000));
            b.set_style(style.clone());
            b.set_prefix(match variant {
                Variant::Full => p.as_str().to_string(),
                Variant::NoEdge => format!("{} (no edge)", p.as_str()),
                Variant::EdgeAsCloud => EDGE_AS_CLOUD.to_string(),
            });
            b
        })
        .collect();
    let results = batch::parallel_map(&runs, |i, &(name, variant)| {
        let bar = &bar_of[i];
        let r = setup.run_one(
            name,
            variant,
            record && variant == Variant::Full,
            &mut |f| {
                bar.set_position((f * 1000.0) as u64);
            },
        );
        bar.finish();
        r
    });
    bars.clear().ok();
    let results = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    if let Some(path) = &args.jobs_out {
        outcomes::write(path, &setup.world, &runs, &results)?;
    }
    let (metrics, outcomes) = setup.rows(&runs, results);
    // The edge's idle devices by hour, for both files, counted once.
    let idle = if args.usage_out.is_some() || args.plot.is_some() {
        usage::idle_by_hour(&setup.world)
    } else {
        Vec::new()
    };
    if let Some(path) = &args.usage_out {
        usage::write(path, &setup.world, &idle, &metrics, &outcomes)?;
    }
    if let Some(dir) = &args.plot {
        charts::write_all(dir, &setup, &idle, &metrics, &outcomes)?;
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
