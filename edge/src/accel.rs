//! Accelerator discovery and load. NVIDIA GPUs are read through `nvidia-smi`
//! rather than by loading NVML into this process: the edge binary is statically
//! linked, and glibc does not support dlopen of the driver library from a static
//! executable. SoC GPUs and NPUs are read from sysfs load files.
//!
//! A device that cannot be read yields `None`, never 0: unknown is not idle.

use std::path::Path;
use std::time::Duration;

use tidemill_proto::{Accelerator, AcceleratorKind};

use crate::config::{AcceleratorConfig, LoadScale, SysfsLoad};

/// How long `nvidia-smi` may take before its reading counts as unknown.
const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(5);

const QUERY: &str = "--query-gpu=name,memory.total,utilization.gpu";

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
    /// `None` when there are none or none could be read.
    pub async fn mean_load(&self) -> Option<f32> {
        let mut loads: Vec<f32> = Vec::new();
        if let Some(smi) = &self.nvidia_smi {
            match query_nvidia(smi).await {
                Ok(rows) if rows.len() == self.nvidia_count => {
                    loads.extend(rows.iter().filter_map(|r| r.2));
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
    let run = tokio::process::Command::new(program)
        .args([QUERY, "--format=csv,noheader,nounits"])
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
    Ok(parse_nvidia_smi(&String::from_utf8_lossy(&out.stdout)))
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
        assert_eq!(acc.mean_load().await, None);
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
        assert_eq!(acc.mean_load().await, Some(25.0));
    }

    /// An `nvidia-smi` stand-in that answers tidemill's query (and nothing
    /// else) with the rows in file `rows` beside it, as a real one would on a
    /// box with those GPUs, or fails when the file is gone.
    fn fake_nvidia_smi(dir: &Path) -> String {
        use std::os::unix::fs::PermissionsExt;
        let program = dir.join("nvidia-smi");
        let rows = dir.join("rows");
        std::fs::write(
            &program,
            format!(
                "#!/bin/sh\n[ \"$1 $2\" = \"{QUERY} --format=csv,noheader,nounits\" ] || exit 2\n\
                 cat {:?} 2>/dev/null || {{ echo 'NVIDIA-SMI has failed' >&2; exit 9; }}\n",
                rows.display().to_string()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
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
        assert_eq!(acc.mean_load().await, Some(25.0));
        // Each reading runs it again.
        std::fs::write(
            &rows,
            "NVIDIA H100 80GB HBM3, 81559, 90\nTesla T4, 15360, 70\n",
        )
        .unwrap();
        assert_eq!(acc.mean_load().await, Some(80.0));
        // A GPU gone, or nvidia-smi failing, is unknown load, not idle.
        std::fs::write(&rows, "NVIDIA H100 80GB HBM3, 81559, 90\n").unwrap();
        assert_eq!(acc.mean_load().await, None);
        std::fs::remove_file(&rows).unwrap();
        assert_eq!(acc.mean_load().await, None);
        assert!(Accelerators::discover(&cfg).await.devices().is_empty());
    }
}
