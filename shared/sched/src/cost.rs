//! The cost model: how long a training step, a staging transfer and a
//! migration take on a given placement, and what the cloud part costs. Every
//! formula lives here once, so the planner and any simulator agree on it.

use serde::{Deserialize, Serialize};

use crate::throughput::Throughput;

/// Payload bytes per packet assumed by the loss-limited bandwidth bound (a QUIC datagram).
pub const MSS_BYTES: f64 = 1200.0;

/// The overlap exponent γ used unless a policy says otherwise.
///
/// γ = 1 means compute and gradient sync never overlap (times add up); γ → ∞
/// means perfect overlap (the slower of the two sets the pace). 2 sits between,
/// as Pollux (Qiao et al., OSDI '21) fits for data-parallel jobs.
pub const DEFAULT_GAMMA: f64 = 2.0;

/// How the senders' TCP (or QUIC) reacts to loss, which decides what a lossy
/// link delivers. A deployment picks one with its kernel setting
/// (`net.ipv4.tcp_congestion_control`); most kernels default to Cubic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Congestion {
    /// Cubic or Reno: the window shrinks on every loss, and grows until the
    /// bottleneck's queue drops a packet.
    #[default]
    LossBased,
    /// BBR: paces at the bottleneck rate it measures and ignores random loss.
    RateBased,
}

/// One network path between two nodes, as measured or as a class default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// Bandwidth, bytes per second.
    pub bandwidth_bps: f64,
    /// One-way latency, seconds.
    pub latency_s: f64,
    /// Packet loss rate, 0..1.
    pub loss: f64,
    /// The senders' congestion control.
    #[serde(default)]
    pub congestion: Congestion,
}

impl LinkSpec {
    /// Usable throughput of the link, bytes/s.
    ///
    /// Loss-based: `B_eff = min(B, 1.22 × MSS / (RTT × √p))` with
    /// `RTT = 2 × latency_s` (the Mathis et al. bound); with no loss, or no
    /// latency, `B_eff = B`. Rate-based: `B_eff = B × (1 − p)`, the share not
    /// spent on resending what was lost.
    pub fn effective_bandwidth_bps(&self) -> f64 {
        let rtt = 2.0 * self.latency_s;
        if self.loss <= 0.0 || rtt <= 0.0 {
            return self.bandwidth_bps;
        }
        match self.congestion {
            Congestion::LossBased => {
                let mathis = 1.22 * MSS_BYTES / (rtt * self.loss.sqrt());
                self.bandwidth_bps.min(mathis)
            }
            Congestion::RateBased => self.bandwidth_bps * (1.0 - self.loss.min(1.0)),
        }
    }

    /// The share `q` of transfers of `bytes` that wait one extra round trip to
    /// resend a lost packet before they complete.
    ///
    /// Loss-based: `q = 1`, as the sender's window grows until the bottleneck
    /// drops a packet even on a loss-free link. Rate-based: the chance that at
    /// least one of the `⌈bytes / MSS⌉` packets is lost,
    /// `q = 1 − (1 − p)^⌈bytes / MSS⌉`.
    pub fn recovery_share(&self, bytes: f64) -> f64 {
        match self.congestion {
            Congestion::LossBased => 1.0,
            Congestion::RateBased => {
                let packets = (bytes / MSS_BYTES).ceil().max(1.0);
                1.0 - (1.0 - self.loss.clamp(0.0, 1.0)).powf(packets)
            }
        }
    }

    /// Seconds to move `bytes` over the link: `bytes / B_eff + latency_s`; zero bytes take no time.
    pub fn transfer_s(&self, bytes: f64) -> f64 {
        if bytes <= 0.0 {
            return 0.0;
        }
        bytes / self.effective_bandwidth_bps() + self.latency_s
    }

    /// True when `self` is the worse path for gradient sync of `bytes` (slower transfer).
    pub fn slower_than(&self, other: &LinkSpec, bytes: f64) -> bool {
        self.transfer_s(bytes.max(1.0)) > other.transfer_s(bytes.max(1.0))
    }
}

/// Predicted time of one synchronous data-parallel step, split for explanations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTime {
    /// Compute time of the slowest worker, seconds.
    pub compute_s: f64,
    /// Gradient all-reduce time over the slowest inter-node link, seconds.
    pub sync_s: f64,
    /// The step time after overlap, seconds.
    pub total_s: f64,
}

