//! Replays one node of a utilisation trace as if it were the host, for tests,
//! demos and posing as a box with a known tidal pattern.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a trace could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file could not be read.
    #[error("cannot read trace {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A row is not `node,time_s,cpu,mem,gpu` with numbers in range.
    #[error(
        "trace {path}, line {line}: {problem}; rows must be node,time_s,cpu,mem,gpu with percentages 0-100"
    )]
    Row {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: u64,
        /// What is wrong.
        problem: String,
    },
    /// The node has no rows.
    #[error("trace {path} has no rows for node {node:?}; nodes in it include: {known}")]
    NoSuchNode {
        /// The file.
        path: PathBuf,
        /// The node asked for.
        node: String,
        /// Some nodes that exist.
        known: String,
    },
}

/// One utilisation reading from the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// Seconds since the trace's origin.
    pub time_s: f64,
    /// CPU percent.
    pub cpu: f32,
    /// Memory percent.
    pub mem: f32,
    /// GPU percent, if the trace has it.
    pub gpu: Option<f32>,
}

/// One node's readings, replayed in a loop.
#[derive(Debug, Clone)]
pub struct Replay {
    readings: Vec<Reading>,
    period_s: f64,
}

#[derive(serde::Deserialize)]
struct Row {
    node: String,
    time_s: f64,
    cpu: f32,
    mem: f32,
    gpu: Option<f32>,
}

impl Replay {
    /// Loads `node`'s rows from a CSV file, gzip-compressed or not.
    pub fn load(path: &Path, node: &str) -> Result<Self, ReplayError> {
        let io = |source| ReplayError::Io {
            path: path.to_owned(),
            source,
        };
        let mut raw = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_end(&mut raw))
            .map_err(io)?;
        let text: Box<dyn Read> = if raw.starts_with(&[0x1f, 0x8b]) {
            Box::new(flate2::read::GzDecoder::new(&raw[..]))
        } else {
            Box::new(&raw[..])
        };
        let mut reader = csv::Reader::from_reader(text);
        let mut readings = Vec::new();
        let mut others = std::collections::BTreeSet::new();
        let row_err = |line: u64, problem: String| ReplayError::Row {
            path: path.to_owned(),
            line,
            problem,
        };
        let headers = reader
            .headers()
            .map_err(|e| row_err(1, e.to_string()))?
            .clone();
        let mut record = csv::StringRecord::new();
        loop {
            let more = reader
                .read_record(&mut record)
                .map_err(|e| row_err(e.position().map_or(0, |p| p.line()), e.to_string()))?;
            if !more {
                break;
            }
            let line = record.position().map_or(0, |p| p.line());
            let row: Row = record
                .deserialize(Some(&headers))
                .map_err(|e| row_err(line, e.to_string()))?;
            if row.node != node {
                if others.len() < 5 {
                    others.insert(row.node);
                }
                continue;
            }
            for (name, v) in [
                ("cpu", Some(row.cpu)),
                ("mem", Some(row.mem)),
                ("gpu", row.gpu),
            ] {
                if let Some(v) = v.filter(|v| !(0.0..=100.0).contains(v)) {
                    return Err(row_err(line, format!("{name} = {v} is outside 0-100")));
                }
            }
            if !row.time_s.is_finite() {
                return Err(row_err(
                    line,
                    format!("time_s = {} is not a number", row.time_s),
                ));
            }
            readings.push(Reading {
                time_s: row.time_s,
                cpu: row.cpu,
                mem: row.mem,
                gpu: row.gpu,
            });
        }
        if readings.is_empty() {
            return Err(ReplayError::NoSuchNode {
                path: path.to_owned(),
                node: node.to_owned(),
                known: others.into_iter().collect::<Vec<_>>().join(", "),
            });
        }
        Ok(Replay::new(readings))
    }

    /// A replay of the given readings, which need not be sorted.
    pub fn new(mut readings: Vec<Reading>) -> Self {
        readings.sort_by(|a, b| a.time_s.total_cmp(&b.time_s));
        let first = readings[0].time_s;
        for r in &mut readings {
            r.time_s -= first;
        }
        let n = readings.len();
        let last_gap = if n > 1 {
            readings[n - 1].time_s - readings[n - 2].time_s
        } else {
            1.0
        };
        Replay {
            period_s: readings[n - 1].time_s + last_gap.max(f64::EPSILON),
            readings,
        }
    }

    /// The reading in force `elapsed_s` seconds into the replay: the latest row at
    /// or before `elapsed_s mod period`, where the period is the trace's span plus
    /// its last sampling gap, so the replay cycles seamlessly.
    pub fn at(&self, elapsed_s: f64) -> Reading {
        let t = elapsed_s.rem_euclid(self.period_s);
        let idx = self.readings.partition_point(|r| r.time_s <= t);
        self.readings[idx.saturating_sub(1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const TRACE: &str =
        "node,time_s,cpu,mem,gpu\na,100,10,20,\nb,100,90,90,5\na,160,30,40,50\na,130,20,30,\n";

    #[test]
    fn replays_one_node_in_time_order_and_cycles() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(TRACE.as_bytes()).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let replay = Replay::load(&path, "a").unwrap();
        assert_eq!(replay.at(0.0).cpu, 10.0);
        assert_eq!(replay.at(29.9).cpu, 10.0);
        assert_eq!(replay.at(30.0).cpu, 20.0);
        assert_eq!(replay.at(60.0).gpu, Some(50.0));
        // Period = span 60 s + last gap 30 s.
        assert_eq!(replay.at(90.0).cpu, 10.0);
        assert_eq!(replay.at(125.0).cpu, 20.0);
    }

    #[test]
    fn names_the_missing_node_and_the_known_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, TRACE).unwrap();
        let err = Replay::load(&path, "zz").unwrap_err().to_string();
        assert!(err.contains("\"zz\"") && err.contains("a, b"), "{err}");
    }

    #[test]
    fn rejects_out_of_range_values_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, "node,time_s,cpu,mem,gpu\na,0,10,20,\na,1,150,20,\n").unwrap();
        let err = Replay::load(&path, "a").unwrap_err().to_string();
        assert!(err.contains("line 3") && err.contains("cpu = 150"), "{err}");
    }
}
