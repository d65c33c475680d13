//! The twin's coordinator: a real `tidemill-cloud serve` in a temporary data
//! dir, configured from the scenario as far as its config can take it, on
//! the accelerated clock; and what it costs, read from /proc.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tidemill_cloud::api::TokenRequest;
use tidemill_cloud::client::Client;
use tidemill_runtime::clock::Phase;
use tidemill_sched::placement::CostNode;
use tidemill_sched::{TableData, ThroughputTables};

use super::TwinError;
use crate::simulate::Setup;
use crate::simulate::policies::PolicyName;

/// How long the coordinator may take to start serving.
const START_PATIENCE: Duration = Duration::from_secs(60);

/// Wall seconds of slack the coordinator's tide-clocked timeouts get (edge
/// offline, report skew, start timeout): they are set to this many wall
/// seconds' worth of tide, and never below their defaults.
const SLACK_WALL_S: f64 = 30.0;

/// A running coordinator, stopped when dropped.
pub(crate) struct Cloud {
    child: Child,
    /// Where edges dial.
    pub(crate) quic: SocketAddr,
    /// Its API, with the admin token.
    pub(crate) client: Client,
    /// A join token for the emulated edges.
    pub(crate) join_token: String,
    /// Its log file.
    pub(crate) log: PathBuf,
}

/// A loopback port free for UDP and TCP alike a moment ago.
fn free_port() -> Result<u16, TwinError> {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").map_err(TwinError::Io)?;
        let port = udp.local_addr().map_err(TwinError::Io)?.port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
}

/// Writes each class's tables (as the scenario loaded, scaled and filled
/// them) under `dir` in ElasticFlow's format, one directory per class, so the
/// coordinator plans with the very numbers the simulator runs on; returns
/// the `[scheduler.throughput]` table. Sia profiles have no such format and
/// are left out (the coordinator then estimates those models from other
/// classes).
fn write_tables(tables: &ThroughputTables, dir: &Path) -> Result<toml::Table, TwinError> {
    let mut out = toml::Table::new();
    for (class, models) in &tables.classes {
        let class_dir = dir.join(format!("throughputs_{class}"));
        std::fs::create_dir_all(&class_dir).map_err(TwinError::Io)?;
        for (model, table) in models {
            let TableData::Grid(g) = &table.data else {
                tracing::warn!(
                    class,
                    model,
                    "a Sia profile cannot be given to the coordinator; it estimates this model from other classes"
                );
                continue;
            };
            let mut csv = String::from("global_batch_size");
            for n in &g.gpus {
                csv.push_str(&format!(",{n}"));
            }
            csv.push('\n');
            for (b, row) in g.batches.iter().zip(&g.iters_per_s) {
                csv.push_str(&b.to_string());
                for v in row {
                    csv.push(',');
                    if let Some(v) = v {
                        csv.push_str(&v.to_string());
                    }
                }
                csv.push('\n');
            }
            std::fs::write(class_dir.join(format!("{model}.csv")), csv).map_err(TwinError::Io)?;
        }
        out.insert(
            class.clone(),
            toml::Value::String(class_dir.display().to_string()),
        );
    }
    Ok(out)
}

/// The table at `key` of `t`, made if absent.
fn table<'a>(t: &'a mut toml::Table, key: &str) -> &'a mut toml::Table {
    t.entry(key)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .expect("the default config's sections are tables")
}

