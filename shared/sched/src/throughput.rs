//! Training throughput per device class: measured tables in ElasticFlow's CSV
//! format (one file per model; rows are global batch sizes, columns GPU
//! counts, cells iterations/s) or Sia's per-placement profiles ([`crate::sia`]),
//! classes defined as a per-model multiple of another, and documented
//! fallbacks for what was not measured. Every table says where its numbers
//! came from ([`TableSource`]), so a report can show it. The ElasticFlow
//! format is read in [`crate::elasticflow`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::elasticflow::Grid;
use crate::provenance::{ClassSources, TableSource};
use crate::sia::{self, SiaProfile};

/// Why a throughput table could not be read or built.
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
    /// A Sia profile file is not what Sia's format expects.
    #[error(
        "{file}:{line}: {problem}; expected a Sia placement profile (columns local_bsz, step_time, sync_time and placement, or num_nodes and num_replicas)"
    )]
    Sia {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// A Sia profile directory has no file for the cluster asked for.
    #[error(
        "{dir}: no `<model>__placements-{cluster}.csv` of a data-parallel model; clusters found there: {found}; pick one of them"
    )]
    SiaCluster {
        /// The directory.
        dir: PathBuf,
        /// The cluster asked for.
        cluster: String,
        /// The clusters that do have files, comma-separated.
        found: String,
    },
    /// A rate in a [`ModelRates`] is not a positive number.
    #[error(
        "throughput of model {model} on class {class}: {value} iterations/s at global batch {batch}; rates must be numbers above 0 and the batch at least 1"
    )]
    BadRate {
        /// The model.
        model: String,
        /// The device class.
        class: String,
        /// The rate given.
        value: f64,
        /// The global batch given.
        batch: u32,
    },
    /// A class cannot be built as a multiple of another.
    #[error("cannot build class {class} as lambda × {from}: {problem}")]
    Scale {
        /// The class being built.
        class: String,
        /// The class it scales.
        from: String,
        /// What is wrong and how to fix it.
        problem: String,
    },
}

/// One model's rates, one worker per device class, at one global batch: the
/// form of the coordinator's built-in `[scheduler.throughput.<model>]`
/// tables and of a job's own `[work.iters_per_s]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRates {
    /// The global batch the rates were measured at; other batches are read
    /// at the same samples/s.
    pub global_batch: u32,
    /// Where the numbers come from, shown wherever the table is reported.
    pub source: String,
    /// Device class → iterations/s on one device of it.
    pub iters_per_s: BTreeMap<String, f64>,
}

/// A per-model speed ratio to another class, with where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lambda {
    /// Speed as a share of the other class's (iterations/s ratio), > 0.
    pub ratio: f64,
    /// Where the ratio comes from (paper, benchmark, measurement).
    pub source: String,
}

/// The numbers of a [`ModelTable`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum TableData {
    /// An ElasticFlow-format grid.
    Grid(Grid),
    /// A Sia placement profile: any batch, step split into compute and sync.
    Sia(SiaProfile),
}

/// One model's throughput on one device class, and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelTable {
    /// The numbers.
    pub data: TableData,
    /// Where they came from.
    pub source: TableSource,
}

/// A throughput answer and whether any fallback was involved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Iterations (global-batch steps) per second.
    pub iters_per_s: f64,
    /// Seconds of each iteration the table measured as gradient sync over the
    /// class's own fabric; `None` when the table does not split its steps
    /// (ElasticFlow format). The cost model swaps it for its own link model
    /// across nodes ([`crate::cost::class_compute_s`]).
    pub sync_s: Option<f64>,
    /// True when a fallback (other class, other batch size, interpolation) produced it.
    pub estimated: bool,
}

/// A rate at one measured worker count, before the worker-count fallback.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    /// Iterations/s.
    pub(crate) iters_per_s: f64,
    /// Measured sync seconds per iteration, if the table splits it.
    pub(crate) sync_s: Option<f64>,
}

impl Rate {
    /// The share of the step spent syncing.
    fn sync_share(&self) -> Option<f64> {
        self.sync_s.map(|s| s * self.iters_per_s)
    }

