//! Finding and reading policy files for the shells (the CLI, the service, the language
//! server). A directory of `.gantry` files is one policy; files named on the command line
//! form a policy with the other named files of their directory. A policy's revision is a
//! content hash of its files ([`content_hash`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A policy: the files of one directory, in path order.
#[derive(Debug)]
pub struct Policy {
    pub files: Vec<PathBuf>,
    /// When the files were named one by one (not found under a directory argument): those
    /// files. `gantry check` then checks the whole directory and reports for these.
    pub named: Option<Vec<PathBuf>>,
}

/// What went wrong finding files; shown as `gantry: ...` with exit code 2.
#[derive(Debug)]
pub struct FindError(pub String);

/// The default paths: `policies/` when it exists, else the current directory.
pub fn default_paths(paths: &[PathBuf]) -> Vec<PathBuf> {
    if !paths.is_empty() {
        return paths.to_vec();
    }
    let policies = PathBuf::from("policies");
    vec![if policies.is_dir() {
        policies
    } else {
        PathBuf::from(".")
    }]
}

/// Every `.gantry` file under the paths, grouped into policies by directory.
pub fn find_policies(paths: &[PathBuf]) -> Result<Vec<Policy>, FindError> {
    let mut by_dir: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    let mut whole: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| cannot_read(path, &e))?;
        if meta.is_dir() {
            let mut found = Vec::new();
            walk(path, &mut found, 0)?;
            if found.is_empty() {
                return Err(FindError(format!(
                    "no policy files (`*.gantry`) under `{}`",
                    path.display()
                )));
            }
            for f in found {
                whole.insert(parent(&f));
                by_dir.entry(parent(&f)).or_default().push(f);
            }
        } else {
            by_dir.entry(parent(path)).or_default().push(path.clone());
        }
    }
    Ok(by_dir
        .into_iter()
        .map(|(dir, mut files)| {
            files.sort();
            files.dedup();
            let named = (!whole.contains(&dir)).then(|| files.clone());
            Policy { files, named }
        })
        .collect())
}

/// The `.gantry` files of `dir` itself (not below it), sorted: the policy a named file
/// belongs to.
pub fn siblings(dir: &Path) -> Result<Vec<PathBuf>, FindError> {
    let entries = std::fs::read_dir(dir).map_err(|e| cannot_read(dir, &e))?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "gantry"))
        .collect();
    out.sort();
    Ok(out)
}

fn parent(p: &Path) -> PathBuf {
    p.parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

const MAX_DEPTH: usize = 32;

fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<(), FindError> {
    walk_for(dir, out, depth, ".gantry")
}

/// Files under `paths` (or the paths themselves) whose names end in `suffix`, sorted.
pub fn find_files(paths: &[PathBuf], suffix: &str) -> Result<Vec<PathBuf>, FindError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| cannot_read(path, &e))?;
        if meta.is_dir() {
            walk_for(path, &mut out, 0, suffix)?;
        } else {
            out.push(path.clone());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk_for(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    depth: usize,
    suffix: &str,
) -> Result<(), FindError> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| {
        FindError(format!(
            "cannot read directory `{}`: {}",
            dir.display(),
            describe(&e)
        ))
    })?;
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                walk_for(&path, out, depth + 1, suffix)?;
            }
        } else if name.ends_with(suffix) {
            out.push(path);
        }
    }
    Ok(())
}

fn cannot_read(path: &Path, e: &std::io::Error) -> FindError {
    FindError(format!("cannot read `{}`: {}", path.display(), describe(e)))
}

pub fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// A file's contents: text, or where its bytes stop being UTF-8.
#[derive(Debug)]
pub enum Contents {
    Text(String),
    NotUtf8 { lossy: String, valid_up_to: usize },
}

/// Files larger than this are refused rather than parsed.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

pub fn read(path: &Path) -> Result<Contents, FindError> {
    let meta = std::fs::metadata(path).map_err(|e| cannot_read(path, &e))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(FindError(format!(
            "`{}` is {} MiB; policy files are limited to {} MiB",
            path.display(),
            meta.len() / (1024 * 1024),
            MAX_FILE_BYTES / (1024 * 1024)
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| cannot_read(path, &e))?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => Contents::Text(text),
        Err(e) => {
            let valid_up_to = e.utf8_error().valid_up_to();
            Contents::NotUtf8 {
                lossy: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                valid_up_to,
            }
        }
    })
}

/// How a path is shown in diagnostics: relative, with `/` separators.
pub fn display_name(path: &Path) -> String {
    let s = path.to_string_lossy().replace('\\', "/");
    s.strip_prefix("./").map(str::to_string).unwrap_or(s)
}

/// Reads a UTF-8 text file for a command: `(display name, text)` or a message.
pub fn read_text(path: &Path) -> Result<(String, String), String> {
    match read(path) {
        Ok(Contents::Text(t)) => Ok((display_name(path), t)),
        Ok(Contents::NotUtf8 { valid_up_to, .. }) => Err(format!(
            "`{}` is not UTF-8 text (invalid byte at offset {valid_up_to})",
            path.display()
        )),
        Err(e) => Err(e.0),
    }
}

/// A directory's own policy when it has `.gantry` files, else the one policy under it.
pub fn one_policy(path: &Path, found: Vec<Policy>) -> Result<Policy, String> {
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

/// FNV-1a (64 bit): stable across runs and platforms, unlike the std hasher.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// FNV-1a over each file's name and text.
pub fn content_hash(inputs: &[(String, String)]) -> String {
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
