//! `tidemill-sim allreduce`, built inside this package so that the live tests
//! can give its path to a job as the command to run.

use std::process::ExitCode;

use clap::Parser;

/// The flags of `tidemill-sim allreduce`.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: tidemill_sim::allreduce::Args,
}

fn main() -> ExitCode {
    match tidemill_sim::allreduce::run(&Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
