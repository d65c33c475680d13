//! The figures reported per policy, and how they are computed from the
//! engine's accumulators and the jobs' final states.
//!
//! - Deadline satisfaction ratio (DSR), all jobs: SLO jobs finished by their
//!   deadline plus best-effort jobs finished at all, over all jobs; SLO DSR:
//!   SLO jobs finished by their deadline over SLO jobs. A rejected or
//!   abandoned job counts as missed.
//! - Best-effort JCT: finish − submission of finished best-effort jobs.
//! - Edge figures are measured over the window from the first submission to
//!   the last deadline or submission (`window_ms`): harvested = device-hours
//!   jobs held on boxes while truly idle, over the device-hours truly idle;
//!   interference = box-hours with a job on the box while its true load was
//!   over the threshold, over all box-hours.
//! - Edge device-hours by what they did ([`EdgeHours`]): training (stepping),
//!   start-up (staging the data shard, moving a checkpoint, restarting: what
//!   a start or migration pays), and idle but unused (truly idle device-hours
//!   no job held).
//! - Guarantees: `guaranteed_jobs` are the jobs a policy admitted with a
//!   promise to meet their deadline; `guaranteed_missed` those of them that
//!   did not finish by it; `promise_notice_h_median` is the median, over
//!   guaranteed jobs, of deadline − first promise, hours (nearest rank: the
//!   ⌈n/2⌉-th smallest of n): how much warning a promise gave.
//! - Evictions (engine module doc): how often a policy took a job off a box
//!   whose tide had come in, and the training it lost, device-hours and
//!   iterations since the job's last checkpoint.
//! - Traffic, GB by tier: `site_lan` (between boxes of one edge site),
//!   `between_sites`, `cloud_edge`, `cloud_cloud`; `wan_gb` is the last three.
//! - `edge_gain` = DSR(policy) − DSR(the same policy on the same world with no
//!   edge box), filled in by the run that made both (0 for a policy that never
//!   uses the edge); `slo_edge_gain` the same over SLO jobs alone (SLO DSR), so
//!   best-effort throughput does not hide what the edge does for deadlines.
//! - Start-up share = edge start-up device-hours / edge device-hours held
//!   (training + start-up): the part of the edge's time that moving jobs ate.

use serde::Serialize;

use super::edges::EdgeWorld;
use super::forecasts::ForecastCounts;
use super::placement::{CostModel, Traffic};
use super::policies::{JobRun, JobStatus};

/// What the engine adds up while it runs.
#[derive(Debug, Clone, Default)]
pub struct Accumulators {
    /// Cloud GPU-seconds held.
    pub cloud_gpu_s: f64,
    /// Cloud money.
    pub cloud_cost: f64,
    /// Edge device-seconds held while the box was truly idle.
    pub edge_idle_used_s: f64,
    /// Edge device-seconds held in all.
    pub edge_used_s: f64,
    /// Edge device-seconds held in start-up: staging, checkpoint transfer, restart.
    pub edge_startup_s: f64,
    /// Box-seconds of interference.
    pub interference_s: f64,
    /// Bytes by tier.
    pub traffic: Traffic,
    /// Jobs taken off a box whose tide had come in.
    pub evictions: u64,
    /// Iterations those evictions lost.
    pub lost_iters: f64,
    /// Device-seconds of training those evictions lost.
    pub lost_device_s: f64,
    /// Rounds the policy was asked.
    pub rounds: u64,
}

/// A placement held for a while, to charge ([`Accumulators::hold`]).
#[derive(Debug, Clone, Copy)]
pub struct Held<'a> {
    /// (node index, devices).
    pub place: &'a [(u32, u32)],
    /// When the stretch began, trace ms.
    pub from_ms: i64,
    /// Seconds held, start-up included.
    pub used_s: f64,
    /// Seconds of them in start-up.
    pub startup_s: f64,
    /// Where the measurement window ends, trace ms: no box time past it is
    /// split into idle and busy.
    pub window_end_ms: i64,
}

