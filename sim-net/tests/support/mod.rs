//! What the simulator's integration tests share: where the repository and the
//! shared data are, `simulate` options parsed as the command line parses them,
//! and the binary run from the repository root as a user runs it.

// Each test crate compiles this module on its own and uses a subset of it.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::Parser;
use tidemill_sim::simulate::Args;

/// `simulate`'s options as a parser of their own, so tests build them from flags.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

/// The repository root (tests run in sim-net/).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The absolute path of `rel` under the shared data directory.
pub fn data(rel: &str) -> String {
    repo()
        .join("../shared/data")
        .join(rel)
        .display()
        .to_string()
}

/// The shipped topology, configs/topology-edgeflow-eval.toml.
pub fn shipped_topology() -> PathBuf {
    repo().join("configs/topology-edgeflow-eval.toml")
}

/// `simulate FLAGS`, parsed as the command line parses it.
pub fn args<T: Into<OsString> + Clone>(flags: impl IntoIterator<Item = T>) -> Args {
    let argv = std::iter::once(OsString::from("simulate")).chain(flags.into_iter().map(Into::into));
    Cli::parse_from(argv).args
}

/// `simulate` options for `topology` with ElasticFlow's A100 and T4 tables and
/// the Alibaba utilisation trace by absolute path, then `extra`.
pub fn topology_args(topology: &Path, extra: &[&str]) -> Args {
    let mut flags = vec![
        "--topology".to_string(),
        topology.display().to_string(),
        "--throughputs".into(),
        format!("A100={}", data("elasticflow/throughputs_A100")),
        "--throughputs".into(),
        format!("T4={}", data("elasticflow/throughputs_T4")),
        "--utilization".into(),
        data("alibaba-2018-machine-usage/machine_usage.csv.gz"),
        "--format".into(),
        "alibaba-2018".into(),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    args(flags)
}

/// `tidemill-sim ARGS` from the repository root, as a user runs it.
pub fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidemill-sim"))
        .current_dir(repo())
        .args(args)
        .output()
        .expect("the binary runs")
}
