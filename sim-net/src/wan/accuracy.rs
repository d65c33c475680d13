//! `tidemill-sim wan-accuracy`: the cost model's ring all-reduce term against
//! a real TCP ring over the lab's impaired links, printed with its error.
//!
//! A measurement, not a test: how close the term comes depends on how busy
//! the machine is, so the figures are printed for docs/wan.md to quote and
//! the tests only check that the ring runs and is slowed by the link.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tidemill_sched::cost::{Congestion, ring_allreduce_s};

use super::netns::{self, Lab};
use super::scenario::Impairment;
use crate::allreduce;

/// Options of `wan-accuracy`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Ranks in each ring.
    #[arg(long, default_value_t = 3)]
    pub ranks: usize,
    /// All-reduce steps each rank times; the median is compared.
    #[arg(long, default_value_t = 6)]
    pub steps: usize,
}

/// One lab setting: a name, the link between every pair of ranks, the TCP
/// congestion control (name for the kernel, model for the term) and the
/// bytes all-reduced each step.
#[derive(Debug, Clone)]
pub struct Setting {
    /// What the link stands for (metro, long, lossy).
    pub name: &'static str,
    /// The link between every pair of ranks, each way.
    pub link: Impairment,
    /// The kernel's name of the congestion control.
    pub tcp: &'static str,
    /// How the cost model treats that congestion control.
    pub congestion: Congestion,
    /// Bytes all-reduced each step.
    pub bytes: usize,
}

/// What one setting measured against the term for it, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// The slowest rank's median step.
    pub measured_s: f64,
    /// `cost::ring_allreduce_s` for the same link and bytes.
    pub predicted_s: f64,
}

impl Measured {
    /// Relative error of the term: measured / predicted − 1.
    pub fn error(&self) -> f64 {
        self.measured_s / self.predicted_s - 1.0
    }
}

/// A link of `mbps`, `delay_ms` each way and `loss`.
pub fn link(mbps: f64, delay_ms: f64, loss: f64) -> Impairment {
    Impairment {
        delay_ms,
        loss,
        rate_mbps: Some(mbps),
        ..Impairment::default()
    }
}

/// The four settings docs/wan.md quotes: a metro link, a long one, and a
/// lossy one under Cubic and under BBR.
pub fn settings() -> Vec<Setting> {
    let s = |name, link, tcp, congestion, bytes| Setting {
        name,
        link,
        tcp,
        congestion,
        bytes,
    };
    vec![
        s(
            "metro",
            link(100.0, 5.0, 0.0),
            "cubic",
            Congestion::LossBased,
            4 << 20,
        ),
        s(
            "long",
            link(20.0, 30.0, 0.0),
            "cubic",
            Congestion::LossBased,
            1 << 20,
        ),
        s(
            "lossy",
            link(100.0, 30.0, 0.005),
            "cubic",
            Congestion::LossBased,
            1 << 20,
        ),
        s(
            "lossy",
            link(100.0, 30.0, 0.005),
            "bbr",
            Congestion::RateBased,
            1 << 20,
        ),
    ]
}

/// Runs a ring of `ranks` copies of `bin allreduce` in a lab whose every pair
/// of ranks has `setting`'s link, and returns the slowest rank's median step
/// beside the term. `subnet` keeps concurrent labs apart.
pub fn measure(
    bin: &Path,
    setting: &Setting,
    ranks: usize,
    steps: usize,
    subnet: u8,
) -> Result<Measured, String> {
    let names: Vec<String> = (0..ranks).map(|r| format!("r{r}")).collect();
    let nodes: Vec<(&str, bool)> = names.iter().map(|n| (n.as_str(), true)).collect();
    let mut lab = Lab::create("tmlab", subnet, &nodes).map_err(|e| e.to_string())?;
    lab.set_tcp_congestion(setting.tcp)
        .map_err(|e| e.to_string())?;
    let imp = setting.link.clone();
    let _hub = lab
        .start_hub(move |_, _| imp.clone(), 7)
        .map_err(|e| e.to_string())?;
    let master = lab.nodes()[0].ip.to_string();
    let mut children = Vec::new();
    for (rank, name) in names.iter().enumerate() {
        let child = lab
            .command(name, bin)
            .args(["allreduce", "--bytes", &setting.bytes.to_string()])
            .args(["--steps", &steps.to_string(), "--timeout-s", "60"])
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", ranks.to_string())
            .env("MASTER_ADDR", &master)
            .env("MASTER_PORT", "29500")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start rank {rank} ({}): {e}", bin.display()))?;
        children.push(child);
    }
    let mut slowest: f64 = 0.0;
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "rank {rank} failed: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let median = allreduce::median_in_output(&stdout)
            .ok_or_else(|| format!("rank {rank} printed no median step: {stdout}"))?;
        slowest = slowest.max(median);
    }
    let spec = setting
        .link
        .link_spec(setting.congestion)
        .ok_or("the setting's link has no rate limit")?;
    Ok(Measured {
        measured_s: slowest,
        predicted_s: ring_allreduce_s(ranks as u32, setting.bytes as f64, &spec),
    })
}

/// One printed row: the setting, both times and the error.
pub fn row(setting: &Setting, ranks: usize, m: &Measured) -> String {
    format!(
        "{}: {}, {}: {} B over {ranks} ranks, measured {:.3} s, predicted {:.3} s, error {:+.1} %",
        setting.name,
        setting.link,
        setting.tcp,
        setting.bytes,
        m.measured_s,
        m.predicted_s,
        100.0 * m.error()
    )
}

/// Runs every setting and prints a row for each.
pub fn run(args: &Args) -> Result<(), String> {
    if let Some(why) = netns::unavailable() {
        return Err(format!(
            "the WAN lab needs root and /dev/net/tun ({why}); run wan-accuracy as root on Linux"
        ));
    }
    if args.ranks < 2 {
        return Err(format!("--ranks {}: a ring needs at least 2", args.ranks));
    }
    let bin: PathBuf = std::env::current_exe().map_err(|e| e.to_string())?;
    let base = (std::process::id() % 50) as u8 * 4;
    for (k, setting) in settings().iter().enumerate() {
        let m = measure(&bin, setting, args.ranks, args.steps, base + k as u8)?;
        println!("{}", row(setting, args.ranks, &m));
    }
    Ok(())
}