    /// A rate of `iters_per_s` that syncs the same share of its step as `self`.
    fn with_share_of(iters_per_s: f64, share: Option<f64>) -> Rate {
        Rate {
            iters_per_s,
            sync_s: share.map(|s| s / iters_per_s),
        }
    }
}

/// The rate at `workers` from the nearest measured counts at or below it and above it.
///
/// Exact when `below` is at `workers`. Fallbacks (each marks the answer
/// estimated): between two measured counts iterations/s and the sync share of
/// the step interpolate linearly in the worker count; above the largest
/// measured count the largest is used (no further speed-up); below the
/// smallest, iterations/s scale linearly, `v × workers / g`, at the same sync share.
pub(crate) fn across_workers(
    workers: u32,
    below: Option<(u32, Rate)>,
    above: Option<(u32, Rate)>,
) -> Option<Throughput> {
    let (rate, estimated) = match (below, above) {
        (Some((g, r)), _) if g == workers => (r, false),
        (Some((g0, r0)), Some((g1, r1))) => {
            let f = f64::from(workers - g0) / f64::from(g1 - g0);
            let ips = r0.iters_per_s + f * (r1.iters_per_s - r0.iters_per_s);
            let share = r0
                .sync_share()
                .zip(r1.sync_share())
                .map(|(s0, s1)| s0 + f * (s1 - s0));
            (Rate::with_share_of(ips, share), true)
        }
        (Some((_, r)), None) => (r, true),
        (None, Some((g, r))) => (
            Rate::with_share_of(
                r.iters_per_s * f64::from(workers) / f64::from(g),
                r.sync_share(),
            ),
            true,
        ),
        (None, None) => return None,
    };
    Some(Throughput {
        iters_per_s: rate.iters_per_s,
        sync_s: rate.sync_s,
        estimated,
    })
}

/// Throughput tables for every device class the scheduler knows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThroughputTables {
    /// Class (e.g. `A100`) → model name → table.
    pub classes: BTreeMap<String, BTreeMap<String, ModelTable>>,
}

impl TableData {
    /// The same numbers on a device `ratio` times as fast.
    pub fn scaled(&self, ratio: f64) -> TableData {
        match self {
            TableData::Grid(g) => TableData::Grid(Grid {
                iters_per_s: g
                    .iters_per_s
                    .iter()
                    .map(|r| r.iter().map(|v| v.map(|v| v * ratio)).collect())
                    .collect(),
                ..g.clone()
            }),
            TableData::Sia(p) => TableData::Sia(p.scaled(ratio)),
        }
    }
}

impl ModelTable {
    /// A table with one cell: `iters_per_s` on one worker at global batch
    /// `batch`, given by `source` (other batches read at the same samples/s,
    /// more workers as [`across_workers`] reads them).
    pub fn one_worker(batch: u32, iters_per_s: f64, source: TableSource) -> ModelTable {
        ModelTable {
            data: TableData::Grid(Grid {
                batches: vec![batch],
                gpus: vec![1],
                iters_per_s: vec![vec![Some(iters_per_s)]],
            }),
            source,
        }
    }

