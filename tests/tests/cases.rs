//! Data-driven language tests: every `tests/cases/*.gantry` file is checked, and its inline
//! expectations must match the diagnostics exactly. An expectation is a comment under the
//! line it points at:
//!
//! ```text
//! pool p { capacity = reserved; node = dgx_h100; nodes = 4 gpu }
//! #                                                      ^^^^^ error[E0302]: expected a node count
//! ```
//!
//! The carets mark the columns of the diagnostic's primary span; the text after the colon
//! must occur in its message. `#! warning[W0309]` expects a diagnostic anywhere in the file.
//! Rendered diagnostics are also snapshotted with insta.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use std::path::Path;

#[derive(Debug, PartialEq, Eq, Clone)]
struct Expectation {
    severity: String,
    code: String,
    message: String,
    /// 1-based line and start/end columns; `None` for `#!` expectations.
    at: Option<(usize, usize, usize)>,
}

fn parse_expectations(text: &str) -> Vec<Expectation> {
    let mut out = Vec::new();
    let mut last_code_line = 0;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let rest = line.strip_prefix('#');
        let is_caret = rest.is_some_and(|r| r.trim_start().starts_with('^'));
        let is_bang = line.starts_with("#!");
        if !is_caret && !is_bang {
            last_code_line = line_no;
            continue;
        }
        let (at, spec) = if is_bang {
            (None, line.trim_start_matches("#!").trim())
        } else {
            let start = line.find('^').unwrap_or(0);
            let end = start + line[start..].chars().take_while(|c| *c == '^').count();
            (
                Some((last_code_line, start + 1, end + 1)),
                line[end..].trim(),
            )
        };
        let (head, message) = spec
            .split_once(':')
            .map_or((spec, ""), |(h, m)| (h, m.trim()));
        let (severity, code) = head.trim().split_once('[').unwrap_or(("", ""));
        out.push(Expectation {
            severity: severity.to_string(),
            code: code.trim_end_matches(']').to_string(),
            message: message.to_string(),
            at,
        });
    }
    out
}

fn run_case(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let checked = lang::check(&[(name.clone(), text.clone())]);
    let mut expected = parse_expectations(&text);
    let mut unexpected = Vec::new();
    for d in &checked.diagnostics {
        let span = d.primary_span().unwrap_or_default();
        let file = checked.sources.get(span.file);
        let (start, end) = file
            .map(|f| {
                (
                    f.line_col(span.start as usize),
                    f.line_col(span.end as usize),
                )
            })
            .unwrap_or((
                lang::source::LineCol { line: 0, column: 0 },
                lang::source::LineCol { line: 0, column: 0 },
            ));
        let matches = |e: &Expectation| {
            e.code == d.code
                && e.severity == d.severity.as_str()
                && d.message.contains(&e.message)
                && match e.at {
                    None => true,
                    Some((line, from, to)) => {
                        span.file == 0
                            && start.line == line
                            && start.column == from
                            && (end.line != line || end.column == to)
                    }
                }
        };
        match expected.iter().position(matches) {
            Some(i) => {
                expected.remove(i);
            }
            None => unexpected.push(format!(
                "{}:{}:{}-{}:{} {}[{}]: {}",
                name,
                start.line,
                start.column,
                end.line,
                end.column,
                d.severity.as_str(),
                d.code,
                d.message
            )),
        }
    }
    if expected.is_empty() && unexpected.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{name}:\n  expected but not reported: {:#?}\n  reported but not expected: {:#?}",
        expected, unexpected
    ))
}

/// The `.gantry` files of `tests/cases`, sorted.
fn case_paths() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.retain(|p| p.extension().is_some_and(|e| e == "gantry"));
    paths.sort();
    paths
}

#[test]
fn language_cases() {
    let paths = case_paths();
    assert!(
        paths.len() >= 30,
        "expected the case folder to hold the language cases, found {}",
        paths.len()
    );
    let failures: Vec<String> = paths.iter().filter_map(|p| run_case(p).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        paths.len(),
        failures.join("\n")
    );
}

