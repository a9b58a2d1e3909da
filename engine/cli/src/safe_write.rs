//! Replacing a file's contents in place without ever leaving it half-written, redirected
//! or with other permissions: a unique temporary file next to the real target (created
//! exclusively, so a planted link is never followed), the target's mode and owner, fsync
//! of the file and of its directory, then a rename. A symlinked target stays a symlink
//! (the file it points to is replaced); a read-only target is refused. The temporary file
//! is removed on any failure, and on Ctrl-C or SIGTERM while it exists.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The temporary file that exists right now, for the signal handler to remove.
static PENDING: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Why a file was not replaced.
#[derive(Debug)]
pub enum WriteError {
    /// The target may not be written (read-only mode, or not writable by this user).
    ReadOnly,
    /// Its owner could not be kept (writing would hand the file to this user).
    Owner,
    Io(std::io::Error),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::ReadOnly => write!(
                f,
                "the file is read-only; make it writable (chmod u+w) to format it, or use `gantry fmt --check`"
            ),
            WriteError::Owner => write!(
                f,
                "its owner could not be kept (run as its owner, or as root)"
            ),
            WriteError::Io(e) => write!(f, "{}", files::describe(e)),
        }
    }
}

impl From<std::io::Error> for WriteError {
    fn from(e: std::io::Error) -> Self {
        WriteError::Io(e)
    }
}

/// Replaces the contents of the file at `path` (following a symlink to its target).
pub fn replace(path: &Path, text: &str) -> Result<(), WriteError> {
    let target = std::fs::canonicalize(path)?;
    let meta = std::fs::metadata(&target)?;
    if meta.permissions().readonly() || !writable(&target) {
        return Err(WriteError::ReadOnly);
    }
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".gantry-fmt.tmp")
        .tempfile_in(dir)?;
    set_pending(Some(tmp.path().to_path_buf()));
    let result = (|| {
        tmp.as_file().set_permissions(meta.permissions())?;
        keep_owner(tmp.as_file(), &meta)?;
        tmp.write_all(text.as_bytes())?;
        tmp.as_file().sync_all()?;
        Ok::<(), WriteError>(())
    })();
    let result = result.and_then(|()| {
        // On failure `persist` hands the file back, and dropping it removes it.
        tmp.persist(&target).map_err(|e| WriteError::Io(e.error))?;
        Ok(())
    });
    set_pending(None);
    result?;
    sync_dir(dir);
    Ok(())
}

/// Removes the temporary file when the process is interrupted while one exists. Call
/// once before writing; the handler runs on its own thread.
pub fn clean_up_on_signals() {
    let spawned = std::thread::Builder::new()
        .name("fmt-signals".into())
        .spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                #[cfg(unix)]
                {
                    use tokio::signal::unix::{signal, SignalKind};
                    let (Ok(mut int), Ok(mut term)) = (
                        signal(SignalKind::interrupt()),
                        signal(SignalKind::terminate()),
                    ) else {
                        return;
                    };
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                #[cfg(not(unix))]
                {
                    if tokio::signal::ctrl_c().await.is_err() {
                        return;
                    }
                }
                if let Some(p) = PENDING.lock().ok().and_then(|mut g| g.take()) {
                    let _ = std::fs::remove_file(p);
                }
                std::process::exit(130);
            });
        });
    drop(spawned);
}

fn set_pending(path: Option<PathBuf>) {
    if let Ok(mut g) = PENDING.lock() {
        *g = path;
    }
}

/// Whether this user may open the file for writing (the mode bits alone do not say so
/// for files owned by others).
fn writable(path: &Path) -> bool {
    std::fs::OpenOptions::new().append(true).open(path).is_ok()
}

#[cfg(unix)]
fn keep_owner(file: &std::fs::File, meta: &std::fs::Metadata) -> Result<(), WriteError> {
    use std::os::unix::fs::MetadataExt;
    let now = file.metadata()?;
    if now.uid() == meta.uid() && now.gid() == meta.gid() {
        return Ok(());
    }
    std::os::unix::fs::fchown(file, Some(meta.uid()), Some(meta.gid()))
        .map_err(|_| WriteError::Owner)
}

#[cfg(not(unix))]
fn keep_owner(_file: &std::fs::File, _meta: &std::fs::Metadata) -> Result<(), WriteError> {
    Ok(())
}

/// Makes the rename durable. Best effort: some filesystems do not sync directories.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}