impl Accumulators {
    /// Charges `held`: GPU-seconds and money on cloud nodes; device-seconds
    /// on edge boxes, start-up apart, and the part of them while the box was
    /// truly idle as harvested. Each box's busy ms of the stretch goes to
    /// `busy_ms` (the largest over the jobs on it); the caller adds their sum
    /// to `interference_s` once every job of the step is charged, so a box
    /// counts once however many jobs it holds.
    pub fn hold(
        &mut self,
        model: &CostModel,
        edges: &EdgeWorld,
        busy_ms: &mut [i64],
        held: Held<'_>,
    ) {
        let until = (held.from_ms + (held.used_s * 1000.0).ceil() as i64).min(held.window_end_ms);
        for &(q, w) in held.place {
            let node = &model.nodes()[q as usize];
            let w = f64::from(w);
            match (node.price_per_gpu_hour, node.edge) {
                (Some(price), _) => {
                    self.cloud_gpu_s += w * held.used_s;
                    self.cloud_cost += price * w * held.used_s / 3600.0;
                }
                (None, Some(e)) => {
                    self.edge_used_s += w * held.used_s;
                    self.edge_startup_s += w * held.startup_s;
                    if until > held.from_ms {
                        let (idle, busy) = edges.split_idle(e, held.from_ms, until);
                        self.edge_idle_used_s += w * idle as f64 / 1000.0;
                        busy_ms[q as usize] = busy_ms[q as usize].max(busy);
                    }
                }
                (None, None) => {}
            }
        }
    }
}

/// One policy's results.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyMetrics {
    /// The policy.
    pub policy: String,
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs with a deadline.
    pub slo_jobs: usize,
    /// Deadline satisfaction ratio over all jobs.
    pub deadline_satisfaction_ratio: f64,
    /// Deadline satisfaction ratio over SLO jobs.
    pub slo_deadline_satisfaction_ratio: f64,
    /// SLO jobs that met their deadline.
    pub deadlines_met: usize,
    /// DSR(policy) − DSR(same policy with no edge box), when known.
    pub edge_gain: Option<f64>,
    /// DSR of the same policy with no edge box; `None` when it was not run
    /// because the policy never uses the edge (its `edge_gain` is then 0).
    pub dsr_without_edge: Option<f64>,
    /// SLO DSR(policy) − SLO DSR(same policy with no edge box), when known.
    pub slo_edge_gain: Option<f64>,
    /// SLO DSR of the same policy with no edge box (`None` as for `dsr_without_edge`).
    pub slo_dsr_without_edge: Option<f64>,
    /// Jobs admitted with a guarantee of their deadline.
    pub guaranteed_jobs: usize,
    /// Guaranteed jobs that missed their deadline.
    pub guaranteed_missed: usize,
    /// Median notice a promise gave, hours (nearest rank): deadline − the
    /// time of the first promise, over guaranteed jobs (`None` without any).
    pub promise_notice_h_median: Option<f64>,
    /// Jobs rejected at admission.
    pub rejected: usize,
    /// Admitted jobs given up on after their deadline passed.
    pub abandoned: usize,
    /// Jobs not finished when the simulation ended.
    pub unfinished: usize,
    /// Finished best-effort jobs.
    pub best_effort_finished: usize,
    /// Mean best-effort JCT, seconds.
    pub best_effort_jct_mean_s: Option<f64>,
    /// 95th-percentile best-effort JCT, seconds.
    pub best_effort_jct_p95_s: Option<f64>,
    /// Cloud GPU-hours held.
    pub cloud_gpu_hours: f64,
    /// Cloud money, currency units.
    pub cloud_cost: f64,
    /// Edge device-hours held while truly idle.
    pub edge_gpu_hours_harvested: f64,
    /// Edge device-hours truly idle in the window.
    pub edge_gpu_hours_idle: f64,
    /// Harvested over idle.
    pub harvested_idle_share: f64,
    /// Edge device-hours by what they did.
    pub edge_hours: EdgeHours,
    /// Edge start-up device-hours over edge device-hours held (0 without any).
    pub startup_share: f64,
    /// Box-hours of interference.
    pub interference_node_hours: f64,
    /// Interference over all box-hours in the window.
    pub interference_share: f64,
    /// Migrations per job.
    pub migrations_per_job: f64,
    /// Preemptions per job.
    pub preemptions_per_job: f64,
    /// Evictions: jobs taken off a box whose tide had come in.
    pub evictions: u64,
    /// Device-hours of training the evictions threw away.
    pub lost_device_hours: f64,
    /// Iterations the evictions threw away.
    pub lost_iterations: f64,
    /// GB moved, by tier.
    pub traffic_gb: Traffic,
    /// Wide-area GB: between sites, cloud-edge and cloud-cloud.
    pub wan_gb: f64,
    /// Scheduling rounds.
    pub rounds: u64,
    /// Edge forecasts made and reused (online forecasts only).
    pub forecasts: Option<ForecastCounts>,
    /// Wall time of this policy's run, seconds.
    pub elapsed_s: f64,
}

/// Edge device-hours by what they did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct EdgeHours {
    /// Held by a job that was stepping.
    pub training: f64,
    /// Held by a job in start-up: staging, checkpoint transfer, restart.
    pub startup: f64,
    /// Truly idle and held by no job (in the measurement window).
    pub idle_unused: f64,
}

