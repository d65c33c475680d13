//! Sia's per-placement GPU profiles, read natively (Jayaram Subramanya et al.,
//! "Sia: Heterogeneity-aware, goodput-optimized ML-cluster scheduling", SOSP
//! 2023; the T4 profile is Pollux's, Qiao et al., OSDI 2021). Unlike an
//! ElasticFlow-format grid, a profile answers any global batch and keeps the
//! measured split of a step into compute and gradient sync, so the cost model
//! can replace the datacentre's sync with its own link model.
//!
//! Files, one pair per model and cluster, in one directory:
//! `<model>__placements-<cluster>.csv` (columns `local_bsz`, `step_time`,
//! `sync_time`, `placement`, in any order) and, optionally,
//! `<model>__scalability-<cluster>.csv` (`num_nodes`, `num_replicas`,
//! `local_bsz`, `step_time`, `sync_time`). A placement such as `44` is two
//! nodes with four GPUs each. The T4 profile is cluster `aws` (its unsuffixed
//! `<model>__placements.csv` copies are not read).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::throughput::{Rate, Throughput, ThroughputError, across_workers};

/// Sia's largest global batch per model (`max_batch_size` in Sia's
/// `applications.py`: the largest batch of the model's validation traces), as
/// `derive_elasticflow_tables.py` in the data directory uses it.
///
/// It caps the per-GPU micro-batch so that `micro × replicas × (accum + 1)`
/// stays within it, as Sia's simulator does.
pub const SIA_MAX_BATCH: [(&str, u32); 6] = [
    ("bert", 384),
    ("cifar10", 4096),
    ("deepspeech2", 640),
    ("imagenet", 12_800),
    ("ncf", 32_768),
    ("yolov3", 512),
];

/// Models profiled as pipeline-model-parallel jobs (Sia's `PMPApplication`):
/// their `step_time` is one forward stage, not a data-parallel step, so the
/// data-parallel recipe does not apply and they are not loaded.
pub const PIPELINE_PARALLEL_MODELS: [&str; 1] = ["gpt_pmp"];

/// One measured step at one per-GPU batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ProfilePoint {
    /// Per-GPU (micro-)batch, samples.
    pub local_bsz: u32,
    /// Seconds per step, gradient sync included.
    pub step_s: f64,
    /// Seconds of the step spent synchronising gradients.
    pub sync_s: f64,
}

/// One model's profile on one cluster, reduced to what the recipe reads: the
/// packed placement of every worker count that was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiaProfile {
    /// The model's [`SIA_MAX_BATCH`], if it has one.
    pub max_batch: Option<u32>,
    /// Worker count → its packed placement's points, ascending in `local_bsz`.
    pub by_workers: BTreeMap<u32, Vec<ProfilePoint>>,
}

impl SiaProfile {
    /// The recipe at exactly `workers` GPUs on their packed placement, or
    /// `None` when that count was not profiled or the micro-batch falls outside
    /// the profiled range.
    ///
    /// `local = ⌈B / n⌉`; `accum = ⌈local / max_local⌉ − 1` gradient-accumulation
    /// steps, `max_local` the placement's largest profiled per-GPU batch;
    /// `micro = min(⌈local / (accum + 1)⌉, ⌊max(B, B_max) / (n (accum + 1))⌋)`
    /// (`B_max` = [`SIA_MAX_BATCH`]; no cap without one); step and sync
    /// seconds interpolated linearly in `micro` between profiled points;
    /// `iterations/s = 1 / (step + accum × (step − sync))` (the accumulation
    /// steps compute without syncing). Sync seconds per iteration are `sync`.
    pub(crate) fn at(&self, batch: u32, workers: u32) -> Option<Rate> {
        let points = self.by_workers.get(&workers)?;
        let local = batch.div_ceil(workers);
        let accum = local.div_ceil(points.last()?.local_bsz) - 1;
        let mut micro = local.div_ceil(accum + 1);
        if let Some(max) = self.max_batch {
            micro = micro.min(batch.max(max) / (workers * (accum + 1)));
        }
        let (step, sync) = interpolate(points, micro)?;
        Some(Rate {
            iters_per_s: 1.0 / (step + (step - sync) * f64::from(accum)),
            sync_s: Some(sync),
        })
    }

