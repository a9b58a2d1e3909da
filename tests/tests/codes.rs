//! The diagnostic registry: one entry per code, every example produces its code, every fix
//! is clean, and `gantry explain` prints the long form.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

use lang::codes::{Severity, CODES};

#[test]
fn codes_are_unique_and_documented() {
    let mut seen = std::collections::BTreeSet::new();
    for c in CODES {
        assert!(seen.insert(c.code), "duplicate code {}", c.code);
        assert!(
            c.explanation.len() > 80,
            "{} needs a longer explanation",
            c.code
        );
        assert!(!c.title.is_empty());
        assert!(
            !c.example.is_empty() || !c.illustration.is_empty(),
            "{} has no example",
            c.code
        );
        let expected = if c.code.starts_with('W') {
            Severity::Warning
        } else {
            Severity::Error
        };
        assert_eq!(c.severity(), expected);
    }
}

#[test]
fn every_example_produces_its_code_and_every_fix_is_clean() {
    for c in CODES.iter().filter(|c| !c.example.is_empty()) {
        let bad = lang::check(&[("example.gantry".into(), c.example.into())]);
        assert!(
            bad.diagnostics.iter().any(|d| d.code == c.code),
            "{}: example produced {:?}",
            c.code,
            bad.diagnostics.iter().map(|d| d.code).collect::<Vec<_>>()
        );
        let fixed = lang::check(&[("fix.gantry".into(), c.fix.into())]);
        assert!(
            fixed.diagnostics.is_empty(),
            "{}: fix produced {:?}",
            c.code,
            fixed
                .diagnostics
                .iter()
                .map(|d| (d.code, &d.message))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn explain_prints_the_long_form_with_its_example() {
    for c in CODES {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let code = cli::run(
            ["gantry", "explain", &c.code.to_lowercase()],
            &mut cli::Io::captured(&mut out, &mut err),
        );
        let out = String::from_utf8(out).unwrap();
        assert_eq!(code, 0, "{}", c.code);
        assert!(out.contains(c.code) && out.contains(c.title), "{out}");
        if !c.example.is_empty() {
            assert!(out.contains(c.example.lines().next().unwrap()), "{out}");
        }
    }
}