/// A plain check frees the policy's tree as it lowers it; an editor's keeps it whole. Both
/// report the same and lower the same program, for every case and every bundled policy
/// (a policy directory's files checked together, as `gantry check DIR` does).
#[test]
fn a_plain_check_and_an_editors_agree_on_every_case_and_policy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut policies: Vec<Vec<(String, String)>> = case_paths()
        .iter()
        .map(|p| {
            vec![(
                p.display().to_string(),
                std::fs::read_to_string(p).unwrap_or_default(),
            )]
        })
        .collect();
    for dir in [
        "policies/onprem-dgx",
        "policies/cloud-burst",
        "policies/hybrid",
        "examples/tour",
        "examples/openb",
        "examples/plan",
        "examples/autoscale",
        "examples/autoscale/on-demand",
        "examples/autoscale/static",
    ] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|p: &std::path::PathBuf| p.extension().is_some_and(|e| e == "gantry"));
        files.sort();
        assert!(!files.is_empty(), "{dir} holds no policy");
        policies.push(
            files
                .iter()
                .map(|p| {
                    (
                        p.display().to_string(),
                        std::fs::read_to_string(p).unwrap_or_default(),
                    )
                })
                .collect(),
        );
    }
    for files in &policies {
        let plain = lang::check(files);
        let editor = lang::check_for_editor(files);
        assert_eq!(plain.diagnostics, editor.diagnostics, "{}", files[0].0);
        assert_eq!(plain.program, editor.program, "{}", files[0].0);
    }
}

#[test]
fn every_code_in_the_registry_has_a_case() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
    let all: String = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    // Codes no policy text can produce are covered by CLI tests instead.
    let io_only = ["E0100", "E0103"];
    let missing: Vec<&str> = lang::codes::CODES
        .iter()
        .map(|c| c.code)
        .filter(|c| !io_only.contains(c) && !all.contains(&format!("[{c}]")))
        .collect();
    assert!(missing.is_empty(), "codes without a case: {missing:?}");
}

#[test]
fn rendered_diagnostics() {
    insta::glob!("../cases", "*.gantry", |path| {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let checked = lang::check(&[(name, text)]);
        let rendered: String = checked
            .diagnostics
            .iter()
            .map(|d| d.render(&checked.sources, false))
            .collect();
        insta::assert_snapshot!(rendered);
    });
}

/// Every machine-applicable fix in the cases does what its help says: applied to the text,
/// the diagnostic it belongs to is gone (same code and message), and no more diagnostics
/// of its code appear (a fixed keyword may reveal what its block lacks, a new E02xx; it
/// must not leave a syntax error).
#[test]
fn fixes_remove_the_diagnostics_they_belong_to() {
    let paths = case_paths();
    let mut applied = 0;
    let mut failures = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let checked = lang::check(&[(name.clone(), text.clone())]);
        let of_code =
            |c: &lang::Checked, code: &str| c.diagnostics.iter().filter(|d| d.code == code).count();
        for d in &checked.diagnostics {
            let Some(fix) = &d.fix else { continue };
            assert_eq!(checked.sources.name(fix.span.file), name, "{name}: {d:?}");
            let mut fixed = text.clone();
            fixed.replace_range(
                fix.span.start as usize..fix.span.end as usize,
                &fix.replacement,
            );
            let again = lang::check(&[(name.clone(), fixed)]);
            applied += 1;
            if again
                .diagnostics
                .iter()
                .any(|e| e.code == d.code && e.message == d.message)
            {
                failures.push(format!(
                    "{name}: the fix for {} `{}` leaves it",
                    d.code, d.message
                ));
            }
            if of_code(&again, d.code) >= of_code(&checked, d.code) {
                failures.push(format!(
                    "{name}: the fix for {} `{}` leaves as many of its code: {:?}",
                    d.code,
                    d.message,
                    again
                        .diagnostics
                        .iter()
                        .map(|d| &d.message)
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
    assert!(applied >= 5, "only {applied} fixes in the cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// W0419's placement rule (a start is a multiple of the width; on 8-slot GPUs the compute
/// slices end by slice 7) holds for every MIG profile of the standard library, which
/// copies `nvidia-smi mig -lgipp`: checked as a policy of its own, it gets no W0419.
#[test]
fn standard_mig_profiles_follow_the_placement_rule() {
    let text = stdlib::module("std.gpus").unwrap().to_string();
    let checked = lang::check(&[("gpus.gantry".to_string(), text)]);
    let w0419: Vec<_> = checked
        .diagnostics
        .iter()
        .filter(|d| d.code == lang::codes::MIG_START_NOT_ALLOWED)
        .map(|d| &d.message)
        .collect();
    assert!(w0419.is_empty(), "{w0419:?}");
    assert!(checked
        .program
        .is_some_and(|p| p.gpu_models.iter().any(|g| g.mig_profiles.len() >= 5)));
}
