//! Workspace-level tests live in `tests/tests/`. This library holds what they share.

/// A property test's number of cases: `n`, times `GANTRY_SOAK` when that is set to a
/// whole number (a soak run before a release: `GANTRY_SOAK=30 cargo test -p tests --test
/// plan_properties`). Proptest draws fresh random cases on every run, so a soak finds
/// rare counterexamples before CI happens upon them.
pub fn cases(n: u32) -> u32 {
    let soak = std::env::var("GANTRY_SOAK")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    n.saturating_mul(soak)
}

#[cfg(test)]
mod tests {
    #[test]
    fn without_a_soak_the_count_is_as_written() {
        if std::env::var_os("GANTRY_SOAK").is_none() {
            assert_eq!(super::cases(64), 64);
        }
    }
}
