//! The decision log of what the queue carries out: a placement and a waiting reason each
//! get one structured line under `gantry::decision`, as `--log-format json` writes them.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

mod apiserver;
mod harness;

use apiserver::Kind;
use harness::*;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tracing::instrument::WithSubscriber;

/// Log lines written into memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placements_and_waits_are_logged_one_line_each() {
    let h = harness().await;
    h.api
        .apply(Kind::Pods, gated("p-0", "alpha", "best_effort", 8, None));
    h.api.apply(
        Kind::Pods,
        gated("g-0", "alpha", "best_effort", 8, Some(("g", 2))),
    );
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_env_filter("info")
        .with_writer(move || writer.clone())
        .finish();
    let (actions, done) = h.cycle().with_subscriber(subscriber).await;
    assert_eq!(done, actions.len(), "{actions:?}");
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["target"] == "gantry::decision")
        .collect();
    let decisions: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            let f = &l["fields"];
            (
                f["decision"].as_str().unwrap().to_string(),
                f["pod"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // The assignment is the placement's first phase: at debug level, not shown here.
    assert_eq!(
        decisions,
        [
            ("place".to_string(), "p-0".to_string()),
            ("wait".to_string(), "g-0".to_string())
        ],
        "{text}"
    );
    let place = &lines[0]["fields"];
    assert!(!place["node"].as_str().unwrap().is_empty(), "{place}");
    assert_eq!(lines[1]["fields"]["reason"], "GangIncomplete");
    assert_eq!(place["dropped"], 0);
}
