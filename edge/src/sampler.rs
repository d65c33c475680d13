//! Turns the host, or a replayed trace posing as the host, into [`Sample`]s and
//! [`Capabilities`].

use std::collections::{HashMap, HashSet};

use sysinfo::{Networks, ProcessesToUpdate, System};
use tidemill_proto::{Accelerator, AcceleratorKind, Capabilities, Sample};

use crate::accel::Accelerators;
use crate::config::{CapabilityOverride, EdgeConfig};
use crate::journal::HistoryRow;
use crate::replay::{Replay, ReplayError};

/// Why the host cannot be sampled.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// sysinfo cannot read this platform.
    #[error("cannot read host statistics: {0}; tidemill-edge supports Linux with /proc mounted")]
    Host(String),
    /// The replay trace is unusable.
    #[error(transparent)]
    Replay(#[from] ReplayError),
}

/// The sampling source.
#[derive(Debug)]
pub struct Sampler {
    system: System,
    networks: Networks,
    accel: Accelerators,
    replay: Option<(Replay, i64)>,
}

impl Sampler {
    /// Opens the host, and the replay trace if one is configured. `now_ms` is the
    /// replay's origin on the sampling clock.
    pub async fn open(cfg: &EdgeConfig, now_ms: i64) -> Result<Self, SamplerError> {
        let host = |e: sysinfo::Error| SamplerError::Host(e.to_string());
        let mut system = System::new().map_err(host)?;
        system.refresh_memory();
        system.refresh_cpu_usage();
        let networks = Networks::new_with_refreshed_list().map_err(host)?;
        let accel = Accelerators::discover(&cfg.accelerators).await;
        let replay = match &cfg.replay {
            Some(r) => Some((
                Replay::load(&r.file, &r.node)?,
                r.clock_anchor_ms.unwrap_or(now_ms),
            )),
            None => None,
        };
        Ok(Sampler {
            system,
            networks,
            accel,
            replay,
        })
    }

