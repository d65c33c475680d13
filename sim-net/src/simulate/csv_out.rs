//! The CSV files `simulate` writes on request (`--jobs-out`, `--usage-out`):
//! written beside their path and renamed at the end, so a failed write
//! leaves no half file where a reader expects a whole one.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// A CSV file a flag asked for that could not be written.
#[derive(Debug, Error)]
#[error(
    "{flag} {}: {source}; pass a file path in a directory that exists and that you may write to",
    path.display()
)]
pub struct CsvOutError {
    /// The flag that named the file.
    pub flag: &'static str,
    /// The file asked for.
    pub path: PathBuf,
    /// What failed.
    #[source]
    pub source: csv::Error,
}

/// The writer `fill` serialises its lines into.
pub type Out = csv::Writer<BufWriter<File>>;

/// Writes the lines `fill` serialises (a header first) to `path`, asked for
/// by `flag`: into `path.partial`, synced, then renamed over `path`; the
/// partial file is removed when anything fails.
pub fn write(
    flag: &'static str,
    path: &Path,
    fill: impl FnOnce(&mut Out) -> Result<(), csv::Error>,
) -> Result<(), CsvOutError> {
    let fail = |source: csv::Error| CsvOutError {
        flag,
        path: path.to_path_buf(),
        source,
    };
    let io = |e: std::io::Error| fail(e.into());
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let written = (|| {
        let file = File::create(&partial).map_err(io)?;
        let mut out = csv::Writer::from_writer(BufWriter::new(file));
        fill(&mut out).map_err(fail)?;
        let file = out
            .into_inner()
            .map_err(|e| io(e.into_error()))?
            .into_inner()
            .map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&partial, path).map_err(io)
    })();
    if written.is_err() {
        std::fs::remove_file(&partial).ok();
    }
    written
}
