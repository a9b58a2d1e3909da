//! `gantry check`: type-check each policy and report every diagnostic.

use super::files::{self, Contents};
use super::{fail, DiagnosticFormat, Io, EXIT_FINDINGS, EXIT_OK};
use lang::codes::{self, Severity};
use lang::{Diagnostic, SourceMap, Span};
use std::io::Write;
use std::path::PathBuf;

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
    for policy in &policies {
        let mut inputs = Vec::new();
        let mut unreadable = SourceMap::new();
        let mut io_diags = Vec::new();
        for path in &policy.files {
            file_count += 1;
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
        let checked = lang::check(&inputs);
        for (i, d) in checked.diagnostics.iter().enumerate() {
            match d.severity {
                Severity::Error => errors += 1,
                Severity::Warning => warnings += 1,
            }
            if format == DiagnosticFormat::Human && i == MAX_RENDERED {
                let _ = writeln!(
                    io.stderr,
                    "... and {} more diagnostics (`--format json` lists them all)",
                    checked.diagnostics.len() - MAX_RENDERED
                );
            }
            if format == DiagnosticFormat::Json || i < MAX_RENDERED {
                report(d, &checked.sources, format, io);
            }
        }
    }
    if format == DiagnosticFormat::Human {
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

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}