/// The coordinator's config: its defaults, with the scenario's scheduler
/// settings, tables, cloud nodes and links, `policy`, and the clock at
/// `speed` from `anchor_ms`, then at each of `phases`.
fn config(
    defaults: &str,
    setup: &Setup,
    policy: PolicyName,
    (speed, phases): (f64, &[Phase]),
    anchor_ms: i64,
    tables: toml::Table,
) -> Result<String, TwinError> {
    let mut c: toml::Table = defaults
        .parse()
        .map_err(|e| TwinError::Config(format!("the default config does not parse: {e}")))?;
    // Timeouts leave the same wall slack at the fastest speed of the run.
    let fastest = phases.iter().map(|p| p.speed).fold(speed, f64::max);
    let tide_s = |default: i64| toml::Value::Integer(default.max((SLACK_WALL_S * fastest) as i64));
    c.insert("offline_after_secs".into(), tide_s(20));
    c.insert("restart_grace_secs".into(), tide_s(120));
    c.insert(
        "round_interval_secs".into(),
        toml::Value::Integer(i64::from(setup.topology.engine.slot_s.max(1))),
    );
    table(&mut c, "trust").insert("report_skew_secs".into(), tide_s(300));
    table(&mut c, "trust").insert("start_timeout_secs".into(), tide_s(120));
    // Every emulated edge dials from loopback, one address for all where a
    // real fleet has one per box, and joins before its first session: two
    // handshakes each may be in flight at once.
    let handshakes = 2 * setup.world.model.nodes().len() as i64 + 32;
    let q = table(&mut c, "quic");
    q.insert(
        "max_unadmitted_per_address".into(),
        toml::Value::Integer(handshakes),
    );
    q.insert(
        "max_unadmitted".into(),
        toml::Value::Integer(handshakes.max(512)),
    );
    // Every pair of boxes of one site is probed, so the coordinator learns
    // each site's LAN as the simulator knows it.
    let peers = c
        .get("probe_peers_per_edge")
        .and_then(toml::Value::as_integer)
        .unwrap_or(0)
        .max(site_reach(setup.world.model.nodes()) as i64);
    c.insert("probe_peers_per_edge".into(), toml::Value::Integer(peers));
    let ingest = table(&mut c, "ingest");
    ingest.insert("reports_per_hour".into(), toml::Value::Integer(100_000_000));
    ingest.insert(
        "report_bytes_per_hour".into(),
        toml::Value::Integer(1 << 40),
    );
    let clock = table(&mut c, "clock");
    clock.insert("speed".into(), toml::Value::Float(speed));
    clock.insert("anchor_ms".into(), toml::Value::Integer(anchor_ms));
    let phases = phases
        .iter()
        .map(|p| {
            let mut t = toml::Table::new();
            t.insert("from_ms".into(), toml::Value::Integer(p.from_ms));
            t.insert("speed".into(), toml::Value::Float(p.speed));
            toml::Value::Table(t)
        })
        .collect();
    clock.insert("phases".into(), toml::Value::Array(phases));
    let s = table(&mut c, "scheduler");
    s.insert(
        "policy".into(),
        toml::Value::String(policy.as_str().to_string()),
    );
    s.insert(
        "tidemill".into(),
        toml::Value::try_from(&setup.topology.tidemill)
            .map_err(|e| TwinError::Config(format!("[tidemill]: {e}")))?,
    );
    if let Some(e) = setup.topology.edge.first() {
        s.insert(
            "idle_cpu_threshold_pct".into(),
            toml::Value::Float(e.idle_threshold_pct),
        );
    }
    let classes: toml::Table = tables
        .keys()
        .map(|k| (k.clone(), toml::Value::String(k.clone())))
        .collect();
    s.insert("device_classes".into(), toml::Value::Table(classes));
    s.insert("throughput".into(), toml::Value::Table(tables));
    let mut rented = toml::Table::new();
    for n in setup.world.model.nodes().iter().filter(|n| n.is_cloud()) {
        let mut t = toml::Table::new();
        t.insert(
            "price_per_gpu_hour".into(),
            toml::Value::Float(n.price_per_gpu_hour.unwrap_or(0.0)),
        );
        rented.insert(n.id.clone(), toml::Value::Table(t));
    }
    s.insert("cloud_nodes".into(), toml::Value::Table(rented));
    let l = &setup.topology.links;
    let links = table(s, "links");
    for (key, link) in [
        ("edge_edge", l.edge_edge),
        ("cloud_edge", l.cloud_edge),
        ("cloud_cloud", l.cloud_cloud),
    ] {
        links.insert(
            key.into(),
            toml::Value::try_from(link).map_err(|e| TwinError::Config(format!("links: {e}")))?,
        );
    }
    toml::to_string(&c).map_err(|e| TwinError::Config(e.to_string()))
}

/// How many places apart in node-id order (the order the coordinator hands
/// out probes in, `probing::assigned`) two boxes of one site stand at most.
fn site_reach(nodes: &[CostNode]) -> usize {
    let mut ids: Vec<(&str, Option<&str>)> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.site.as_deref()))
        .collect();
    ids.sort_unstable();
    let mut span: std::collections::HashMap<&str, (usize, usize)> = Default::default();
    for (k, (_, site)) in ids.iter().enumerate() {
        if let Some(site) = site {
            span.entry(site).or_insert((k, k)).1 = k;
        }
    }
    span.values()
        .map(|(first, last)| last - first)
        .max()
        .unwrap_or(0)
}

