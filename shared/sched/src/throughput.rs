//! Measured training throughput per device class, in ElasticFlow's CSV format
//! (one file per model; rows are global batch sizes, columns GPU counts,
//! cells iterations/s), with documented fallbacks for what was not measured.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Why a throughput table could not be read.
#[derive(Debug, Error)]
pub enum ThroughputError {
    /// The directory or a file in it could not be read.
    #[error("cannot read throughput table {path}: {source}; check the path and permissions")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A cell is not what ElasticFlow's format expects.
    #[error(
        "{file}:{line}:{column}: {what} (got {value:?}); expected ElasticFlow format: header `global_batch_size,1,2,4,...`, then one row per batch size with iterations/s per GPU count"
    )]
    Cell {
        /// The file (or name given for inline text).
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The offending text.
        value: String,
        /// What is wrong with it.
        what: &'static str,
    },
    /// The file has a header but no measured row.
    #[error("{file}: no measured row; add at least one `batch,iters_per_s,...` line")]
    Empty {
        /// The file.
        file: String,
    },
}

/// One model's measured (or estimated) throughput on one device class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelTable {
    /// Global batch sizes of the rows, ascending.
    pub batches: Vec<u32>,
    /// GPU counts of the columns, ascending.
    pub gpus: Vec<u32>,
    /// Iterations/s per row and column; `None` where not measured (empty, 0 or `nan` in the file).
    pub iters_per_s: Vec<Vec<Option<f64>>>,
    /// Why the numbers are an estimate rather than a measurement of this class, if they are.
    pub estimated_from: Option<String>,
}

/// A throughput answer and whether any fallback was involved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Iterations (global-batch steps) per second.
    pub iters_per_s: f64,
    /// True when a fallback (other class, other batch size, interpolation) produced it.
    pub estimated: bool,
}

/// Throughput tables for every device class the scheduler knows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThroughputTables {
    /// Class (e.g. `A100`) → model name → table.
    pub classes: BTreeMap<String, BTreeMap<String, ModelTable>>,
}

impl ModelTable {
    /// Parses one ElasticFlow CSV; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<ModelTable, ThroughputError> {
        let cell_err = |line, column, value: &str, what| ThroughputError::Cell {
            file: file.to_string(),
            line,
            column,
            value: value.to_string(),
            what,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (hline, header) = lines.next().ok_or_else(|| ThroughputError::Empty {
            file: file.to_string(),
        })?;
        let mut gpus = Vec::new();
        for (c, cell) in header.split(',').enumerate().skip(1) {
            let g: u32 = cell.trim().parse().map_err(|_| {
                cell_err(
                    hline + 1,
                    c + 1,
                    cell,
                    "GPU count is not a positive integer",
                )
            })?;
            if g == 0 || gpus.last().is_some_and(|&p| p >= g) {
                return Err(cell_err(
                    hline + 1,
                    c + 1,
                    cell,
                    "GPU counts must be positive and ascending",
                ));
            }
            gpus.push(g);
        }
        if gpus.is_empty() {
            return Err(cell_err(
                hline + 1,
                1,
                header,
                "header has no GPU-count columns",
            ));
        }
        let mut rows: Vec<(u32, Vec<Option<f64>>)> = Vec::new();
        for (i, line) in lines {
            let cells: Vec<&str> = line.split(',').collect();
            if cells.len() != gpus.len() + 1 {
                return Err(cell_err(
                    i + 1,
                    cells.len().min(gpus.len() + 1),
                    line,
                    "row length differs from the header",
                ));
            }
            let batch: u32 = cells[0]
                .trim()
                .parse()
                .ok()
                .filter(|&b| b > 0)
                .ok_or_else(|| {
                    cell_err(i + 1, 1, cells[0], "batch size is not a positive integer")
                })?;
            let mut vals = Vec::with_capacity(gpus.len());
            for (c, cell) in cells.iter().enumerate().skip(1) {
                if cell.trim().is_empty() {
                    vals.push(None);
                    continue;
                }
                let v: f64 = cell
                    .trim()
                    .parse()
                    .map_err(|_| cell_err(i + 1, c + 1, cell, "throughput is not a number"))?;
                if v < 0.0 {
                    return Err(cell_err(i + 1, c + 1, cell, "throughput is negative"));
                }
                vals.push((v.is_finite() && v > 0.0).then_some(v));
            }
            if vals.iter().any(Option::is_some) {
                rows.push((batch, vals));
            }
        }
        if rows.is_empty() {
            return Err(ThroughputError::Empty {
                file: file.to_string(),
            });
        }
        rows.sort_by_key(|r| r.0);
        Ok(ModelTable {
            batches: rows.iter().map(|r| r.0).collect(),
            gpus,
            iters_per_s: rows.into_iter().map(|r| r.1).collect(),
            estimated_from: None,
        })
    }

