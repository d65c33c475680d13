//! The run's report: a table for people, JSON (`--json`) for scripts.

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::Setup;
use super::metrics::PolicyMetrics;

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
    /// Wall time of the whole command, seconds.
    pub elapsed_s: f64,
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
            elapsed_s,
            policies,
        }
    }

    /// Pretty JSON.
    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).expect("the report serialises");
        writeln!(out, "{json}")
    }

    /// The table; `wan_gb` is the wide-area part (cloud-edge and edge-edge),
    /// the JSON also has the cloud-cloud bytes.
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
        writeln!(
            out,
            "{:<12} {:>6} {:>6} {:>8} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>9} {:>8} {:>7}",
            "policy",
            "dsr",
            "slo",
            "rejected",
            "cloud_gh",
            "cost",
            "edge_gh",
            "harvest",
            "interf",
            "migr/j",
            "wan_gb",
            "be_jct_h",
            "time_s"
        )?;
        for p in &self.policies {
            writeln!(
                out,
                "{:<12} {:>6.3} {:>6.3} {:>8} {:>9.1} {:>9.1} {:>8.1} {:>8.3} {:>6.2}% {:>7.3} {:>9.1} {:>8} {:>7.2}",
                p.policy,
                p.deadline_satisfaction_ratio,
                p.slo_deadline_satisfaction_ratio,
                p.rejected,
                p.cloud_gpu_hours,
                p.cloud_cost,
                p.edge_gpu_hours_harvested,
                p.harvested_idle_share,
                100.0 * p.interference_share,
                p.migrations_per_job,
                (p.wan_bytes.cloud_edge + p.wan_bytes.edge_edge) / 1e9,
                p.best_effort_jct_mean_s
                    .map_or("-".to_string(), |s| format!("{:.2}", s / 3600.0)),
                p.elapsed_s
            )?;
        }
        Ok(())
    }
}
