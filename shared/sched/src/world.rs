//! What the deadline-aware scheduler sees: nodes with their pessimistic idle
//! windows, links, jobs with their progress and standing reservations, and the
//! policy knobs. The caller (coordinator or simulator) builds it each round.

use serde::{Deserialize, Serialize};
use tidemill_forecast::{Quantiles, idle_score, score_probability};

use crate::constraints::Constraints;
use crate::cost::{Congestion, LinkSpec};
use crate::throughput::ThroughputTables;

/// Everything one scheduling round decides on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorldSnapshot {
    /// Every known node, cloud and edge.
    pub nodes: Vec<NodeSpec>,
    /// Link measurements and per-class defaults.
    pub links: LinkTable,
    /// Queued, admitted and running jobs (finished and rejected ones are left out).
    pub jobs: Vec<JobState>,
    /// Iterations/s per device class and model.
    pub throughput: ThroughputTables,
    /// Node labels and the labels jobs require: every policy's plan is
    /// guarded by them ([`Constraints::guard`]).
    #[serde(default)]
    pub constraints: Constraints,
}

/// A node and what it can give to training.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// The node id.
    pub id: String,
    /// Device class, the key into the throughput tables (e.g. `A100`, `T4`, `soc`).
    pub class: String,
    /// Training devices (GPUs, or 1 for a SoC).
    pub devices: u32,
    /// Memory per device, bytes; a worker needs its `memory_per_worker_bytes` of it.
    pub memory_per_device_bytes: u64,
    /// Reachable now.
    pub online: bool,
    /// Cloud or edge, with what that implies.
    pub kind: NodeKind,
}

/// Cloud nodes cost money and are always there; edge nodes are free when idle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NodeKind {
    /// A rented cloud GPU node.
    Cloud {
        /// Price, currency units per GPU-hour.
        price_per_gpu_hour: f64,
    },
    /// An edge box whose primary workload leaves capacity free at times.
    Edge(EdgeAvailability),
}

/// When an edge node is free for training, in two grades (see
/// [`EdgeAvailability::from_forecast`]): the sure grade for promises, the
/// likely grade for plans that promise nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EdgeAvailability {
    /// Sure grade: idle windows from the P90 forecast (the primary load
    /// stays below the threshold in them with 90 % confidence), ascending,
    /// non-overlapping. Guarantees and the stay rule plan on these alone.
    pub windows: Vec<Window>,
    /// Likely grade: idle windows from the P50 forecast (the load is more
    /// likely under the threshold than not), ascending, non-overlapping;
    /// they include every sure window. Plans that carry no promise may use
    /// them and pay for an eviction when the tide turns. Empty (an older
    /// snapshot) means the same as `windows`.
    #[serde(default)]
    pub likely: Vec<Window>,
    /// When (Unix ms) the node last turned idle, as it reported, while it
    /// is idle now. The likely grade opens on a box only once it has stayed
    /// idle for the policy's `likely_dwell_s` (see `schedule/grid.rs`), so
    /// a box whose load hovers at the threshold is not handed work it must
    /// give back within minutes. `None` when it was never seen busy (or
    /// is busy now, or the snapshot is older): no flip, no dwell.
    #[serde(default)]
    pub idle_since_ms: Option<i64>,
    /// The latest measured utilisation of the primary workload, percent.
    pub util_now_pct: Option<f64>,
    /// Utilisation above which the node is not idle, percent.
    pub idle_threshold_pct: f64,
}

/// An idle window: the half-open interval `[start_ms, end_ms)`, Unix ms, and
/// how sure the forecast is of it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Start, Unix ms.
    pub start_ms: i64,
    /// End, Unix ms (exclusive).
    pub end_ms: i64,
    /// Probability (0-1) that the window's least certain slot is really idle,
    /// by the forecast's own reading of its P50 and P90
    /// ([`tidemill_forecast::idle_probability`]); 1 for a slot observed or a
    /// load known for certain.
    #[serde(default = "certain")]
    pub confidence: f64,
}

fn certain() -> f64 {
    1.0
}

