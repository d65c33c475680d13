//! `tidemill-sim`'s entry point, built inside this package so the integration
//! tests always run the current code (Cargo rebuilds only a package's own
//! binaries for its tests).
fn main() -> std::process::ExitCode {
    tidemill_sim::cli::main()
}
