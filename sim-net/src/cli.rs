//! The command line: one subcommand per tool, each in its own module; the
//! binary and the tests' harness both run it.

use std::process::ExitCode;

use crate::{allreduce, demo, forecast_eval, gen_trace, simulate, swarm, sweep, twin, wan};
use clap::{Parser, Subcommand};
use tidemill_runtime::lifecycle;

#[derive(Debug, Parser)]
#[command(
    name = "tidemill-sim",
    version = tidemill_runtime::version_line!(),
    about = "tidemill's simulator, trace generator and forecast backtest"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Ring all-reduce over TCP among a job's ranks (RANK, WORLD_SIZE,
    /// MASTER_ADDR, MASTER_PORT from the environment), printing each step's
    /// time: the workload the cost model's sync term describes.
    Allreduce(allreduce::Args),
    /// Run a whole cluster on loopback, replaying a generated tidal trace, and
    /// schedule a few jobs onto the idle edges.
    Demo(demo::Args),
    /// Backtest every forecast method on a trace (rolling origin).
    ForecastEval(forecast_eval::Args),
    /// Write a synthetic tidal utilisation trace in tidemill's format.
    GenTrace(gen_trace::Args),
    /// Trace-driven simulation of tidemill against EdgeFlow and the classic
    /// baselines on the same jobs, nodes and edge load.
    Simulate(simulate::Args),
    /// Run N simulated edges against one coordinator, each with its own QUIC
    /// connection and node id, speaking the real protocol; prints progress.
    Swarm(swarm::Args),
    /// Run one scenario over a grid of settings (`--vary KEY=V1,V2,...`) for
    /// every policy, on all cores; write CSV, JSON and SVG line charts.
    Sweep(sweep::Args),
    /// Run a scenario live: a real coordinator on the accelerated clock, one
    /// emulated edge per node that replays its box's load and runs its
    /// tasks in emulation, and the trace's jobs submitted through the API;
    /// prints `simulate`'s figures for the live run.
    Twin(twin::Args),
    /// Relay UDP between an edge and the coordinator through emulated WAN
    /// impairment: delay, jitter, loss, reordering, duplication, a rate limit
    /// and outages, in each direction.
    Wan(wan::Args),
    /// Measure the cost model's ring all-reduce term against a real TCP ring
    /// over the WAN lab's impaired links and print each error (needs root).
    WanAccuracy(wan::accuracy::Args),
    /// Move checkpoints through the WAN relay with the live code and print
    /// each transfer's time against the cost model's term.
    CheckpointAccuracy(wan::checkpoint_accuracy::Args),
}

/// Parses the command line, runs the subcommand, and reports any error
/// without a panic.
pub fn main() -> ExitCode {
    let result: Result<(), Box<dyn std::error::Error>> = match Cli::parse().command {
        Command::Allreduce(args) => allreduce::run(&args).map_err(Into::into),
        Command::Demo(args) => demo::run(&args).map_err(Into::into),
        Command::ForecastEval(args) => {
            lifecycle::exit_quietly_on_closed_pipe();
            forecast_eval::run(&args).map_err(Into::into)
        }
        Command::GenTrace(args) => {
            lifecycle::exit_quietly_on_closed_pipe();
            gen_trace::run(&args).map_err(Into::into)
        }
        Command::Simulate(args) => {
            lifecycle::exit_quietly_on_closed_pipe();
            simulate::run(&args).map_err(Into::into)
        }
        Command::Sweep(args) => {
            lifecycle::exit_quietly_on_closed_pipe();
            sweep::run(&args).map_err(Into::into)
        }
        Command::Twin(args) => {
            lifecycle::exit_quietly_on_closed_pipe();
            twin::run(&args).map_err(Into::into)
        }
        Command::Swarm(args) => swarm::run(&args).map_err(Into::into),
        Command::Wan(args) => wan::run(&args).map_err(Into::into),
        Command::WanAccuracy(args) => wan::accuracy::run(&args).map_err(Into::into),
        Command::CheckpointAccuracy(args) => {
            wan::checkpoint_accuracy::run(&args).map_err(|e| e as Box<dyn std::error::Error>)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
