//! The command line: the coordinator (`serve`) and the operator's client
//! commands (`nodes`, `jobs ...`), which talk to the API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tidemill_runtime::lifecycle::{self, LogFormat};
use tidemill_runtime::notify;

use crate::client::Client;
use crate::config::{CloudConfig, DEFAULT_CONFIG};
use crate::job::{JobFile, JobPhase, JobRecord};
use tidemill_sched::policies::PolicyName;

mod trust;

/// tidemill-cloud: schedules deadline-bound training onto idle edge capacity.
#[derive(Debug, Parser)]
#[command(version = tidemill_runtime::version_line!(), about)]
pub struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
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
enum ConfigCmd {
    /// Load the config file and the TIDEMILL_* environment overrides, check
    /// them, and print the effective configuration with secrets redacted.
    Check {
        /// TOML config file; without it the documented defaults apply.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// TOML config file; without it the documented defaults apply.
    #[arg(long)]
    config: Option<PathBuf>,
    /// How log lines are written: text or json (overrides `log_format`).
    #[arg(long)]
    log_format: Option<LogFormat>,
    /// UDP address for edges.
    #[arg(long)]
    quic_listen: Option<SocketAddr>,
    /// TCP address for the operator API.
    #[arg(long)]
    api_listen: Option<SocketAddr>,
    /// Database and PKI directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Run the clock this many times faster than real time (demos, tests).
    #[arg(long)]
    speed: Option<f64>,
    /// Wall time (Unix ms) at which accelerated time starts; give edges the same.
    #[arg(long)]
    clock_anchor: Option<i64>,
    /// The policy that plans jobs with `[work]` (overrides `[scheduler] policy`;
    /// `tidemill-cloud policies` lists them).
    #[arg(long)]
    policy: Option<PolicyName>,
    /// Start although <data_dir>/secrets.key is lost or replaced and no
    /// backup restores it: the jobs whose sealed secrets no longer decrypt
    /// are cancelled (submit them again), and a new key is made if none is
    /// left.
    #[arg(long)]
    forget_lost_secrets: bool,
}

#[derive(Debug, Args)]
struct ApiArgs {
    /// The coordinator's API, HOST:PORT or a URL (https:// where [api] tls
    /// = true); a bare HOST:PORT means http://HOST:PORT.
    #[arg(long, env = "TIDEMILL_API", default_value = "http://127.0.0.1:7480", value_parser = crate::client::api_base)]
    api: String,
    /// An API token (`api-token create`). Without one, the CLI reads the
    /// local admin token, <data_dir>/admin-token (0600), of the coordinator on
    /// this host, and sends it only to a loopback --api.
    #[arg(long, env = "TIDEMILL_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// The CA to check an https:// API against (the coordinator's ca.pem).
    #[arg(long, env = "TIDEMILL_API_CA")]
    api_ca: Option<PathBuf>,
    /// The coordinator's data dir, where the local admin token is read
    /// without --api-token (default: the one in --config).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The coordinator's config, naming its data dir (default:
    /// /etc/tidemill/cloud.toml where it exists, else the documented
    /// defaults; TIDEMILL_DATA_DIR overrides it as it does for `serve`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

impl ApiArgs {
    fn client(&self) -> Result<Client, crate::client::ClientError> {
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
enum ApiTokenCmd {
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
struct RevokeArgs {
    /// The token's id, as `list` shows it.
    id: String,
    #[command(flatten)]
    api: ApiArgs,
}

#[derive(Debug, Subcommand)]
enum CaCmd {
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
enum NodesCmd {
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
enum TokenCmd {
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
fn parse_ttl(s: &str) -> Result<u64, String> {
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
enum JobsCmd {
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

/// Parses the command line, runs it, and reports any error without a panic.
pub fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemill-cloud: error: {e}");
            ExitCode::FAILURE
        }
    }
}

type Outcome = Result<(), Box<dyn std::error::Error>>;

fn run(cli: Cli) -> Outcome {
    if !matches!(cli.command, Cmd::Serve(_)) {
        lifecycle::exit_quietly_on_closed_pipe();
    }
    match cli.command {
        Cmd::PrintDefaultConfig => {
            print!("{DEFAULT_CONFIG}");
            Ok(())
        }
        Cmd::Policies => {
            for p in PolicyName::ALL {
                println!("{:<16} {}", p.as_str(), p.summary());
            }
            Ok(())
        }
        Cmd::Serve(args) => serve(args),
        Cmd::Doctor { config } => {
            let source = config.as_deref().map_or_else(
                || "the default config".to_string(),
                |p| p.display().to_string(),
            );
            let cfg = match CloudConfig::load(config.as_deref())
                .and_then(|cfg| cfg.validate().map(|()| cfg))
            {
                Ok(cfg) => cfg,
                Err(e) => {
                    tidemill_runtime::doctor::Report::default().fail(
                        "config",
                        e.to_string(),
                        "fix the file or the TIDEMILL_* variable named; `tidemill-cloud print-default-config` documents every key",
                    );
                    return Err("a check failed".into());
                }
            };
            if crate::doctor::run(&cfg, &source).passed() {
                Ok(())
            } else {
                Err("a check failed".into())
            }
        }
        Cmd::Config(ConfigCmd::Check { config }) => {
            let (cfg, mut table) = CloudConfig::load_effective(config.as_deref())?;
            cfg.validate()?;
            tidemill_runtime::config_file::redact(&mut table);
            print!("{table}");
            Ok(())
        }
        Cmd::Nodes {
            cmd: Some(NodesCmd::Remove { id, api }),
            ..
        } => {
            let removed = api.client()?.remove_node(&id)?;
            if api.json {
                return print_json(&removed);
            }
            println!(
                "node {} removed: {} certificate(s) revoked, its connection closed",
                removed.node_id, removed.revoked
            );
            Ok(())
        }
        Cmd::Nodes {
            cmd: Some(NodesCmd::Drain { id, api }),
            ..
        } => {
            let drained = api.client()?.cordon(&id, true)?;
            if api.json {
                return print_json(&drained);
            }
            let jobs: Vec<String> = drained.moving.iter().map(u64::to_string).collect();
            println!(
                "node {id} drained: nothing new is placed there; {} job(s) checkpoint and move ({}); `tidemill-cloud nodes uncordon {id}` undoes it",
                jobs.len(),
                if jobs.is_empty() {
                    "none".to_string()
                } else {
                    jobs.join(", ")
                }
            );
            Ok(())
        }
        Cmd::Nodes {
            cmd: Some(NodesCmd::AcceptCapabilities { id, api }),
            ..
        } => trust::accept_capabilities(&id, &api),
        Cmd::Nodes {
            cmd: Some(NodesCmd::Label { id, label, api }),
            ..
        } => trust::label(&id, &label, true, &api),
        Cmd::Nodes {
            cmd: Some(NodesCmd::Unlabel { id, label, api }),
            ..
        } => trust::label(&id, &label, false, &api),
        Cmd::Nodes {
            cmd: Some(NodesCmd::Uncordon { id, api }),
            ..
        } => {
            let node = api.client()?.cordon(&id, false)?;
            if api.json {
                return print_json(&node);
            }
            println!("node {id} uncordoned: the scheduler may place jobs there again");
            Ok(())
        }
        Cmd::Token(TokenCmd::Create {
            ttl,
            uses,
            description,
            api,
        }) => {
            let req = crate::api::TokenRequest {
                ttl_secs: ttl,
                uses,
                description,
            };
            let new = api.client()?.create_token(&req)?;
            if api.json {
                return print_json(&new);
            }
            println!(
                "join token {} created; it is shown only now:",
                new.record.id
            );
            println!("{}", new.token);
            Ok(())
        }
        Cmd::ApiToken(ApiTokenCmd::Create {
            scope,
            description,
            api,
        }) => {
            let new = api
                .client()?
                .create_api_token(&crate::api::ApiTokenRequest {
                    scope: scope.as_str().into(),
                    description,
                })?;
            if api.json {
                return print_json(&new);
            }
            println!(
                "API token {} ({}) created; it is shown only now:",
                new.id, new.scope
            );
            println!("{}", new.token);
            Ok(())
        }
        Cmd::ApiToken(ApiTokenCmd::List(a)) => {
            let tokens = a.client()?.api_tokens()?;
            print_json(&tokens)
        }
        Cmd::ApiToken(ApiTokenCmd::Revoke(RevokeArgs { id, api })) => {
            let tokens = api.client()?.revoke_api_token(&id)?;
            print_json(&tokens)
        }
        Cmd::Ca(CaCmd::Status(a)) => print_ca(&a.client()?.ca_status()?, a.json),
        Cmd::Ca(CaCmd::Rotate { step, force, api }) => {
            let status = api
                .client()?
                .rotate_ca(&crate::api::RotateRequest { step, force })?;
            print_ca(&status, api.json)
        }
        Cmd::Token(TokenCmd::List(a)) => print_tokens(&a.client()?.tokens()?, a.json),
        Cmd::Token(TokenCmd::Revoke(RevokeArgs { id, api })) => {
            print_tokens(&api.client()?.revoke_token(&id)?, api.json)
        }
        Cmd::Nodes { cmd: None, api: a } => {
            let nodes = a.client()?.nodes()?;
            if a.json {
                return print_json(&nodes);
            }
            println!(
                "{:<20} {:<7} {:>5} {:>9} {:>6} {:>6} {:>6} {:>8}  {:<28} {:>8}  FORECAST",
                "NODE",
                "ONLINE",
                "CORES",
                "MEM(GiB)",
                "CPU%",
                "MEM%",
                "GPU%",
                "LAST_SEQ",
                "NEXT IDLE (UTC), CONFIDENCE",
                "IDLE/24H"
            );
            for n in nodes {
                let pct = |v: Option<f32>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
                let (next_idle, idle_24h, summary) = forecast_cells(n.forecast.as_ref());
                println!(
                    "{:<20} {:<7} {:>5} {:>9.1} {:>6} {:>6} {:>6} {:>8}  {:<28} {:>8}  {}",
                    n.id,
                    match (n.online, n.drained) {
                        (true, true) => "drained",
                        (true, false) => "yes",
                        (false, _) => "no",
                    },
                    n.cpu_cores,
                    n.mem_bytes as f64 / (1u64 << 30) as f64,
                    pct(n.cpu_util),
                    pct(n.mem_util),
                    pct(n.gpu_util),
                    n.last_seq,
                    next_idle,
                    idle_24h,
                    summary
                );
                trust::print_standing(&n);
            }
            Ok(())
        }
        Cmd::Links(a) => {
            let links = a.client()?.links()?;
            if a.json {
                return print_json(&links);
            }
            println!(
                "{:<16} {:<16} {:<11} {:>9} {:>12} {:>7}  MEASURED (UTC)",
                "FROM", "TO", "CLASS", "RTT(ms)", "BW(Mbit/s)", "LOSS%"
            );
            for l in links {
                println!(
                    "{:<16} {:<16} {:<11} {:>9.2} {:>12.1} {:>7.2}  {}",
                    l.from,
                    l.to,
                    l.class.as_str(),
                    l.rtt_ms,
                    l.bandwidth_bps * 8.0 / 1e6,
                    l.loss * 100.0,
                    l.measured_at.format("%m-%d %H:%M:%S")
                );
            }
            Ok(())
        }
        Cmd::Forecast { node, api } => {
            let f = api.client()?.forecast(&node)?;
            if api.json {
                return print_json(&f);
            }
            print_forecast(&node, &f);
            Ok(())
        }
        Cmd::Jobs(JobsCmd::Submit { file, api }) => {
            let spec = JobFile::from_file(&file)?;
            let id = api.client()?.submit(&spec)?;
            if api.json {
                return print_json(&serde_json::json!({ "id": id }));
            }
            println!("{id}");
            Ok(())
        }
        Cmd::Jobs(JobsCmd::List(a)) => {
            let jobs = a.client()?.jobs()?;
            if a.json {
                return print_json(&jobs);
            }
            println!(
                "{:>6} {:<24} {:<10} {:<16} {:<25} REASON",
                "ID", "NAME", "STATE", "NODE", "DEADLINE"
            );
            for j in jobs {
                println!(
                    "{:>6} {:<24} {:<10} {:<16} {:<25} {}",
                    j.id,
                    j.name,
                    j.state.as_str(),
                    j.node.as_deref().unwrap_or("-"),
                    j.deadline.to_rfc3339(),
                    j.reason.as_deref().unwrap_or("")
                );
            }
            Ok(())
        }
        Cmd::Jobs(JobsCmd::Show { id, api }) => show(&api.client()?.job(id)?, api.json),
        Cmd::Jobs(JobsCmd::Cancel { id, api }) => show(&api.client()?.cancel(id)?, api.json),
        Cmd::Jobs(JobsCmd::Wait {
            id,
            timeout_secs,
            api,
        }) => {
            let client = api.client()?;
            let until = std::time::Instant::now() + std::time::Duration::from_secs(timeout_secs);
            let job = loop {
                let job = client.job(id)?;
                if job.state.is_terminal() {
                    break job;
                }
                if std::time::Instant::now() >= until {
                    return Err(format!(
                        "job {id} is still {} after {timeout_secs} s; wait longer with --timeout-secs",
                        job.state.as_str()
                    )
                    .into());
                }
                std::thread::sleep(WAIT_POLL);
            };
            show(&job, api.json)?;
            if job.state != JobPhase::Succeeded {
                return Err(format!("job {id} ended {}", job.state.as_str()).into());
            }
            Ok(())
        }
    }
}

/// How often `jobs wait` asks for the job.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// The `nodes` table's forecast cells: the next idle window and its
/// confidence, idle hours in the next 24 h, and when the forecast was made,
/// on how much history, and whether it found a daily cycle.
fn forecast_cells(f: Option<&crate::store::ForecastView>) -> (String, String, String) {
    let Some(f) = f else {
        return ("-".into(), "-".into(), "none yet".into());
    };
    let next_idle = f
        .next_idle
        .as_ref()
        .map_or("none within the horizon".into(), |w| {
            format!(
                "{}–{} {:.2}",
                w.start.format("%m-%d %H:%M"),
                w.end.format("%m-%d %H:%M"),
                w.confidence
            )
        });
    let mut summary = format!("issued {} UTC", f.issued_at.format("%m-%d %H:%M"));
    if let Some(h) = f.history {
        summary.push_str(&format!(", {h}"));
    }
    if let Some(p) = f.prior {
        summary.push_str(&format!(", {p}"));
    }
    if let Some(c) = f.daily_cycle {
        summary.push_str(match c {
            tidemill_forecast::DailyCycle::Present => ", daily cycle",
            tidemill_forecast::DailyCycle::Absent => ", no daily cycle",
            tidemill_forecast::DailyCycle::Unknown => ", daily cycle unknown",
        });
    }
    (
        next_idle,
        format!("{:.1} h", f.idle_hours_next_24h),
        summary,
    )
}

fn print_forecast(node: &str, f: &tidemill_proto::NodeForecast) {
    let time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map_or("?".into(), |t| t.format("%m-%d %H:%M").to_string())
    };
    println!(
        "forecast for {node} by {}, issued {} UTC, {}",
        f.method,
        time(f.issued_ms),
        f.history()
            .map_or("history not reported (an older edge)".into(), |h| h
                .to_string())
            + &f.prior.map_or(String::new(), |p| format!(", {p}"))
    );
    for w in &f.idle_windows {
        println!(
            "idle window {} .. {} UTC, confidence {:.2}",
            time(w.start_ms),
            time(w.end_ms),
            w.confidence
        );
    }
    let names: Vec<String> = f
        .resources
        .iter()
        .map(|r| format!("{:?} p10/p50/p90", r.resource))
        .collect();
    println!("{:<12} {}", "SLOT (UTC)", names.join("   "));
    let slots = f.resources.iter().map(|r| r.slots.len()).max().unwrap_or(0);
    for i in 0..slots {
        let cells: Vec<String> = f
            .resources
            .iter()
            .map(|r| match r.slots.get(i).copied().flatten() {
                Some(q) => format!("{:>5.1} {:>5.1} {:>5.1}", q.p10, q.p50, q.p90),
                None => format!("{:>17}", "-"),
            })
            .collect();
        println!("{:<12} {}", time(f.slot_start_ms(i)), cells.join("   "));
    }
}

fn print_ca(s: &crate::rotation::CaStatus, json: bool) -> Outcome {
    if json {
        return print_json(s);
    }
    println!("CA (servers, join tokens): sha256 {}", s.ca_sha256);
    println!(
        "issuing CA (node certificates): sha256 {}",
        s.issuing_sha256
    );
    println!(
        "rotation: {}; {} of {} nodes hold a certificate from the issuing CA",
        if s.rotating { "under way" } else { "none" },
        s.nodes_on_issuing,
        s.nodes
    );
    Ok(())
}

fn print_tokens(tokens: &[crate::store::TokenRecord], json: bool) -> Outcome {
    if json {
        return print_json(&tokens);
    }
    let time = |ms: Option<i64>| {
        ms.and_then(chrono::DateTime::from_timestamp_millis)
            .map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M").to_string())
    };
    println!(
        "{:<8} {:<17} {:<17} {:>9} {:>5} {:<17} DESCRIPTION",
        "ID", "CREATED (UTC)", "EXPIRES (UTC)", "USES LEFT", "USED", "REVOKED (UTC)"
    );
    for t in tokens {
        println!(
            "{:<8} {:<17} {:<17} {:>9} {:>5} {:<17} {}",
            t.id,
            time(Some(t.created_ms)),
            time(t.expires_ms),
            t.uses_left.map_or("any".into(), |u| u.to_string()),
            t.used,
            time(t.revoked_ms),
            t.description
        );
    }
    Ok(())
}

fn print_json(value: &impl serde::Serialize) -> Outcome {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn show(job: &JobRecord, json: bool) -> Outcome {
    if json {
        return print_json(job);
    }
    println!("id:         {}", job.id);
    println!("name:       {}", job.name);
    println!("state:      {}", job.state.as_str());
    println!("node:       {}", job.node.as_deref().unwrap_or("-"));
    println!(
        "exit code:  {}",
        job.exit_code.map_or("-".to_string(), |c| c.to_string())
    );
    println!("reason:     {}", job.reason.as_deref().unwrap_or("-"));
    println!("command:    {:?}", job.command);
    println!("deadline:   {}", job.deadline.to_rfc3339());
    println!("submitted:  {}", job.submitted_at.to_rfc3339());
    if let Some(t) = job.started_at {
        println!("started:    {}", t.to_rfc3339());
    }
    if let Some(w) = &job.start_window {
        println!(
            "            in {}'s forecast idle window {} – {} (confidence {:.2}; forecast of {})",
            w.node,
            w.window.start.to_rfc3339(),
            w.window.end.to_rfc3339(),
            w.window.confidence,
            w.forecast_issued_at.to_rfc3339()
        );
    }
    if let Some(t) = job.finished_at {
        let slack = crate::job::signed_span((job.deadline - t).num_milliseconds());
        println!("finished:   {} (slack {slack})", t.to_rfc3339());
    }
    if let Some(ck) = &job.checkpoint {
        println!("checkpoint: {}", checkpoint_line(ck));
    }
    if let Some(p) = &job.plan {
        print_plan(job, p);
    }
    print_transfers(&job.checkpoint_transfers);
    if !job.output_tail.is_empty() {
        println!("output (last {} lines):", job.output_tail.len());
        for line in &job.output_tail {
            println!("  {line}");
        }
    }
    if let Some(why) = &job.output_hidden {
        println!("output:     {why}");
    }
    Ok(())
}

/// What a job's latest ended task left in its checkpoint dir, for `jobs show`.
fn checkpoint_line(ck: &tidemill_proto::CheckpointState) -> String {
    let error = ck
        .last_error
        .as_deref()
        .map_or_else(String::new, |e| format!(" (last error: {e})"));
    let held = format!("{} files, {:.1} MB", ck.files, ck.bytes as f64 / 1e6);
    match (ck.saved_by_task, ck.files) {
        (true, _) => format!("{held}, saved by its last task"),
        (false, 0) => format!("none saved{error}"),
        (false, _) => format!("none saved by its last task{error}; {held} kept from before"),
    }
}

/// A job's checkpoint transfers, for `jobs show`: each leg's size, rate,
/// time and the step it carried, which a task resumed from.
fn print_transfers(transfers: &[crate::store::TransferRecord]) {
    if transfers.is_empty() {
        return;
    }
    println!("checkpoint transfers:");
    for t in transfers {
        let resent = match t.resent_chunks {
            0 => String::new(),
            n => format!(", {n} chunks sent again after a bad hash"),
        };
        let resumed = if t.moved_bytes < t.bytes {
            format!(
                " ({} moved, the rest held from a cut transfer)",
                t.moved_bytes
            )
        } else {
            String::new()
        };
        println!(
            "  {} → {}: step {}, {} bytes{resumed} in {:.2} s at {:.2} Mb/s{resent}",
            t.from,
            t.to,
            t.step,
            t.bytes,
            t.seconds,
            t.rate_bps() * 8.0 / 1e6
        );
    }
}

fn print_plan(job: &JobRecord, p: &crate::job::PlanView) {
    let time = |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or("-".into(), |t| t.to_rfc3339());
    if job.state.is_terminal() {
        println!(
            "last plan before the job ended ({}):",
            p.decided_at.to_rfc3339()
        );
    } else {
        println!("plan ({}):", p.decided_at.to_rfc3339());
    }
    println!("  verdict:  {}", p.verdict.as_str());
    println!("  shape:    {:?} on {}", p.shape, p.nodes.join(", "));
    println!("  start:    {}", time(p.expected_start));
    println!("  finish:   {}", time(p.expected_finish));
    if let Some(s) = p.step {
        println!(
            "  step:     {:.3} s (compute {:.3} s, sync {:.3} s); staging {:.1} s",
            s.total_s, s.compute_s, s.sync_s, p.staging_s
        );
    }
    println!("  cloud:    {:.2}", p.cloud_cost);
    println!("  reason:   {}", p.reason);
    for (k, seg) in p.segments.iter().enumerate() {
        let why = stretch_why(k.checked_sub(1).map(|j| &p.segments[j]), seg);
        println!("  stretch {}: {}; {why}", k + 1, stretch_line(seg));
    }
    if let Some(w) = &job.work {
        println!(
            "  progress: {:.0} of {:.0} iterations ({}), {:.0} s run",
            job.done_iters,
            w.iterations,
            job.progress.as_str(),
            job.attained_s
        );
        if let Some(r) = job.measured_ips {
            println!("  rate:     {r:.4} iterations/s, measured from the job's reports");
        }
    }
}

/// One stretch of a plan for `jobs show`: from when to when, where and on
/// how many workers, and what it costs and does.
fn stretch_line(s: &tidemill_sched::Segment) -> String {
    let time = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms).map_or_else(
            || format!("{ms} ms"),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
    };
    let on: Vec<String> =
        s.on.iter()
            .map(|a| format!("{}×{}", a.node_id, a.workers))
            .collect();
    format!(
        "{} → {} UTC on {}: {:.0} iterations at {:.3} s a step after {:.1} s of start-up, cost {:.2}",
        time(s.start_ms),
        time(s.end_ms),
        on.join(", "),
        s.iters,
        s.step.total_s,
        s.startup_s,
        s.cloud_cost
    )
}

/// Why a stretch differs from the one before it: where the plan resizes,
/// moves or pauses, each paid as a checkpoint and a restart.
fn stretch_why(prev: Option<&tidemill_sched::Segment>, s: &tidemill_sched::Segment) -> String {
    let workers = |s: &tidemill_sched::Segment| s.on.iter().map(|a| a.workers).sum::<u32>();
    let within = |a: &tidemill_sched::Segment, b: &tidemill_sched::Segment| {
        a.on.iter()
            .all(|x| b.on.iter().any(|y| y.node_id == x.node_id))
    };
    let site = |s: &tidemill_sched::Segment| {
        if s.cloud_cost > 0.0 {
            "the cloud"
        } else {
            "idle edge capacity"
        }
    };
    match prev {
        None => format!("starts on {}", site(s)),
        Some(p) if p.on == s.on && s.start_ms > p.end_ms => {
            "resumes where it paused (restart)".into()
        }
        Some(p) if p.on == s.on => "continues".into(),
        Some(p) if workers(s) > workers(p) && within(p, s) => format!(
            "grows from {} to {} workers as capacity frees (checkpoint and restart)",
            workers(p),
            workers(s)
        ),
        Some(p) if workers(s) < workers(p) && within(s, p) => format!(
            "shrinks from {} to {} workers as capacity is taken (checkpoint and restart)",
            workers(p),
            workers(s)
        ),
        Some(p) => format!(
            "moves from {} to {} (checkpoint transfer and restart)",
            site(p),
            site(s)
        ),
    }
}

fn serve(args: ServeArgs) -> Outcome {
    let mut cfg = CloudConfig::load(args.config.as_deref())?;
    if let Some(v) = args.quic_listen {
        cfg.quic_listen = v;
    }
    if let Some(v) = args.api_listen {
        cfg.api_listen = v;
    }
    if let Some(v) = args.data_dir {
        cfg.data_dir = v;
    }
    if let Some(v) = args.speed {
        cfg.clock.speed = v;
    }
    if let Some(v) = args.clock_anchor {
        cfg.clock.anchor_ms = Some(v);
    }
    if let Some(v) = args.policy {
        cfg.scheduler.policy = v;
    }
    if let Some(v) = args.log_format {
        cfg.log_format = v;
    }
    cfg.forget_lost_secrets = args.forget_lost_secrets;
    cfg.validate()?;
    // quinn's endpoint logs, at debug, each datagram it refuses (garbage, unknown
    // connections, unsupported versions): operators should see those.
    lifecycle::init_logging_as("info,quinn_proto::endpoint=debug", cfg.log_format);
    lifecycle::private_files();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let clock = tidemill_runtime::clock::for_speed(cfg.clock.speed, cfg.clock.anchor_ms);
        let server = crate::server::start(cfg, clock).await?;
        // The store is open and the QUIC and API listeners are bound.
        notify::ready();
        let watchdog = notify::start_watchdog();
        lifecycle::shutdown_signal().await;
        notify::stopping();
        tracing::info!("stopping");
        server.stop().await;
        drop(watchdog);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemill_sched::cost::StepTime;
    use tidemill_sched::{Assignment, Segment};

    #[test]
    fn a_stretch_says_when_where_how_wide_and_what_it_does() {
        let seg = Segment {
            start_ms: 1_767_225_600_000,
            end_ms: 1_767_229_200_000,
            on: vec![
                Assignment {
                    node_id: "e1".into(),
                    workers: 1,
                },
                Assignment {
                    node_id: "e2".into(),
                    workers: 2,
                },
            ],
            startup_s: 30.5,
            step: StepTime {
                compute_s: 0.4,
                sync_s: 0.2,
                total_s: 0.5,
            },
            iters: 7139.0,
            cloud_cost: 0.0,
        };
        assert_eq!(
            stretch_line(&seg),
            "2026-01-01 00:00:00 → 2026-01-01 01:00:00 UTC on e1×1, e2×2: 7139 iterations at 0.500 s a step after 30.5 s of start-up, cost 0.00"
        );
        assert_eq!(stretch_why(None, &seg), "starts on idle edge capacity");
    }

    #[test]
    fn a_stretch_says_why_it_resizes_moves_or_resumes() {
        let on = |nodes: &[(&str, u32)], start_ms: i64, cost: f64| Segment {
            start_ms,
            end_ms: start_ms + 1_000,
            on: nodes
                .iter()
                .map(|&(n, w)| Assignment {
                    node_id: n.into(),
                    workers: w,
                })
                .collect(),
            startup_s: 30.0,
            step: StepTime {
                compute_s: 0.1,
                sync_s: 0.0,
                total_s: 0.1,
            },
            iters: 10.0,
            cloud_cost: cost,
        };
        let one = on(&[("c2", 1)], 0, 1.0);
        let two = on(&[("c1", 1), ("c2", 1)], 1_000, 2.0);
        assert_eq!(
            stretch_why(Some(&one), &two),
            "grows from 1 to 2 workers as capacity frees (checkpoint and restart)"
        );
        assert_eq!(
            stretch_why(Some(&two), &on(&[("c1", 1)], 2_000, 1.0)),
            "shrinks from 2 to 1 workers as capacity is taken (checkpoint and restart)"
        );
        assert_eq!(
            stretch_why(Some(&one), &on(&[("c2", 1)], 1_000, 1.0)),
            "continues"
        );
        assert_eq!(
            stretch_why(Some(&one), &on(&[("c2", 1)], 5_000, 1.0)),
            "resumes where it paused (restart)"
        );
        assert_eq!(
            stretch_why(
                Some(&on(&[("e1", 1)], 0, 0.0)),
                &on(&[("c1", 1)], 1_000, 1.0)
            ),
            "moves from idle edge capacity to the cloud (checkpoint transfer and restart)"
        );
    }
}
