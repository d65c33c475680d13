//! The run's report: a table for people, JSON (`--json`) for scripts.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use tidemill_sched::ClassSources;

use super::bound::LpBound;
use super::metrics::PolicyMetrics;
use super::policies::PolicyName;
use super::variants::{self, EdgeEquivalent};
use super::{EDGE_AS_CLOUD, Setup};

/// Everything printed.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The job trace.
    pub jobs_file: PathBuf,
    /// Jobs simulated.
    pub jobs: usize,
    /// Cloud GPUs.
    pub cloud_gpus: u32,
    /// Edge boxes.
    pub edge_boxes: usize,
    /// Whether tidemill saw the true future.
    pub oracle_forecast: bool,
    /// The seed.
    pub seed: u64,
    /// Where each device class's throughput numbers came from: class → model → source.
    pub device_classes: BTreeMap<String, ClassSources>,
    /// Wall time of the whole command, seconds.
    pub elapsed_s: f64,
    /// The edge's idle capacity in cloud GPUs (the `edge-as-cloud` row), with `--upper-bound`.
    pub edge_equivalent: Option<EdgeEquivalent>,
    /// Deadline jobs one idle edge device could finish in time (no staging).
    pub edge_feasible_jobs: Option<usize>,
    /// The LP bound on DSR (see [`super::bound`]), with `--lp-bound`.
    pub lp_bound: Option<LpBound>,
    /// The same LP without the edge boxes, with `--lp-bound`.
    pub lp_bound_without_edge: Option<LpBound>,
    /// Each policy's share of the gap from cloud-only to each bound, with either bound flag.
    pub gap_shares: Vec<GapShare>,
    /// One entry per policy.
    pub policies: Vec<PolicyMetrics>,
}

/// A policy's share of the gap from cloud-only's DSR to each bound.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GapShare {
    /// The policy.
    pub policy: String,
    /// Share of the gap to the `edge-as-cloud` row's DSR.
    pub to_edge_as_cloud: Option<f64>,
    /// Share of the gap to the LP bound.
    pub to_lp_bound: Option<f64>,
}

/// The smallest gap, in DSR, worth a share: below it the share is noise.
pub const MIN_GAP: f64 = 0.005;

/// `(dsr − floor) / (bound − floor)`, all three DSRs (dimensionless): how much
/// of what the bound allows above `floor` (cloud-only) a policy reached;
/// `None` when `bound − floor` is under [`MIN_GAP`].
pub fn gap_share(dsr: f64, floor: f64, bound: f64) -> Option<f64> {
    (bound - floor >= MIN_GAP).then(|| (dsr - floor) / (bound - floor))
}

/// Each policy's [`GapShare`] (the bound's own row left out); empty without
/// a cloud-only row or without any bound.
fn gap_shares(policies: &[PolicyMetrics], lp: Option<&LpBound>) -> Vec<GapShare> {
    let dsr_of = |name: &str| {
        policies
            .iter()
            .find(|p| p.policy == name)
            .map(|p| p.deadline_satisfaction_ratio)
    };
    let (Some(floor), eac) = (
        dsr_of(PolicyName::CloudOnly.as_str()),
        dsr_of(EDGE_AS_CLOUD),
    ) else {
        return Vec::new();
    };
    if eac.is_none() && lp.is_none() {
        return Vec::new();
    }
    policies
        .iter()
        .filter(|p| p.policy != EDGE_AS_CLOUD)
        .map(|p| GapShare {
            policy: p.policy.clone(),
            to_edge_as_cloud: eac.and_then(|b| gap_share(p.deadline_satisfaction_ratio, floor, b)),
            to_lp_bound: lp.and_then(|b| gap_share(p.deadline_satisfaction_ratio, floor, b.dsr)),
        })
        .collect()
}

