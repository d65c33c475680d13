//! The command line's shape: every subcommand and flag of `tidemill-cloud`,
//! as clap reads them (docs/cli.md lists them for people).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tidemill_runtime::lifecycle::LogFormat;
use tidemill_sched::policies::PolicyName;

use crate::client::Client;

/// tidemill-cloud: schedules deadline-bound training onto idle edge capacity.
#[derive(Debug, Parser)]
#[command(version = tidemill_runtime::version_line!(), about)]
pub struct Cli {
    #[command(subcommand)]
    pub(super) command: Cmd,
}

#[derive(Debug, Subcommand)]
pub(super) enum Cmd {
    /// Run the coordinator.
    Serve(ServeArgs),
    /// Print the default configuration, every key documented.
    PrintDefaultConfig,
    /// Check the configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Check this machine: config, data dir, store, CA and server
    /// certificate, listen addresses, API TLS, clock. Exits non-zero when a
    /// check fails.
    Doctor {
        /// TOML config file; without it the documented defaults apply.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// List the scheduling policies `serve --policy` accepts, one line each.
    Policies,
    /// List nodes, or drain, uncordon or remove one.
    Nodes {
        #[command(subcommand)]
        cmd: Option<NodesCmd>,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Create, list and revoke join tokens.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    ApiToken(ApiTokenCmd),
    /// Show the CA, or rotate it (`ca rotate begin`, then `ca rotate finish`).
    #[command(subcommand)]
    Ca(CaCmd),
    /// Show the measured link matrix.
    Links(ApiArgs),
    /// Show a node's latest forecast, slot by slot.
    Forecast {
        /// The node id.
        node: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Submit, list, show and cancel jobs.
    #[command(subcommand)]
    Jobs(JobsCmd),
}

#[derive(Debug, Subcommand)]
pub(super) enum ConfigCmd {
    /// Load the config file and the TIDEMILL_* environment overrides, check
    /// them, and print the effective configuration with secrets redacted.
    Check {
        /// TOML config file; without it the documented defaults apply.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// TOML config file; without it the documented defaults apply.
    #[arg(long)]
    pub(super) config: Option<PathBuf>,
    /// How log lines are written: text or json (overrides `log_format`).
    #[arg(long)]
    pub(super) log_format: Option<LogFormat>,
    /// UDP address for edges.
    #[arg(long)]
    pub(super) quic_listen: Option<SocketAddr>,
    /// TCP address for the operator API.
    #[arg(long)]
    pub(super) api_listen: Option<SocketAddr>,
    /// Database and PKI directory.
    #[arg(long)]
    pub(super) data_dir: Option<PathBuf>,
    /// Run the clock this many times faster than real time (demos, tests).
    #[arg(long)]
    pub(super) speed: Option<f64>,
    /// Wall time (Unix ms) at which accelerated time starts; give edges the same.
    #[arg(long)]
    pub(super) clock_anchor: Option<i64>,
    /// The policy that plans jobs with `[work]` (overrides `[scheduler] policy`;
    /// `tidemill-cloud policies` lists them).
    #[arg(long)]
    pub(super) policy: Option<PolicyName>,
    /// Start although <data_dir>/secrets.key is lost or replaced and no
    /// backup restores it: the jobs whose sealed secrets no longer decrypt
    /// are cancelled (submit them again), and a new key is made if none is
    /// left.
    #[arg(long)]
    pub(super) forget_lost_secrets: bool,
}

#[derive(Debug, Args)]
pub(super) struct ApiArgs {
    /// The coordinator's API, HOST:PORT or a URL (https:// where [api] tls
    /// = true); a bare HOST:PORT means http://HOST:PORT.
    #[arg(long, env = "TIDEMILL_API", default_value = "http://127.0.0.1:7480", value_parser = crate::client::api_base)]
    pub(super) api: String,
    /// An API token (`api-token create`). Without one, the CLI reads the
    /// local admin token, <data_dir>/admin-token (0600), of the coordinator on
    /// this host, and sends it only to a loopback --api.
    #[arg(long, env = "TIDEMILL_API_TOKEN", hide_env_values = true)]
    pub(super) api_token: Option<String>,
    /// The CA to check an https:// API against (the coordinator's ca.pem).
    #[arg(long, env = "TIDEMILL_API_CA")]
    pub(super) api_ca: Option<PathBuf>,
    /// The coordinator's data dir, where the local admin token is read
    /// without --api-token (default: the one in --config).
    #[arg(long)]
    pub(super) data_dir: Option<PathBuf>,
    /// The coordinator's config, naming its data dir (default:
    /// /etc/tidemill/cloud.toml where it exists, else the documented
    /// defaults; TIDEMILL_DATA_DIR overrides it as it does for `serve`).
    #[arg(long)]
    pub(super) config: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(super) json: bool,
}

impl ApiArgs {
    pub(super) fn client(&self) -> Result<Client, crate::client::ClientError> {
        let token = crate::local_admin::token(
            &self.api,
            self.api_token.as_deref(),
            self.data_dir.as_deref(),
            self.config.as_deref(),
        );
        let client = Client::with_auth(
            &self.api,
            token.as_ref().ok().map(String::as_str),
            self.api_ca.as_deref(),
        )?;
        Ok(match token {
            Ok(_) => client,
            Err(why) => client.without_token_because(why.to_string()),
        })
    }
}

#[derive(Debug, Subcommand)]
pub(super) enum ApiTokenCmd {
    /// Create an API token; prints it alone on the last line.
    Create {
        /// read, submit or admin.
        #[arg(long)]
        scope: crate::auth::Scope,
        /// What it is for, shown in `api-token list`.
        #[arg(long, default_value = "")]
        description: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// List API tokens (never their secrets).
    List(ApiArgs),
    /// Revoke an API token by its id.
    Revoke(RevokeArgs),
}

/// A token to revoke.
#[derive(Debug, Args)]
pub(super) struct RevokeArgs {
    /// The token's id, as `list` shows it.
    pub(super) id: String,
    #[command(flatten)]
    pub(super) api: ApiArgs,
}

#[derive(Debug, Subcommand)]
pub(super) enum CaCmd {
    /// Where the CA stands: rotating or not, and how many nodes hold a
    /// certificate from the CA that issues now.
    Status(ApiArgs),
    /// Take a rotation step: begin (a new CA signs from now on; every edge
    /// reconnects once and renews onto it), then finish (the new CA is the
    /// only one; refused while a node has not renewed, unless --force).
    Rotate {
        /// begin or finish.
        step: crate::rotation::Step,
        /// Finish even with nodes not yet renewed; they must join again.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        api: ApiArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum NodesCmd {
    /// Revoke a node's certificate, close its connection and forget its
    /// forecast and links; it must join again with a new token.
    Remove {
        /// The node id.
        id: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Place nothing new on a node, and have the jobs there checkpoint and
    /// move elsewhere (before maintenance or an upgrade).
    Drain {
        /// The node id.
        id: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Let the scheduler use a drained node again.
    Uncordon {
        /// The node id.
        id: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Accept the larger capabilities a node's refused hello claimed (new
    /// hardware you trust); its next hello is welcomed.
    AcceptCapabilities {
        /// The node id.
        id: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Give a node a label, e.g. `trusted`: jobs that `requires` it may run
    /// there. Only an admin sets labels; a node never does.
    Label {
        /// The node id.
        id: String,
        /// The label.
        label: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Take a label from a node; jobs already running there stay.
    Unlabel {
        /// The node id.
        id: String,
        /// The label.
        label: String,
        #[command(flatten)]
        api: ApiArgs,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum TokenCmd {
    /// Create a join token; prints it alone on the last line.
    Create {
        /// How long it works: a number and s, m, h or d (for example 24h);
        /// without it, until revoked.
        #[arg(long, value_parser = parse_ttl)]
        ttl: Option<u64>,
        /// How many edges may join with it; without it, any number.
        #[arg(long)]
        uses: Option<u32>,
        /// What it is for, shown in `token list`.
        #[arg(long, default_value = "")]
        description: String,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// List join tokens (never their secrets).
    List(ApiArgs),
    /// Revoke a join token by its id.
    Revoke(RevokeArgs),
}

/// Seconds in a duration such as `90s`, `30m`, `24h` or `7d`.
pub(super) fn parse_ttl(s: &str) -> Result<u64, String> {
    let bad =
        || format!("{s:?} is not a duration: give a number and s, m, h or d, for example 24h");
    let (n, unit) = s.split_at(s.len().saturating_sub(1));
    let n: u64 = n.parse().map_err(|_| bad())?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).filter(|&t| t > 0).ok_or_else(bad)
}

#[derive(Debug, Subcommand)]
pub(super) enum JobsCmd {
    /// Submit a job file (TOML); prints the new job's id.
    Submit {
        /// The job file.
        #[arg(long)]
        file: PathBuf,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// List jobs, newest first.
    List(ApiArgs),
    /// Show one job.
    Show {
        /// The job id.
        id: u64,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Cancel a job.
    Cancel {
        /// The job id.
        id: u64,
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Wait until a job has ended, then show it; exits non-zero unless it
    /// succeeded (for scripts).
    Wait {
        /// The job id.
        id: u64,
        /// Give up after this many seconds (wall time).
        #[arg(long, default_value_t = 3600)]
        timeout_secs: u64,
        #[command(flatten)]
        api: ApiArgs,
    },
}
