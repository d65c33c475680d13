//! `tidemill-sim gen-trace`: a synthetic tidal utilisation trace in tidemill's
//! format (`node,time_s,cpu,mem,gpu`), deterministic per seed. It is the demo's
//! and the tests' data source, so nothing depends on external data sets.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::Args as ClapArgs;
use flate2::Compression;
use flate2::write::GzEncoder;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};
use thiserror::Error;

/// Options of `gen-trace`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Number of nodes.
    #[arg(long, default_value_t = 8)]
    pub nodes: u32,
    /// Days of data.
    #[arg(long, default_value_t = 14)]
    pub days: u32,
    /// Random seed; the same seed gives the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 300)]
    pub step_s: u32,
    /// Unix time of the first sample, seconds (default: Monday 2024-01-01 00:00 UTC).
    #[arg(long, default_value_t = 1_704_067_200)]
    pub start_s: i64,
    /// Share of nodes (0-1) that report a GPU.
    #[arg(long, default_value_t = 0.5)]
    pub gpu_share: f64,
    /// Share of nodes (0-1) without a daily cycle (a wandering level instead).
    #[arg(long, default_value_t = 0.125)]
    pub acyclic_share: f64,
    /// Output file; gzip when the name ends in `.gz`.
    #[arg(long)]
    pub out: PathBuf,
}

/// Why a trace could not be generated.
#[derive(Debug, Error)]
pub enum GenError {
    /// An option is out of range.
    #[error("--{flag} {value}: {rule}")]
    BadOption {
        /// The option.
        flag: &'static str,
        /// Its value.
        value: String,
        /// The rule.
        rule: &'static str,
    },
    /// The output could not be written.
    #[error("{path}: cannot write: {source}; check the directory exists and is writable")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// One node's character, drawn once from the seed.
struct NodeShape {
    night_pct: f64,
    amplitude_pct: f64,
    peak_hour: f64,
    weekend_factor: f64,
    noise_pct: f64,
    cyclic: bool,
    gpu: bool,
}

impl NodeShape {
    fn draw(rng: &mut StdRng, args: &Args) -> Self {
        Self {
            night_pct: rng.random_range(3.0..15.0),
            amplitude_pct: rng.random_range(35.0..70.0),
            peak_hour: rng.random_range(11.0..17.0),
            weekend_factor: rng.random_range(0.2..0.7),
            noise_pct: rng.random_range(2.0..5.0),
            cyclic: rng.random::<f64>() >= args.acyclic_share,
            gpu: rng.random::<f64>() < args.gpu_share,
        }
    }
}

/// The busy-hours shape: 1 at the peak hour, falling to 0 twelve hours away,
/// ((1 + cos(2π(h − peak)/24)) / 2)², dimensionless.
fn day_shape(hour: f64, peak_hour: f64) -> f64 {
    let c = (1.0 + (std::f64::consts::TAU * (hour - peak_hour) / 24.0).cos()) / 2.0;
    c * c
}

/// Checks the options, then writes the trace.
pub fn run(args: &Args) -> Result<(), GenError> {
    let bad = |flag, value: String, rule| Err(GenError::BadOption { flag, value, rule });
    if args.nodes == 0 {
        return bad("nodes", args.nodes.to_string(), "must be at least 1");
    }
    if args.days == 0 {
        return bad("days", args.days.to_string(), "must be at least 1");
    }
    if !(1..=86_400).contains(&args.step_s) {
        return bad(
            "step-s",
            args.step_s.to_string(),
            "must be between 1 and 86400 seconds",
        );
    }
    for (flag, v) in [
        ("gpu-share", args.gpu_share),
        ("acyclic-share", args.acyclic_share),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return bad(flag, v.to_string(), "must be a share between 0 and 1");
        }
    }
    let write_err = |source| GenError::Write {
        path: args.out.clone(),
        source,
    };
    let file = File::create(&args.out).map_err(write_err)?;
    let mut out: Box<dyn Write> = if is_gz(&args.out) {
        Box::new(BufWriter::new(GzEncoder::new(file, Compression::default())))
    } else {
        Box::new(BufWriter::new(file))
    };
    write_trace(args, &mut out).map_err(write_err)?;
    out.flush().map_err(write_err)
}