/// Totals of the edge over the measurement window.
#[derive(Debug, Clone, Copy, Default)]
pub struct EdgeTotals {
    /// Device-seconds truly idle.
    pub idle_device_s: f64,
    /// Box-seconds in all.
    pub box_s: f64,
}

/// Whether the DSR counts `j`: an SLO job done by its deadline, or a
/// best-effort job done.
pub fn counts(j: &JobRun) -> bool {
    match j.finish_ms {
        Some(f) if j.slo() => f <= j.spec.deadline_ms,
        Some(_) => true,
        None => false,
    }
}

/// Computes the figures.
pub fn summarise(
    policy: &str,
    jobs: &[JobRun],
    acc: &Accumulators,
    edge: EdgeTotals,
    forecasts: Option<ForecastCounts>,
    elapsed_s: f64,
) -> PolicyMetrics {
    let n = jobs.len();
    let slo: Vec<&JobRun> = jobs.iter().filter(|j| j.slo()).collect();
    let met = slo.iter().filter(|j| counts(j)).count();
    let mut be_jct: Vec<f64> = jobs
        .iter()
        .filter(|j| !j.slo())
        .filter_map(|j| Some((j.finish_ms? - j.spec.submitted_ms) as f64 / 1000.0))
        .collect();
    be_jct.sort_by(f64::total_cmp);
    let count = |s: JobStatus| jobs.iter().filter(|j| j.status == s).count();
    let guaranteed: Vec<&JobRun> = jobs.iter().filter(|j| j.guaranteed_ms.is_some()).collect();
    let mut notice_h: Vec<f64> = guaranteed
        .iter()
        .filter_map(|j| Some((j.spec.deadline_ms - j.guaranteed_ms?) as f64 / 3.6e6))
        .collect();
    notice_h.sort_by(f64::total_cmp);
    let guaranteed_missed = guaranteed
        .iter()
        .filter(|j| j.finish_ms.is_none_or(|f| f > j.spec.deadline_ms))
        .count();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let per_job =
        |f: fn(&JobRun) -> u32| ratio(jobs.iter().map(|j| f64::from(f(j))).sum::<f64>(), n as f64);
    PolicyMetrics {
        policy: policy.to_string(),
        jobs: n,
        slo_jobs: slo.len(),
        deadline_satisfaction_ratio: ratio((met + be_jct.len()) as f64, n as f64),
        slo_deadline_satisfaction_ratio: ratio(met as f64, slo.len() as f64),
        deadlines_met: met,
        edge_gain: None,
        dsr_without_edge: None,
        slo_edge_gain: None,
        slo_dsr_without_edge: None,
        guaranteed_jobs: guaranteed.len(),
        guaranteed_missed,
        promise_notice_h_median: (!notice_h.is_empty()).then(|| notice_h[(notice_h.len() - 1) / 2]),
        rejected: count(JobStatus::Rejected),
        abandoned: count(JobStatus::Abandoned),
        unfinished: count(JobStatus::Active),
        best_effort_finished: be_jct.len(),
        best_effort_jct_mean_s: (!be_jct.is_empty())
            .then(|| be_jct.iter().sum::<f64>() / be_jct.len() as f64),
        best_effort_jct_p95_s: (!be_jct.is_empty()).then(|| {
            let k = ((be_jct.len() as f64 * 0.95).ceil() as usize).clamp(1, be_jct.len());
            be_jct[k - 1]
        }),
        cloud_gpu_hours: acc.cloud_gpu_s / 3600.0,
        cloud_cost: acc.cloud_cost,
        edge_gpu_hours_harvested: acc.edge_idle_used_s / 3600.0,
        edge_gpu_hours_idle: edge.idle_device_s / 3600.0,
        harvested_idle_share: ratio(acc.edge_idle_used_s, edge.idle_device_s),
        edge_hours: EdgeHours {
            training: (acc.edge_used_s - acc.edge_startup_s) / 3600.0,
            startup: acc.edge_startup_s / 3600.0,
            idle_unused: (edge.idle_device_s - acc.edge_idle_used_s).max(0.0) / 3600.0,
        },
        startup_share: ratio(acc.edge_startup_s, acc.edge_used_s),
        interference_node_hours: acc.interference_s / 3600.0,
        interference_share: ratio(acc.interference_s, edge.box_s),
        migrations_per_job: per_job(|j| j.migrations),
        preemptions_per_job: per_job(|j| j.preemptions),
        evictions: acc.evictions,
        lost_device_hours: acc.lost_device_s / 3600.0,
        lost_iterations: acc.lost_iters,
        traffic_gb: {
            let mut gb = Traffic::default();
            gb.add_scaled(&acc.traffic, 1e-9);
            gb
        },
        wan_gb: acc.traffic.wan() / 1e9,
        rounds: acc.rounds,
        forecasts,
        elapsed_s,
    }
}

