//! The `gantry` binary: a thin wrapper that hands arguments and standard streams to the CLI.

fn main() -> std::process::ExitCode {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let mut io = engine::cli::Io::terminal(stdout.lock(), stderr.lock());
    std::process::ExitCode::from(engine::cli::run(std::env::args_os(), &mut io))
}
