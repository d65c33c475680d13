//! Accelerator discovery and load. NVIDIA GPUs are read through `nvidia-smi`
//! rather than by loading NVML into this process: the edge binary is statically
//! linked, and glibc does not support dlopen of the driver library from a static
//! executable. SoC GPUs and NPUs are read from sysfs load files.
//!
//! A device that cannot be read yields `None`, never 0: unknown is not idle.
//! tidemill's own tasks' GPU use is left out of a GPU's load (per process,
//! from `nvidia-smi pmon`), as their CPU is left out of the host's.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use tidemill_proto::{Accelerator, AcceleratorKind};

use crate::config::{AcceleratorConfig, LoadScale, SysfsLoad};

/// How long `nvidia-smi` may take before its reading counts as unknown.
const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a sample waits on accelerators: its two `nvidia-smi` runs
/// (the query and, while tasks run, `pmon`).
pub const MAX_READ: Duration = NVIDIA_SMI_TIMEOUT.saturating_mul(2);

const QUERY: &str = "--query-gpu=name,memory.total,utilization.gpu";

/// One sample of each process's GPU use, utilisation only.
const PMON: [&str; 5] = ["pmon", "-c", "1", "-s", "u"];

/// The accelerators found on this host and how to read them.
#[derive(Debug)]
pub struct Accelerators {
    nvidia_smi: Option<String>,
    nvidia_count: usize,
    sysfs: Vec<SysfsLoad>,
    devices: Vec<Accelerator>,
}

/// One `nvidia-smi` row: model, memory in bytes, utilisation percent.
type NvidiaRow = (String, Option<u64>, Option<f32>);

impl Accelerators {
    /// Finds NVIDIA GPUs and present SoC load files.
    pub async fn discover(cfg: &AcceleratorConfig) -> Self {
        let rows = query_nvidia(&cfg.nvidia_smi).await;
        let (nvidia_smi, rows) = match rows {
            Ok(rows) => (Some(cfg.nvidia_smi.clone()), rows),
            Err(why) => {
                tracing::info!(%why, "no NVIDIA GPU found");
                (None, Vec::new())
            }
        };
        let mut devices: Vec<Accelerator> = rows
            .iter()
            .map(|(model, mem_bytes, _)| Accelerator {
                kind: AcceleratorKind::NvidiaGpu,
                model: model.clone(),
                mem_bytes: *mem_bytes,
            })
            .collect();
        let sysfs: Vec<SysfsLoad> = cfg
            .sysfs
            .iter()
            .filter(|s| s.path.exists())
            .cloned()
            .collect();
        devices.extend(sysfs.iter().map(|s| Accelerator {
            kind: AcceleratorKind::SocLoad,
            model: s.model.clone(),
            mem_bytes: None,
        }));
        for d in &devices {
            tracing::info!(model = %d.model, kind = ?d.kind, "found accelerator");
        }
        Accelerators {
            nvidia_smi,
            nvidia_count: rows.len(),
            sysfs,
            devices,
        }
    }

    /// The accelerators, for registration.
    pub fn devices(&self) -> &[Accelerator] {
        &self.devices
    }

    /// Mean utilisation over every accelerator that could be read, percent;
    /// `None` when there are none or none could be read. A GPU's load leaves
    /// out what the processes `own` (tidemill's tasks) use of it
    /// ([`box_load`]); GPUs whose share of it cannot be read count as
    /// unknown. SoC load files cannot tell processes apart and are read whole.
    pub async fn mean_load(&self, own: &HashSet<u32>) -> Option<f32> {
        let mut loads: Vec<f32> = Vec::new();
        if let Some(smi) = &self.nvidia_smi {
            match query_nvidia(smi).await {
                Ok(rows) if rows.len() == self.nvidia_count => {
                    let utils: Vec<Option<f32>> = rows.iter().map(|r| r.2).collect();
                    if own.is_empty() {
                        loads.extend(utils.into_iter().flatten());
                    } else {
                        match run_nvidia(smi, &PMON).await {
                            Ok(text) => loads.extend(
                                box_load(&utils, &parse_pmon(&text), own)
                                    .into_iter()
                                    .flatten(),
                            ),
                            Err(why) => {
                                tracing::warn!(%why, "cannot tell tidemill's own GPU use from the box's; GPU load unknown")
                            }
                        }
                    }
                }
                Ok(rows) => tracing::warn!(
                    expected = self.nvidia_count,
                    found = rows.len(),
                    "nvidia-smi lists a different number of GPUs than at start; GPU load unknown"
                ),
                Err(why) => tracing::warn!(%why, "cannot read NVIDIA GPU load; reporting unknown"),
            }
        }
        loads.extend(self.sysfs.iter().filter_map(read_sysfs));
        (!loads.is_empty()).then(|| loads.iter().sum::<f32>() / loads.len() as f32)
    }
}