    /// What this node offers: detected, then overridden by the config.
    pub fn capabilities(&self, overrides: Option<&CapabilityOverride>) -> Capabilities {
        let mut caps = Capabilities {
            cpu_cores: self.system.cpus().len() as u32,
            mem_bytes: self.system.total_memory(),
            accelerators: self.accel.devices().to_vec(),
            os: System::long_os_version().unwrap_or_else(|_| std::env::consts::OS.to_string()),
            arch: std::env::consts::ARCH.to_string(),
            daemon_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        if let Some(o) = overrides {
            caps.cpu_cores = o.cpu_cores.unwrap_or(caps.cpu_cores);
            caps.mem_bytes = o.mem_bytes.unwrap_or(caps.mem_bytes);
            if let Some(accs) = &o.accelerators {
                caps.accelerators = accs
                    .iter()
                    .map(|a| Accelerator {
                        kind: AcceleratorKind::NvidiaGpu,
                        model: a.model.clone(),
                        mem_bytes: a.mem_bytes,
                    })
                    .collect();
            }
        }
        caps
    }

    /// Under replay, the trace's readings from `since_ms` up to `until_ms`
    /// every `step_ms`, as history rows; the trace cycles, so times before the
    /// replay's origin read its end. `None` when not replaying.
    pub fn replay_history(
        &self,
        since_ms: i64,
        until_ms: i64,
        step_ms: i64,
    ) -> Option<Vec<HistoryRow>> {
        let (replay, origin_ms) = self.replay.as_ref()?;
        let step = step_ms.max(1);
        let rows = (0..)
            .map(|i| since_ms + i * step)
            .take_while(|&t| t < until_ms)
            .map(|t| {
                let r = replay.at((t - origin_ms) as f64 / 1000.0);
                (t, r.cpu, r.mem, r.gpu)
            })
            .collect();
        Some(rows)
    }

    /// Takes one sample stamped `now_ms`. Under replay, utilisation comes from the
    /// trace at `now_ms − origin` and network counters are 0.
    ///
    /// `own_pids` are the processes of tidemill's own running tasks: their CPU
    /// and GPU use (with their descendants') is left out, so that the sample
    /// measures the box's primary workload, the tide, and not the training it
    /// hosts, which would otherwise read as the tide coming in and move it.
    pub async fn sample(&mut self, now_ms: i64, own_pids: &[u32]) -> Sample {
        if let Some((replay, origin_ms)) = &self.replay {
            let r = replay.at((now_ms - origin_ms) as f64 / 1000.0);
            return Sample {
                t_ms: now_ms,
                cpu_pct: r.cpu,
                per_core_pct: Vec::new(),
                mem_pct: r.mem,
                net_rx_bytes: 0,
                net_tx_bytes: 0,
                gpu_pct: r.gpu,
            };
        }
        self.system.refresh_cpu_usage();
        self.system.refresh_memory();
        self.networks.refresh(true);
        let total = self.system.total_memory().max(1);
        let (rx, tx) = self.networks.values().fold((0, 0), |(rx, tx), n| {
            (rx + n.received(), tx + n.transmitted())
        });
        let (own, own_tree) = if own_pids.is_empty() {
            (0.0, HashSet::new())
        } else {
            self.system.refresh_processes(ProcessesToUpdate::All, true);
            let procs = self.system.processes().iter().map(|(pid, p)| {
                (
                    pid.as_u32(),
                    p.parent().map(|pp| pp.as_u32()),
                    p.cpu_usage(),
                )
            });
            own_cpu_pct(procs, own_pids, self.system.cpus().len())
        };
        Sample {
            t_ms: now_ms,
            cpu_pct: (self.system.global_cpu_usage() - own).max(0.0),
            per_core_pct: self.system.cpus().iter().map(|c| c.usage()).collect(),
            mem_pct: (self.system.used_memory() as f64 / total as f64 * 100.0) as f32,
            net_rx_bytes: rx,
            net_tx_bytes: tx,
            gpu_pct: self.accel.mean_load(&own_tree).await,
        }
    }
}

/// Host CPU percent used by the processes `roots` and their descendants:
/// the sum of their per-core percentages (`cpu_usage`, 100 = one core) over
/// the number of cores; and those processes. `procs` yields (pid, parent
/// pid, cpu_usage).
fn own_cpu_pct(
    procs: impl Iterator<Item = (u32, Option<u32>, f32)>,
    roots: &[u32],
    cores: usize,
) -> (f32, HashSet<u32>) {
    let procs: HashMap<u32, (Option<u32>, f32)> = procs
        .map(|(pid, parent, cpu)| (pid, (parent, cpu)))
        .collect();
    let owned = |mut pid: u32| {
        // Walk up the parent chain; bounded in case of a cycle in stale data.
        for _ in 0..64 {
            if roots.contains(&pid) {
                return true;
            }
            match procs.get(&pid).and_then(|(parent, _)| *parent) {
                Some(parent) => pid = parent,
                None => return false,
            }
        }
        false
    };
    let tree: HashSet<u32> = procs.keys().copied().filter(|&pid| owned(pid)).collect();
    let total: f32 = tree.iter().map(|pid| procs[pid].1).sum();
    (total / cores.max(1) as f32, tree)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ReplayConfig;

    fn no_accelerators() -> EdgeConfig {
        let mut cfg = EdgeConfig::default();
        cfg.accelerators.nvidia_smi = "/nonexistent/nvidia-smi".into();
        cfg.accelerators.sysfs.clear();
        cfg
    }

    #[test]
    fn own_tasks_and_their_children_are_left_out_of_the_load() {
        // Task 10 (50 % of a core) runs 11 (100 %), which runs 12 (30 %);
        // 20 (80 %) is the box's own workload. On 4 cores the task tree uses
        // (50 + 100 + 30) / 4 = 45 % of the host.
        let procs = [
            (1, None, 0.0),
            (10, Some(1), 50.0),
            (11, Some(10), 100.0),
            (12, Some(11), 30.0),
            (20, Some(1), 80.0),
        ];
        let (pct, tree) = own_cpu_pct(procs.into_iter(), &[10], 4);
        assert_eq!((pct, tree), (45.0, HashSet::from([10, 11, 12])));
        assert_eq!(
            own_cpu_pct(procs.into_iter(), &[99], 4),
            (0.0, HashSet::new())
        );
    }

    #[tokio::test]
    async fn samples_the_real_host() {
        let mut sampler = Sampler::open(&no_accelerators(), 0).await.unwrap();
        let caps = sampler.capabilities(None);
        let cores = std::thread::available_parallelism().unwrap().get() as u32;
        assert!(
            caps.cpu_cores >= cores,
            "{} cores, {cores} available",
            caps.cpu_cores
        );
        assert!(caps.mem_bytes > 0);
        let s = sampler.sample(42, &[std::process::id()]).await;
        assert_eq!(s.t_ms, 42);
        assert_eq!(s.per_core_pct.len(), caps.cpu_cores as usize);
        assert!((0.0..=100.0).contains(&s.mem_pct) && s.mem_pct > 0.0);
        assert_eq!(s.gpu_pct, None);
    }

    #[tokio::test]
    async fn replays_a_trace_and_honours_overrides() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(
            &path,
            "node,time_s,cpu,mem,gpu\nn1,0,5,50,\nn1,60,80,60,70\n",
        )
        .unwrap();
        let mut cfg = no_accelerators();
        cfg.replay = Some(ReplayConfig {
            file: path,
            node: "n1".into(),
            speed: 60.0,
            clock_anchor_ms: None,
            prime_history: true,
        });
        let mut sampler = Sampler::open(&cfg, 1_000_000).await.unwrap();
        assert_eq!(sampler.sample(1_000_000, &[]).await.cpu_pct, 5.0);
        let later = sampler.sample(1_000_000 + 61_000, &[]).await;
        assert_eq!((later.cpu_pct, later.gpu_pct), (80.0, Some(70.0)));
        // History before the origin reads the trace's end (period 120 s): the
        // 80 % row from 60 s to 120 s into the cycle.
        let primed = sampler
            .replay_history(1_000_000 - 50_000, 1_000_000, 30_000)
            .unwrap();
        let cpu: Vec<(i64, f32)> = primed.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(cpu, vec![(950_000, 80.0), (980_000, 80.0)]);
        let o = CapabilityOverride {
            cpu_cores: Some(4),
            mem_bytes: None,
            accelerators: Some(vec![crate::config::AcceleratorOverride {
                model: "Tesla T4".into(),
                mem_bytes: Some(16 << 30),
            }]),
        };
        let caps = sampler.capabilities(Some(&o));
        assert_eq!(caps.cpu_cores, 4);
        assert_eq!(caps.accelerators[0].model, "Tesla T4");
    }
}