impl Window {
    /// The last instant (Unix ms) a plan may count on the window at `now_ms`,
    /// leaving a margin that grows with the forecast's doubt about it:
    ///
    /// margin = grace + (1 − c) × R / 2,  usable until end − margin
    ///
    /// with `grace` the time to checkpoint and yield (ms), `c` the window's
    /// [`Window::confidence`] and `R = end − max(start, now)` what is left of
    /// it (ms). Reading: with probability c the window holds to its end;
    /// otherwise the tide comes in at a time uniform over what is left, which
    /// loses R / 2 on average, so (1 − c) × R / 2 is the idle time the
    /// forecast expects to lose. A window that has held so far has less left
    /// to lose, so its margin shrinks as it runs; one known for certain keeps
    /// only the grace.
    pub fn usable_until_ms(&self, now_ms: i64, grace_ms: i64) -> i64 {
        let left = (self.end_ms - self.start_ms.max(now_ms)).max(0) as f64;
        let doubt = (1.0 - self.confidence.clamp(0.0, 1.0)) * left / 2.0;
        self.end_ms - grace_ms - doubt.round() as i64
    }
}

impl EdgeAvailability {
    /// The forecast-to-availability rule, the one the coordinator and the
    /// simulator both use, for both grades. On the slot grid
    /// `start_ms + k × slot_ms` (Unix ms), slot `k` is idle in the sure grade
    /// when the P90 utilisation (percent) of every forecast resource the node
    /// has (CPU and accelerator, one slice each in `forecast`, indexed by
    /// slot) is known and below `idle_threshold_pct`, and in the likely grade
    /// when every resource's P50 is (a sure slot is always likely: P50 ≤ P90);
    /// the forecast covers as many slots as its shortest resource. The slot in
    /// progress at `now_ms` is observed, not forecast: when `util_now_pct`
    /// (the highest utilisation the node reports now) is known, it judges
    /// that slot, the slot just before `start_ms` included (a forecast
    /// starts at the next slot boundary, so a node idle now and forecast idle
    /// next has a window that covers the present), and that slot is certain.
    /// A node busy now is idle in neither grade; one idle now is idle in the
    /// likely grade, and in the sure grade only when the forecast says so
    /// too (for that slot, or the first one when the present precedes the
    /// forecast): a box that went idle against its forecast may flip back
    /// within minutes, and a promise must not rest on that.
    /// Adjacent idle slots merge into windows. A forecast slot's confidence is
    /// the least [`tidemill_forecast::idle_probability`] over the resources;
    /// a window's is its least certain slot's, as the forecaster's own idle
    /// windows count it.
    ///
    /// A `tidemill-forecast` `NodeForecast` maps in as its `start_ms`,
    /// `slot_len_s × 1000` and the per-slot quantiles of its CPU and GPU forecasts.
    pub fn from_forecast(
        start_ms: i64,
        slot_ms: i64,
        forecast: &[&[Option<Quantiles>]],
        idle_threshold_pct: f64,
        now_ms: i64,
        util_now_pct: Option<f64>,
    ) -> EdgeAvailability {
        let slot_score = |k: usize, sure: bool| -> Option<f64> {
            forecast.iter().try_fold(f64::INFINITY, |z, r| {
                let q = r[k].filter(|q| if sure { q.p90 } else { q.p50 } < idle_threshold_pct)?;
                Some(z.min(idle_score(&q, idle_threshold_pct)))
            })
        };
        let slots = forecast.iter().map(|r| r.len()).min().unwrap_or(0) as i64;
        let in_progress = (now_ms - start_ms).div_euclid(slot_ms.max(1));
        let now = util_now_pct.filter(|_| (-1..slots).contains(&in_progress));
        let first = if now.is_some() { in_progress.min(0) } else { 0 };
        let idle = |sure: bool| {
            (first..slots).map(move |k| match now {
                Some(u) if k == in_progress => (u < idle_threshold_pct
                    && (!sure || slot_score(k.max(0) as usize, true).is_some()))
                .then_some(f64::INFINITY),
                _ => slot_score(k as usize, sure),
            })
        };
        let grid_ms = start_ms + first * slot_ms;
        EdgeAvailability {
            likely: runs(grid_ms, slot_ms, idle(false)),
            ..EdgeAvailability::from_idle_slots(
                grid_ms,
                slot_ms,
                idle(true),
                idle_threshold_pct,
                util_now_pct,
            )
        }
    }