impl Report {
    /// The report of a finished run.
    pub fn new(setup: &Setup, policies: Vec<PolicyMetrics>, elapsed_s: f64) -> Report {
        Report {
            jobs_file: setup.jobs_path.clone(),
            jobs: setup.world.jobs.len(),
            cloud_gpus: setup.world.model.cloud_gpus(),
            edge_boxes: setup.world.edges.boxes.len(),
            oracle_forecast: setup.oracle,
            seed: setup.seed,
            device_classes: setup.world.model.tables.sources(),
            elapsed_s,
            edge_equivalent: setup.edge_equivalent,
            edge_feasible_jobs: variants::edge_feasible_jobs(&setup.world),
            lp_bound: setup.lp_bound,
            lp_bound_without_edge: setup.lp_bound_without_edge,
            gap_shares: gap_shares(&policies, setup.lp_bound.as_ref()),
            policies,
        }
    }

    /// Pretty JSON.
    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).expect("the report serialises");
        writeln!(out, "{json}")
    }

    /// The table; `wan_gb` is the wide-area part (between sites, cloud-edge
    /// and cloud-cloud), `lan_gb` a site's LAN; `evict` counts evictions and
    /// `lost_dh` the device-hours of training they lost.
    pub fn write_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "{}: {} jobs, {} cloud GPUs, {} edge boxes, {} forecasts, seed {}, {:.1} s",
            self.jobs_file.display(),
            self.jobs,
            self.cloud_gpus,
            self.edge_boxes,
            if self.oracle_forecast {
                "oracle"
            } else {
                "online"
            },
            self.seed,
            self.elapsed_s
        )?;
        for (class, sources) in &self.device_classes {
            writeln!(out, "class {class}: {sources}")?;
        }
        writeln!(
            out,
            "{:<15} {:>6} {:>9} {:>6} {:>11} {:>8} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>6} {:>8} {:>9} {:>9} {:>8} {:>7}",
            "policy",
            "dsr",
            "edge_gain",
            "slo",
            "guar/missed",
            "rejected",
            "cloud_gh",
            "cost",
            "edge_gh",
            "harvest",
            "interf",
            "migr/j",
            "evict",
            "lost_dh",
            "lan_gb",
            "wan_gb",
            "be_jct_h",
            "time_s"
        )?;
        for p in &self.policies {
            writeln!(
                out,
                "{:<15} {:>6.3} {:>9} {:>6.3} {:>11} {:>8} {:>9.1} {:>9.1} {:>8.1} {:>8.3} {:>6.2}% {:>7.3} {:>6} {:>8.1} {:>9.1} {:>9.1} {:>8} {:>7.2}",
                p.policy,
                p.deadline_satisfaction_ratio,
                p.edge_gain.map_or("-".to_string(), |g| format!("{g:+.3}")),
                p.slo_deadline_satisfaction_ratio,
                format!("{}/{}", p.guaranteed_jobs, p.guaranteed_missed),
                p.rejected,
                p.cloud_gpu_hours,
                p.cloud_cost,
                p.edge_gpu_hours_harvested,
                p.harvested_idle_share,
                100.0 * p.interference_share,
                p.migrations_per_job,
                p.evictions,
                p.lost_device_hours,
                p.traffic_gb.site_lan,
                p.wan_gb,
                p.best_effort_jct_mean_s
                    .map_or("-".to_string(), |s| format!("{:.2}", s / 3600.0)),
                p.elapsed_s
            )?;
        }
        if let Some(n) = self.edge_feasible_jobs {
            writeln!(
                out,
                "deadline jobs one idle edge device could finish in time (no staging): {n} of {}",
                self.policies.first().map_or(0, |p| p.slo_jobs)
            )?;
        }
        if let Some(eq) = &self.edge_equivalent {
            writeln!(
                out,
                "{EDGE_AS_CLOUD}: cloud-only with {} more cloud GPUs ({:.2} exact) = {:.0} idle edge device-hours × λ {:.3} over the window",
                eq.gpus, eq.exact_gpus, eq.idle_device_hours, eq.lambda
            )?;
        }
        self.write_bounds(out)?;
        self.write_deadlines(out)?;
        let zero = |ran: bool| {
            self.policies
                .iter()
                .filter(|p| p.edge_gain == Some(0.0) && p.dsr_without_edge.is_some() == ran)
                .map(|p| p.policy.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if self.edge_boxes > 0 {
            for (names, why) in [
                (zero(true), "the edge changed none of their deadlines"),
                (zero(false), "they never use the edge"),
            ] {
                if !names.is_empty() {
                    writeln!(out, "edge_gain is zero for {names}: {why}")?;
                }
            }
        }
        Ok(())
    }
}

