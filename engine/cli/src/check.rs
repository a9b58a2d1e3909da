//! `gantry check`: type-check each policy and report every diagnostic.

use super::{fail, DiagnosticFormat, Io, EXIT_FINDINGS, EXIT_OK};
use files::{self, Contents};
use lang::codes::{self, Severity};
use lang::{Diagnostic, SourceMap, Span};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Rendered diagnostics per policy; more would bury the first ones (JSON lists all).
const MAX_RENDERED: usize = 200;

pub fn run(
    paths: &[PathBuf],
    format: DiagnosticFormat,
    deny_warnings: bool,
    io: &mut Io<'_>,
) -> u8 {
    let paths = files::default_paths(paths);
    let policies = match files::find_policies(&paths) {
        Ok(p) => p,
        Err(e) => return fail(io, e.0),
    };
    let (mut errors, mut warnings, mut file_count) = (0usize, 0usize, 0usize);
    // Codes reported, in order of first appearance, for the closing `gantry explain` line.
    let mut codes_seen: Vec<&'static str> = Vec::new();
    for policy in &policies {
        // Files named one by one are checked with the rest of their directory (the
        // policy they belong to), and reported for themselves only.
        let (files, shown, precomputed) = match with_siblings(policy) {
            Ok(v) => v,
            Err(e) => return fail(io, e.0),
        };
        file_count += shown.as_ref().map_or(files.len(), Vec::len);
        let mut inputs = Vec::new();
        let mut unreadable = SourceMap::new();
        let mut io_diags = Vec::new();
        for path in &files {
            let name = files::display_name(path);
            match files::read(path) {
                Ok(Contents::Text(text)) => inputs.push((name, text)),
                Ok(Contents::NotUtf8 { lossy, valid_up_to }) => {
                    let id = unreadable.add(name, lossy);
                    io_diags.push(
                        Diagnostic::new(codes::INVALID_UTF8, "file is not valid UTF-8")
                            .with_label(
                                Span::new(id, valid_up_to, valid_up_to + 1),
                                "invalid byte here",
                            )
                            .with_help("save the file as UTF-8"),
                    );
                }
                Err(e) => return fail(io, e.0),
            }
        }
        for d in &io_diags {
            report(d, &unreadable, format, io);
        }
        errors += io_diags.len();
        if inputs.is_empty() {
            continue;
        }
        // The check `with_siblings` made of the same files, when it made one.
        let checked = match precomputed {
            Some(c) if io_diags.is_empty() => c,
            _ => lang::check_owned(inputs),
        };
        // Hidden: what is in the sibling files pulled in; the named files' diagnostics and
        // the standard library's (e.g. W0404 on an imported tier) are reported.
        let siblings: Vec<String> = match &shown {
            Some(shown) => files
                .iter()
                .map(|p| files::display_name(p))
                .filter(|n| !shown.contains(n))
                .collect(),
            None => Vec::new(),
        };
        let reported = |d: &&Diagnostic| {
            d.labels.first().is_none_or(|l| {
                !siblings
                    .iter()
                    .any(|n| n == checked.sources.name(l.span.file))
            })
        };
        let elsewhere = checked.diagnostics.iter().filter(|d| !reported(d)).count();
        let diagnostics: Vec<&Diagnostic> = checked.diagnostics.iter().filter(reported).collect();
        if elsewhere > 0 && format == DiagnosticFormat::Human {
            let _ = writeln!(
                io.stderr,
                "note: {elsewhere} {} in other files of this policy; check the directory to see {}",
                plural(elsewhere, "diagnostic", "diagnostics"),
                plural(elsewhere, "it", "them")
            );
        }
        for (i, d) in diagnostics.iter().copied().enumerate() {
            match d.severity {
                Severity::Error => errors += 1,
                Severity::Warning => warnings += 1,
            }
            if !codes_seen.contains(&d.code) {
                codes_seen.push(d.code);
            }
            if format == DiagnosticFormat::Human && i == MAX_RENDERED {
                let _ = writeln!(
                    io.stderr,
                    "... and {} more diagnostics (`--format json` lists them all)",
                    diagnostics.len() - MAX_RENDERED
                );
            }
            if format == DiagnosticFormat::Json || i < MAX_RENDERED {
                report(d, &checked.sources, format, io);
            }
        }
    }
    if format == DiagnosticFormat::Human {
        if let Some(first) = codes_seen.first() {
            let _ = writeln!(io.stderr, "{}", explain_line(&codes_seen, first));
        }
        let _ = writeln!(
            io.stderr,
            "checked {} {} ({} {}): {} {}, {} {}",
            policies.len(),
            plural(policies.len(), "policy", "policies"),
            file_count,
            plural(file_count, "file", "files"),
            errors,
            plural(errors, "error", "errors"),
            warnings,
            plural(warnings, "warning", "warnings"),
        );
    }
    if errors > 0 || (deny_warnings && warnings > 0) {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    }
}

