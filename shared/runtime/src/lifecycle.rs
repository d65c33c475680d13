//! What every tidemill daemon does at start and stop: set up logging and wait
//! for a stop signal.

/// Makes every file this process creates from now on private to its user
/// (mode 0600, directories 0700): databases, journals, WAL files and keys
/// hold secrets.
pub fn private_files() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
}

/// Logs to stderr, filtered by `RUST_LOG`, else by `default_filter`.
pub fn init_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colour only for a person at a terminal; log files and pipes get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
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
