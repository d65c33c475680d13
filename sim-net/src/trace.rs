//! Reading utilisation traces: CSV (optionally gzip), a column mapping (or a
//! preset for a known data set) and a value scale, into one series per node.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use clap::{Args as ClapArgs, ValueEnum};
use flate2::read::MultiGzDecoder;
use thiserror::Error;

/// Known trace layouts; each fills in the column mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Alibaba cluster-trace-v2018 machine_usage: machine_id, time_stamp, cpu_util_percent.
    #[value(name = "alibaba-2018")]
    Alibaba2018,
    /// Azure Public Dataset V1 VM CPU: vm_id, t_seconds, avg_cpu.
    #[value(name = "azure-2017")]
    Azure2017,
    /// Bitbrains GWA-T-12 Rnd: vm_id, timestamp, cpu_usage_pct.
    Bitbrains,
    /// C2TM fog cellular traffic: fog_id, unix_ts, users (scaled to each series' max).
    C2tm,
    /// Alibaba 2018 datacenter aggregate (one series): t_seconds, cpu_util_percent.
    #[value(name = "alibaba-2018-dc")]
    Alibaba2018Dc,
    /// Azure V2 datacenter aggregate (one series): t_seconds, cpu_usage in cores,
    /// scaled to its max.
    #[value(name = "azure-v2-dc")]
    AzureV2Dc,
    /// tidemill's own format: node, time_s, cpu, mem, gpu (percent; gpu may be empty).
    Tidemill,
}

/// How raw values become percentages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ValueScale {
    /// Already percent (0-100).
    Percent,
    /// A fraction (0-1): multiplied by 100.
    Fraction,
    /// Any non-negative volume: each series as a percentage of its own maximum.
    Max,
}

/// Which columns hold what, and how values are scaled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Node id column; `None` reads the whole file as one series named after it.
    pub node_col: Option<String>,
    /// Time column, seconds (absolute or relative).
    pub time_col: String,
    /// Value column.
    pub value_col: String,
    /// Value scale.
    pub scale: ValueScale,
}

impl Format {
    /// The mapping this preset stands for.
    pub fn mapping(self) -> Mapping {
        let (node, time, value, scale) = match self {
            Format::Alibaba2018 => (
                Some("machine_id"),
                "time_stamp",
                "cpu_util_percent",
                ValueScale::Percent,
            ),
            Format::Azure2017 => (Some("vm_id"), "t_seconds", "avg_cpu", ValueScale::Percent),
            Format::Bitbrains => (
                Some("vm_id"),
                "timestamp",
                "cpu_usage_pct",
                ValueScale::Percent,
            ),
            Format::C2tm => (Some("fog_id"), "unix_ts", "users", ValueScale::Max),
            Format::Alibaba2018Dc => (None, "t_seconds", "cpu_util_percent", ValueScale::Percent),
            Format::AzureV2Dc => (None, "t_seconds", "cpu_usage", ValueScale::Max),
            Format::Tidemill => (Some("node"), "time_s", "cpu", ValueScale::Percent),
        };
        Mapping {
            node_col: node.map(str::to_string),
            time_col: time.to_string(),
            value_col: value.to_string(),
            scale,
        }
    }
}

/// The column-mapping flags shared by every subcommand that reads a
/// utilisation trace: a preset, and per-column overrides.
#[derive(Debug, Clone, Default, ClapArgs)]
pub struct MappingFlags {
    /// Preset column mapping for a known data set; the column flags override it.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Column with the node id (omit, with no preset, to read one series).
    #[arg(long)]
    pub node_col: Option<String>,
    /// Column with the time in seconds (absolute or relative).
    #[arg(long)]
    pub time_col: Option<String>,
    /// Column with the utilisation value.
    #[arg(long)]
    pub value_col: Option<String>,
    /// How values become percent.
    #[arg(long, value_enum)]
    pub value_scale: Option<ValueScale>,
}

