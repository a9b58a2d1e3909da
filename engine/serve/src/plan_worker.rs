//! `/v1/plan` computations run on one thread of their own at the lowest CPU priority
//! (nice 19), so that on a small machine admission and the extender, on the runtime's
//! workers, get the CPU first: a plan only uses what they leave. Requests are admitted
//! one at a time by `AppState::plan_slot` before they are queued here, so the queue holds
//! at most one.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

type Work = Box<dyn FnOnce() + Send>;

static WORKER: OnceLock<Mutex<Sender<Work>>> = OnceLock::new();

fn start() -> Mutex<Sender<Work>> {
    let (tx, rx) = channel::<Work>();
    let spawned = std::thread::Builder::new()
        .name("gantry-plan".into())
        .spawn(move || {
            lower_priority();
            for work in rx {
                // A panic in one plan must not take the thread down for the next.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the plan thread; /v1/plan will answer 500");
    }
    Mutex::new(tx)
}

#[cfg(unix)]
fn lower_priority() {
    // On Linux the nice value is per thread: this thread only.
    if let Err(error) = rustix::process::setpriority_process(None, 19) {
        tracing::warn!(%error, "cannot lower the plan thread's priority");
    }
}

#[cfg(not(unix))]
fn lower_priority() {}

/// Runs `f` on the plan thread; `None` when the thread is gone.
pub async fn run<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let work: Work = Box::new(move || {
        let _ = tx.send(f());
    });
    let sent = WORKER
        .get_or_init(start)
        .lock()
        .ok()
        .is_some_and(|w| w.send(work).is_ok());
    if !sent {
        return None;
    }
    rx.await.ok()
}