    /// Builds windows from one per-slot utilisation series known for certain
    /// (the simulator's oracle reads the true load): a slot is idle when its
    /// value is known and below `idle_threshold_pct`; adjacent idle slots
    /// merge, each certain. Forecasts go through [`EdgeAvailability::from_forecast`].
    pub fn from_known_load(
        start_ms: i64,
        slot_ms: i64,
        util_pct: &[Option<f64>],
        idle_threshold_pct: f64,
        util_now_pct: Option<f64>,
    ) -> EdgeAvailability {
        EdgeAvailability::from_idle_slots(
            start_ms,
            slot_ms,
            util_pct.iter().map(|p| {
                p.is_some_and(|p| p < idle_threshold_pct)
                    .then_some(f64::INFINITY)
            }),
            idle_threshold_pct,
            util_now_pct,
        )
    }

    /// Builds the sure grade from `idle` (see [`runs`]); a load known
    /// for certain has no likelier grade, so `likely` is left empty (the
    /// same windows).
    fn from_idle_slots(
        start_ms: i64,
        slot_ms: i64,
        idle: impl IntoIterator<Item = Option<f64>>,
        idle_threshold_pct: f64,
        util_now_pct: Option<f64>,
    ) -> EdgeAvailability {
        EdgeAvailability {
            windows: runs(start_ms, slot_ms, idle),
            likely: Vec::new(),
            idle_since_ms: None,
            util_now_pct,
            idle_threshold_pct,
        }
    }

    /// The likely grade's windows: `likely`, or the sure ones where it is
    /// empty (a load known for certain, or an older snapshot).
    pub fn likely_windows(&self) -> &[Window] {
        if self.likely.is_empty() {
            &self.windows
        } else {
            &self.likely
        }
    }

    /// True when the primary load is above the threshold right now (the tide came in).
    pub fn tide_in(&self) -> bool {
        self.util_now_pct
            .is_some_and(|u| u > self.idle_threshold_pct)
    }
}

/// Merges adjacent idle slots of the grid `start_ms + k × slot_ms` into
/// windows; `idle` gives each slot's [`idle_score`] (`+∞` where it is
/// certain), `None` where it is busy. A window's confidence is the
/// probability of its lowest score, taken once per window.
fn runs(start_ms: i64, slot_ms: i64, idle: impl IntoIterator<Item = Option<f64>>) -> Vec<Window> {
    // (start, end, lowest score) of each run of idle slots.
    let mut runs: Vec<(i64, i64, f64)> = Vec::new();
    for (i, idle) in idle.into_iter().enumerate() {
        let Some(score) = idle else {
            continue;
        };
        let s = start_ms + i as i64 * slot_ms;
        match runs.last_mut() {
            Some((_, end, low)) if *end == s => {
                *end = s + slot_ms;
                *low = low.min(score);
            }
            _ => runs.push((s, s + slot_ms, score)),
        }
    }
    runs.into_iter()
        .map(|(start_ms, end_ms, low)| Window {
            start_ms,
            end_ms,
            confidence: score_probability(low),
        })
        .collect()
}

/// The three kinds of path, each with its own default when nothing was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkClass {
    /// Between two edge nodes.
    EdgeEdge,
    /// Between a cloud and an edge node.
    CloudEdge,
    /// Between two cloud nodes.
    CloudCloud,
}

impl LinkClass {
    /// The name shown, as its JSON form spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkClass::EdgeEdge => "edge-edge",
            LinkClass::CloudEdge => "cloud-edge",
            LinkClass::CloudCloud => "cloud-cloud",
        }
    }
}

/// Link measurements keyed by node pair, and defaults per link class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkTable {
    /// Default for edge-edge paths.
    pub edge_edge: LinkSpec,
    /// Default for cloud-edge paths.
    pub cloud_edge: LinkSpec,
    /// Default for cloud-cloud paths.
    pub cloud_cloud: LinkSpec,
    /// Live measurements; symmetric (a→b also answers b→a).
    pub measured: Vec<MeasuredLink>,
}

/// One measured path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasuredLink {
    /// One end, a node id.
    pub a: String,
    /// The other end, a node id.
    pub b: String,
    /// What was measured.
    pub link: LinkSpec,
}

