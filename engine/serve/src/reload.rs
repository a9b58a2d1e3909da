//! Watching the policy directory and reading it only once it is stable.
//!
//! A policy goes live only when two reads `STABLE_GAP` apart, with no change event
//! between them, give the same content hash: a file written in two parts is not served
//! half-written unless its writer pauses longer than that. Updates should still be atomic
//! (a ConfigMap's symlink swap, or write-then-rename); the README says so.
//!
//! The watch is on the directory itself, so deleting it and making it again ends the
//! watch; where a symlink leads to it (git-sync's `current`), the symlink's parent is
//! watched too, so a swap is seen at once. The directory's identity (device and inode) is checked after every change and
//! every tick; while it is missing or replaced it is looked at every `REWATCH_EVERY`, and
//! watched again (and the policy read) as soon as it is back.

use super::state::{read_policy, PolicyRead};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// Two reads this far apart must agree before a policy goes live.
pub const STABLE_GAP: Duration = Duration::from_millis(500);
/// Reads tried before giving up until the next change or tick (about 5 s of churn).
const STABLE_TRIES: usize = 10;
/// How often a missing or replaced policy directory is looked for.
pub const REWATCH_EVERY: Duration = Duration::from_millis(250);

/// A directory's identity: (device, inode) where the platform has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirId(u64, u64);

fn identity(dir: &Path) -> Option<DirId> {
    let meta = std::fs::metadata(dir)
        .ok()
        .filter(std::fs::Metadata::is_dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(DirId(meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        drop(meta);
        Some(DirId(0, 0))
    }
}

/// The notify watcher on the policy directory, renewed when the directory is replaced.
pub struct PolicyWatch {
    dir: PathBuf,
    changed: UnboundedSender<()>,
    watcher: Option<notify::RecommendedWatcher>,
    watched: Option<DirId>,
}

impl std::fmt::Debug for PolicyWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyWatch")
            .field("dir", &self.dir)
            .field("watched", &self.watched)
            .finish_non_exhaustive()
    }
}

impl PolicyWatch {
    /// Starts watching `dir`; every change that is not a read sends on `changed`.
    pub fn start(dir: &Path, changed: UnboundedSender<()>) -> Result<PolicyWatch, String> {
        let watcher = watch_dir(dir, changed.clone())?;
        Ok(PolicyWatch {
            dir: dir.to_path_buf(),
            changed,
            watcher: Some(watcher),
            watched: identity(dir),
        })
    }

    /// Whether the watched directory is gone or is no longer the one watched.
    pub fn lost(&self) -> bool {
        identity(&self.dir) != self.watched
    }

    /// Watches the directory again if it is back; `true` when it did (and a change was
    /// sent, so the policy is read again).
    pub fn rewatch(&mut self) -> bool {
        let Some(now) = identity(&self.dir) else {
            self.watcher = None;
            return false;
        };
        if Some(now) == self.watched && self.watcher.is_some() {
            return false;
        }
        match watch_dir(&self.dir, self.changed.clone()) {
            Ok(w) => {
                self.watcher = Some(w);
                self.watched = Some(now);
                tracing::info!(dir = %self.dir.display(), "policy directory is back; watching it again");
                let _ = self.changed.send(());
                true
            }
            Err(error) => {
                tracing::warn!(%error, "policy directory is back but cannot be watched yet");
                false
            }
        }
    }
}

fn same(a: &PolicyRead, b: &PolicyRead) -> bool {
    match (a, b) {
        (Ok((_, x)), Ok((_, y))) => x == y,
        (Err(x), Err(y)) => x == y,
        _ => false,
    }
}

async fn read(dir: &Path) -> PolicyRead {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || read_policy(&dir))
        .await
        .unwrap_or_else(|e| Err(format!("reading the policy failed: {e}")))
}

/// The policy's files once two reads `STABLE_GAP` apart agree and no change arrived in
/// between; `None` when they kept changing (the next change or tick tries again).
pub async fn stable_read(dir: &Path, changes: &mut UnboundedReceiver<()>) -> Option<PolicyRead> {
    let mut last = read(dir).await;
    for _ in 0..STABLE_TRIES {
        tokio::time::sleep(STABLE_GAP).await;
        let mut quiet = true;
        while changes.try_recv().is_ok() {
            quiet = false;
        }
        let again = read(dir).await;
        if quiet && same(&last, &again) {
            return Some(again);
        }
        last = again;
    }
    tracing::warn!(
        dir = %dir.display(),
        "policy files are still changing; the current policy keeps serving until they settle"
    );
    None
}

/// Watches `dir`; every change that is not a read sends on `changed`. The watcher lives
/// as long as the returned value.
fn watch_dir(
    dir: &Path,
    changed: UnboundedSender<()>,
) -> Result<notify::RecommendedWatcher, String> {
    use notify::Watcher;
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reading the files (as a reload does) is not a change.
        if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = changed.send(());
        }
    })
    .map_err(|e| format!("cannot watch `{}`: {e}", dir.display()))?;
    watcher
        .watch(dir, notify::RecursiveMode::Recursive)
        .map_err(|e| format!("cannot watch `{}`: {e}", dir.display()))?;
    // A symlink on the way to `dir` (git-sync's `current`) is swapped by a rename in its
    // parent, which the watch above (on the old target) never sees.
    for link in dir
        .ancestors()
        .filter(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()))
    {
        if let Some(parent) = link.parent().filter(|p| !p.as_os_str().is_empty()) {
            watcher
                .watch(parent, notify::RecursiveMode::NonRecursive)
                .map_err(|e| format!("cannot watch `{}`: {e}", parent.display()))?;
        }
    }
    Ok(watcher)
}