    /// Iterations/s at global batch `batch` on `workers` devices: the recipe of
    /// [`SiaProfile::at`] at `workers` when profiled, else worker counts as in
    /// [`across_workers`] over the profiled counts the batch fits. A batch
    /// beyond the model's [`SIA_MAX_BATCH`] is marked estimated.
    pub(crate) fn lookup(&self, batch: u32, workers: u32) -> Option<Throughput> {
        let at = |n: u32| self.at(batch, n).map(|r| (n, r));
        let exact = at(workers);
        let (below, above) = if exact.is_some() {
            (exact, None)
        } else {
            (
                self.by_workers
                    .range(..workers)
                    .rev()
                    .find_map(|(&n, _)| at(n)),
                self.by_workers
                    .range(workers.saturating_add(1)..)
                    .find_map(|(&n, _)| at(n)),
            )
        };
        let t = across_workers(workers, below, above)?;
        Some(Throughput {
            estimated: t.estimated || self.beyond_max_batch(batch),
            ..t
        })
    }

    /// True when `batch` exceeds the largest batch Sia profiled the model for.
    fn beyond_max_batch(&self, batch: u32) -> bool {
        self.max_batch.is_some_and(|m| batch > m)
    }

    /// Per-GPU batches profiled on one GPU: where single-device speed is known.
    pub(crate) fn one_device_batches(&self) -> Vec<u32> {
        self.by_workers
            .get(&1)
            .map(|p| p.iter().map(|p| p.local_bsz).collect())
            .unwrap_or_default()
    }

    /// The same profile on a device `ratio` times as fast: every time divided by `ratio`.
    pub(crate) fn scaled(&self, ratio: f64) -> SiaProfile {
        let by_workers = self
            .by_workers
            .iter()
            .map(|(&n, points)| {
                let points = points
                    .iter()
                    .map(|p| ProfilePoint {
                        local_bsz: p.local_bsz,
                        step_s: p.step_s / ratio,
                        sync_s: p.sync_s / ratio,
                    })
                    .collect();
                (n, points)
            })
            .collect();
        SiaProfile {
            by_workers,
            ..self.clone()
        }
    }
}

/// Step and sync seconds at per-GPU batch `x`: `w = (x − a) / (b − a)`,
/// `v = v_a (1 − w) + v_b w` between the profiled batches `a ≤ x ≤ b`;
/// `None` outside the profiled range.
fn interpolate(points: &[ProfilePoint], x: u32) -> Option<(f64, f64)> {
    let i = points.partition_point(|p| p.local_bsz < x);
    let b = points.get(i)?;
    if b.local_bsz == x {
        return Some((b.step_s, b.sync_s));
    }
    let a = points.get(i.checked_sub(1)?)?;
    let w = f64::from(x - a.local_bsz) / f64::from(b.local_bsz - a.local_bsz);
    Some((
        a.step_s * (1.0 - w) + b.step_s * w,
        a.sync_s * (1.0 - w) + b.sync_s * w,
    ))
}

/// The packed placement of `workers` GPUs on nodes of `per_node`: full nodes
/// plus one partial node, written as Sia does (smallest rotation, so the
/// partial node first): 9 on 4-GPU nodes is `144`.
fn packed(workers: u32, per_node: u32) -> String {
    let rem = workers % per_node;
    let mut s = if rem > 0 {
        rem.to_string()
    } else {
        String::new()
    };
    s.push_str(&per_node.to_string().repeat((workers / per_node) as usize));
    s
}