/// Once, after the diagnostics: where the long explanations are (as rustc's `--explain`).
fn explain_line(codes_seen: &[&str], first: &str) -> String {
    match codes_seen {
        [one] => format!("for more on {one}, run `gantry explain {one}`"),
        many => format!(
            "for more on a code, run `gantry explain {first}` (codes above: {})",
            many.join(", ")
        ),
    }
}

fn report(d: &Diagnostic, sources: &SourceMap, format: DiagnosticFormat, io: &mut Io<'_>) {
    match format {
        DiagnosticFormat::Human => {
            let _ = write!(io.stderr, "{}", d.render(sources, io.color));
        }
        DiagnosticFormat::Json => {
            if let Ok(line) = serde_json::to_string(&d.to_json(sources)) {
                let _ = writeln!(io.stdout, "{line}");
            }
        }
    }
}

/// The files to check for `policy`, what to report for, and the check of those files
/// when one was made on the way.
type Chosen = (Vec<PathBuf>, Option<Vec<String>>, Option<lang::Checked>);

/// The files to check for `policy` and, for files named one by one, the display names
/// to report for: named files that use names they do not define bring the other
/// `.gantry` files of their directory (the policy they belong to), when that leaves them
/// fewer errors.
fn with_siblings(policy: &files::Policy) -> Result<Chosen, files::FindError> {
    let Some(named) = &policy.named else {
        return Ok((policy.files.clone(), None, None));
    };
    // A named file is checked with its directory only when it names things it does not
    // define (E0201) and the directory resolves some of them: a scratch file beside
    // other policies (`/tmp/ml.gantry`) stays on its own, with its own errors.
    let read_all = |paths: &[PathBuf]| -> Option<Vec<(String, String)>> {
        paths
            .iter()
            .map(|p| match files::read(p) {
                Ok(Contents::Text(t)) => Some((files::display_name(p), t)),
                _ => None,
            })
            .collect()
    };
    let shown: Vec<String> = named.iter().map(|p| files::display_name(p)).collect();
    let errors_in_named = |checked: &lang::Checked| {
        checked
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .filter(|d| {
                d.primary_span()
                    .is_some_and(|s| shown.iter().any(|n| n == checked.sources.name(s.file)))
            })
            .map(|d| d.code)
            .collect::<Vec<_>>()
    };
    let Some(alone) = read_all(named).map(lang::check_owned) else {
        return Ok((named.clone(), None, None));
    };
    let alone_errors = errors_in_named(&alone);
    if !alone_errors.contains(&codes::UNKNOWN_NAME) {
        return Ok((named.clone(), None, Some(alone)));
    }
    let dir = named
        .first()
        .and_then(|f| f.parent())
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let named_canonical: Vec<PathBuf> = named.iter().map(|p| canonical(p)).collect();
    let mut files: Vec<PathBuf> = files::siblings(&dir)?
        .into_iter()
        .filter(|s| !named_canonical.contains(&canonical(s)))
        .collect();
    if files.is_empty() {
        return Ok((named.clone(), None, Some(alone)));
    }
    files.extend(named.iter().cloned());
    files.sort();
    match read_all(&files).map(lang::check_owned) {
        Some(together) if errors_in_named(&together).len() < alone_errors.len() => {
            Ok((files, Some(shown), Some(together)))
        }
        _ => Ok((named.clone(), None, Some(alone))),
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}
