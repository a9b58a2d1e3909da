//! Helpers the binary's test files share.

use std::path::{Path, PathBuf};

/// The repository root (`engine/gantry` is two levels down).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Process output as text.
#[allow(dead_code, reason = "not every test file prints output")]
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
