//! Job traces in ElasticFlow's two CSV layouts, read into the scheduler's
//! [`JobSpec`]s plus what the non-elastic baselines need (the GPUs asked for).
//!
//! - `elasticflow` (Microsoft ITP, as ElasticFlow ships it):
//!   `job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration`.
//! - `philly-ef` (Philly-derived): `job_id,submit_time,real_iteration,model_name,ddl,batch_size,num_gpu,real_duration,duration,iteration`;
//!   ElasticFlow's `elasticVpollux_e.csv` uses the same names without the `real_*`
//!   columns (`job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration`) and is read as this format too.
//!
//! Times are seconds on the trace's own clock (SOURCE.md); deadlines are
//! absolute on it. They become "Unix ms" for the scheduler by × 1000, so the
//! simulation's epoch is the trace's zero. Work is the iteration count; the
//! `duration` column only feeds the deadline generator. A trace without a
//! deadline column gets `deadline = submit + λ × duration`, λ ~ U[λmin, λmax]
//! from the run's seed. An optional `best_effort` column (1 = no deadline) marks
//! best-effort jobs; `engine.best_effort_share` can mark more by a seeded draw.
//! A scenario's `[generator]` replaces all of that afterwards
//! ([`generate_deadlines`]).

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use thiserror::Error;
use tidemill_sched::{DataSite, JobClass, JobSpec, OnInfeasible};

use super::topology::{DeadlineSpec, GeneratorSpec, Topology};
use crate::trace::open_maybe_gz;

/// The two layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobsFormat {
    /// ITP traces: `submission_time`, `num_iteration`, `deadline`.
    Elasticflow,
    /// Philly-derived traces: `submit_time`, `iteration` or `real_iteration`, `ddl`.
    #[value(name = "philly-ef")]
    PhillyEf,
}

impl JobsFormat {
    /// (submit, iterations candidates, deadline) column names.
    fn columns(self) -> (&'static str, &'static [&'static str], &'static str) {
        match self {
            JobsFormat::Elasticflow => ("submission_time", &["num_iteration"], "deadline"),
            JobsFormat::PhillyEf => ("submit_time", &["iteration", "real_iteration"], "ddl"),
        }
    }

    /// The layout a header belongs to, if either.
    pub fn detect(header: &[&str]) -> Option<JobsFormat> {
        if header.contains(&"submission_time") {
            Some(JobsFormat::Elasticflow)
        } else if header.contains(&"submit_time") {
            Some(JobsFormat::PhillyEf)
        } else {
            None
        }
    }
}

/// A job trace that cannot be used.
#[derive(Debug, Error)]
pub enum JobsError {
    /// The file could not be read.
    #[error("{path}: cannot read the job trace: {source}; check --jobs")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The header matches neither layout.
    #[error(
        "{path}: line 1: header `{header}` is neither ElasticFlow format (submission_time,...) nor philly-ef (submit_time,...); pass --jobs-format or fix the header"
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// The header.
        header: String,
    },
    /// A required column is missing.
    #[error(
        "{path}: line 1: no column `{column}` for --jobs-format {format}; the header has: {header}"
    )]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column.
        column: String,
        /// The layout.
        format: String,
        /// The header.
        header: String,
    },
    /// A cell is not what its column needs.
    #[error("{path}: line {line}: column `{column}`: `{value}` {what}; fix the row")]
    BadCell {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The column.
        column: String,
        /// The cell.
        value: String,
        /// What is wrong.
        what: &'static str,
    },
    /// Malformed CSV.
    #[error("{path}: line {line}: malformed CSV: {message}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The parser's message.
        message: String,
    },
    /// No job in the file.
    #[error("{path}: no jobs; the trace needs at least one row")]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

/// A trace job: the scheduler's spec plus the trace's own facts.
#[derive(Debug, Clone)]
pub struct TraceJob {
    /// The spec every policy sees (`id` is the row index).
    pub spec: JobSpec,
    /// The trace's job id.
    pub name: String,
    /// GPUs the job asked for in the trace, capped at the largest power of two
    /// the cloud and `engine.max_gpus_per_job` allow (what non-elastic baselines run it on).
    pub requested_gpus: u32,
}