impl Default for LinkTable {
    /// Defaults: edge-edge 1 Gb/s, 5 ms (same site LAN/metro); cloud-edge 100 Mb/s,
    /// 30 ms, 0.01 % loss (consumer uplink); cloud-cloud 10 Gb/s, 1 ms (datacenter).
    fn default() -> Self {
        LinkTable {
            edge_edge: LinkSpec {
                bandwidth_bps: 125e6,
                latency_s: 0.005,
                loss: 0.0,
                congestion: Congestion::LossBased,
            },
            cloud_edge: LinkSpec {
                bandwidth_bps: 12.5e6,
                latency_s: 0.030,
                loss: 1e-4,
                congestion: Congestion::LossBased,
            },
            cloud_cloud: LinkSpec {
                bandwidth_bps: 1.25e9,
                latency_s: 0.001,
                loss: 0.0,
                congestion: Congestion::LossBased,
            },
            measured: Vec::new(),
        }
    }
}

/// One link class's default as configs write it, in operators' units.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkDefault {
    /// Megabits per second.
    pub bandwidth_mbps: f64,
    /// One-way latency, milliseconds.
    pub latency_ms: f64,
    /// Packet loss share, 0 to 1.
    #[serde(default)]
    pub loss: f64,
    /// The senders' congestion control: `loss-based` (Cubic, Reno) or
    /// `rate-based` (BBR).
    #[serde(default)]
    pub congestion: Congestion,
}

impl LinkDefault {
    /// In the cost model's units: bytes/s and seconds.
    pub fn spec(&self) -> LinkSpec {
        LinkSpec {
            bandwidth_bps: self.bandwidth_mbps * 1e6 / 8.0,
            latency_s: self.latency_ms / 1000.0,
            loss: self.loss,
            congestion: self.congestion,
        }
    }
}

/// The defaults of the three link classes, as configs name them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkDefaults {
    /// Between two edge nodes.
    pub edge_edge: LinkDefault,
    /// Between a cloud node and an edge node.
    pub cloud_edge: LinkDefault,
    /// Between two cloud nodes.
    pub cloud_cloud: LinkDefault,
}

impl LinkDefaults {
    /// The link table with these defaults and the `measured` links.
    pub fn table(&self, measured: Vec<MeasuredLink>) -> LinkTable {
        LinkTable {
            edge_edge: self.edge_edge.spec(),
            cloud_edge: self.cloud_edge.spec(),
            cloud_cloud: self.cloud_cloud.spec(),
            measured,
        }
    }
}

impl LinkTable {
    /// The default for a link class.
    pub fn default_for(&self, class: LinkClass) -> &LinkSpec {
        match class {
            LinkClass::EdgeEdge => &self.edge_edge,
            LinkClass::CloudEdge => &self.cloud_edge,
            LinkClass::CloudCloud => &self.cloud_cloud,
        }
    }
}

/// SLO jobs get deadline guarantees; best-effort jobs take what is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobClass {
    /// Must finish by its deadline once admitted as guaranteed.
    Slo,
    /// Runs on spare capacity, no promise.
    BestEffort,
}

/// What to do with an SLO job no plan can guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnInfeasible {
    /// Run it best-effort instead.
    BestEffort,
    /// Turn it away.
    Reject,
}

/// Where a job's dataset lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataSite {
    /// Cloud object storage, reached like a cloud node.
    Cloud,
    /// On this node.
    Node(String),
}

/// Seconds of training between two checkpoints when a job does not say:
/// 30 minutes, a common save interval for multi-hour training runs.
pub const DEFAULT_CHECKPOINT_INTERVAL_S: f64 = 1800.0;

fn default_checkpoint_interval_s() -> f64 {
    DEFAULT_CHECKPOINT_INTERVAL_S
}