impl Cloud {
    /// Starts `bin serve` under `dir` for `setup`'s scenario and waits (a
    /// bounded time) until its API answers.
    pub(crate) fn start(
        bin: &Path,
        dir: &Path,
        setup: &Setup,
        policy: PolicyName,
        speeds: (f64, &[Phase]),
        anchor_ms: i64,
    ) -> Result<Cloud, TwinError> {
        let defaults = Command::new(bin)
            .arg("print-default-config")
            .output()
            .map_err(|e| TwinError::CloudBin(bin.to_path_buf(), e))?;
        let defaults = String::from_utf8_lossy(&defaults.stdout).into_owned();
        let tables = write_tables(&setup.world.model.tables, dir)?;
        let data_dir = dir.join("cloud");
        std::fs::create_dir_all(&data_dir).map_err(TwinError::Io)?;
        let file = data_dir.join("cloud.toml");
        let text = config(&defaults, setup, policy, speeds, anchor_ms, tables)?;
        std::fs::write(&file, text).map_err(TwinError::Io)?;
        let quic: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let api: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let log = dir.join("cloud.log");
        let child = Command::new(bin)
            .args(["serve", "--config"])
            .arg(&file)
            .args(["--quic-listen", &quic.to_string()])
            .args(["--api-listen", &api.to_string()])
            .arg("--data-dir")
            .arg(&data_dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(TwinError::Io)?)
            .spawn()
            .map_err(|e| TwinError::CloudBin(bin.to_path_buf(), e))?;
        let mut cloud = Cloud {
            child,
            quic,
            client: Client::new(&format!("http://{api}"), ""),
            join_token: String::new(),
            log,
        };
        let started = Instant::now();
        let token_file = data_dir.join("admin-token");
        loop {
            if let Some(status) = cloud.child.try_wait().map_err(TwinError::Io)? {
                return Err(TwinError::CloudExited(
                    status.to_string(),
                    cloud.log.clone(),
                ));
            }
            if let Ok(token) = std::fs::read_to_string(&token_file) {
                let client = Client::new(&format!("http://{api}"), token.trim());
                if let Ok(t) = client.create_token(&TokenRequest {
                    ttl_secs: None,
                    uses: None,
                    description: "tidemill-sim twin edges".into(),
                }) {
                    cloud.client = client;
                    cloud.join_token = t.token;
                    return Ok(cloud);
                }
            }
            if started.elapsed() > START_PATIENCE {
                return Err(TwinError::CloudSlow(START_PATIENCE, cloud.log.clone()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// CPU seconds the coordinator has used and its resident memory, MiB.
    pub(crate) fn cost(&self) -> (f64, f64) {
        proc_cost(self.child.id())
    }
}

impl Drop for Cloud {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU seconds (user and system) and resident MiB of process `pid`, from
/// /proc; zeros where it cannot be read.
pub(crate) fn proc_cost(pid: u32) -> (f64, f64) {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the command's closing parenthesis; utime and stime
            // are the 14th and 15th of the line.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / ticks)
        })
        .unwrap_or(0.0);
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0);
    (cpu, rss)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::testkit::{cloud_node, edge_node};

    #[test]
    fn the_probe_reach_spans_the_widest_site_in_id_order() {
        let mut nodes = vec![cloud_node("cloud-0000", "A100", 1)];
        // In id order cloud-0000 stands at place 0, site a at 1 and 2, and
        // site b at 3 to 5.
        for (k, site) in ["a", "a", "b", "b", "b"].iter().enumerate() {
            let mut n = edge_node(&format!("mec-{k:04}"), "T4", k);
            n.site = Some(site.to_string());
            nodes.push(n);
        }
        assert_eq!(site_reach(&nodes), 2);
        // A box of site a sorted after b's stretches a over places 1..=6.
        let mut late = edge_node("x-0000", "T4", 5);
        late.site = Some("a".into());
        nodes.push(late);
        assert_eq!(site_reach(&nodes), 5);
        assert_eq!(site_reach(&nodes[..1]), 0, "no site, no reach");
    }
}