/// Reads `path` in `format` (detected from the header when `None`).
pub fn read_jobs(
    path: &Path,
    format: Option<JobsFormat>,
    topology: &Topology,
    max_gpus: u32,
    seed: u64,
) -> Result<Vec<TraceJob>, JobsError> {
    let io = |source| JobsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut csv = csv::ReaderBuilder::new().from_reader(open_maybe_gz(path).map_err(io)?);
    let csv_err = |e: csv::Error| JobsError::Csv {
        path: path.to_path_buf(),
        line: e.position().map_or(1, |p| p.line()),
        message: e.to_string(),
    };
    let header: Vec<String> = csv
        .headers()
        .map_err(csv_err)?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let names: Vec<&str> = header.iter().map(String::as_str).collect();
    let format = match format.or_else(|| JobsFormat::detect(&names)) {
        Some(f) => f,
        None => {
            return Err(JobsError::UnknownFormat {
                path: path.to_path_buf(),
                header: header.join(","),
            });
        }
    };
    let (submit_col, iter_cols, deadline_col) = format.columns();
    let format_name = format
        .to_possible_value()
        .map_or(String::new(), |v| v.get_name().to_string());
    let col = |name: &str| names.iter().position(|h| *h == name);
    let need = |name: &str| {
        col(name).ok_or_else(|| JobsError::MissingColumn {
            path: path.to_path_buf(),
            column: name.to_string(),
            format: format_name.clone(),
            header: header.join(","),
        })
    };
    let c_id = need("job_id")?;
    let c_submit = need(submit_col)?;
    let c_iter = match iter_cols.iter().find_map(|c| col(c)) {
        Some(c) => c,
        None => need(iter_cols[0])?,
    };
    let c_model = need("model_name")?;
    let c_batch = need("batch_size")?;
    let c_gpu = need("num_gpu")?;
    let c_deadline = col(deadline_col);
    let c_duration = col("duration");
    if c_deadline.is_none() && c_duration.is_none() {
        need(deadline_col)?;
    }
    let c_be = col("best_effort");

    let mut rng = StdRng::seed_from_u64(seed);
    let DeadlineSpec {
        lambda_min,
        lambda_max,
    } = topology.deadlines;
    let be_share = topology.engine.best_effort_share;
    let mut jobs = Vec::new();
    let mut record = csv::StringRecord::new();
    while csv.read_record(&mut record).map_err(csv_err)? {
        let line = record.position().map_or(0, |p| p.line());
        let cell = |c: usize| record.get(c).unwrap_or("").trim();
        let bad = |c: usize, what| JobsError::BadCell {
            path: path.to_path_buf(),
            line,
            column: header[c].clone(),
            value: cell(c).to_string(),
            what,
        };
        let num = |c: usize| {
            cell(c)
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(c, "is not a non-negative number"))
        };
        let submit_s = num(c_submit)?;
        let iterations = num(c_iter)?;
        let batch = num(c_batch)?;
        if batch < 1.0 {
            return Err(bad(c_batch, "is not a positive batch size"));
        }
        let gpus = num(c_gpu)?.max(1.0) as u32;
        let model = cell(c_model).to_string();
        if model.is_empty() {
            return Err(bad(c_model, "is empty; every job needs a model name"));
        }
        let lambda = rng.random_range(lambda_min..=lambda_max);
        let be_draw: f64 = rng.random();
        let deadline_s = match (c_deadline, c_duration) {
            (Some(c), _) => num(c)?,
            (None, Some(c)) => submit_s + lambda * num(c)?,
            (None, None) => unreachable!("checked above"),
        };
        let best_effort = c_be.is_some_and(|c| cell(c) == "1") || be_draw < be_share;
        let sizes = topology.model(&model);
        let requested = pow2_floor(gpus.min(max_gpus));
        let id = jobs.len() as u64;
        jobs.push(TraceJob {
            name: cell(c_id).to_string(),
            requested_gpus: requested,
            spec: JobSpec {
                id,
                class: if best_effort {
                    JobClass::BestEffort
                } else {
                    JobClass::Slo
                },
                submitted_ms: (submit_s * 1000.0).round() as i64,
                deadline_ms: if best_effort {
                    NO_DEADLINE_MS
                } else {
                    (deadline_s * 1000.0).round() as i64
                },
                iterations,
                global_batch: batch as u32,
                model,
                model_bytes: (sizes.model_mb * 1e6) as u64,
                dataset_bytes: (sizes.dataset_gb * 1e9) as u64,
                dataset_site: DataSite::Cloud,
                min_workers: 1,
                max_workers: max_gpus,
                memory_per_worker_bytes: 0,
                checkpoint_bytes: (sizes.checkpoint_mb * 1e6) as u64,
                checkpoint_interval_s: topology.engine.checkpoint_interval_min * 60.0,
                on_infeasible: OnInfeasible::Reject,
            },
        });
    }
    if jobs.is_empty() {
        return Err(JobsError::Empty {
            path: path.to_path_buf(),
        });
    }
    jobs.sort_by_key(|j| (j.spec.submitted_ms, j.spec.id));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.spec.id = i as u64;
    }
    Ok(jobs)
}

