//! Loading a policy directory or file for commands that run it.

use super::files::{self, read_text};
use super::{fail, Io};
use lang::ir::Program;
use std::io::Write;
use std::path::Path;

/// Checks the policy at `path`; prints its diagnostics and fails if it has errors.
pub fn load(path: &Path, io: &mut Io<'_>) -> Result<Program, u8> {
    let found = files::find_policies(&[path.to_path_buf()]).map_err(|e| fail(io, e.0))?;
    let mut inputs = Vec::new();
    for file in found.iter().flat_map(|p| p.files.iter()) {
        inputs.push(read_text(file).map_err(|e| fail(io, e))?);
    }
    let checked = lang::check(&inputs);
    match checked.program {
        Some(program) => Ok(program),
        None => {
            for d in &checked.diagnostics {
                let _ = write!(io.stderr, "{}", d.render(&checked.sources, io.color));
            }
            Err(fail(
                io,
                format!("policy `{}` has errors; run `gantry check`", path.display()),
            ))
        }
    }
}
