//! What every tidemill daemon does at start and stop: set up logging and wait
//! for a stop signal.

/// The `--version` line of a daemon: its release, the git commit it was built
/// from and the build date (UTC), which the crate's build script sets in
/// `TIDEMILL_GIT_COMMIT` and `TIDEMILL_BUILD_DATE` (shared/build/version.rs).
#[macro_export]
macro_rules! version_line {
    () => {
        concat!(
            env!("CARGO_PKG_VERSION"),
            " (commit ",
            env!("TIDEMILL_GIT_COMMIT"),
            ", built ",
            env!("TIDEMILL_BUILD_DATE"),
            ")"
        )
    };
}

/// Makes every file this process creates from now on private to its user
/// (mode 0600, directories 0700): databases, journals, WAL files and keys
/// hold secrets.
pub fn private_files() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
}

/// How log lines are written: `text` for people, `json` (one object a line,
/// with every field) for log collectors. Config key `log_format`, flag
/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("{s:?} is not a log format: use text or json")),
        }
    }
}

/// Logs text to stderr, filtered by `RUST_LOG`, else by `default_filter`.
pub fn init_logging(default_filter: &str) {
    init_logging_as(default_filter, LogFormat::Text);
}

/// Logs to stderr in `format`, filtered by `RUST_LOG`, else by `default_filter`.
pub fn init_logging_as(default_filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colour only for a person at a terminal; log files and pipes get plain text.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// Logs plain text to the file at `path` (appended to, created 0600), filtered
/// by `RUST_LOG`, else by `default_filter`: for a command whose own output
/// is on the terminal, where log lines would break into it.
pub fn init_logging_to_file(default_filter: &str, path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .init();
    Ok(())
}

/// For commands that print and exit: let a closed pipe (`... | head`) end the
/// process quietly, as it does other Unix tools, instead of making `println!`
/// panic. Never call it in a server: there SIGPIPE must stay ignored, so a write
/// to a closed socket fails with an error rather than killing the process.
pub fn exit_quietly_on_closed_pipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: installs the default disposition, not a handler; this runs at
    // start-up, before any thread that could be writing to a pipe.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! { _ = tokio::signal::ctrl_c() => {}, _ = term.recv() => {} }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_formats_parse_from_flags_and_config_and_name_a_bad_one() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        let err = "xml".parse::<LogFormat>().unwrap_err();
        assert!(
            err.contains("\"xml\"") && err.contains("text or json"),
            "{err}"
        );
        #[derive(serde::Deserialize)]
        struct C {
            log_format: LogFormat,
        }
        let c: C = toml::from_str("log_format = \"json\"").unwrap();
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(toml::from_str::<C>("log_format = \"xml\"").is_err());
    }
}