/// Multiplies the trace's inter-arrival times by `scale`, as EdgeFlow's
/// sensitivity study varies load: `submit' = submit₀ + scale × (submit − submit₀)`
/// with submit₀ the first submission, and an SLO job keeps its slack,
/// `deadline' = submit' + (deadline − submit)`. Below 1 the jobs come faster.
pub fn scale_arrivals(jobs: &mut [TraceJob], scale: f64) {
    let Some(first) = jobs.first().map(|j| j.spec.submitted_ms) else {
        return;
    };
    for j in jobs {
        let s = &mut j.spec;
        let submitted = first + (scale * (s.submitted_ms - first) as f64).round() as i64;
        if s.class == JobClass::Slo {
            s.deadline_ms = submitted + (s.deadline_ms - s.submitted_ms);
        }
        s.submitted_ms = submitted;
    }
}

/// The deadline of a best-effort job: far beyond any trace, yet clear of overflow.
const NO_DEADLINE_MS: i64 = i64::MAX / 4;

/// The scenario's job generator: replaces every job's deadline and class,
/// whatever the trace said. Job by job in `jobs`' order, a generator seeded
/// with `seed` draws λ ~ U[`lambda_min`, `lambda_max`] and u ~ U[0, 1): the job
/// runs best-effort when u < `best_effort_share`, else its deadline is
/// `submit + λ × T_req`, with `T_req = runtime_s(job)` in seconds (the caller
/// passes its runtime on the GPUs it asked for).
pub fn generate_deadlines(
    jobs: &mut [TraceJob],
    spec: &GeneratorSpec,
    seed: u64,
    runtime_s: impl Fn(&TraceJob) -> f64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    for j in jobs {
        let lambda = rng.random_range(spec.lambda_min..=spec.lambda_max);
        let best_effort = rng.random::<f64>() < spec.best_effort_share;
        let slack_ms = (lambda * runtime_s(j) * 1000.0).round() as i64;
        let s = &mut j.spec;
        (s.class, s.deadline_ms) = if best_effort {
            (JobClass::BestEffort, NO_DEADLINE_MS)
        } else {
            (JobClass::Slo, s.submitted_ms + slack_ms)
        };
    }
}

