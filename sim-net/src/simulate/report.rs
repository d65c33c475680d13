//! The run's report: a table for people, JSON (`--json`) for scripts.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use tidemill_sched::ClassSources;

use super::metrics::PolicyMetrics;
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
    /// One entry per policy.
    pub policies: Vec<PolicyMetrics>,
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
