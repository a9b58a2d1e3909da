//! The `gantry` binary: a thin wrapper that hands arguments and standard streams to the CLI.
//! A crate of its own so that crates the engine must not depend on can plug into it.

fn main() -> std::process::ExitCode {
    // Standard output is buffered, not locked: `lsp` speaks JSON-RPC on it from other
    // threads, and `serve` logs to standard error from other threads.
    let stdout = std::io::BufWriter::new(std::io::stdout());
    let mut io = engine::cli::Io::terminal(stdout, std::io::stderr());
    std::process::ExitCode::from(engine::cli::run(std::env::args_os(), &mut io))
}
