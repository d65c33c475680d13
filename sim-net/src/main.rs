//! `tidemill-sim`: one subcommand per tool; each lives in its own module.

fn main() -> std::process::ExitCode {
    tidemill_sim::cli::main()
}
