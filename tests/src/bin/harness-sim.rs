//! The `tidemill-sim` subcommands the live walkthrough runs (`gen-trace`),
//! built inside this package so that its test runs the current code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// `tidemill-sim gen-trace`.
    GenTrace(tidemill_sim::gen_trace::Args),
}

fn main() -> ExitCode {
    let Command::GenTrace(args) = Cli::parse().command;
    match tidemill_sim::gen_trace::run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidemill-sim: error: {e}");
            ExitCode::FAILURE
        }
    }
}