async fn query_nvidia(program: &str) -> Result<Vec<NvidiaRow>, String> {
    run_nvidia(program, &[QUERY, "--format=csv,noheader,nounits"])
        .await
        .map(|text| parse_nvidia_smi(&text))
}

/// Runs `program` (nvidia-smi) with `args`; its standard output, or why not.
async fn run_nvidia(program: &str, args: &[&str]) -> Result<String, String> {
    let run = tokio::process::Command::new(program)
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(NVIDIA_SMI_TIMEOUT, run)
        .await
        .map_err(|_| format!("`{program}` did not answer within {NVIDIA_SMI_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "`{program}` failed ({}): {}",
            out.status,
            stderr.trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One `nvidia-smi pmon` row: GPU index, process id, SM utilisation percent
/// (`None` where it printed `-`: nothing ran in the sample).
type PmonRow = (usize, u32, Option<f32>);

/// Parses `nvidia-smi pmon --select u` by its header's column names (`# gpu
/// pid type sm ...`; drivers add columns such as `jpg`, `ofa`, `fb`), so
/// their order and number may change. Rows without a process id (a GPU
/// nothing runs on prints `-`) are skipped.
fn parse_pmon(text: &str) -> Vec<PmonRow> {
    let mut columns: Option<(usize, usize, usize)> = None;
    let mut rows = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.trim_start_matches('#').split_whitespace().collect();
        if line.starts_with('#') {
            let at = |name: &str| fields.iter().position(|f| *f == name);
            if let (Some(gpu), Some(pid), Some(sm)) = (at("gpu"), at("pid"), at("sm")) {
                columns = Some((gpu, pid, sm));
            }
            continue;
        }
        let Some((gpu, pid, sm)) = columns else {
            continue;
        };
        let field = |i: usize| fields.get(i).copied().unwrap_or("-");
        if let (Ok(gpu), Ok(pid)) = (field(gpu).parse(), field(pid).parse()) {
            rows.push((gpu, pid, field(sm).parse().ok()));
        }
    }
    rows
}

/// Each GPU's load without tidemill's own use of it, percent:
/// `L_g = max(0, U_g − Σ_{p ∈ own, on g} sm_p)`, where `U_g` is GPU g's
/// utilisation (`utils[g]`, by nvidia-smi's index) and `sm_p` the share of
/// the sample during which process p ran a kernel on it (`pmon`). Both are
/// percentages of time; when the box's work and a task's ran at once the
/// sum overstates the task, hence the floor at 0. A GPU whose utilisation
/// is unknown stays unknown.
fn box_load(utils: &[Option<f32>], pmon: &[PmonRow], own: &HashSet<u32>) -> Vec<Option<f32>> {
    utils
        .iter()
        .enumerate()
        .map(|(g, util)| {
            let ours: f32 = pmon
                .iter()
                .filter(|(gpu, pid, _)| *gpu == g && own.contains(pid))
                .filter_map(|(_, _, sm)| *sm)
                .sum();
            util.map(|u| (u - ours).max(0.0))
        })
        .collect()
}

/// Parses `nvidia-smi --query-gpu=name,memory.total,utilization.gpu
/// --format=csv,noheader,nounits`. Memory is in MiB; `[N/A]` or anything
/// unparsable becomes `None`.
fn parse_nvidia_smi(text: &str) -> Vec<NvidiaRow> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut fields = line.rsplitn(3, ',').map(str::trim);
            let util = fields.next().and_then(|f| f.parse::<f32>().ok());
            let mem = fields
                .next()
                .and_then(|f| f.parse::<u64>().ok())
                .map(|mib| mib << 20);
            let name = fields.next().unwrap_or("NVIDIA GPU").to_string();
            (name, mem, util)
        })
        .collect()
}

fn read_sysfs(load: &SysfsLoad) -> Option<f32> {
    parse_load(
        &std::fs::read_to_string(&load.path).ok()?,
        load.scale,
        &load.path,
    )
}

