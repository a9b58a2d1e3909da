//! Loading a policy directory or file for commands that run it.

use super::files::{self, read_text};
use super::{fail, Io};
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

/// A directory's own policy when it has `.gantry` files, else the one policy under it.
pub(crate) fn one_policy(path: &Path, found: Vec<files::Policy>) -> Result<files::Policy, String> {
    if found.len() == 1 {
        return found.into_iter().next().ok_or_else(String::new);
    }
    let dirs: Vec<String> = found
        .iter()
        .filter_map(|p| p.files.first()?.parent().map(|d| d.display().to_string()))
        .collect();
    found
        .into_iter()
        .find(|p| p.files.first().and_then(|f| f.parent()) == Some(path))
        .ok_or_else(|| {
            format!(
                "`{}` holds {} policies ({}); name one directory",
                path.display(),
                dirs.len(),
                dirs.join(", ")
            )
        })
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

/// FNV-1a (64 bit): stable across runs and platforms, unlike the std hasher.
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// FNV-1a over each file's name and text.
pub(crate) fn content_hash(inputs: &[(String, String)]) -> String {
    let h = fnv1a(inputs.iter().flat_map(|(name, text)| {
        let file = Path::new(name)
            .file_name()
            .map_or_else(|| name.clone(), |f| f.to_string_lossy().into_owned());
        let text = text.as_bytes().iter().copied();
        file.into_bytes()
            .into_iter()
            .chain([0])
            .chain(text)
            .chain([0])
    }));
    format!("fnv1a:{h:016x}")
}
