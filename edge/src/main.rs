fn main() -> std::process::ExitCode {
    tidemill_edge::cli::main()
}
