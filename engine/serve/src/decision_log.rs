//! The decision log: one structured line per admission decision and per decision the
//! queue carries out (placement, eviction with its cause, a waiting reason that changed),
//! under the tracing target `gantry::decision`, so `--log-format json` makes them JSON
//! and `RUST_LOG=gantry::decision=off` turns them off. A token bucket bounds the lines
//! per second, so a storm of requests cannot fill a disk: lines over the bound are
//! dropped and counted, and the next line written says how many (`dropped`).

use super::admission::Outcome;
use std::sync::Mutex;
use std::time::Instant;

/// The tracing target of every decision line.
pub const TARGET: &str = "gantry::decision";

/// Lines per second on average, and how many may come at once.
const RATE_PER_S: f64 = 100.0;
const BURST: f64 = 500.0;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Option<Instant>,
    dropped: u64,
}

/// A token bucket shared by every decision line of the process.
#[derive(Debug)]
pub struct Limiter {
    bucket: Mutex<Bucket>,
    rate_per_s: f64,
    burst: f64,
}

impl Limiter {
    pub const fn new(rate_per_s: f64, burst: f64) -> Limiter {
        Limiter {
            bucket: Mutex::new(Bucket {
                tokens: burst,
                last: None,
                dropped: 0,
            }),
            rate_per_s,
            burst,
        }
    }

    /// Whether a line may be written at `now`; if so, how many were dropped since the
    /// last one written.
    pub fn admit(&self, now: Instant) -> Option<u64> {
        let mut b = match self.bucket.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(last) = b.last {
            let refill = now.saturating_duration_since(last).as_secs_f64() * self.rate_per_s;
            b.tokens = (b.tokens + refill).min(self.burst);
        }
        b.last = Some(now);
        if b.tokens < 1.0 {
            b.dropped += 1;
            return None;
        }
        b.tokens -= 1.0;
        Some(std::mem::take(&mut b.dropped))
    }
}

static LIMIT: Limiter = Limiter::new(RATE_PER_S, BURST);

/// Whether a decision line at `level` is wanted and within the bound; how many were
/// dropped before it.
pub fn admit(level: tracing::Level) -> Option<u64> {
    let wanted = if level == tracing::Level::DEBUG {
        tracing::enabled!(target: TARGET, tracing::Level::DEBUG)
    } else {
        tracing::enabled!(target: TARGET, tracing::Level::INFO)
    };
    if !wanted {
        return None;
    }
    LIMIT.admit(Instant::now())
}

/// The line for one admission decision. Pods passed through untouched (not a GPU pod, an
/// update that changes nothing scheduling reads, …) are logged at debug level.
pub fn admission(endpoint: &str, outcome: &Outcome, revision: &str) {
    let pass = outcome.action == "pass";
    let level = if pass {
        tracing::Level::DEBUG
    } else {
        tracing::Level::INFO
    };
    let Some(dropped) = admit(level) else {
        return;
    };
    let namespace = outcome.namespace.as_deref().unwrap_or("");
    let pod = outcome.pod.as_deref().unwrap_or("");
    let detail = outcome.message.as_deref().unwrap_or("");
    if pass {
        tracing::debug!(
            target: TARGET,
            decision = "admission",
            endpoint,
            namespace,
            pod,
            operation = %outcome.operation,
            result = outcome.action,
            reason = %outcome.reason,
            revision,
            dry_run = outcome.dry_run,
            dropped,
            "admission: pass"
        );
    } else {
        tracing::info!(
            target: TARGET,
            decision = "admission",
            endpoint,
            namespace,
            pod,
            operation = %outcome.operation,
            result = outcome.action,
            rule = %outcome.reason,
            detail,
            revision,
            dry_run = outcome.dry_run,
            repeat = outcome.repeat,
            dropped,
            "admission: {} {namespace}/{pod} ({})",
            outcome.action,
            outcome.reason
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_storm_is_cut_to_the_burst_and_the_next_line_counts_what_was_dropped() {
        let limiter = Limiter::new(10.0, 5.0);
        let t0 = Instant::now();
        let written = (0..100).filter(|_| limiter.admit(t0).is_some()).count();
        assert_eq!(written, 5);
        // A second later the bucket is full again; its first line reports the 95 dropped.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(limiter.admit(later), Some(95));
        assert_eq!(limiter.admit(later), Some(0));
        // The bucket holds at most the burst: 3 more lines, then nothing.
        let more = (0..100).filter(|_| limiter.admit(later).is_some()).count();
        assert_eq!(more, 3);
    }
}