    /// Iterations/s at global batch `batch` on `workers` devices.
    ///
    /// Fallbacks (each marks the answer estimated): a batch size without a row
    /// uses the nearest row (by ratio) at constant samples/s,
    /// `it/s(b) = it/s(b_row) × b_row / b`; a worker count between measured
    /// columns interpolates linearly; above the largest measured column the
    /// largest is used (no further speed-up); below the smallest it scales linearly.
    pub fn lookup(&self, batch: u32, workers: u32) -> Option<Throughput> {
        if workers == 0 || batch == 0 {
            return None;
        }
        let exact = self.batches.partition_point(|&b| b < batch);
        let row = if self.batches.get(exact) == Some(&batch) {
            exact
        } else {
            (0..self.batches.len()).min_by(|&a, &b| {
                let d = |i: usize| (f64::from(self.batches[i]) / f64::from(batch)).ln().abs();
                d(a).total_cmp(&d(b))
            })?
        };
        let vals = &self.iters_per_s[row];
        let measured = || {
            self.gpus
                .iter()
                .zip(vals)
                .filter_map(|(&g, v)| v.map(|v| (g, v)))
        };
        let mut below = None;
        let mut above = None;
        for (g, v) in measured() {
            if g <= workers {
                below = Some((g, v));
            } else if above.is_none() {
                above = Some((g, v));
            }
        }
        let (ips, interpolated) = match (below, above) {
            (Some((g, v)), _) if g == workers => (v, false),
            (Some((g0, v0)), Some((g1, v1))) => {
                let f = f64::from(workers - g0) / f64::from(g1 - g0);
                (v0 + f * (v1 - v0), true)
            }
            (Some((_, v)), None) => (v, true),
            (None, Some((g, v))) => (v * f64::from(workers) / f64::from(g), true),
            (None, None) => return None,
        };
        let row_batch = self.batches[row];
        Some(Throughput {
            iters_per_s: ips * f64::from(row_batch) / f64::from(batch),
            estimated: interpolated || row_batch != batch || self.estimated_from.is_some(),
        })
    }

    /// Best single-device samples/s over all rows; the basis of cross-class ratios.
    fn samples_per_s_one_device(&self) -> Option<f64> {
        self.batches
            .iter()
            .filter_map(|&b| self.lookup(b, 1).map(|t| t.iters_per_s * f64::from(b)))
            .reduce(f64::max)
    }

    fn scaled(&self, ratio: f64, why: String) -> ModelTable {
        ModelTable {
            iters_per_s: self
                .iters_per_s
                .iter()
                .map(|r| r.iter().map(|v| v.map(|v| v * ratio)).collect())
                .collect(),
            estimated_from: Some(why),
            ..self.clone()
        }
    }
}

impl ThroughputTables {
    /// Adds one model's table for a device class from CSV text; `file` names it in errors.
    pub fn insert_csv(
        &mut self,
        class: &str,
        model: &str,
        file: &str,
        text: &str,
    ) -> Result<(), ThroughputError> {
        let table = ModelTable::parse(file, text)?;
        self.classes
            .entry(class.to_string())
            .or_default()
            .insert(model.to_string(), table);
        Ok(())
    }