impl Report {
    /// The bounds beside cloud-only, with the LP's size and solve time.
    fn write_bounds(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let Some(lp) = &self.lp_bound else {
            return Ok(());
        };
        let dsr_of = |name: &str| {
            self.policies
                .iter()
                .find(|p| p.policy == name)
                .map_or("-".to_string(), |p| {
                    format!("{:.3}", p.deadline_satisfaction_ratio)
                })
        };
        writeln!(
            out,
            "bounds on dsr: cloud-only {}, {EDGE_AS_CLOUD} {}, lp-bound {:.3} (LP relaxation over time-indexed capacity: {:.1} jobs done fractionally, {} of {} jobs could finish alone; {} variables, {} rows, {:.2} s)",
            dsr_of(PolicyName::CloudOnly.as_str()),
            dsr_of(EDGE_AS_CLOUD),
            lp.dsr,
            lp.jobs_done,
            lp.jobs_possible,
            self.jobs,
            lp.variables,
            lp.rows,
            lp.elapsed_s
        )?;
        if let Some(bare) = &self.lp_bound_without_edge {
            writeln!(
                out,
                "lp-bound without the edge {:.3} ({:.2} s): the LP sees room for the edge to add {:+.3}",
                bare.dsr,
                bare.elapsed_s,
                lp.dsr - bare.dsr
            )?;
        }
        Ok(())
    }

    /// What the edge did for deadlines, per policy: `edge_gain` overall and on
    /// SLO jobs alone, the share of the gap from cloud-only to each bound
    /// (`-` under [`MIN_GAP`] or without a bound flag), migrations per job
    /// and the start-up share of the edge's held device-hours.
    fn write_deadlines(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let signed = |v: Option<f64>| v.map_or("-".to_string(), |g| format!("{g:+.3}"));
        let share = |v: Option<f64>| v.map_or("-".to_string(), |g| format!("{:.0}%", 100.0 * g));
        writeln!(
            out,
            "{:<15} {:>9} {:>8} {:>8} {:>8} {:>7} {:>8}",
            "policy", "edge_gain", "slo_gain", "gap_eac", "gap_lp", "migr/j", "startup"
        )?;
        for p in self.policies.iter().filter(|p| p.policy != EDGE_AS_CLOUD) {
            let gap = self.gap_shares.iter().find(|g| g.policy == p.policy);
            writeln!(
                out,
                "{:<15} {:>9} {:>8} {:>8} {:>8} {:>7.3} {:>7.1}%",
                p.policy,
                signed(p.edge_gain),
                signed(p.slo_edge_gain),
                share(gap.and_then(|g| g.to_edge_as_cloud)),
                share(gap.and_then(|g| g.to_lp_bound)),
                p.migrations_per_job,
                100.0 * p.startup_share
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_share_matches_a_hand_calculation() {
        // Cloud-only 0.60, bound 0.80: a policy at 0.75 closes 0.15 of 0.20.
        assert!((gap_share(0.75, 0.60, 0.80).unwrap() - 0.75).abs() < 1e-12);
        // A gap of 0.004 is under MIN_GAP: no share.
        assert_eq!(gap_share(0.61, 0.600, 0.604), None);
    }
}