/// The largest power of two ≤ `n` (1 for 0).
pub fn pow2_floor(n: u32) -> u32 {
    if n <= 1 {
        1
    } else {
        1 << (31 - n.leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo() -> Topology {
        Topology::parse(
            Path::new("t"),
            r#"
[[cloud]]
name = "c"
nodes = 1
gpus_per_node = 8
class = "A100"
price_per_gpu_hour = 1.0
[links]
edge_edge = { bandwidth_mbps = 1000, latency_ms = 5 }
cloud_edge = { bandwidth_mbps = 100, latency_ms = 30 }
cloud_cloud = { bandwidth_mbps = 10000, latency_ms = 1 }
"#,
        )
        .unwrap()
    }

    fn write(body: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("jobs.csv");
        std::fs::write(&p, body).unwrap();
        (d, p)
    }

    #[test]
    fn all_three_headers_read() {
        let itp = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\na,10,100,bert,50,64,16,30\nb,5,7,gpt2,9,128,3,1\n";
        let philly = "job_id,submit_time,real_iteration,model_name,ddl,batch_size,num_gpu,real_duration,duration,iteration\n0,0,12,vgg16,99,256,1,5,5,11\n";
        let pollux = "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration\n0,3,20,ncf,40,4096,8,6\n";
        let (_d, p) = write(itp);
        let j = read_jobs(&p, None, &topo(), 8, 1).unwrap();
        assert_eq!((j[0].name.as_str(), j[0].spec.id), ("b", 0));
        assert_eq!(j[1].spec.deadline_ms, 50_000);
        assert_eq!((j[1].requested_gpus, j[0].requested_gpus), (8, 2));
        let (_d, p) = write(philly);
        let j = read_jobs(&p, None, &topo(), 8, 1).unwrap();
        assert_eq!(
            (j[0].spec.iterations, j[0].spec.deadline_ms),
            (11.0, 99_000)
        );
        let (_d, p) = write(pollux);
        let j = read_jobs(&p, Some(JobsFormat::PhillyEf), &topo(), 8, 1).unwrap();
        assert_eq!(
            (j[0].spec.iterations, j[0].spec.model.as_str()),
            (20.0, "ncf")
        );
    }

    #[test]
    fn scaled_arrivals_keep_order_and_slack() {
        let itp = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\na,100,1,bert,150,64,1,1\nb,300,1,bert,1300,64,1,1\n";
        let (_d, p) = write(itp);
        let mut j = read_jobs(&p, None, &topo(), 8, 1).unwrap();
        scale_arrivals(&mut j, 0.5);
        // 100 + 0.5 × (300 − 100) = 200 s; slack 1000 s kept.
        assert_eq!(j[0].spec.submitted_ms, 100_000);
        assert_eq!(j[0].spec.deadline_ms, 150_000);
        assert_eq!(j[1].spec.submitted_ms, 200_000);
        assert_eq!(j[1].spec.deadline_ms, 1_200_000);
    }

    /// `n` jobs submitted an hour apart, each 100 s of work at 1 it/s, all with a deadline at 50 s.
    fn generated(n: usize, share: f64, seed: u64) -> Vec<TraceJob> {
        let mut body = String::from(
            "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n",
        );
        for i in 0..n {
            body += &format!("j{i},{},100,bert,50,64,1,100\n", i * 3600);
        }
        let (_d, p) = write(&body);
        let mut jobs = read_jobs(&p, None, &topo(), 8, 1).unwrap();
        let spec = GeneratorSpec {
            lambda_min: 2.0,
            lambda_max: 12.0,
            best_effort_share: share,
        };
        generate_deadlines(&mut jobs, &spec, seed, |j| j.spec.iterations);
        jobs
    }

    #[test]
    fn the_generator_replaces_every_deadline_within_the_lambda_range() {
        for j in generated(200, 0.0, 3) {
            assert_eq!(j.spec.class, JobClass::Slo);
            // T_req = 100 s, so the slack is 200 s to 1200 s.
            let slack = j.spec.deadline_ms - j.spec.submitted_ms;
            assert!((200_000..=1_200_000).contains(&slack), "{slack}");
        }
    }

    #[test]
    fn the_generator_is_deterministic_for_a_seed() {
        let key = |jobs: Vec<TraceJob>| -> Vec<(JobClass, i64)> {
            jobs.iter()
                .map(|j| (j.spec.class, j.spec.deadline_ms))
                .collect()
        };
        assert_eq!(key(generated(50, 0.3, 9)), key(generated(50, 0.3, 9)));
        assert_ne!(key(generated(50, 0.3, 9)), key(generated(50, 0.3, 10)));
    }

    #[test]
    fn the_generator_marks_about_its_share_best_effort() {
        let jobs = generated(2000, 0.25, 5);
        let be = jobs
            .iter()
            .filter(|j| j.spec.class == JobClass::BestEffort)
            .count();
        // Binomial(2000, 0.25): standard deviation 19.4 jobs.
        assert!((420..=580).contains(&be), "{be}");
        assert!(
            jobs.iter()
                .filter(|j| j.spec.class == JobClass::BestEffort)
                .all(|j| j.spec.deadline_ms == NO_DEADLINE_MS)
        );
    }

    #[test]
    fn missing_deadline_is_generated_from_duration() {
        let body = "job_id,submit_time,iteration,model_name,batch_size,num_gpu,duration\n0,100,20,ncf,4096,1,1000\n";
        let (_d, p) = write(body);
        let j = read_jobs(&p, None, &topo(), 8, 7).unwrap();
        let rel = (j[0].spec.deadline_ms - 100_000) as f64 / 1e6;
        assert!((0.5..=1.5).contains(&rel), "{rel}");
        let again = read_jobs(&p, None, &topo(), 8, 7).unwrap();
        assert_eq!(j[0].spec.deadline_ms, again[0].spec.deadline_ms);
    }

    #[test]
    fn errors_name_file_line_column_and_fix() {
        let (_d, p) = write("job_id,foo\n1,2\n");
        let msg = read_jobs(&p, None, &topo(), 8, 1).unwrap_err().to_string();
        assert!(
            msg.contains("neither ElasticFlow") && msg.contains("--jobs-format"),
            "{msg}"
        );
        let (_d, p) = write(
            "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\na,x,1,bert,5,64,1,1\n",
        );
        let msg = read_jobs(&p, None, &topo(), 8, 1).unwrap_err().to_string();
        assert!(
            msg.contains("line 2: column `submission_time`: `x`"),
            "{msg}"
        );
        let (_d, p) = write("job_id,submit_time,model_name,ddl,batch_size,num_gpu\n");
        let msg = read_jobs(&p, None, &topo(), 8, 1).unwrap_err().to_string();
        assert!(msg.contains("no column `iteration`"), "{msg}");
    }
}
