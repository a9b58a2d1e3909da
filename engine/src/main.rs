//! The `gantry` binary: a thin wrapper that hands arguments and standard streams to the CLI.

fn main() -> std::process::ExitCode {
    // Standard output is locked for speed; standard error is not, because `serve` writes
    // its logs to it from other threads.
    let stdout = std::io::stdout();
    let mut io = engine::cli::Io::terminal(stdout.lock(), std::io::stderr());
    std::process::ExitCode::from(engine::cli::run(std::env::args_os(), &mut io))
}
