//! `tidemill-sim`: one subcommand per tool; each lives in its own module.

/// The simulator allocates and frees small plans by the million a run;
/// glibc's allocator took a fifth of its time on MEC cluster04.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    tidemill_sim::cli::main()
}
