//! The `gantry` binary: hands arguments and standard streams to the CLI (the `cli` crate), with the
//! Kubernetes cluster view (the `cluster` crate) plugged in for `serve`.

mod pages;

#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // Freed pages are returned by a background thread on jemalloc's decay schedule, not
    // only when this thread next allocates: a check of a 10 MB policy otherwise peaked
    // about 100 MB higher, holding pages freed while parsing (BENCHMARKS.md). If the
    // setting is refused the allocator works as before, so the error is ignored.
    #[cfg(all(unix, not(target_env = "musl")))]
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
    #[cfg(all(unix, not(target_env = "musl")))]
    if pages::returns_freed_pages_at_once(std::env::args_os().nth(1).as_deref()) {
        return_freed_pages_at_once();
    }
    // Huge pages pay for the decision cycles of `plan` and `serve`, not for the rest
    // (pages.rs).
    if !pages::wants_huge_pages(std::env::args_os().nth(1).as_deref()) {
        pages::small_pages_only();
    }
    // Standard output is buffered, not locked: `lsp` speaks JSON-RPC on it from other
    // threads, and `serve` logs to standard error from other threads.
    let stdout = std::io::BufWriter::new(std::io::stdout());
    let mut io = cli::Io::terminal(stdout, std::io::stderr());
    io.cluster = Some(std::sync::Arc::new(cluster::Connector));
    std::process::ExitCode::from(cli::run(std::env::args_os(), &mut io))
}

/// Sets jemalloc's dirty-page decay to 0 for every arena, present and future: freed pages
/// go back to the kernel at once (pages.rs says for which commands). Refused
/// settings leave the allocator as it was.
#[cfg(all(unix, not(target_env = "musl")))]
fn return_freed_pages_at_once() {
    use tikv_jemalloc_ctl::{Access, AsName};
    let _ = "arenas.dirty_decay_ms\0".name().write(0isize);
    let arenas: u32 = "arenas.narenas\0".name().read().unwrap_or(0);
    for arena in 0..arenas {
        let key = format!("arena.{arena}.dirty_decay_ms\0");
        let _ = key.as_str().name().write(0isize);
    }
}
