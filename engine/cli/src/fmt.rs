//! `gantry fmt`: rewrite policy files in the canonical style, or check that they are.

use super::safe_write;
use super::{fail, Io, EXIT_FINDINGS, EXIT_OK};
use files::{self, Contents};
use lang::SourceMap;
use std::io::{Read, Write};
use std::path::PathBuf;

pub fn run(paths: &[PathBuf], check: bool, io: &mut Io<'_>) -> u8 {
    if paths.len() == 1 && paths.first().is_some_and(|p| p.as_os_str() == "-") {
        return stdin(io);
    }
    let paths = files::default_paths(paths);
    let policies = match files::find_policies(&paths) {
        Ok(p) => p,
        Err(e) => return fail(io, e.0),
    };
    let mut findings = false;
    let (mut changed, mut total) = (0usize, 0usize);
    let mut signals_handled = false;
    for path in policies.iter().flat_map(|p| p.files.iter()) {
        total += 1;
        let name = files::display_name(path);
        let text = match files::read(path) {
            Ok(Contents::Text(t)) => t,
            Ok(Contents::NotUtf8 { .. }) => {
                let _ = writeln!(
                    io.stderr,
                    "gantry: `{name}` is not valid UTF-8; not formatted"
                );
                findings = true;
                continue;
            }
            Err(e) => return fail(io, e.0),
        };
        let formatted = match lang::format::format_source(&text) {
            Ok(f) => f,
            Err(diags) => {
                let mut sources = SourceMap::new();
                sources.add(name.clone(), text.clone());
                for d in diags {
                    let _ = write!(io.stderr, "{}", d.render(&sources, io.color));
                }
                let _ = writeln!(
                    io.stderr,
                    "gantry: `{name}` has syntax errors; not formatted"
                );
                findings = true;
                continue;
            }
        };
        if formatted == text {
            continue;
        }
        changed += 1;
        if check {
            findings = true;
            // A deadline keeps huge files fast: past it the diff is still correct, only
            // not always the smallest.
            let diff = similar::TextDiff::configure()
                .timeout(std::time::Duration::from_secs(1))
                .diff_lines(&text, &formatted);
            let _ = write!(
                io.stdout,
                "{}",
                diff.unified_diff()
                    .context_radius(3)
                    .header(&format!("{name} (current)"), &format!("{name} (formatted)"))
            );
        } else if let Err(e) = {
            if !signals_handled {
                safe_write::clean_up_on_signals();
                signals_handled = true;
            }
            safe_write::replace(path, &formatted)
        } {
            return fail(io, format!("cannot write `{name}`: {e}"));
        } else {
            let _ = writeln!(io.stderr, "formatted {name}");
        }
    }
    if check {
        let _ = writeln!(
            io.stderr,
            "{changed} of {total} files {} formatting",
            if changed == 1 { "needs" } else { "need" }
        );
    }
    if findings {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    }
}

/// Formats standard input to standard output.
fn stdin(io: &mut Io<'_>) -> u8 {
    let mut text = String::new();
    if let Err(e) = io.stdin.read_to_string(&mut text) {
        return fail(io, format!("cannot read standard input: {e}"));
    }
    match lang::format::format_source(&text) {
        Ok(f) => {
            let _ = io.stdout.write_all(f.as_bytes());
            EXIT_OK
        }
        Err(diags) => {
            let mut sources = SourceMap::new();
            sources.add("<stdin>", text.clone());
            for d in diags {
                let _ = write!(io.stderr, "{}", d.render(&sources, io.color));
            }
            EXIT_FINDINGS
        }
    }
}
