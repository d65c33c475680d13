//! `tidemill-sim checkpoint-accuracy`: a checkpoint moved through the UDP
//! impairment relay by the live code (the edge's mover and the
//! coordinator's handlers, over a mutual-TLS QUIC connection), timed each
//! way, against the cost model's transfer term for the same link and bytes.
//!
//! A measurement, not a test: the figures depend on how busy the machine
//! is, so they are printed for docs/wan.md to quote. The coordinator runs in
//! this process; one edge joins through the relay; a job's task is placed on
//! it directly in the store, so that the edge may send and fetch the job's
//! checkpoints; each run sends a fresh checkpoint up (the leg from the node
//! a job leaves) and fetches it into an empty store (the leg to the node it
//! goes to).

use std::path::Path;
use std::sync::Arc;

use tidemill_cloud::config::CloudConfig;
use tidemill_cloud::store::Owed;
use tidemill_edge::checkpoint_files;
use tidemill_edge::checkpoint_move::{CheckpointConfig, Mover};
use tidemill_proto::{Capabilities, CloudMsg, EdgeMsg, Hello, Report, ReportBody, Sample};
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::identity::{JoinToken, NodeKeyPair, request_certificate};
use tidemill_runtime::{frames, quic};
use tidemill_sched::cost::LinkSpec;
use tidemill_sched::{FirstFitLimits, first_fit};

use super::relay::Relay;
use super::scenario::{Impairment, PathSpec};

/// Options of `checkpoint-accuracy`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The relay's rate each way, Mb/s.
    #[arg(long, default_value_t = 100.0)]
    pub rate_mbps: f64,
    /// The relay's delay each way, ms.
    #[arg(long, default_value_t = 30.0)]
    pub delay_ms: f64,
    /// Size of the checkpoint moved, MiB.
    #[arg(long, default_value_t = 64)]
    pub mib: u64,
    /// Checkpoints moved; each is timed.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

const NODE: &str = "measured";

/// Runs the measurement and prints each transfer against the term.
pub fn run(args: &Args) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(measure(args))
}