impl PolicyMetrics {
    /// Fills in `edge_gain`, `slo_edge_gain` and the DSRs they come from
    /// with `without`, the same policy's row on the same world with no edge
    /// box: `None` where that run was not needed (the policy never uses the
    /// edge, or the world has none), so the gain is 0. `simulate` and the
    /// live `twin` both compute the gain here.
    pub fn set_edge_gain(&mut self, without: Option<&PolicyMetrics>) {
        self.dsr_without_edge = without.map(|w| w.deadline_satisfaction_ratio);
        self.slo_dsr_without_edge = without.map(|w| w.slo_deadline_satisfaction_ratio);
        self.edge_gain = Some(
            self.dsr_without_edge
                .map_or(0.0, |w| self.deadline_satisfaction_ratio - w),
        );
        self.slo_edge_gain = Some(
            self.slo_dsr_without_edge
                .map_or(0.0, |w| self.slo_deadline_satisfaction_ratio - w),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit;
    use super::*;

    const H: i64 = 3_600_000;

    /// A job due at `deadline_h`, promised at `promised_h` (if ever),
    /// finished at `finish_h` (if ever).
    fn run(id: u64, deadline_h: i64, promised_h: Option<i64>, finish_h: Option<i64>) -> JobRun {
        let mut spec = testkit::job("m").spec;
        spec.id = id;
        spec.deadline_ms = deadline_h * H;
        let mut j = JobRun::new(spec, 1);
        j.guaranteed_ms = promised_h.map(|h| h * H);
        j.finish_ms = finish_h.map(|h| h * H);
        if j.finish_ms.is_some() {
            j.status = JobStatus::Done;
        }
        j
    }

    /// The row of `jobs` alone, with nothing accumulated.
    fn summary(jobs: &[JobRun]) -> PolicyMetrics {
        summarise(
            "p",
            jobs,
            &Accumulators::default(),
            EdgeTotals::default(),
            None,
            0.0,
        )
    }

    #[test]
    fn edge_gain_is_the_dsr_over_the_run_without_edge_or_zero_without_one() {
        let row = |met: &[bool]| {
            let jobs: Vec<JobRun> = met
                .iter()
                .enumerate()
                .map(|(k, &m)| run(k as u64, 12, None, m.then_some(11)))
                .collect();
            summary(&jobs)
        };
        let mut full = row(&[true, true, true, false]);
        assert_eq!(full.edge_gain, None, "not measured until a run fills it in");
        full.set_edge_gain(Some(&row(&[true, false, false, false])));
        assert_eq!(full.dsr_without_edge, Some(0.25));
        assert_eq!(full.edge_gain, Some(0.5));
        assert_eq!(full.slo_edge_gain, Some(0.5));
        full.set_edge_gain(None);
        assert_eq!((full.edge_gain, full.dsr_without_edge), (Some(0.0), None));
    }

    #[test]
    fn guarantees_count_their_misses_and_the_median_notice() {
        // Promised 10, 4, 1 and 6 h before their deadlines: the nearest-rank
        // median of 1, 4, 6, 10 is the 2nd smallest, 4 h. The second finishes
        // late, the fourth never, the fifth was never promised.
        let jobs = [
            run(1, 12, Some(2), Some(11)),
            run(2, 12, Some(8), Some(13)),
            run(3, 12, Some(11), Some(12)),
            run(4, 12, Some(6), None),
            run(5, 12, None, None),
        ];
        let m = summary(&jobs);
        assert_eq!((m.guaranteed_jobs, m.guaranteed_missed), (4, 2));
        assert_eq!(m.promise_notice_h_median, Some(4.0));
        assert_eq!(m.deadlines_met, 2);
    }

    #[test]
    fn the_startup_share_is_startup_over_held_edge_hours() {
        // 4000 device-seconds held on the edge, 1000 of them starting up: 25 %.
        let acc = Accumulators {
            edge_used_s: 4000.0,
            edge_startup_s: 1000.0,
            ..Accumulators::default()
        };
        let m = summarise("p", &[], &acc, EdgeTotals::default(), None, 0.0);
        assert!(
            (m.startup_share - 0.25).abs() < 1e-12,
            "{}",
            m.startup_share
        );
    }
}
