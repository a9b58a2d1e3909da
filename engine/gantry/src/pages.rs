//! Which page size the process's memory gets. The `gantry` binary's allocator asks for
//! transparent huge pages (jemalloc's `thp:always`, set at build time in
//! `.cargo/config.toml`): the decision cycle reads records spread over hundreds of MB, and
//! huge pages spare it most TLB misses. Commands that do not run decision cycles on a large
//! cluster turn them off, since a huge page costs memory: `gantry check` of a 10 MB policy
//! peaks at 201 MB with them and 191 MB without (BENCHMARKS.md as of a8acb47, decision
//! cycle at scale, "tenth session").

/// Whether `command` (the first argument) runs decision cycles that huge pages speed up.
pub fn wants_huge_pages(command: Option<&std::ffi::OsStr>) -> bool {
    command.is_some_and(|c| c == "plan" || c == "serve")
}

/// Whether `command` frees most of what it allocated before it is done, so freed pages
/// are best returned at once rather than on the allocator's decay schedule: `gantry check`
/// frees each part of the policy's tree as it lowers it, and the lowered program, made
/// after, needs other allocation sizes than the tree's, so held pages only add to its
/// peak (a 10 MB policy: 204 -> 189 MB).
pub fn returns_freed_pages_at_once(command: Option<&std::ffi::OsStr>) -> bool {
    command.is_some_and(|c| c == "check")
}

/// Stops the kernel from backing this process's memory with transparent huge pages from
/// now on (Linux's `PR_SET_THP_DISABLE`, which overrides the allocator's request). Elsewhere,
/// or when refused, nothing changes: the pages are only slower or larger.
pub fn small_pages_only() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn only_decision_commands_keep_huge_pages() {
        assert!(wants_huge_pages(Some(OsStr::new("plan"))));
        assert!(wants_huge_pages(Some(OsStr::new("serve"))));
        for other in ["check", "simulate", "fmt", "lsp", "agent", "--help"] {
            assert!(!wants_huge_pages(Some(OsStr::new(other))), "{other}");
        }
        assert!(!wants_huge_pages(None));
    }

    #[test]
    fn only_check_returns_freed_pages_at_once() {
        assert!(returns_freed_pages_at_once(Some(OsStr::new("check"))));
        for other in ["plan", "serve", "simulate", "fmt", "lsp", "--help"] {
            assert!(
                !returns_freed_pages_at_once(Some(OsStr::new(other))),
                "{other}"
            );
        }
        assert!(!returns_freed_pages_at_once(None));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn small_pages_only_sets_the_flag() {
        // The flag is per process: this test binary keeps it, and no test reads it back.
        small_pages_only();
        assert_eq!(
            rustix::thread::transparent_huge_pages_are_disabled().ok(),
            Some(true)
        );
    }
}