/// Reads a load file's number: Jetson writes `NNN` (per mille), Rockchip devfreq
/// writes `NN@FREQHz` (percent).
fn parse_load(text: &str, scale: LoadScale, path: &Path) -> Option<f32> {
    let number = text.trim().split('@').next()?.trim();
    let value: f32 = match number.parse() {
        Ok(v) => v,
        Err(_) => {
            tracing::warn!(path = %path.display(), content = %text.trim(), "unreadable load file");
            return None;
        }
    };
    let pct = match scale {
        LoadScale::Permille => value / 10.0,
        LoadScale::Percent => value,
    };
    Some(pct.clamp(0.0, 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvidia_smi_rows() {
        let rows = parse_nvidia_smi("Tesla T4, 15360, 37\nNVIDIA H100 80GB HBM3, 81559, [N/A]\n");
        assert_eq!(rows[0], ("Tesla T4".into(), Some(15360 << 20), Some(37.0)));
        assert_eq!(
            rows[1],
            ("NVIDIA H100 80GB HBM3".into(), Some(81559 << 20), None)
        );
    }

    #[test]
    fn parses_soc_load_files() {
        let p = Path::new("x");
        assert_eq!(parse_load("537\n", LoadScale::Permille, p), Some(53.7));
        assert_eq!(
            parse_load("42@1000000000Hz\n", LoadScale::Percent, p),
            Some(42.0)
        );
        assert_eq!(parse_load("garbage", LoadScale::Percent, p), None);
    }

    #[tokio::test]
    async fn a_box_without_nvidia_reports_unknown_not_zero() {
        let cfg = AcceleratorConfig {
            nvidia_smi: "/nonexistent/nvidia-smi".into(),
            sysfs: vec![SysfsLoad {
                path: "/nonexistent/load".into(),
                model: "none".into(),
                scale: LoadScale::Percent,
            }],
        };
        let acc = Accelerators::discover(&cfg).await;
        assert!(acc.devices().is_empty());
        assert_eq!(acc.mean_load(&HashSet::new()).await, None);
    }

    #[tokio::test]
    async fn reads_a_present_sysfs_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("load");
        std::fs::write(&path, "250\n").unwrap();
        let cfg = AcceleratorConfig {
            nvidia_smi: "/nonexistent/nvidia-smi".into(),
            sysfs: vec![SysfsLoad {
                path,
                model: "Jetson GPU".into(),
                scale: LoadScale::Permille,
            }],
        };
        let acc = Accelerators::discover(&cfg).await;
        assert_eq!(acc.devices().len(), 1);
        assert_eq!(acc.mean_load(&HashSet::new()).await, Some(25.0));
    }

    /// An `nvidia-smi` stand-in that answers tidemill's two queries (and
    /// nothing else) from the files `rows` and `pmon` beside it, as a real
    /// one would on a box with those GPUs and processes, or fails when the
    /// file is gone.
    fn fake_nvidia_smi(dir: &Path) -> String {
        let program = dir.join("nvidia-smi");
        let source = dir.join("nvidia-smi.sh");
        let answer = |file: &str| {
            let path = dir.join(file).display().to_string();
            format!("cat {path:?} 2>/dev/null || {{ echo 'NVIDIA-SMI has failed' >&2; exit 9; }}")
        };
        std::fs::write(
            &source,
            format!(
                "#!/bin/sh\ncase \"$*\" in\n\
                 \"{QUERY} --format=csv,noheader,nounits\") {} ;;\n\
                 \"{}\") {} ;;\n\
                 *) exit 2 ;;\nesac\n",
                answer("rows"),
                PMON.join(" "),
                answer("pmon"),
            ),
        )
        .unwrap();
        // Installed by a child process, so that no file this process wrote
        // is executed: a fork in another test thread could still hold it
        // open for writing, and exec would fail with ETXTBSY.
        let installed = std::process::Command::new("install")
            .args(["-m", "0755"])
            .arg(&source)
            .arg(&program)
            .status()
            .unwrap();
        assert!(installed.success());
        program.display().to_string()
    }

    #[tokio::test]
    async fn gpus_are_found_and_read_through_nvidia_smi() {
        let dir = tempfile::tempdir().unwrap();
        let rows = dir.path().join("rows");
        std::fs::write(
            &rows,
            "NVIDIA H100 80GB HBM3, 81559, 10\nTesla T4, 15360, 40\n",
        )
        .unwrap();
        let cfg = AcceleratorConfig {
            nvidia_smi: fake_nvidia_smi(dir.path()),
            sysfs: Vec::new(),
        };
        let acc = Accelerators::discover(&cfg).await;
        let found: Vec<_> = acc
            .devices()
            .iter()
            .map(|d| (d.kind, d.model.as_str(), d.mem_bytes))
            .collect();
        assert_eq!(
            found,
            [
                (
                    AcceleratorKind::NvidiaGpu,
                    "NVIDIA H100 80GB HBM3",
                    Some(81_559 << 20)
                ),
                (AcceleratorKind::NvidiaGpu, "Tesla T4", Some(15_360 << 20)),
            ]
        );
        assert_eq!(acc.mean_load(&HashSet::new()).await, Some(25.0));
        // Each reading runs it again.
        std::fs::write(
            &rows,
            "NVIDIA H100 80GB HBM3, 81559, 90\nTesla T4, 15360, 70\n",
        )
        .unwrap();
        assert_eq!(acc.mean_load(&HashSet::new()).await, Some(80.0));
        // A GPU gone, or nvidia-smi failing, is unknown load, not idle.
        std::fs::write(&rows, "NVIDIA H100 80GB HBM3, 81559, 90\n").unwrap();
        assert_eq!(acc.mean_load(&HashSet::new()).await, None);
        std::fs::remove_file(&rows).unwrap();
        assert_eq!(acc.mean_load(&HashSet::new()).await, None);
        assert!(Accelerators::discover(&cfg).await.devices().is_empty());
    }

    /// `nvidia-smi pmon -c 1 -s u` as drivers print it: with `jpg` and
    /// `ofa` columns (newer drivers), a GPU running nothing, and a process
    /// that ran no kernel in the sample.
    const PMON_TEXT: &str = "\
# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
# Idx           #    C/G      %      %      %      %      %      %    name
    0       4242     C     70     30      -      -      -      -    python
    0       4243     C     10      5      -      -      -      -    python
    0        777   C+G     15      2      -      -      -      -    encoder
    1          -     -      -      -      -      -      -      -    -
    2       4244     C      -      -      -      -      -      -    python
";

    #[test]
    fn pmon_rows_are_read_by_their_column_names() {
        assert_eq!(
            parse_pmon(PMON_TEXT),
            [
                (0, 4242, Some(70.0)),
                (0, 4243, Some(10.0)),
                (0, 777, Some(15.0)),
                (2, 4244, None),
            ]
        );
        // An older driver's columns, and an extra `fb` column before sm.
        let old =
            "# gpu pid type sm mem enc dec command\n# Idx # C/G % % % % name\n 1 9 C 42 1 - - x\n";
        assert_eq!(parse_pmon(old), [(1, 9, Some(42.0))]);
        let moved = "# gpu pid type fb sm command\n 0 9 C 300 55 x\n";
        assert_eq!(parse_pmon(moved), [(0, 9, Some(55.0))]);
        assert!(parse_pmon("no header\n 0 9 C 55\n").is_empty());
    }

    #[test]
    fn a_gpus_load_leaves_out_tidemills_own_processes() {
        // GPU 0 at 95 %: tasks 4242 and 4243 ran kernels 70 % and 10 % of the
        // sample, the box's encoder 15 %: 95 − (70 + 10) = 15 % is the box's.
        // GPU 1 runs nothing of ours; GPU 2's task ran no kernel; GPU 3 is
        // unknown and stays so. A sum over the utilisation floors at 0.
        let own = HashSet::from([4242, 4243, 4244]);
        let utils = [Some(95.0), Some(30.0), Some(5.0), None];
        assert_eq!(
            box_load(&utils, &parse_pmon(PMON_TEXT), &own),
            [Some(15.0), Some(30.0), Some(5.0), None]
        );
        assert_eq!(
            box_load(&[Some(60.0)], &parse_pmon(PMON_TEXT), &own),
            [Some(0.0)]
        );
    }

    #[tokio::test]
    async fn own_tasks_gpu_use_is_left_out_of_the_reported_load() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("rows"),
            "NVIDIA H100 80GB HBM3, 81559, 95\nTesla T4, 15360, 30\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("pmon"), PMON_TEXT).unwrap();
        let cfg = AcceleratorConfig {
            nvidia_smi: fake_nvidia_smi(dir.path()),
            sysfs: Vec::new(),
        };
        let acc = Accelerators::discover(&cfg).await;
        // (95 + 30) / 2 with no task of ours; (15 + 30) / 2 with 4242 and 4243.
        assert_eq!(acc.mean_load(&HashSet::new()).await, Some(62.5));
        let own = HashSet::from([4242, 4243]);
        assert_eq!(acc.mean_load(&own).await, Some(22.5));
        // Without pmon the task's share cannot be told apart: unknown, not
        // the whole reading, which would look like the tide coming in.
        std::fs::remove_file(dir.path().join("pmon")).unwrap();
        assert_eq!(acc.mean_load(&own).await, None);
    }
}