/// Seconds of one ring all-reduce of `model_bytes` among `ring_nodes` nodes over `link`.
///
/// `T_n = 2(n−1)/n × M / B_eff + 2(n−1) × (latency_s + q × 1.25 × RTT)`,
/// n = nodes in the ring (workers that share a node reduce locally first, over
/// the node's own fabric, which the measured throughput tables already
/// include), M = model bytes, RTT = 2 × latency_s, and q the
/// [`LinkSpec::recovery_share`] of one chunk of `M/n` bytes. Each of the
/// `2(n−1)` chunk transfers waits for its predecessor's chunk, so a chunk that
/// loses a packet holds up the ring until the loss is detected and resent: a
/// round trip plus the reordering window of a quarter round trip that RACK
/// waits before it calls a packet lost (RFC 8985). One node has no WAN term:
/// `T_n = 0`.
pub fn ring_allreduce_s(ring_nodes: u32, model_bytes: f64, link: &LinkSpec) -> f64 {
    if ring_nodes <= 1 {
        return 0.0;
    }
    let n = f64::from(ring_nodes);
    let chunk = model_bytes / n;
    let per_chunk_s = link.latency_s + link.recovery_share(chunk) * 1.25 * 2.0 * link.latency_s;
    2.0 * (n - 1.0) / n * model_bytes / link.effective_bandwidth_bps()
        + 2.0 * (n - 1.0) * per_chunk_s
}

/// Combines compute and sync time: `T = (T_c^γ + T_n^γ)^(1/γ)`, γ ≥ 1 (see [`DEFAULT_GAMMA`]).
pub fn overlap_s(compute_s: f64, sync_s: f64, gamma: f64) -> f64 {
    if sync_s <= 0.0 {
        return compute_s;
    }
    (compute_s.powf(gamma) + sync_s.powf(gamma)).powf(1.0 / gamma)
}

/// Seconds one device class computes per step on a placement of `ring_nodes`
/// nodes: its `T_c` in [`step_time`]. `t` is the class's throughput at the
/// placement's total worker count.
///
/// - One node, or a table without a measured split (`t.sync_s = None`, the
///   ElasticFlow format, whose cells already include the datacentre fabric):
///   `T_c = 1 / iters_per_s` s, the measured step; on one node that is the
///   compute plus the measured sync over the node's own fabric.
/// - Several nodes, with the table's measured sync `T_sync` s per iteration at
///   the same worker count: `T_c = 1 / iters_per_s − T_sync` s, the measured
///   compute alone (gradient accumulation included); [`ring_allreduce_s`]
///   over the slowest inter-node link takes the measured sync's place, and
///   [`overlap_s`] combines the two.
pub fn class_compute_s(t: &Throughput, ring_nodes: u32) -> f64 {
    let step_s = 1.0 / t.iters_per_s;
    match t.sync_s {
        Some(sync_s) if ring_nodes > 1 => step_s - sync_s,
        _ => step_s,
    }
}

/// Step time of a placement.
///
/// `worker_compute_s` holds, per device class in the placement, the compute
/// time of one step, [`class_compute_s`] of the class's throughput at the
/// placement's worker count; synchronous data-parallel waits for the slowest, so
/// `T_c = max`. `slowest_link` is the worst inter-node link of the placement
/// (`None` on one node) and feeds [`ring_allreduce_s`]; [`overlap_s`] combines them.
pub fn step_time(
    worker_compute_s: impl IntoIterator<Item = f64>,
    ring_nodes: u32,
    model_bytes: f64,
    slowest_link: Option<&LinkSpec>,
    gamma: f64,
) -> StepTime {
    let compute_s = worker_compute_s.into_iter().fold(0.0, f64::max);
    let sync_s = slowest_link.map_or(0.0, |l| ring_allreduce_s(ring_nodes, model_bytes, l));
    StepTime {
        compute_s,
        sync_s,
        total_s: overlap_s(compute_s, sync_s, gamma),
    }
}

/// Seconds to stage a job on one node before its first step.
///
/// `T_stage = shard_bytes × workers_on_node / B_eff(data) + latency(data)
///          + checkpoint_bytes / B_eff(ckpt) + latency(ckpt)`;
/// each term is zero when its bytes already sit on the node (`None` link).
/// A placement's staging is the maximum over its nodes (transfers run in parallel).
pub fn staging_s(
    data_bytes: f64,
    data_link: Option<&LinkSpec>,
    checkpoint_bytes: f64,
    checkpoint_link: Option<&LinkSpec>,
) -> f64 {
    data_link.map_or(0.0, |l| l.transfer_s(data_bytes))
        + checkpoint_link.map_or(0.0, |l| l.transfer_s(checkpoint_bytes))
}

