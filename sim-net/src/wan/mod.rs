//! `tidemill-sim wan`: a UDP impairment relay. This kernel has no `sch_netem`, so
//! WAN conditions are emulated in userspace: an edge pointed at `--listen`
//! reaches the coordinator at `--upstream` through delay, jitter, loss,
//! reordering, duplication, a rate limit and outages, in each direction.
//!
//! [`impair`] decides (sans-IO, seeded, time passed in), [`relay`] moves the
//! datagrams, [`scenario`] reads the TOML that sets up several paths at once.

pub mod accuracy;
pub mod checkpoint_accuracy;
pub mod hub;
pub mod impair;
pub mod netem;
pub mod netns;
pub mod relay;
pub mod scenario;

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::task::JoinSet;

use relay::{Relay, RelayError};
use scenario::{Impairment, PathSpec, Scenario, ScenarioError};

/// Options of `wan`: one path from flags, or every path of a scenario file.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Where the relay listens; point the edge here.
    #[arg(
        long,
        required_unless_present = "scenario",
        conflicts_with = "scenario"
    )]
    pub listen: Option<SocketAddr>,
    /// Where the relay forwards to, e.g. the coordinator.
    #[arg(
        long,
        required_unless_present = "scenario",
        conflicts_with = "scenario"
    )]
    pub upstream: Option<SocketAddr>,
    /// One-way delay in milliseconds, each way (75 gives a 150 ms RTT).
    #[arg(long, default_value_t = 0, conflicts_with = "scenario")]
    pub delay_ms: u64,
    /// Each datagram's delay is uniform in delay ± jitter, in milliseconds.
    #[arg(long, default_value_t = 0, conflicts_with = "scenario")]
    pub jitter_ms: u64,
    /// Fraction of datagrams lost each way (0.01 = 1 %).
    #[arg(long, default_value_t = 0.0, conflicts_with = "scenario")]
    pub loss: f64,
    /// Rate limit each way, in Mb/s; none when absent.
    #[arg(long, conflicts_with = "scenario")]
    pub rate_mbps: Option<f64>,
    /// Seed of the random draws (up uses it, down uses it + 1).
    #[arg(long, default_value_t = 1, conflicts_with = "scenario")]
    pub seed: u64,
    /// A TOML scenario with one or more paths (see configs/wan/).
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Apply the paths with the kernel's netem on veth pairs in network
    /// namespaces instead of relaying (needs root and sch_netem).
    #[arg(long)]
    pub netem: bool,
}

/// Why `wan` failed.
#[derive(Debug, thiserror::Error)]
pub enum WanError {
    /// A flag is out of range.
    #[error("--{flag} {value}: {rule}")]
    BadOption {
        /// The flag, without dashes.
        flag: String,
        /// Its value.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
    /// The scenario file is unusable.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A relay failed.
    #[error(transparent)]
    Relay(#[from] RelayError),
    /// The netem back end failed.
    #[error(transparent)]
    Netem(#[from] netem::NetemError),
    /// The async runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// The paths to relay with their seeds, from the scenario or from the flags.
pub fn paths(args: &Args) -> Result<Vec<(PathSpec, u64)>, WanError> {
    if let Some(file) = &args.scenario {
        let scenario = Scenario::load(file)?;
        return Ok(scenario.paths().map(|(p, s)| (p.clone(), s)).collect());
    }
    let imp = Impairment {
        delay_ms: args.delay_ms as f64,
        jitter_ms: args.jitter_ms as f64,
        loss: args.loss,
        rate_mbps: args.rate_mbps,
        ..Impairment::default()
    };
    imp.check().map_err(|e| WanError::BadOption {
        flag: e.key.replace('_', "-"),
        value: e.value,
        rule: e.rule,
    })?;
    // clap requires both flags when there is no scenario.
    let (Some(listen), Some(upstream)) = (args.listen, args.upstream) else {
        unreachable!("clap requires --listen and --upstream without --scenario")
    };
    let path = PathSpec {
        name: "cli".into(),
        listen,
        upstream,
        up: imp.clone(),
        down: imp,
        outage: Vec::new(),
        flap: Vec::new(),
    };
    Ok(vec![(path, args.seed)])
}

/// Runs every path's relay until SIGINT or SIGTERM, or until one fails.
pub fn run(args: &Args) -> Result<(), WanError> {
    let paths = paths(args)?;
    tidemill_runtime::lifecycle::init_logging("info");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(WanError::Runtime)?;
    if args.netem {
        let specs: Vec<PathSpec> = paths.into_iter().map(|(spec, _)| spec).collect();
        let mut netem = netem::NetemPaths::create(&specs)?;
        for (k, spec) in specs.iter().enumerate() {
            let (_, _, ns, here, _) = netem::names(k);
            println!(
                "path {}: start the edge with `ip netns exec {ns} tidemill-edge run --coordinator {here}:{port} ...`, \
                 the coordinator listening on {here} or 0.0.0.0",
                spec.name,
                port = spec.upstream.port()
            );
        }
        return rt
            .block_on(netem.run_until_stopped())
            .map_err(WanError::from);
    }
    rt.block_on(async {
        let mut relays = JoinSet::new();
        for (spec, seed) in paths {
            relays.spawn(Relay::bind(spec, seed).await?.run());
        }
        tokio::select! {
            () = tidemill_runtime::lifecycle::shutdown_signal() => {
                tracing::info!("stopping");
                Ok(())
            }
            Some(ended) = relays.join_next() => match ended {
                Ok(result) => result.map_err(WanError::from),
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            },
        }
    })
}
