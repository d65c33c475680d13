fn main() -> std::process::ExitCode {
    tidemill_cloud::cli::main()
}