impl MappingFlags {
    /// The mapping for `trace`: the flags over the preset; `default` stands in
    /// for `--format` when none was given (e.g. from a config file).
    pub fn resolve(&self, trace: &Path, default: Option<Format>) -> Result<Mapping, TraceError> {
        let preset = self.format.or(default).map(Format::mapping);
        let missing = |flag| TraceError::MissingMapping {
            path: trace.to_path_buf(),
            flag,
        };
        Ok(Mapping {
            node_col: self
                .node_col
                .clone()
                .or_else(|| preset.as_ref().and_then(|p| p.node_col.clone())),
            time_col: self
                .time_col
                .clone()
                .or_else(|| preset.as_ref().map(|p| p.time_col.clone()))
                .ok_or_else(|| missing("time-col"))?,
            value_col: self
                .value_col
                .clone()
                .or_else(|| preset.as_ref().map(|p| p.value_col.clone()))
                .ok_or_else(|| missing("value-col"))?,
            scale: self
                .value_scale
                .or(preset.as_ref().map(|p| p.scale))
                .unwrap_or(ValueScale::Percent),
        })
    }
}

/// One node's samples: (Unix ms, percent), sorted by time.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Node id as in the trace.
    pub node: String,
    /// Samples, oldest first.
    pub points: Vec<(i64, f64)>,
}

/// A trace that could not be read.
#[derive(Debug, Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{path}: cannot read: {source}; check the path and permissions")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A mapped column is not in the header.
    #[error(
        "{path}: line 1: no column `{column}` (from {flag}); the header has: {header}; pass {flag} with one of these or pick another --format"
    )]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The missing column.
        column: String,
        /// The flag that named it.
        flag: &'static str,
        /// The header's columns, comma-separated.
        header: String,
    },
    /// A cell that should be a number is not.
    #[error(
        "{path}: line {line}: column `{column}`: `{value}` is not a number; fix the row or map {flag} to a numeric column"
    )]
    BadNumber {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The column.
        column: String,
        /// The cell.
        value: String,
        /// The flag that mapped the column.
        flag: &'static str,
    },
    /// The CSV itself is malformed (e.g. a row with too few fields).
    #[error(
        "{path}: line {line}: malformed CSV: {source}; every row needs as many fields as the header"
    )]
    Csv {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The parser's error.
        source: csv::Error,
    },
    /// A column mapping is incomplete.
    #[error("{path}: no --{flag} given; pass --format with a preset or --{flag} COLUMN")]
    MissingMapping {
        /// The trace.
        path: PathBuf,
        /// The missing flag.
        flag: &'static str,
    },
    /// No usable rows.
    #[error("{path}: no rows with a value in column `{column}`; check --value-col")]
    Empty {
        /// The file.
        path: PathBuf,
        /// The value column.
        column: String,
    },
}

/// Opens `path`, decompressing gzip when the name ends in `.gz` or the content
/// starts with the gzip magic bytes.
pub fn open_maybe_gz(path: &Path) -> Result<Box<dyn Read>, std::io::Error> {
    let mut reader = BufReader::new(File::open(path)?);
    let magic = reader.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let gz_name = path.extension().is_some_and(|e| e == "gz");
    Ok(if magic || gz_name {
        Box::new(MultiGzDecoder::new(reader))
    } else {
        Box::new(reader)
    })
}

/// Reads every series of a trace. Rows whose value cell is empty are skipped
/// (e.g. a node without GPU); other unparsable cells are errors.
pub fn read_trace(path: &Path, mapping: &Mapping) -> Result<Vec<Series>, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut csv = csv::ReaderBuilder::new().from_reader(open_maybe_gz(path).map_err(io)?);
    let header = csv
        .headers()
        .map_err(|source| TraceError::Csv {
            path: path.to_path_buf(),
            line: 1,
            source,
        })?
        .clone();
    let find = |column: &str, flag: &'static str| {
        header
            .iter()
            .position(|h| h == column)
            .ok_or_else(|| TraceError::MissingColumn {
                path: path.to_path_buf(),
                column: column.to_string(),
                flag,
                header: header.iter().collect::<Vec<_>>().join(","),
            })
    };
    let node_idx = mapping
        .node_col
        .as_deref()
        .map(|c| find(c, "--node-col"))
        .transpose()?;
    let time_idx = find(&mapping.time_col, "--time-col")?;
    let value_idx = find(&mapping.value_col, "--value-col")?;
    let single = path
        .file_name()
        .map_or("series".into(), |n| n.to_string_lossy().into_owned());

    let mut index: HashMap<String, usize> = HashMap::new();
    let mut series: Vec<Series> = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        match csv.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(source) => {
                let line = source.position().map_or(0, |p| p.line());
                return Err(TraceError::Csv {
                    path: path.to_path_buf(),
                    line,
                    source,
                });
            }
        }
        let line = record.position().map_or(0, |p| p.line());
        let value_cell = record.get(value_idx).unwrap_or("").trim();
        if value_cell.is_empty() {
            continue;
        }
        let number = |idx: usize, column: &str, flag: &'static str| {
            let cell = record.get(idx).unwrap_or("").trim();
            cell.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| TraceError::BadNumber {
                    path: path.to_path_buf(),
                    line,
                    column: column.to_string(),
                    value: cell.to_string(),
                    flag,
                })
        };
        let t_s = number(time_idx, &mapping.time_col, "--time-col")?;
        let value = number(value_idx, &mapping.value_col, "--value-col")?;
        let node = node_idx.map_or(single.as_str(), |i| record.get(i).unwrap_or(""));
        let slot = match index.get(node) {
            Some(&i) => i,
            None => {
                index.insert(node.to_string(), series.len());
                series.push(Series {
                    node: node.to_string(),
                    points: Vec::new(),
                });
                series.len() - 1
            }
        };
        series[slot]
            .points
            .push(((t_s * 1_000.0).round() as i64, value));
    }
    if series.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
            column: mapping.value_col.clone(),
        });
    }
    for s in &mut series {
        s.points.sort_by_key(|p| p.0);
        scale(&mut s.points, mapping.scale);
    }
    Ok(series)
}