    /// Loads every `<model>.csv` in `dir` as the tables of `class`.
    pub fn load_dir(&mut self, class: &str, dir: &Path) -> Result<(), ThroughputError> {
        let io = |source| ThroughputError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(io)?;
        files.retain(|p| p.extension().is_some_and(|e| e == "csv"));
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(|source| ThroughputError::Io {
                path: path.clone(),
                source,
            })?;
            let model = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.insert_csv(class, &model, &path.display().to_string(), &text)?;
        }
        Ok(())
    }

    /// Fills models missing from a class with estimates from another class.
    ///
    /// Fallback: for target class C and source class D, the ratio is the median,
    /// over models measured in both, of `sps₁(C, m) / sps₁(D, m)` where `sps₁` is
    /// the best single-device samples/s of the model; D is the class that has the
    /// model and shares the most measured models with C (ties by name). The
    /// estimate is D's table × ratio, marked in `estimated_from`. Classes that
    /// share no measured model with any class holding it stay without it.
    pub fn fill_missing(&mut self) {
        let measured = |t: &ModelTable| t.estimated_from.is_none();
        let mut additions = Vec::new();
        for (c, c_models) in &self.classes {
            let all_models: std::collections::BTreeSet<&String> =
                self.classes.values().flat_map(|m| m.keys()).collect();
            for model in all_models {
                if c_models.contains_key(model) {
                    continue;
                }
                let best = self
                    .classes
                    .iter()
                    .filter(|(d, dm)| *d != c && dm.get(model).is_some_and(measured))
                    .map(|(d, dm)| {
                        let mut ratios: Vec<f64> = c_models
                            .iter()
                            .filter(|(_, t)| measured(t))
                            .filter_map(|(m, t)| {
                                let other = dm.get(m).filter(|t| measured(t))?;
                                Some(
                                    t.samples_per_s_one_device()?
                                        / other.samples_per_s_one_device()?,
                                )
                            })
                            .collect();
                        ratios.sort_by(f64::total_cmp);
                        (d, ratios)
                    })
                    .filter(|(_, r)| !r.is_empty())
                    .max_by(|a, b| a.1.len().cmp(&b.1.len()).then_with(|| b.0.cmp(a.0)));
                if let Some((d, ratios)) = best {
                    let n = ratios.len();
                    let median = if n % 2 == 1 {
                        ratios[n / 2]
                    } else {
                        (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
                    };
                    let why = format!(
                        "{d} table × {median:.4}, the median {c}/{d} single-device samples/s ratio over {n} model(s) measured in both"
                    );
                    let table = self.classes[d][model].scaled(median, why);
                    additions.push((c.clone(), model.clone(), table));
                }
            }
        }
        for (c, m, t) in additions {
            self.classes.entry(c).or_default().insert(m, t);
        }
    }

    /// The table of `model` on `class`, measured or estimated.
    pub fn model(&self, class: &str, model: &str) -> Option<&ModelTable> {
        self.classes.get(class)?.get(model)
    }

    /// Iterations/s of `model` at global batch `batch` on `workers` devices of `class`.
    pub fn lookup(&self, class: &str, model: &str, batch: u32, workers: u32) -> Option<Throughput> {
        self.model(class, model)?.lookup(batch, workers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A100_BERT: &str = "global_batch_size,1,2,4\n64,6.0,8.0,10.0\n128,3.5,5.5,8.5\n";
    const A100_R50: &str = "global_batch_size,1,2,4,8\n64,6.8,11.8,18.3,0\n";
    const T4_BERT: &str = "global_batch_size,1,2,4\n64,1.5,2.0,nan\n";
    const T4_DS2: &str = "global_batch_size,1,2\n32,1.0,1.8\n";
    const A100_DS2: &str = "global_batch_size,1,2\n32,3.0,5.4\n";

    fn tables() -> ThroughputTables {
        let mut t = ThroughputTables::default();
        t.insert_csv("A100", "bert", "a/bert.csv", A100_BERT)
            .unwrap();
        t.insert_csv("A100", "resnet50", "a/r50.csv", A100_R50)
            .unwrap();
        t.insert_csv("A100", "deepspeech2", "a/ds2.csv", A100_DS2)
            .unwrap();
        t.insert_csv("T4", "bert", "t/bert.csv", T4_BERT).unwrap();
        t.insert_csv("T4", "deepspeech2", "t/ds2.csv", T4_DS2)
            .unwrap();
        t
    }

    #[test]
    fn exact_interpolated_and_capped_lookups() {
        let t = tables();
        let exact = t.lookup("A100", "bert", 64, 2).unwrap();
        assert_eq!(
            exact,
            Throughput {
                iters_per_s: 8.0,
                estimated: false
            }
        );
        // 3 workers: halfway between 8.0 and 10.0
        let mid = t.lookup("A100", "bert", 64, 3).unwrap();
        assert!((mid.iters_per_s - 9.0).abs() < 1e-12 && mid.estimated);
        // 8 GPUs unmeasured (0): stays at the 4-GPU value
        assert_eq!(
            t.lookup("A100", "resnet50", 64, 8).unwrap().iters_per_s,
            18.3
        );
        // batch 256 has no row: nearest (128) at constant samples/s, 3.5 × 128/256
        let b = t.lookup("A100", "bert", 256, 1).unwrap();
        assert!((b.iters_per_s - 1.75).abs() < 1e-12 && b.estimated);
        // T4 bert at 4 GPUs is nan: falls back to the 2-GPU value
        assert_eq!(t.lookup("T4", "bert", 64, 4).unwrap().iters_per_s, 2.0);
    }

    #[test]
    fn missing_model_uses_the_median_class_ratio() {
        let mut t = tables();
        assert!(t.lookup("T4", "resnet50", 64, 1).is_none());
        t.fill_missing();
        // bert: T4/A100 = (1.5·64)/(6.0·64... best row: max(384, 448)=448) = 96/448
        // deepspeech2: 32/96. Median of two = mean.
        let ratio = (96.0 / 448.0 + 32.0 / 96.0) / 2.0;
        let est = t.lookup("T4", "resnet50", 64, 1).unwrap();
        assert!((est.iters_per_s - 6.8 * ratio).abs() < 1e-9, "{est:?}");
        assert!(est.estimated);
        let why = t
            .model("T4", "resnet50")
            .unwrap()
            .estimated_from
            .as_deref()
            .unwrap();
        assert!(why.contains("median") && why.contains("2 model"), "{why}");
        // Measured tables are untouched.
        assert!(!t.lookup("T4", "bert", 64, 1).unwrap().estimated);
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let err = ModelTable::parse("x.csv", "global_batch_size,1,2\n64,1.0,fast\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("x.csv:2:3:") && msg.contains("not a number"),
            "{msg}"
        );
        let err = ModelTable::parse("y.csv", "global_batch_size,1,1\n").unwrap_err();
        assert!(err.to_string().starts_with("y.csv:1:3:"), "{err}");
        let err = ModelTable::parse("z.csv", "global_batch_size,1\n64,0\n").unwrap_err();
        assert!(matches!(err, ThroughputError::Empty { .. }), "{err}");
        let err = ModelTable::parse("w.csv", "global_batch_size,1,2\n64,1.0\n").unwrap_err();
        assert!(err.to_string().contains("row length"), "{err}");
    }

    #[test]
    fn loads_the_real_elasticflow_tables() {
        let root = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/elasticflow"
        );
        let mut t = ThroughputTables::default();
        t.load_dir("A100", &Path::new(root).join("throughputs_A100"))
            .unwrap();
        t.load_dir("T4", &Path::new(root).join("throughputs_T4"))
            .unwrap();
        let r50 = t.lookup("A100", "resnet50", 64, 1).unwrap();
        assert!((r50.iters_per_s - 6.8429775823889685).abs() < 1e-12 && !r50.estimated);
        assert!(t.lookup("T4", "resnet50", 64, 1).is_none());
        t.fill_missing();
        let est = t.lookup("T4", "resnet50", 64, 1).unwrap();
        assert!(
            est.estimated && est.iters_per_s < r50.iters_per_s,
            "{est:?}"
        );
        assert!(t.lookup("A100", "yolov3", 64, 1).unwrap().estimated);
        let missing = ThroughputTables::default().load_dir("X", Path::new("/nonexistent/dir"));
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("/nonexistent/dir")
        );
    }
}