/// A training job as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// The job id.
    pub id: u64,
    /// SLO or best-effort.
    pub class: JobClass,
    /// Submission time, Unix ms.
    pub submitted_ms: i64,
    /// When it must be done, Unix ms.
    pub deadline_ms: i64,
    /// Work, in iterations of the global batch.
    pub iterations: f64,
    /// Global batch size, samples per iteration.
    pub global_batch: u32,
    /// Model name, the key into the throughput tables.
    pub model: String,
    /// Model (gradient) size, bytes; what all-reduce moves.
    pub model_bytes: u64,
    /// Dataset size, bytes; each worker gets an equal shard.
    pub dataset_bytes: u64,
    /// Where the dataset is.
    pub dataset_site: DataSite,
    /// Fewest workers the job can run on.
    pub min_workers: u32,
    /// Most workers it can use.
    pub max_workers: u32,
    /// Device memory a worker needs, bytes.
    pub memory_per_worker_bytes: u64,
    /// Checkpoint size, bytes; moved on migration.
    pub checkpoint_bytes: u64,
    /// Seconds of training (stepping, not start-up) between two
    /// checkpoints: a job stopped without warning falls back to its last
    /// one and loses what it trained since.
    #[serde(default = "default_checkpoint_interval_s")]
    pub checkpoint_interval_s: f64,
    /// For SLO jobs: what to do when no guarantee is possible.
    pub on_infeasible: OnInfeasible,
}

/// Where the scheduler stands with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum Admission {
    /// Not decided yet (new SLO job).
    Pending,
    /// Guaranteed to meet its deadline; decided at `since_ms`.
    Guaranteed {
        /// When it was admitted, Unix ms; guaranteed jobs keep capacity in this order.
        since_ms: i64,
    },
    /// Runs on what is left.
    BestEffort,
}

/// Some workers of a job on one node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Assignment {
    /// The node id.
    pub node_id: String,
    /// Workers (devices) on it.
    pub workers: u32,
}

/// How far a job got, as the executor reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Iterations completed (and checkpointed or live).
    pub done_iters: f64,
    /// Seconds it has run so far, for least-attained-service order.
    pub attained_s: f64,
    /// Where its data and latest checkpoint are: its current or last placement; empty before the first start.
    pub location: Vec<Assignment>,
    /// Running on `location` now (false when waiting or paused).
    pub running: bool,
    /// Seconds of staging or restart still to go before steps resume on `location`.
    pub startup_left_s: f64,
}

/// A job with its state, as the caller keeps it between rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    /// The submitted job.
    pub spec: JobSpec,
    /// The admission verdict so far.
    pub admission: Admission,
    /// Execution progress.
    pub progress: Progress,
    /// The segments the last round planned (its `JobDecision::segments`); a
    /// guaranteed job keeps them while they stay valid.
    pub reservation: Vec<crate::decision::Segment>,
}

/// Order in which best-effort jobs take leftover capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BestEffortOrder {
    /// Least attained service first.
    LeastAttainedService,
    /// Shortest remaining (single-device-equivalent) time first.
    ShortestRemainingTime,
}