/// Applies `scale` to one series' values.
fn scale(points: &mut [(i64, f64)], scale: ValueScale) {
    let factor = match scale {
        ValueScale::Percent => return,
        ValueScale::Fraction => 100.0,
        ValueScale::Max => {
            let max = points.iter().map(|p| p.1).fold(0.0, f64::max);
            if max <= 0.0 {
                return;
            }
            100.0 / max
        }
    };
    for p in points {
        p.1 *= factor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(name: &str, body: &str, gz: bool) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let file = File::create(&path).unwrap();
        if gz {
            let mut enc = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
            enc.write_all(body.as_bytes()).unwrap();
            enc.finish().unwrap();
        } else {
            let mut file = file;
            file.write_all(body.as_bytes()).unwrap();
        }
        (dir, path)
    }

    const BODY: &str = "node,time_s,cpu,mem,gpu\nb,60,10,5,\na,120,30,5,1\na,60,20,5,\n";

    #[test]
    fn reads_groups_and_sorts_plain_and_gzip_by_magic() {
        for gz in [false, true] {
            let (_d, path) = write("t.csv", BODY, gz);
            let s = read_trace(&path, &Format::Tidemill.mapping()).unwrap();
            assert_eq!(s[0].node, "b");
            assert_eq!(s[1].points, vec![(60_000, 20.0), (120_000, 30.0)]);
        }
    }

    #[test]
    fn empty_cells_are_skipped_and_max_scales_per_series() {
        let (_d, path) = write("t.csv", BODY, false);
        let mapping = Mapping {
            value_col: "gpu".into(),
            scale: ValueScale::Max,
            ..Format::Tidemill.mapping()
        };
        let s = read_trace(&path, &mapping).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].points, vec![(120_000, 100.0)]);
    }

    #[test]
    fn single_series_without_node_column() {
        let (_d, path) = write(
            "dc.csv",
            "step,t_seconds,cpu_usage\n0,0,0.5\n1,300,0.25\n",
            false,
        );
        let mapping = Mapping {
            scale: ValueScale::Fraction,
            ..Format::AzureV2Dc.mapping()
        };
        let s = read_trace(&path, &mapping).unwrap();
        assert_eq!(s[0].node, "dc.csv");
        assert_eq!(s[0].points, vec![(0, 50.0), (300_000, 25.0)]);
    }

    #[test]
    fn errors_name_file_line_column_and_fix() {
        let (_d, path) = write("t.csv", "node,time_s,cpu\na,0,1\na,60,high\n", false);
        let msg = read_trace(&path, &Format::Tidemill.mapping())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("t.csv: line 3: column `cpu`: `high`"), "{msg}");
        assert!(msg.contains("--value-col"), "{msg}");

        let msg = read_trace(&path, &Format::Alibaba2018.mapping())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("no column `machine_id`") && msg.contains("node,time_s,cpu"),
            "{msg}"
        );

        let (_d2, ragged) = write("r.csv", "node,time_s,cpu\na,0\n", false);
        let msg = read_trace(&ragged, &Format::Tidemill.mapping())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("line 2") && msg.contains("malformed CSV"),
            "{msg}"
        );

        let missing = read_trace(Path::new("/nonexistent/x.csv"), &Format::Tidemill.mapping());
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("/nonexistent/x.csv: cannot read")
        );
    }
}
