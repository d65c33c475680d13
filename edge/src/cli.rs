//! The command line: `tidemill-edge run`, `join`, `status`, `config check` and
//! `print-default-config`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tidemill_runtime::lifecycle::{self, LogFormat};
use tidemill_runtime::notify;

use crate::config::{DEFAULT_CONFIG, EdgeConfig, ReplayConfig};

/// tidemill-edge: harvests this box's idle capacity for deadline-bound training.
#[derive(Debug, Parser)]
#[command(version = tidemill_runtime::version_line!(), about)]
pub struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the daemon: sample, journal, report, and run assigned tasks.
    Run(Box<RunArgs>),
    /// Join a coordinator with a token and store this node's certificate in
    /// the data dir, then exit (`run --token` does the same on first start).
    Join(Box<RunArgs>),
    /// Print the default configuration, every key documented.
    PrintDefaultConfig,
    /// Show this edge's state: from its status port when [status] listen is
    /// set, else from the journal in the data dir (connection unknown).
    Status(StatusArgs),
    /// Check the configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Check this box: config, data dir, certificate, the coordinator over
    /// mutual TLS, clock, probe port, accelerators, task confinement. Exits
    /// non-zero when a check fails.
    Doctor(NodeArgs),
    /// Kill what a stopped or crashed daemon's tasks left running (systemd's
    /// ExecStopPost runs it); the next start reports them as yielded.
    /// Refused while the daemon runs.
    Reap {
        /// TOML config file; without it the documented defaults apply.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Delete this edge's state (journal, certificate, tasks, checkpoints)
    /// after a typed confirmation; refused while the daemon runs.
    Reset {
        /// TOML config file, for its data_dir.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The data dir to wipe (overrides the config's).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Load the config file and the TIDEMILL_* environment overrides, check
    /// them, and print the effective configuration with secrets redacted.
    Check {
        /// TOML config file; without it the documented defaults apply.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// Flags of `status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The edge's TOML config file: its data dir, node id (shown as is) and
    /// status port.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The data dir to read (overrides the config's; with it and no
    /// --config, the journal is read and the status port is not asked).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

impl StatusArgs {
    /// The snapshot, as a table or JSON.
    fn run(&self) -> Result<String, Box<dyn std::error::Error>> {
        let mut cfg = EdgeConfig::load(self.config.as_deref())?;
        cfg.validate()?;
        if let Some(dir) = &self.data_dir {
            cfg.data_dir = dir.clone();
            if self.config.is_none() {
                cfg.status = crate::config::StatusConfig::default();
            }
        }
        cfg.absolute_paths()?;
        let snapshot = crate::status::query(&cfg.status, &cfg.data_dir, &cfg.resolved_node_id())?;
        Ok(if self.json {
            serde_json::to_string_pretty(&snapshot)? + "\n"
        } else {
            snapshot.table(tidemill_runtime::clock::Clock::now_ms(
                &tidemill_runtime::clock::SystemClock,
            ))
        })
    }
}

/// The flags that say which node this is and where its coordinator is:
/// `run`, `join` and `doctor` share them, each overriding the config file.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// TOML config file; without it the documented defaults apply.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Coordinator QUIC address, HOST:PORT; replicas as a comma-separated
    /// list, tried in order.
    #[arg(long)]
    coordinator: Option<String>,
    /// This node's id.
    #[arg(long)]
    node_id: Option<String>,
    /// Where the journal, certificate and tasks live.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A CA certificate to trust instead of the one received at join.
    #[arg(long)]
    ca: Option<PathBuf>,
}

impl NodeArgs {
    /// The config file overlaid with the `TIDEMILL_*` environment, then these
    /// flags, with relative paths made absolute.
    fn resolve(&self) -> Result<EdgeConfig, tidemill_runtime::config_file::ConfigError> {
        let mut cfg = EdgeConfig::load(self.config.as_deref())?;
        if let Some(v) = &self.coordinator {
            cfg.coordinator = crate::coordinators::Coordinators::parse_flag(v);
        }
        if let Some(v) = &self.node_id {
            cfg.node_id = v.clone();
        }
        if let Some(v) = &self.data_dir {
            cfg.data_dir = v.clone();
        }
        if let Some(v) = &self.ca {
            cfg.ca = v.clone();
        }
        cfg.absolute_paths()?;
        Ok(cfg)
    }
}

/// Flags of `run` and `join`; each overrides the config file.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// How log lines are written: text or json (overrides `log_format`).
    #[arg(long)]
    log_format: Option<LogFormat>,
    /// A join token (`tidemill-cloud token create`), used when the data dir
    /// holds no certificate yet. On a command line it shows in
    /// /proc/PID/cmdline to every local user: prefer --token-file or the
    /// TIDEMILL_TOKEN variable.
    #[arg(long, env = "TIDEMILL_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the join token (`-` for stdin), kept off the command
    /// line; used as --token is.
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Seconds between samples.
    #[arg(long)]
    sample_interval: Option<f64>,
    /// Replay this utilisation trace (CSV, optionally gzip) instead of sampling the host.
    #[arg(long, requires = "replay_node")]
    replay: Option<PathBuf>,
    /// The trace's node to replay.
    #[arg(long, requires = "replay")]
    replay_node: Option<String>,
    /// Replay speed-up: trace seconds per wall second.
    #[arg(long, requires = "replay")]
    speed: Option<f64>,
    /// Wall time (Unix ms) at which the replay and its accelerated clock start;
    /// give a coordinator and its edges the same value so they agree on the time.
    #[arg(long, requires = "replay")]
    clock_anchor: Option<i64>,
}

/// Why `run` or `join` cannot start from their flags.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// The config file or environment is unusable.
    #[error(transparent)]
    Config(#[from] tidemill_runtime::config_file::ConfigError),
    /// The token file cannot be read.
    #[error(
        "cannot read the join token from --token-file {path}: {source}; give a readable file holding the token, or - for stdin"
    )]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl RunArgs {
    /// The config file overlaid with the `TIDEMILL_*` environment, then the flags.
    pub fn resolve(&self) -> Result<EdgeConfig, ArgsError> {
        let mut cfg = self.node.resolve()?;
        if let Some(path) = &self.token_file {
            cfg.token = read_token(path).map_err(|source| ArgsError::TokenFile {
                path: path.clone(),
                source,
            })?;
        }
        if let Some(v) = &self.token {
            cfg.token = v.clone();
        }
        if let Some(v) = self.log_format {
            cfg.log_format = v;
        }
        if let Some(v) = self.sample_interval {
            cfg.sample_interval_secs = v;
        }
        if let (Some(file), Some(node)) = (&self.replay, &self.replay_node) {
            let kept = cfg.replay.take();
            cfg.replay = Some(ReplayConfig {
                file: file.clone(),
                node: node.clone(),
                speed: kept.as_ref().map_or(1.0, |r| r.speed),
                clock_anchor_ms: kept.as_ref().and_then(|r| r.clock_anchor_ms),
                prime_history: kept.as_ref().is_none_or(|r| r.prime_history),
            });
        }
        if let Some(r) = cfg.replay.as_mut() {
            if let Some(speed) = self.speed {
                r.speed = speed;
            }
            if let Some(anchor) = self.clock_anchor {
                r.clock_anchor_ms = Some(anchor);
            }
        }
        Ok(cfg)
    }
}