/// Seconds a migration stalls the job: `T_mig = checkpoint_bytes / B_eff + latency + restart_s`.
pub fn migration_s(checkpoint_bytes: f64, link: Option<&LinkSpec>, restart_s: f64) -> f64 {
    link.map_or(0.0, |l| l.transfer_s(checkpoint_bytes)) + restart_s
}

/// Money for cloud GPUs: `cost = price_per_gpu_hour × gpus × seconds / 3600`.
///
/// Idle edge capacity is priced by its own `price_per_gpu_hour`, normally 0.
pub fn gpu_cost(price_per_gpu_hour: f64, gpus: u32, seconds: f64) -> f64 {
    price_per_gpu_hour * f64::from(gpus) * seconds / 3600.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 Gb/s = 125 000 000 bytes/s, 20 ms one way, no loss.
    const GBIT_20MS: LinkSpec = LinkSpec {
        bandwidth_bps: 125_000_000.0,
        latency_s: 0.020,
        loss: 0.0,
        congestion: Congestion::LossBased,
    };
    /// ResNet-50: 25.6 M parameters, 97.5 MB in fp32 (as issue 4 states it).
    const RESNET50_BYTES: f64 = 97_500_000.0;
    /// ElasticFlow A100 resnet50.csv, global batch 64: iterations/s at 1, 2 and 8 GPUs.
    const A100_R50_B64: [(u32, f64); 3] = [
        (1, 6.8429775823889685),
        (2, 11.838468717843664),
        (8, 21.265357623184627),
    ];

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9 * b.abs().max(1.0), "{a} != {b}");
    }

    #[test]
    fn one_node_has_no_wan_term() {
        let t = step_time([1.0 / A100_R50_B64[0].1], 1, RESNET50_BYTES, None, 2.0);
        // 1 / 6.8429775823889685 it/s = 0.1461352... s
        close(t.compute_s, 0.146_135_214_964_548_76);
        close(t.sync_s, 0.0);
        close(t.total_s, t.compute_s);
        // Even with a link given, one node in the ring moves nothing.
        close(ring_allreduce_s(1, RESNET50_BYTES, &GBIT_20MS), 0.0);
    }

    #[test]
    fn two_workers_over_a_gigabit_20ms_link() {
        // Loss-based, so every chunk pays a round trip (q = 1):
        // Tn = 2·1/2 · 97.5e6 / 125e6 + 2·1·(0.020 + 1.25 · 0.040) = 0.78 + 0.14 = 0.92 s
        close(ring_allreduce_s(2, RESNET50_BYTES, &GBIT_20MS), 0.92);
        // Tc = 1 / 11.838468717843664 = 0.084470... s
        let tc = 1.0 / A100_R50_B64[1].1;
        let t = step_time([tc, tc], 2, RESNET50_BYTES, Some(&GBIT_20MS), 2.0);
        close(t.sync_s, 0.92);
        // γ = 2: sqrt(0.084470^2 + 0.92^2) = 0.923870... s
        close(t.total_s, (tc * tc + 0.92 * 0.92).sqrt());
        assert!((t.total_s - 0.923_870).abs() < 1e-6, "{}", t.total_s);
        // γ = 1 adds them: 1.004470... s
        let t1 = step_time([tc], 2, RESNET50_BYTES, Some(&GBIT_20MS), 1.0);
        close(t1.total_s, tc + 0.92);
    }

    #[test]
    fn eight_workers_over_a_gigabit_20ms_link() {
        // Tn = 2·7/8 · 0.78 + 2·7·(0.020 + 0.050) = 1.365 + 0.98 = 2.345 s
        close(ring_allreduce_s(8, RESNET50_BYTES, &GBIT_20MS), 2.345);
        let tc = 1.0 / A100_R50_B64[2].1; // 0.047024... s
        let t = step_time([tc; 8], 8, RESNET50_BYTES, Some(&GBIT_20MS), 2.0);
        assert!((t.total_s - 2.345_471).abs() < 1e-6, "{}", t.total_s);
        // The WAN makes 8 workers slower per step than one A100 alone.
        assert!(t.total_s > 1.0 / A100_R50_B64[0].1);
    }

    #[test]
    fn heterogeneous_workers_wait_for_the_slowest() {
        // One A100 at 6.84 it/s and one T4-class worker at 0.5 it/s on a
        // 2-worker placement over the same link: Tc = max(0.0845, 2.0) = 2.0 s.
        let a100 = 1.0 / A100_R50_B64[1].1;
        let t4 = 1.0 / 0.5;
        let t = step_time([a100, t4], 2, RESNET50_BYTES, Some(&GBIT_20MS), 2.0);
        close(t.compute_s, 2.0);
        // sqrt(2.0^2 + 0.92^2) = 2.201454... s
        assert!((t.total_s - 2.201_454).abs() < 1e-6, "{}", t.total_s);
    }

    #[test]
    fn measured_sync_is_replaced_by_the_ring_across_nodes_only() {
        // 2 it/s with 0.1 s of measured sync per iteration.
        let split = Throughput {
            iters_per_s: 2.0,
            sync_s: Some(0.1),
            estimated: false,
        };
        // One node: the measured step, 1/2 = 0.5 s.
        close(class_compute_s(&split, 1), 0.5);
        // Two nodes: compute alone, 0.5 − 0.1 = 0.4 s; with the ring over
        // 1 Gb/s, 20 ms (0.92 s, above): sqrt(0.4² + 0.92²) = 1.003195... s.
        let tc = class_compute_s(&split, 2);
        close(tc, 0.4);
        let t = step_time([tc], 2, RESNET50_BYTES, Some(&GBIT_20MS), 2.0);
        assert!((t.total_s - 1.003_195).abs() < 1e-6, "{}", t.total_s);
        // An ElasticFlow-format cell (no split) keeps its whole step on any placement.
        let grid = Throughput {
            sync_s: None,
            ..split
        };
        close(class_compute_s(&grid, 1), 0.5);
        close(class_compute_s(&grid, 2), 0.5);
    }

    #[test]
    fn loss_caps_bandwidth_by_the_mathis_bound() {
        let lossy = LinkSpec {
            loss: 0.01,
            ..GBIT_20MS
        };
        // 1.22 · 1200 / (0.040 · 0.1) = 366 000 bytes/s
        close(lossy.effective_bandwidth_bps(), 366_000.0);
        close(GBIT_20MS.effective_bandwidth_bps(), 125_000_000.0);
        assert!(lossy.slower_than(&GBIT_20MS, 1e6));
    }

    #[test]
    fn a_rate_based_sender_loses_only_what_it_resends() {
        let bbr = LinkSpec {
            loss: 0.01,
            congestion: Congestion::RateBased,
            ..GBIT_20MS
        };
        // 125e6 · (1 − 0.01) = 123 750 000 bytes/s, where Cubic gets 366 000.
        close(bbr.effective_bandwidth_bps(), 123_750_000.0);
        // Without loss it never waits to resend, a loss-based sender always does.
        let clean = LinkSpec {
            congestion: Congestion::RateBased,
            ..GBIT_20MS
        };
        close(clean.recovery_share(1e6), 0.0);
        close(GBIT_20MS.recovery_share(1e6), 1.0);
        // 100 Mb/s, 30 ms, 0.5 % loss, 1 MiB over 3 ranks: chunks of
        // 349 525.3 B, ⌈/1200⌉ = 292 packets, q = 1 − 0.995^292 = 0.768613;
        // Tn = 4/3 · 1 048 576 / (12.5e6 · 0.995) + 4 · (0.030 + 0.768613 · 1.25 · 0.060)
        //    = 0.112410 + 0.350584 = 0.462994 s
        let lab = LinkSpec {
            bandwidth_bps: 12.5e6,
            latency_s: 0.030,
            loss: 0.005,
            congestion: Congestion::RateBased,
        };
        assert!((lab.recovery_share(1_048_576.0 / 3.0) - 0.768_613).abs() < 1e-6);
        let t = ring_allreduce_s(3, 1_048_576.0, &lab);
        assert!((t - 0.462_994).abs() < 1e-6, "{t}");
    }

    #[test]
    fn staging_migration_and_money() {
        // 1 GB shard over 1 Gb/s: 8 s + 0.02 s; 100 MB checkpoint: 0.8 s + 0.02 s.
        close(
            staging_s(1e9, Some(&GBIT_20MS), 1e8, Some(&GBIT_20MS)),
            8.84,
        );
        close(staging_s(1e9, None, 1e8, None), 0.0);
        // 100 MB checkpoint + 30 s restart
        close(migration_s(1e8, Some(&GBIT_20MS), 30.0), 30.82);
        // 4 GPUs for 90 minutes at 3 $/GPU-h = 18 $
        close(gpu_cost(3.0, 4, 5400.0), 18.0);
    }
}