    /// Parses one ElasticFlow CSV into a measured table; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<ModelTable, ThroughputError> {
        Ok(ModelTable {
            data: TableData::Grid(Grid::parse(file, text)?),
            source: TableSource::ElasticFlow {
                file: file.to_string(),
            },
        })
    }

    /// Iterations/s at global batch `batch` on `workers` devices, with the
    /// fallbacks of the table's format; an estimated table's answers are all
    /// marked estimated.
    pub fn lookup(&self, batch: u32, workers: u32) -> Option<Throughput> {
        if workers == 0 || batch == 0 {
            return None;
        }
        let t = match &self.data {
            TableData::Grid(g) => g.lookup(batch, workers)?,
            TableData::Sia(p) => p.lookup(batch, workers)?,
        };
        Some(Throughput {
            estimated: t.estimated || self.source.is_estimate(),
            ..t
        })
    }

    /// Why the numbers are an estimate rather than a measurement of this class, if they are.
    pub fn estimated_from(&self) -> Option<String> {
        self.source.estimate_text()
    }

    /// Best single-device samples/s over the batches measured on one device;
    /// the basis of cross-class ratios.
    fn samples_per_s_one_device(&self) -> Option<f64> {
        let batches = match &self.data {
            TableData::Grid(g) => g.batches.clone(),
            TableData::Sia(p) => p.one_device_batches(),
        };
        batches
            .into_iter()
            .filter_map(|b| self.lookup(b, 1).map(|t| t.iters_per_s * f64::from(b)))
            .reduce(f64::max)
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

    /// Adds `model`'s one-worker `rates` to every class that has no table
    /// for it yet, measured or estimated: tables loaded from files win, so
    /// the built-in defaults only fill gaps.
    pub fn insert_rates(&mut self, model: &str, rates: &ModelRates) -> Result<(), ThroughputError> {
        for (class, &value) in &rates.iters_per_s {
            if !(value.is_finite() && value > 0.0) || rates.global_batch == 0 {
                return Err(ThroughputError::BadRate {
                    model: model.to_string(),
                    class: class.clone(),
                    value,
                    batch: rates.global_batch,
                });
            }
            let table = ModelTable::one_worker(
                rates.global_batch,
                value,
                TableSource::Given {
                    by: rates.source.clone(),
                },
            );
            self.classes
                .entry(class.clone())
                .or_default()
                .entry(model.to_string())
                .or_insert(table);
        }
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

    /// Loads every data-parallel model's Sia profile of `cluster` in `dir` as
    /// the tables of `class` (see [`crate::sia`] for the files).
    pub fn load_sia(
        &mut self,
        class: &str,
        dir: &Path,
        cluster: &str,
    ) -> Result<(), ThroughputError> {
        let source = TableSource::Sia {
            dir: dir.display().to_string(),
            cluster: cluster.to_string(),
        };
        let models = self.classes.entry(class.to_string()).or_default();
        for (model, profile) in sia::read_dir(dir, cluster)? {
            models.insert(
                model,
                ModelTable {
                    data: TableData::Sia(profile),
                    source: source.clone(),
                },
            );
        }
        Ok(())
    }

    /// Builds `class` as `lambda_m` × class `from`'s measured table of each
    /// model `m` in `lambdas`: iterations/s times `ratio` (a Sia profile's
    /// step and sync seconds divided by it). The tables are marked estimated
    /// with the ratio and its source. Models without a lambda are left out.
    pub fn insert_scaled(
        &mut self,
        class: &str,
        from: &str,
        lambdas: &BTreeMap<String, Lambda>,
    ) -> Result<(), ThroughputError> {
        let fail = |problem: String| ThroughputError::Scale {
            class: class.to_string(),
            from: from.to_string(),
            problem,
        };
        let Some(base) = self.classes.get(from) else {
            let loaded: Vec<&str> = self.classes.keys().map(String::as_str).collect();
            return Err(fail(format!(
                "class {from} is not loaded (loaded: {}); load it before the classes that scale it",
                loaded.join(", ")
            )));
        };
        if lambdas.is_empty() {
            return Err(fail("no lambda given; give one ratio per model".into()));
        }
        let mut tables = BTreeMap::new();
        for (model, lambda) in lambdas {
            let Some(table) = base.get(model) else {
                let models: Vec<&str> = base.keys().map(String::as_str).collect();
                return Err(fail(format!(
                    "{from} has no table for model {model} (it has: {}); drop that lambda or add the model to {from}",
                    models.join(", ")
                )));
            };
            if let Some(why) = table.estimated_from() {
                return Err(fail(format!(
                    "{from}'s {model} table is itself an estimate ({why}); scale a measured class"
                )));
            }
            if !(lambda.ratio.is_finite() && lambda.ratio > 0.0) {
                return Err(fail(format!(
                    "the lambda of model {model} is {}; give a positive ratio",
                    lambda.ratio
                )));
            }
            if lambda.source.trim().is_empty() {
                return Err(fail(format!(
                    "the lambda of model {model} has no source; say where the ratio comes from"
                )));
            }
            tables.insert(
                model.clone(),
                ModelTable {
                    data: table.data.scaled(lambda.ratio),
                    source: TableSource::Lambda {
                        from: from.to_string(),
                        ratio: lambda.ratio,
                        source: lambda.source.clone(),
                    },
                },
            );
        }
        self.classes
            .entry(class.to_string())
            .or_default()
            .extend(tables);
        Ok(())
    }

    /// Fills models missing from a class with estimates from another class.
    ///
    /// Fallback: for target class C and source class D, the ratio is the median,
    /// over models measured in both, of `sps₁(C, m) / sps₁(D, m)` where `sps₁` is
    /// the best single-device samples/s of the model; D is the class that has the
    /// model and shares the most measured models with C (ties by name). The
    /// estimate is D's table × ratio, marked [`TableSource::MedianRatio`].
    /// Classes that share no measured model with any class holding it stay without it.
    pub fn fill_missing(&mut self) {
        let measured = |t: &ModelTable| !t.source.is_estimate();
        let all_models: BTreeSet<&String> = self.classes.values().flat_map(|m| m.keys()).collect();
        let mut additions = Vec::new();
        for (c, c_models) in &self.classes {
            for &model in &all_models {
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
                    let table = ModelTable {
                        data: self.classes[d][model].data.scaled(median),
                        source: TableSource::MedianRatio {
                            from: d.clone(),
                            ratio: median,
                            models: n,
                        },
                    };
                    additions.push((c.clone(), model.clone(), table));
                }
            }
        }
        for (c, m, t) in additions {
            self.classes.entry(c).or_default().insert(m, t);
        }
    }

    /// Where every class's numbers came from, class → its sources.
    pub fn sources(&self) -> BTreeMap<String, ClassSources> {
        self.classes
            .iter()
            .map(|(class, models)| {
                let sources = models
                    .iter()
                    .map(|(m, t)| (m.clone(), t.source.clone()))
                    .collect();
                (class.clone(), ClassSources(sources))
            })
            .collect()
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
    fn given_rates_fill_gaps_and_never_replace_a_loaded_table() {
        let mut t = ThroughputTables::default();
        t.insert_csv("A100", "bert", "a100/bert.csv", A100_BERT)
            .unwrap();
        let rates = ModelRates {
            global_batch: 64,
            source: "test figures".into(),
            iters_per_s: [("A100".to_string(), 1.0), ("cpu".to_string(), 0.5)].into(),
        };
        t.insert_rates("bert", &rates).unwrap();
        assert_eq!(t.lookup("A100", "bert", 64, 1).unwrap().iters_per_s, 6.0);
        let cpu = t.model("cpu", "bert").unwrap();
        assert_eq!(cpu.lookup(64, 1).unwrap().iters_per_s, 0.5);
        assert_eq!(
            cpu.source,
            TableSource::Given {
                by: "test figures".into()
            }
        );
        let bad = ModelRates {
            iters_per_s: [("cpu".to_string(), f64::NAN)].into(),
            ..rates
        };
        let err = t.insert_rates("gpt2", &bad).unwrap_err().to_string();
        assert!(err.contains("model gpt2 on class cpu: NaN"), "{err}");
    }

    #[test]
    fn exact_interpolated_and_capped_lookups() {
        let t = tables();
        let exact = t.lookup("A100", "bert", 64, 2).unwrap();
        assert_eq!(
            exact,
            Throughput {
                iters_per_s: 8.0,
                sync_s: None,
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
        let why = t.model("T4", "resnet50").unwrap().estimated_from().unwrap();
        assert!(why.contains("median") && why.contains("2 model"), "{why}");
        // Measured tables are untouched.
        assert!(!t.lookup("T4", "bert", 64, 1).unwrap().estimated);
    }

    fn lambdas(entries: &[(&str, f64, &str)]) -> BTreeMap<String, Lambda> {
        entries
            .iter()
            .map(|&(m, ratio, source)| {
                (
                    m.to_string(),
                    Lambda {
                        ratio,
                        source: source.to_string(),
                    },
                )
            })
            .collect()
    }

    /// [`tables`] plus V100 as λ × A100: bert 0.427 (paper X), resnet50 0.527 (bench Y).
    fn tables_with_v100() -> ThroughputTables {
        let mut t = tables();
        t.insert_scaled(
            "V100",
            "A100",
            &lambdas(&[("bert", 0.427, "paper X"), ("resnet50", 0.527, "bench Y")]),
        )
        .unwrap();
        t
    }

    #[test]
    fn lambda_classes_scale_every_lookup_and_say_why() {
        let mut t = tables_with_v100();
        // 0.427 × 8.0 = 3.416 it/s at batch 64 on 2 GPUs; 0.527 × 6.8 = 3.5836 on one.
        let bert = t.lookup("V100", "bert", 64, 2).unwrap();
        assert!(
            (bert.iters_per_s - 3.416).abs() < 1e-12 && bert.estimated,
            "{bert:?}"
        );
        let r50 = t.lookup("V100", "resnet50", 64, 1).unwrap();
        assert!((r50.iters_per_s - 3.5836).abs() < 1e-12, "{r50:?}");
        // Models without a lambda are left out.
        assert!(t.model("V100", "deepspeech2").is_none());
        assert_eq!(
            t.model("V100", "resnet50")
                .unwrap()
                .estimated_from()
                .unwrap(),
            "A100 table × 0.527 (source: bench Y)"
        );
        // fill_missing neither bases ratios on lambda tables nor fills a class
        // that has no measured model.
        t.fill_missing();
        assert!(t.model("V100", "deepspeech2").is_none());
    }

    #[test]
    fn scaling_errors_name_the_class_model_and_fix() {
        let mut t = tables();
        let one = |m: &str, r: f64, s: &str| lambdas(&[(m, r, s)]);
        let err = |t: &mut ThroughputTables, from: &str, l: BTreeMap<String, Lambda>| {
            t.insert_scaled("V100", from, &l).unwrap_err().to_string()
        };
        let e = err(&mut t, "H100", one("bert", 0.5, "s"));
        assert!(
            e.contains("V100 as lambda × H100") && e.contains("loaded: A100, T4"),
            "{e}"
        );
        let e = err(&mut t, "A100", one("gpt2", 0.5, "s"));
        assert!(
            e.contains("no table for model gpt2") && e.contains("bert, deepspeech2, resnet50"),
            "{e}"
        );
        let e = err(&mut t, "A100", one("bert", 0.0, "s"));
        assert!(e.contains("lambda of model bert is 0"), "{e}");
        let e = err(&mut t, "A100", one("bert", 0.5, " "));
        assert!(e.contains("no source"), "{e}");
        let e = err(&mut t, "A100", BTreeMap::new());
        assert!(e.contains("no lambda given"), "{e}");
        t.fill_missing();
        let e = err(&mut t, "T4", one("resnet50", 0.5, "s"));
        assert!(e.contains("itself an estimate"), "{e}");
        assert!(t.model("V100", "bert").is_none());
    }

    #[test]
    fn sources_describe_every_class_in_one_line() {
        let mut t = tables_with_v100();
        t.fill_missing();
        let s = t.sources();
        assert_eq!(
            s["A100"].to_string(),
            "measured, ElasticFlow-format dir a: bert, deepspeech2, resnet50"
        );
        assert_eq!(
            s["V100"].to_string(),
            "estimated, lambda × A100 per model: bert 0.427 (paper X), resnet50 0.527 (bench Y)"
        );
        let t4 = s["T4"].to_string();
        assert!(
            t4.starts_with(
                "measured, ElasticFlow-format dir t: bert, deepspeech2; estimated, A100 table × 0."
            ) && t4.ends_with("over 2 model(s) measured in both: resnet50"),
            "{t4}"
        );
        let json = serde_json::to_value(&s["V100"]).unwrap();
        assert_eq!(json["bert"]["kind"], "lambda");
        assert_eq!(json["bert"]["from"], "A100");
        assert_eq!(json["bert"]["ratio"], 0.427);
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