async fn measure(args: &Args) -> Result<(), Error> {
    // Deleted at the end; the transfers read and write only here.
    let dir = std::env::temp_dir().join(format!(
        "tidemill-checkpoint-accuracy-{}",
        std::process::id()
    ));
    let outcome = measure_in(args, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn measure_in(args: &Args, dir: &Path) -> Result<(), Error> {
    let cfg = CloudConfig {
        quic_listen: "127.0.0.1:0".parse()?,
        api_listen: "127.0.0.1:0".parse()?,
        data_dir: dir.join("cloud"),
        ..CloudConfig::default()
    };
    let server = tidemill_cloud::server::start(cfg, Arc::new(SystemClock)).await?;
    let imp = Impairment {
        delay_ms: args.delay_ms,
        rate_mbps: Some(args.rate_mbps),
        ..Impairment::default()
    };
    let relay = Relay::bind(
        PathSpec {
            name: NODE.into(),
            listen: "127.0.0.1:0".parse()?,
            upstream: server.quic_addr,
            up: imp.clone(),
            down: imp,
            outage: Vec::new(),
            flap: Vec::new(),
        },
        1,
    )
    .await?;
    let via = relay.local_addr();
    tokio::spawn(relay.run());

    let conn = join_through(&server, via).await?;
    let (job_id, task_id) = place_a_task(&server)?;
    let link = LinkSpec {
        bandwidth_bps: args.rate_mbps * 1e6 / 8.0,
        latency_s: args.delay_ms / 1000.0,
        loss: 0.0,
        congestion: Default::default(),
    };
    println!(
        "a {} MiB checkpoint through the relay at {} Mb/s, {} ms each way; term: cost::LinkSpec::transfer_s",
        args.mib, args.rate_mbps, args.delay_ms
    );
    println!("run  leg   measured  term     error");
    for run in 1..=args.runs {
        let checkpoint = dir.join(format!("run-{run}"));
        write_checkpoint(&checkpoint, args.mib, run)?;
        let up = mover(&dir.join(format!("up-{run}")), &conn);
        let (id, m) = checkpoint_files::snapshot(&up.store, job_id, &checkpoint, u64::MAX)?
            .ok_or("the checkpoint has no step file")?;
        let sent = up.upload(task_id, job_id, (&id, &m)).await?;
        let down = mover(&dir.join(format!("down-{run}")), &conn);
        let (_, fetched) = down.download(task_id, job_id, &m).await?;
        let fetched = fetched.ok_or("the fetch found the checkpoint already held")?;
        let term = link.transfer_s(m.bytes() as f64);
        for (leg, t) in [("up", &sent), ("down", &fetched)] {
            println!(
                "{run:>3}  {leg:<4}  {:>7.3} s  {term:.3} s  {:+.1} %",
                t.seconds,
                (t.seconds / term - 1.0) * 100.0
            );
        }
    }
    conn.close(0u32.into(), b"measured");
    server.stop().await;
    Ok(())
}

/// A mover over a store under `dir`, on `conn`, at the whole link.
fn mover(dir: &Path, conn: &quinn::Connection) -> Arc<Mover> {
    let cfg = CheckpointConfig {
        keep: 1,
        max_bytes: u64::MAX,
        link_share: 1.0,
        transfer_timeout_secs: 600,
    };
    let m = Mover::new(NODE.into(), dir, cfg);
    m.set_link(Some((conn.clone(), None)));
    m
}

/// Writes a checkpoint of `mib` MiB of bytes that differ per `run`.
fn write_checkpoint(dir: &Path, mib: u64, run: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ u64::from(run);
    let data: Vec<u8> = (0..mib << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(dir.join("model.pt"), data)?;
    std::fs::write(dir.join(tidemill_proto::STEP_FILE), run.to_string())
}

/// Joins node [`NODE`] through the relay at `via` and says hello, as an
/// edge does; returns its connection.
async fn join_through(
    server: &tidemill_cloud::server::Server,
    via: std::net::SocketAddr,
) -> Result<quinn::Connection, Error> {
    let coord = &server.coordinator;
    let token = JoinToken::generate(&coord.authority().pin());
    coord.store.lock().unwrap().create_token(
        &token,
        "measurement",
        SystemClock.now_ms(),
        None,
        Some(1),
    )?;
    let timing = quic::Timing::default();
    let joiner = quic::joiner(&token.ca_sha256, timing)?;
    let joining = joiner.connect(via, "localhost")?.await?;
    let key = NodeKeyPair::generate()?;
    let issued = request_certificate(&joining, &token, NODE, &key).await?;
    let client = quic::client(&key.into_identity(issued), timing)?;
    let conn = client.connect(via, "localhost")?.await?;
    let hello = EdgeMsg::Hello(Hello {
        node_id: NODE.into(),
        capabilities: Capabilities {
            cpu_cores: 1,
            mem_bytes: 1 << 30,
            accelerators: vec![],
            os: "linux".into(),
            arch: "x86_64".into(),
            daemon_version: "measurement".into(),
        },
        probe_port: None,
        site: None,
    });
    match frames::request(&conn, &hello).await? {
        CloudMsg::Welcome(_) => Ok(conn),
        other => Err(format!("the coordinator refused the hello: {other:?}").into()),
    }
}

/// Places a job's task on [`NODE`] in the store, as a first-fit round
/// would; returns the job and task ids.
fn place_a_task(server: &tidemill_cloud::server::Server) -> Result<(u64, u64), Error> {
    let mut store = server.coordinator.store.lock().unwrap();
    let now = SystemClock.now_ms();
    let sample = Sample {
        t_ms: now,
        cpu_pct: 1.0,
        per_core_pct: vec![],
        mem_pct: 10.0,
        net_rx_bytes: 0,
        net_tx_bytes: 0,
        gpu_pct: None,
    };
    let report = Report {
        seq: 1,
        body: ReportBody::Samples(vec![sample]),
    };
    store.apply_reports(NODE, &[report], now)?;
    let spec = tidemill_cloud::job::JobFile::from_toml(
        "name = \"moved\"\ncommand = [\"true\"]\ndeadline = \"2099-01-01T00:00:00Z\"",
        "moved",
    )?;
    let job = store.submit(&spec, now)?;
    let limits = FirstFitLimits {
        idle_cpu_threshold_pct: 30.0,
        max_tasks_per_node: 1,
    };
    let plan = first_fit(&store.snapshot(now, false)?, &limits);
    store.apply_plan(&plan, &limits, now)?;
    match &store.owed(NODE, 29_500)?[..] {
        [Owed::Assign(a)] => Ok((job, a.task_id)),
        other => Err(format!("the job was not placed on {NODE}: {other:?}").into()),
    }
}