/// How SLO jobs are admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionMode {
    /// On arrival a job gets a reservation that meets its deadline and keeps
    /// it (guaranteed), or is turned away or downgraded (`on_infeasible`).
    Reserve,
    /// No reservations: every round, SLO jobs take the capacity free now on
    /// which they can still meet their deadline, in `best_effort_order`; a job
    /// that can no longer meet it is turned away (or, with `on_infeasible =
    /// best-effort`, runs on). Serves more deadlines under bursts that
    /// overload the cluster, promises none.
    EachRound,
    /// A job runs or waits without a promise, as under `each-round` (and may
    /// gain ground on idle edge devices meanwhile), until a plan on capacity
    /// nobody holds finishes it by its deadline and within
    /// `Policy::promise_lead_ms`; it is then guaranteed with that plan, and
    /// later rounds give it a plan that still meets its deadline, in its turn
    /// with the queue or first. The promise comes late, not on arrival, so a
    /// burst is served shortest first.
    #[default]
    Queue,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forecast slot with P90 `p90` and a P50 10 points below it.
    fn q(p90: f64) -> Option<Quantiles> {
        Some(Quantiles {
            p10: 0.0,
            p50: p90 - 10.0,
            p90,
        })
    }

    /// Hand-worked: threshold 30 %, slots of 100 ms from 1 000. CPU and GPU
    /// are both under 30 % in slots 0 and 3 only (CPU 50 % in slot 1, GPU
    /// 40 % in slot 2, CPU unknown in slot 4).
    #[test]
    fn a_slot_is_idle_when_every_resource_is_and_the_load_now_judges_the_present() {
        let cpu = [q(10.0), q(50.0), q(10.0), q(10.0), None];
        let gpu = [q(10.0), q(10.0), q(40.0), q(20.0), q(5.0)];
        let spans = |now_ms: i64, util_now: Option<f64>| -> Vec<(i64, i64)> {
            EdgeAvailability::from_forecast(1_000, 100, &[&cpu, &gpu], 30.0, now_ms, util_now)
                .windows
                .iter()
                .map(|w| (w.start_ms, w.end_ms))
                .collect()
        };
        // No load reported: the forecast alone.
        assert_eq!(spans(950, None), vec![(1_000, 1_100), (1_300, 1_400)]);
        // Idle now (20 %) in the slot before the forecast starts: it joins slot 0.
        assert_eq!(spans(950, Some(20.0)), vec![(900, 1_100), (1_300, 1_400)]);
        // Idle now (5 %) in slot 1, where the CPU forecast was busy: the
        // present is likely, not sure.
        assert_eq!(
            spans(1_120, Some(5.0)),
            vec![(1_000, 1_100), (1_300, 1_400)]
        );
        let a = EdgeAvailability::from_forecast(1_000, 100, &[&cpu, &gpu], 30.0, 1_120, Some(5.0));
        let likely: Vec<(i64, i64)> = a
            .likely_windows()
            .iter()
            .map(|w| (w.start_ms, w.end_ms))
            .collect();
        assert_eq!(likely, vec![(1_000, 1_200), (1_300, 1_400)]);
        // Busy now (60 %) in slot 3, forecast idle: only slot 0 is left.
        assert_eq!(spans(1_320, Some(60.0)), vec![(1_000, 1_100)]);
        // A forecast covers only as many slots as its shortest resource.
        let short = EdgeAvailability::from_forecast(1_000, 100, &[&gpu[..3], &gpu], 30.0, 0, None);
        assert_eq!(
            short
                .windows
                .iter()
                .map(|w| (w.start_ms, w.end_ms))
                .collect::<Vec<_>>(),
            vec![(1_000, 1_200)]
        );
    }

    /// Hand-worked confidences, threshold 30 %: P50 10, P90 20 gives
    /// Φ(1.2816 × (30 − 10) / (20 − 10)) = Φ(2.563) = 0.99481; P50 10, P90 28
    /// gives Φ(1.2816 × 20 / 18) = Φ(1.424) = 0.92277. A window takes its
    /// least certain slot's, a resource its least certain resource's, and an
    /// observed slot is certain.
    #[test]
    fn a_window_is_as_sure_as_its_least_certain_slot() {
        let at = |p50: f64, p90: f64| Some(Quantiles { p10: 0.0, p50, p90 });
        let cpu = [at(10.0, 20.0), at(10.0, 28.0), at(10.0, 20.0)];
        let gpu = [at(10.0, 20.0), at(10.0, 20.0), at(0.0, 1.0)];
        let a = EdgeAvailability::from_forecast(1_000, 100, &[&cpu, &gpu], 30.0, 0, None);
        assert_eq!(a.windows.len(), 1);
        assert!((a.windows[0].confidence - 0.92277).abs() < 1e-5, "{a:?}");
        let last =
            EdgeAvailability::from_forecast(1_000, 100, &[&cpu[2..], &gpu[2..]], 30.0, 0, None);
        assert!(
            (last.windows[0].confidence - 0.99481).abs() < 1e-5,
            "{last:?}"
        );
        // Idle now in slot 1 (observed): only slots 0 and 2 are forecast.
        let now =
            EdgeAvailability::from_forecast(1_000, 100, &[&cpu, &gpu], 30.0, 1_150, Some(5.0));
        assert!(
            (now.windows[0].confidence - 0.99481).abs() < 1e-5,
            "{now:?}"
        );
        let known = EdgeAvailability::from_known_load(1_000, 100, &[Some(5.0)], 30.0, None);
        assert_eq!(known.windows[0].confidence, 1.0);
    }

    /// Threshold 30 %: P90 under it in slot 0 only, P50 under it in slots 0
    /// to 2 (slot 3's P50 is 35): the sure grade is slot 0, the likely grade
    /// slots 0 to 2; a box idle now joins the present to both. A box idle
    /// now in a slot whose P90 is over the threshold has the present in the
    /// likely grade only.
    #[test]
    fn the_likely_grade_reads_the_p50_and_holds_the_sure_one() {
        let at = |p50: f64, p90: f64| Some(Quantiles { p10: 0.0, p50, p90 });
        let cpu = [
            at(10.0, 20.0),
            at(20.0, 40.0),
            at(25.0, 60.0),
            at(35.0, 50.0),
        ];
        let spans = |ws: &[Window]| -> Vec<(i64, i64)> {
            ws.iter().map(|w| (w.start_ms, w.end_ms)).collect()
        };
        let a = EdgeAvailability::from_forecast(1_000, 100, &[&cpu], 30.0, 950, None);
        assert_eq!(spans(&a.windows), vec![(1_000, 1_100)]);
        assert_eq!(spans(a.likely_windows()), vec![(1_000, 1_300)]);
        let now = EdgeAvailability::from_forecast(1_000, 100, &[&cpu], 30.0, 950, Some(5.0));
        assert_eq!(spans(&now.windows), vec![(900, 1_100)]);
        assert_eq!(spans(now.likely_windows()), vec![(900, 1_300)]);
        // Idle now against a P90 forecast that says busy: the present is
        // likely, not sure.
        let busy_first = [at(10.0, 50.0), at(10.0, 20.0)];
        let a = EdgeAvailability::from_forecast(1_000, 100, &[&busy_first], 30.0, 1_050, Some(5.0));
        assert_eq!(spans(&a.windows), vec![(1_100, 1_200)]);
        assert_eq!(spans(a.likely_windows()), vec![(1_000, 1_200)]);
        // A load known for certain has one grade.
        let known = EdgeAvailability::from_known_load(1_000, 100, &[Some(5.0)], 30.0, None);
        assert_eq!(known.likely_windows(), known.windows.as_slice());
    }

    /// Hand-worked margins, grace 120 s: a 6-hour window (21 600 000 ms) at
    /// confidence 0.95 seen from its start loses 0.05 × 21 600 000 / 2 =
    /// 540 000 ms more, so it is usable until 21 600 000 − 120 000 − 540 000
    /// = 20 940 000; three hours in, half as much (270 000): 21 210 000; a
    /// certain window keeps the grace alone: 21 480 000.
    #[test]
    fn the_margin_before_a_window_ends_grows_with_its_doubt() {
        let w = |confidence| Window {
            start_ms: 0,
            end_ms: 21_600_000,
            confidence,
        };
        assert_eq!(w(0.95).usable_until_ms(0, 120_000), 20_940_000);
        assert_eq!(w(0.95).usable_until_ms(10_800_000, 120_000), 21_210_000);
        assert_eq!(w(1.0).usable_until_ms(0, 120_000), 21_480_000);
        // Before the window opens, all of it is left to lose.
        assert_eq!(w(0.95).usable_until_ms(-5_000, 120_000), 20_940_000);
    }

    #[test]
    fn known_idle_slots_merge_into_windows() {
        let p90 = [Some(80.0), Some(10.0), Some(20.0), None, Some(5.0)];
        let a = EdgeAvailability::from_known_load(1_000, 100, &p90, 30.0, Some(50.0));
        assert_eq!(
            a.windows,
            vec![
                Window {
                    start_ms: 1_100,
                    end_ms: 1_300,
                    confidence: 1.0
                },
                Window {
                    start_ms: 1_400,
                    end_ms: 1_500,
                    confidence: 1.0
                }
            ]
        );
        assert!(a.tide_in());
    }

    #[test]
    fn measured_links_are_symmetric() {
        let mut t = LinkTable::default();
        let l = LinkSpec {
            bandwidth_bps: 1.0,
            latency_s: 0.1,
            loss: 0.0,
            congestion: Congestion::LossBased,
        };
        t.measured.push(MeasuredLink {
            a: "z".into(),
            b: "a".into(),
            link: l,
        });
        let cost = crate::placement::PlacementCost::new([("a", false), ("z", false)], &t);
        assert_eq!(cost.link(0, 1), (LinkClass::EdgeEdge, l));
        assert_eq!(cost.link(1, 0), (LinkClass::EdgeEdge, l));
    }
}