/// The token in file `path` (`-`: stdin), trimmed.
fn read_token(path: &std::path::Path) -> std::io::Result<String> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(path)?
    };
    Ok(text.trim().to_string())
}

/// Parses the command line, runs it, and reports any error without a panic.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::PrintDefaultConfig => {
            lifecycle::exit_quietly_on_closed_pipe();
            print!("{DEFAULT_CONFIG}");
            ExitCode::SUCCESS
        }
        Cmd::Run(args) => {
            let (cfg, rt) = match start(&args) {
                Ok(started) => started,
                Err(code) => return code,
            };
            let stop = async {
                lifecycle::shutdown_signal().await;
                notify::stopping();
            };
            let daemon = crate::daemon::run(cfg, stop);
            match rt.block_on(daemon) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
        Cmd::Config(ConfigCmd::Check { config }) => {
            lifecycle::exit_quietly_on_closed_pipe();
            let checked = EdgeConfig::load_effective(config.as_deref())
                .and_then(|(cfg, table)| cfg.validate().map(|()| table));
            match checked {
                Ok(mut table) => {
                    tidemill_runtime::config_file::redact(&mut table);
                    print!("{table}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Cmd::Status(args) => {
            lifecycle::exit_quietly_on_closed_pipe();
            match args.run() {
                Ok(out) => {
                    print!("{out}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Cmd::Doctor(args) => doctor(&args),
        Cmd::Reap { config } => match crate::doctor::reap(config.as_deref()) {
            Ok(0) => ExitCode::SUCCESS,
            Ok(n) => {
                println!(
                    "killed what was left of {n} task(s); the next start reports them as yielded"
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        },
        Cmd::Reset {
            config,
            data_dir,
            yes,
        } => {
            let dir = match data_dir {
                Some(dir) => dir,
                None => match EdgeConfig::load(config.as_deref()) {
                    Ok(cfg) => cfg.data_dir,
                    Err(e) => return fail(&e),
                },
            };
            let mut stdin = std::io::stdin().lock();
            match crate::doctor::reset(&dir, yes, &mut stdin, &mut std::io::stdout()) {
                Ok(n) => {
                    println!("reset {}: {n} entries removed", dir.display());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Cmd::Join(args) => {
            let (cfg, rt) = match start(&args) {
                Ok(started) => started,
                Err(code) => return code,
            };
            match rt.block_on(crate::daemon::join_only(&cfg)) {
                Ok(node_id) => {
                    println!(
                        "joined as {node_id}; the certificate is in {}",
                        cfg.data_dir.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
    }
}

/// What `run` and `join` share: logging, private files, the resolved config,
/// and the runtime (one thread keeps the daemon's footprint small; tasks are
/// separate processes). An error is reported and becomes the exit code.
fn start(args: &RunArgs) -> Result<(EdgeConfig, tokio::runtime::Runtime), ExitCode> {
    let cfg = args.resolve().map_err(|e| fail(&e))?;
    lifecycle::init_logging_as("info", cfg.log_format);
    lifecycle::private_files();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(&e))?;
    Ok((cfg, rt))
}

/// `doctor`: a config that does not load is the first failed check and
/// ends the run; otherwise every check runs.
fn doctor(args: &NodeArgs) -> ExitCode {
    lifecycle::exit_quietly_on_closed_pipe();
    lifecycle::init_logging("warn");
    let source = args.config.as_ref().map_or_else(
        || "the default config".to_string(),
        |p| p.display().to_string(),
    );
    let loaded = args.resolve().and_then(|cfg| cfg.validate().map(|()| cfg));
    let cfg = match loaded {
        Ok(cfg) => cfg,
        Err(e) => {
            let mut report = tidemill_runtime::doctor::Report::default();
            report.fail(
                "config",
                e.to_string(),
                "fix the file or the TIDEMILL_* variable named; `tidemill-edge print-default-config` documents every key",
            );
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let report = rt.block_on(crate::doctor::run(&cfg, &source));
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("tidemill-edge: error: {e}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_args(cli: Cli) -> NodeArgs {
        match cli.command {
            Cmd::Doctor(args) => args,
            Cmd::Run(args) | Cmd::Join(args) => args.node,
            other => panic!("not a node command: {other:?}"),
        }
    }

    #[test]
    fn doctor_takes_the_node_flags_of_run_and_resolves_them_as_run_does() {
        let flags = [
            "--data-dir",
            "/srv/edge",
            "--coordinator",
            "10.0.0.1:7400",
            "--node-id",
            "e7",
            "--ca",
            "/etc/tidemill/ca.pem",
        ];
        let mut resolved = Vec::new();
        for sub in ["run", "join", "doctor"] {
            let argv = [&["tidemill-edge", sub][..], &flags[..]].concat();
            let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{sub}: {e}"));
            let cfg = node_args(cli).resolve().unwrap();
            resolved.push((cfg.data_dir, cfg.coordinator, cfg.node_id, cfg.ca));
        }
        assert_eq!(
            resolved[2],
            (
                PathBuf::from("/srv/edge"),
                "10.0.0.1:7400".into(),
                "e7".to_string(),
                PathBuf::from("/etc/tidemill/ca.pem")
            )
        );
        assert!(resolved.iter().all(|r| *r == resolved[2]), "{resolved:?}");
    }
}