fn is_gz(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// Writes the CSV: per node, a day/night cycle with its own phase and amplitude,
/// quieter weekends, AR(1) noise and occasional bursts (or a wandering level for
/// acyclic nodes); memory follows CPU slowly; GPU nodes run GPU-heavy busy hours.
fn write_trace(args: &Args, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "node,time_s,cpu,mem,gpu")?;
    let samples = u64::from(args.days) * 86_400 / u64::from(args.step_s);
    let std_normal = Normal::new(0.0, 1.0).expect("unit normal is valid");
    let step_h = f64::from(args.step_s) / 3_600.0;
    for node in 0..args.nodes {
        let mut rng = StdRng::seed_from_u64(args.seed ^ (u64::from(node) << 32));
        let shape = NodeShape::draw(&mut rng, args);
        let persistence = 0.9f64.powf(step_h * 12.0);
        let (mut noise, mut wander, mut mem) = (0.0, 30.0, 40.0);
        let mut burst_left_h = 0.0;
        let mut burst_pct = 0.0;
        for i in 0..samples {
            let t_s = args.start_s + (i * u64::from(args.step_s)) as i64;
            let hour = t_s.rem_euclid(86_400) as f64 / 3_600.0;
            let weekday = (t_s.div_euclid(86_400) + 3).rem_euclid(7);
            let weekend = weekday >= 5;
            noise = persistence * noise
                + (1.0 - persistence * persistence).sqrt()
                    * shape.noise_pct
                    * std_normal.sample(&mut rng);
            if burst_left_h <= 0.0 && rng.random::<f64>() < step_h / 8.0 {
                burst_left_h = rng.random_range(0.2..1.0);
                burst_pct = rng.random_range(20.0..50.0);
            }
            let burst = if burst_left_h > 0.0 {
                burst_left_h -= step_h;
                burst_pct
            } else {
                0.0
            };
            let base = if shape.cyclic {
                let amp = shape.amplitude_pct * if weekend { shape.weekend_factor } else { 1.0 };
                shape.night_pct + amp * day_shape(hour, shape.peak_hour)
            } else {
                wander += 0.02 * step_h * 12.0 * (35.0 - wander)
                    + 3.0 * step_h.sqrt() * std_normal.sample(&mut rng);
                wander
            };
            let cpu = (base + noise + burst).clamp(0.0, 100.0);
            mem += 0.05 * (30.0 + 0.5 * cpu - mem);
            let gpu = shape
                .gpu
                .then(|| (1.1 * (base - shape.night_pct) + noise + burst).clamp(0.0, 100.0));
            match gpu {
                Some(g) => writeln!(out, "node-{node:03},{t_s},{cpu:.2},{mem:.2},{g:.2}")?,
                None => writeln!(out, "node-{node:03},{t_s},{cpu:.2},{mem:.2},")?,
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Format, read_trace};

    fn args(dir: &Path, name: &str, seed: u64) -> Args {
        Args {
            nodes: 3,
            days: 2,
            seed,
            step_s: 600,
            start_s: 1_704_067_200,
            gpu_share: 0.5,
            acyclic_share: 0.0,
            out: dir.join(name),
        }
    }

    #[test]
    fn deterministic_per_seed_and_readable_as_tidemill_format() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            args(dir.path(), "a.csv.gz", 7),
            args(dir.path(), "b.csv.gz", 7),
            args(dir.path(), "c.csv.gz", 8),
        );
        for x in [&a, &b, &c] {
            run(x).unwrap();
        }
        let read = |p: &Path| read_trace(p, &Format::Tidemill.mapping()).unwrap();
        assert_eq!(read(&a.out), read(&b.out));
        assert_ne!(read(&a.out), read(&c.out));
        let series = read(&a.out);
        assert_eq!(series.len(), 3);
        assert_eq!(series[0].points.len(), 2 * 144);
        assert!(
            series
                .iter()
                .flat_map(|s| &s.points)
                .all(|p| (0.0..=100.0).contains(&p.1))
        );
    }

    #[test]
    fn days_are_busier_than_nights() {
        let dir = tempfile::tempdir().unwrap();
        let a = args(dir.path(), "t.csv", 3);
        run(&a).unwrap();
        for s in read_trace(&a.out, &Format::Tidemill.mapping()).unwrap() {
            let mean_at = |lo: f64, hi: f64| {
                let v: Vec<f64> = s
                    .points
                    .iter()
                    .filter(|p| {
                        (lo..hi).contains(&((p.0 / 1000).rem_euclid(86_400) as f64 / 3600.0))
                    })
                    .map(|p| p.1)
                    .collect();
                v.iter().sum::<f64>() / v.len() as f64
            };
            assert!(mean_at(12.0, 16.0) > mean_at(0.0, 4.0) + 15.0, "{}", s.node);
        }
    }

    #[test]
    fn rejects_bad_options_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args(dir.path(), "t.csv", 1);
        a.gpu_share = 2.0;
        assert!(
            run(&a)
                .unwrap_err()
                .to_string()
                .starts_with("--gpu-share 2")
        );
        let mut a = args(Path::new("/nonexistent-dir"), "t.csv", 1);
        a.nodes = 1;
        assert!(run(&a).unwrap_err().to_string().contains("cannot write"));
    }
}
