//! Loading a policy directory or file for commands that run it.

use super::{fail, Io};
use files::{self, content_hash, one_policy, read_text};
use lang::ir::Program;
use std::io::Write;
use std::path::Path;

/// Checks the policy at `path`; prints its diagnostics and fails if it has errors.
pub fn load(path: &Path, io: &mut Io<'_>) -> Result<Program, u8> {
    load_with_revision(path, io).map(|(program, _)| program)
}

/// [`load`], and the policy's revision: a content hash of its files (names and text).
pub fn load_with_revision(path: &Path, io: &mut Io<'_>) -> Result<(Program, String), u8> {
    let found = files::find_policies(&[path.to_path_buf()]).map_err(|e| fail(io, e.0))?;
    let policy = one_policy(path, found).map_err(|e| fail(io, e))?;
    let mut inputs = Vec::new();
    for file in &policy.files {
        inputs.push(read_text(file).map_err(|e| fail(io, e))?);
    }
    load_sources(&path.display().to_string(), inputs, io)
}

/// Checks a policy given as (file name, text) pairs, e.g. read from a git revision.
pub fn load_sources(
    label: &str,
    inputs: Vec<(String, String)>,
    io: &mut Io<'_>,
) -> Result<(Program, String), u8> {
    let revision = content_hash(&inputs);
    let checked = lang::check(&inputs);
    match checked.program {
        Some(program) => Ok((program, revision)),
        None => {
            for d in &checked.diagnostics {
                let _ = write!(io.stderr, "{}", d.render(&checked.sources, io.color));
            }
            Err(fail(
                io,
                format!("policy `{label}` has errors; run `gantry check`"),
            ))
        }
    }
}