/// Reads every model's profile of `cluster` in `dir`, model name → profile.
pub fn read_dir(
    dir: &Path,
    cluster: &str,
) -> Result<BTreeMap<String, SiaProfile>, ThroughputError> {
    let io = |source| ThroughputError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut clusters = BTreeSet::new();
    let mut models = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let name = entry
            .map_err(io)?
            .file_name()
            .to_string_lossy()
            .into_owned();
        let Some((model, rest)) = name.split_once("__placements-") else {
            continue;
        };
        let Some(c) = rest.strip_suffix(".csv") else {
            continue;
        };
        clusters.insert(c.to_string());
        if c == cluster && !PIPELINE_PARALLEL_MODELS.contains(&model) {
            models.push(model.to_string());
        }
    }
    if models.is_empty() {
        return Err(ThroughputError::SiaCluster {
            dir: dir.to_path_buf(),
            cluster: cluster.to_string(),
            found: clusters.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    models.sort();
    let mut out = BTreeMap::new();
    for model in models {
        let profile = read_model(dir, &model, cluster)?;
        out.insert(model, profile);
    }
    Ok(out)
}

/// One model's profile: the packed placements of `<model>__placements-<cluster>.csv`
/// (GPUs per node = the largest per-node count any placement uses), then
/// packed `(num_nodes, num_replicas)` entries of the scalability file for
/// worker counts the placements lack.
fn read_model(dir: &Path, model: &str, cluster: &str) -> Result<SiaProfile, ThroughputError> {
    let placements = dir.join(format!("{model}__placements-{cluster}.csv"));
    let mut by_placement: BTreeMap<String, BTreeMap<u32, ProfilePoint>> = BTreeMap::new();
    for row in read_rows(&placements, &["placement"])? {
        by_placement
            .entry(row.keys[0].clone())
            .or_default()
            .insert(row.point.local_bsz, row.point);
    }
    let per_node = by_placement
        .keys()
        .flat_map(|p| p.chars().filter_map(|c| c.to_digit(10)))
        .max()
        .filter(|&g| g > 0)
        .ok_or_else(|| ThroughputError::Sia {
            file: placements.display().to_string(),
            line: 1,
            problem: "no placement has a GPU count".into(),
        })?;
    let mut by_workers = BTreeMap::new();
    for (placement, points) in by_placement {
        let workers: u32 = placement.chars().filter_map(|c| c.to_digit(10)).sum();
        if workers > 0 && placement == packed(workers, per_node) {
            by_workers.insert(workers, points.into_values().collect());
        }
    }
    let scalability = dir.join(format!("{model}__scalability-{cluster}.csv"));
    if scalability.exists() {
        let mut by_count: BTreeMap<(u32, u32), BTreeMap<u32, ProfilePoint>> = BTreeMap::new();
        for row in read_rows(&scalability, &["num_nodes", "num_replicas"])? {
            let count = |i: usize| {
                row.keys[i]
                    .parse::<u32>()
                    .map_err(|_| ThroughputError::Sia {
                        file: scalability.display().to_string(),
                        line: row.line,
                        problem: format!(
                            "{:?} is not a whole number of nodes or replicas",
                            row.keys[i]
                        ),
                    })
            };
            let key = (count(0)?, count(1)?);
            by_count
                .entry(key)
                .or_default()
                .insert(row.point.local_bsz, row.point);
        }
        for ((nodes, workers), points) in by_count {
            if workers > 0 && nodes == workers.div_ceil(per_node) {
                by_workers
                    .entry(workers)
                    .or_insert_with(|| points.into_values().collect());
            }
        }
    }
    let max_batch = SIA_MAX_BATCH
        .iter()
        .find(|(m, _)| *m == model)
        .map(|&(_, b)| b);
    Ok(SiaProfile {
        max_batch,
        by_workers,
    })
}

/// One data row: the values of the key columns asked for, and the point.
struct Row {
    line: usize,
    keys: Vec<String>,
    point: ProfilePoint,
}

/// Reads `path`'s rows by column name; a later row for the same key and batch
/// replaces an earlier one (as a Python dict would in Sia's tools).
fn read_rows(path: &Path, key_columns: &[&str]) -> Result<Vec<Row>, ThroughputError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ThroughputError::Io {
        path: PathBuf::from(path),
        source,
    })?;
    let bad = |line: usize, problem: String| ThroughputError::Sia {
        file: file.clone(),
        line,
        problem,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| bad(1, "the file is empty".into()))?;
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let column = |name: &str| {
        names
            .iter()
            .position(|&n| n == name)
            .ok_or_else(|| bad(1, format!("no `{name}` column in the header {header:?}")))
    };
    let keys: Vec<usize> = key_columns
        .iter()
        .map(|k| column(k))
        .collect::<Result<_, _>>()?;
    let (bsz, step, sync) = (
        column("local_bsz")?,
        column("step_time")?,
        column("sync_time")?,
    );
    let mut rows = Vec::new();
    for (i, line) in lines {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != names.len() {
            return Err(bad(
                i + 1,
                format!("{} cells, the header has {}", cells.len(), names.len()),
            ));
        }
        let number = |c: usize| {
            cells[c]
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    bad(
                        i + 1,
                        format!(
                            "`{}` = {:?} is not a non-negative number",
                            names[c], cells[c]
                        ),
                    )
                })
        };
        let local = number(bsz)?;
        if local < 1.0 || local.fract() != 0.0 || local > f64::from(u32::MAX) {
            return Err(bad(
                i + 1,
                format!("`local_bsz` = {:?} is not a whole batch", cells[bsz]),
            ));
        }
        let (step_s, sync_s) = (number(step)?, number(sync)?);
        if sync_s > step_s || step_s == 0.0 {
            return Err(bad(
                i + 1,
                format!("step_time {step_s} s must be positive and at least sync_time {sync_s} s"),
            ));
        }
        rows.push(Row {
            line: i + 1,
            keys: keys.iter().map(|&k| cells[k].to_string()).collect(),
            point: ProfilePoint {
                local_bsz: local as u32,
                step_s,
                sync_s,
            },
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(local_bsz: u32, step_s: f64, sync_s: f64) -> ProfilePoint {
        ProfilePoint {
            local_bsz,
            step_s,
            sync_s,
        }
    }

    /// Two worker counts: one GPU with batches 4 and 8, four GPUs (one node) with batch 8.
    fn profile(max_batch: Option<u32>) -> SiaProfile {
        SiaProfile {
            max_batch,
            by_workers: BTreeMap::from([
                (1, vec![point(4, 0.4, 0.0), point(8, 0.6, 0.0)]),
                (4, vec![point(8, 0.7, 0.1)]),
            ]),
        }
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12 * b.abs().max(1.0), "{a} != {b}");
    }

    #[test]
    fn packed_placements_put_the_partial_node_first() {
        assert_eq!(packed(3, 4), "3");
        assert_eq!(packed(8, 4), "44");
        assert_eq!(packed(9, 4), "144");
        assert_eq!(packed(12, 8), "48");
    }

    #[test]
    fn recipe_by_hand() {
        let p = profile(None);
        // B = 6 on one GPU: local 6, no accumulation, halfway between 4 and 8:
        // step = 0.4 · 0.5 + 0.6 · 0.5 = 0.5 s → 2 it/s.
        let r = p.at(6, 1).unwrap();
        close(r.iters_per_s, 2.0);
        assert_eq!(r.sync_s, Some(0.0));
        // B = 20 on one GPU: local 20 > 8, accum = ⌈20/8⌉ − 1 = 2, micro = ⌈20/3⌉ = 7:
        // step = 0.4 · 0.25 + 0.6 · 0.75 = 0.55 s; 1 / (0.55 + 2 · 0.55) = 1/1.65 it/s.
        close(p.at(20, 1).unwrap().iters_per_s, 1.0 / 1.65);
        // B = 64 on four GPUs: local 16, accum 1, micro 8: 1 / (0.7 + 1 · (0.7 − 0.1)) = 1/1.3.
        let r = p.at(64, 4).unwrap();
        close(r.iters_per_s, 1.0 / 1.3);
        assert_eq!(r.sync_s, Some(0.1));
        // Micro-batch below the profiled range, or an unprofiled count: no answer.
        assert!(p.at(2, 1).is_none());
        assert!(p.at(64, 2).is_none());
    }

    #[test]
    fn the_max_batch_caps_the_micro_batch() {
        // B = 20, B_max = 18 on one GPU: micro = min(7, ⌊20 / 3⌋ = 6) = 6 — the
        // cap uses max(B, B_max) = 20: step 0.5 s, 1 / (0.5 · 3) it/s.
        let p = profile(Some(18));
        close(p.at(20, 1).unwrap().iters_per_s, 1.0 / 1.5);
        assert!(p.beyond_max_batch(20) && !p.beyond_max_batch(18));
        // B_max = 40 ≥ B: micro = min(7, ⌊40/3⌋ = 13) = 7, as without a cap.
        close(profile(Some(40)).at(20, 1).unwrap().iters_per_s, 1.0 / 1.65);
    }

    #[test]
    fn scaling_divides_every_time() {
        let p = profile(None).scaled(0.5);
        close(p.at(64, 4).unwrap().iters_per_s, 0.5 / 1.3);
        assert_eq!(p.at(64, 4).unwrap().sync_s, Some(0.2));
    }

    #[test]
    fn unprofiled_worker_counts_fall_back_like_a_grid() {
        let p = profile(None);
        // B = 64 on 2 GPUs, between the profiled 1 and 4. One GPU: local 64,
        // accum 7, micro 8: 1 / (0.6 + 7 · 0.6) = 1/4.8 it/s, sync share 0.
        // Four GPUs: 1/1.3 it/s, sync share 0.1 · (1/1.3). f = (2 − 1)/(4 − 1).
        let t = p.lookup(64, 2).unwrap();
        let ips = 1.0 / 4.8 + (1.0 / 1.3 - 1.0 / 4.8) / 3.0;
        close(t.iters_per_s, ips);
        close(t.sync_s.unwrap(), (0.1 / 1.3) / 3.0 / ips);
        assert!(t.estimated);
        // Above the largest profiled count: no further speed-up.
        let t = p.lookup(64, 8).unwrap();
        close(t.iters_per_s, 1.0 / 1.3);
        assert!(t.estimated);
        // Profiled exactly: not an estimate; beyond Sia's max batch it is.
        assert!(!p.lookup(64, 4).unwrap().estimated);
        assert!(profile(Some(32)).lookup(64, 4).unwrap().estimated);
        // A batch below every profiled micro-batch has no answer.
        assert!(p.lookup(2, 1).is_none());
    }

    #[test]
    fn across_nodes_only_the_measured_compute_is_kept() {
        // B = 64 on four GPUs: 1/1.3 it/s, 0.1 s of it syncing (above). On one
        // node the step is the measured 1.3 s; across nodes the compute is
        // (accum + 1) × (step − sync) = 2 × (0.7 − 0.1) = 1.2 s.
        let t = profile(None).lookup(64, 4).unwrap();
        close(crate::cost::class_compute_s(&t, 1), 1.3);
        close(crate::cost::class_compute_s(&t, 2), 1.2);
    }

    /// The derived ElasticFlow-format tables next to the profiles, per cluster.
    const DERIVED: [(&str, &str); 5] = [
        ("aws", "T4"),
        ("azure", "V100"),
        ("dgx-ext", "A100"),
        ("rtx", "RTX2080Ti"),
        ("quad", "RTX6000"),
    ];

    fn data(rel: &str) -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(rel)
    }

    /// Every measured cell of `grid` against the native lookup of `class`;
    /// returns the number of cells compared.
    fn compare(
        tables: &crate::ThroughputTables,
        class: &str,
        model: &str,
        grid: &crate::Grid,
    ) -> usize {
        let mut cells = 0;
        for (row, &batch) in grid.batches.iter().enumerate() {
            for (col, &gpus) in grid.gpus.iter().enumerate() {
                let native = tables.lookup(class, model, batch, gpus);
                match grid.iters_per_s[row][col] {
                    Some(want) => {
                        let got = native
                            .unwrap_or_else(|| panic!("{class} {model} {batch}@{gpus}: none"));
                        assert!(
                            (got.iters_per_s - want).abs() <= 1e-9 * want && !got.estimated,
                            "{class} {model} {batch}@{gpus}: {got:?} vs {want}"
                        );
                        cells += 1;
                    }
                    None => assert!(
                        native.is_none_or(|t| t.estimated),
                        "{class} {model} {batch}@{gpus}: {native:?} but not derived"
                    ),
                }
            }
        }
        cells
    }

    #[test]
    fn native_profiles_reproduce_the_derived_and_elasticflow_tables() {
        let profiles = data("gpu-throughput-profiles/sia-placements");
        let mut tables = crate::ThroughputTables::default();
        let mut cells = 0;
        for (cluster, class) in DERIVED {
            tables.load_sia(class, &profiles, cluster).unwrap();
            let dir = data(&format!(
                "gpu-throughput-profiles/elasticflow-format/throughputs_{class}"
            ));
            let mut derived = crate::ThroughputTables::default();
            derived.load_dir(class, &dir).unwrap();
            assert_eq!(derived.classes[class].len(), 6, "{}", dir.display());
            for (model, table) in &derived.classes[class] {
                let crate::TableData::Grid(grid) = &table.data else {
                    unreachable!("CSV tables are grids")
                };
                cells += compare(&tables, class, model, grid);
            }
        }
        // ElasticFlow's own T4 tables are these Pollux T4 profiles.
        let mut elasticflow = crate::ThroughputTables::default();
        elasticflow
            .load_dir("T4", &data("elasticflow/throughputs_T4"))
            .unwrap();
        assert_eq!(elasticflow.classes["T4"].len(), 6);
        for (model, table) in &elasticflow.classes["T4"] {
            let crate::TableData::Grid(grid) = &table.data else {
                unreachable!("CSV tables are grids")
            };
            cells += compare(&tables, "T4", model, grid);
        }
        assert!(cells > 200, "{cells} cells compared");
        // gpt_pmp (pipeline-parallel) is not loaded; the six data-parallel models are.
        assert_eq!(tables.classes["A100"].len(), 6);
        let t4 = tables.lookup("T4", "imagenet", 3200, 8).unwrap();
        assert!(
            t4.sync_s
                .is_some_and(|s| s > 0.0 && s < 1.0 / t4.iters_per_s)
        );
    }

    #[test]
    fn reads_files_by_column_name_and_packs_placements() {
        let dir = std::env::temp_dir().join(format!("tidemill-sia-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("m__placements-c.csv"),
            "step_time,placement,local_bsz,sync_time\n0.4,1,4,0\n0.5,1,4,0\n0.6,1,8,0\n0.7,2,8,0.1\n0.9,11,8,0.3\n0.8,22,8,0.2\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("m__scalability-c.csv"),
            "num_nodes,num_replicas,local_bsz,step_time,sync_time\n3,6,8.0,1.0,0.4\n4,6,8,2.0,0.4\n",
        )
        .unwrap();
        std::fs::write(dir.join("gpt_pmp__placements-c.csv"), "not,a,profile\n").unwrap();
        std::fs::write(dir.join("m__placements-other.csv"), "x\n").unwrap();
        let got = read_dir(&dir, "c").unwrap();
        assert_eq!(got.keys().collect::<Vec<_>>(), ["m"]);
        let m = &got["m"];
        assert_eq!(m.max_batch, None);
        // GPUs per node = 2 (the largest digit): `11` is not packed for two
        // workers, `22` is for four;
        // the scalability row (3 nodes, 6 replicas) is packed, (4, 6) is not.
        assert_eq!(
            m.by_workers.keys().copied().collect::<Vec<_>>(),
            [1, 2, 4, 6]
        );
        // The later row for placement 1, batch 4 wins.
        assert_eq!(m.by_workers[&1][0], point(4, 0.5, 0.0));
        assert_eq!(m.by_workers[&6], vec![point(8, 1.0, 0.4)]);

        let err = read_dir(&dir, "aws").unwrap_err().to_string();
        assert!(err.contains("aws") && err.contains("c, other"), "{err}");
        std::fs::write(
            dir.join("m__placements-c.csv"),
            "local_bsz,step_time,sync_time,placement\n4,0.1,0.2,1\n",
        )
        .unwrap();
        let err = read_dir(&dir, "c").unwrap_err().to_string();
        assert!(
            err.contains("m__placements-c.csv:2:") && err.contains("sync_time"),
            "{err}"
        );
        std::fs::write(
            dir.join("m__placements-c.csv"),
            "local_bsz,step_time,placement\n",
        )
        .unwrap();
        let err = read_dir(&dir, "c").unwrap_err().to_string();
        assert!(err.contains(":1:") && err.contains("`sync_time`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
