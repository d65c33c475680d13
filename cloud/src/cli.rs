//! The command line: the coordinator (`serve`) and the operator's client
//! commands (`nodes`, `jobs ...`), which talk to the API.

use std::process::ExitCode;

use clap::Parser;
use tidemill_runtime::lifecycle;
use tidemill_runtime::notify;

use crate::config::{CloudConfig, DEFAULT_CONFIG};
use crate::job::{JobFile, JobPhase};
use tidemill_sched::policies::PolicyName;

mod args;
mod job_headline;
mod job_view;
mod trust;

pub use args::Cli;
use args::*;
use job_view::show;

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
        let clock = tidemill_runtime::clock::for_phases(
            cfg.clock.speed,
            cfg.clock.anchor_ms,
            &cfg.clock.phases,
        );
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
