//! Replay traces: the contract's JSON Lines (job arrivals and node events, in time order,
//! or a JSON array of jobs) or a timed openb pod CSV. Every problem names the file and line.

use super::fill::Pod;
use super::openb::PodTimes;
use crate::core::gang::JobShape;
use crate::inventory::jobs_file::{self, rfc3339_seconds, Job};
use serde::Deserialize;

/// Arrivals (pending jobs with `submitted_at` and `runtime_s`) and node events, each in
/// time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub jobs: Vec<Job>,
    pub events: Vec<NodeEvent>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    pub at: i64,
    pub kind: NodeEventKind,
    pub node: String,
    pub line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeEventKind {
    /// The node fails: its jobs stop at once and are queued again from their checkpoint.
    NodeDown,
    /// A failed node is back.
    NodeUp,
    /// A spot reclaim notice: jobs get the pool's `notice`, then the node is gone.
    SpotInterrupt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventEntry {
    at: serde_json::Value,
    event: NodeEventKind,
    node: String,
}

/// Parses a JSON Lines trace (jobs and `{"at", "event", "node"}` lines) or a JSON array
/// of jobs. Jobs need `submitted_at` and `runtime_s` and must not be running yet; lines
/// must be in time order.
pub fn parse(file: &str, text: &str) -> Result<Trace, TraceError> {
    let err = |line: usize, message: String| TraceError {
        file: file.to_string(),
        line,
        message,
    };
    let mut events = Vec::new();
    // Node events are read first; the other lines are jobs, read in place (a year's
    // trace is hundreds of MB: no copy of its job lines is made).
    let mut is_event = Vec::new();
    let json_lines = !text.trim_start().starts_with('[');
    if json_lines {
        for (i, l) in text.lines().enumerate() {
            let event = l.contains("\"event\"")
                && serde_json::from_str::<serde_json::Value>(l)
                    .is_ok_and(|v| v.get("event").is_some());
            is_event.push(event);
            if !event {
                continue;
            }
            let entry: EventEntry = serde_json::from_str(l).map_err(|e| {
                let m = e.to_string();
                err(i + 1, m.split(" at line ").next().unwrap_or(&m).to_string())
            })?;
            let at = time(&entry.at).ok_or_else(|| {
                err(
                    i + 1,
                    format!(
                        "field `at`: `{}` is not a time; give seconds or RFC 3339",
                        entry.at
                    ),
                )
            })?;
            events.push(NodeEvent {
                at,
                kind: entry.event,
                node: entry.node,
                line: i + 1,
            });
        }
    }
    let parsed = if json_lines {
        let job_lines = text
            .lines()
            .enumerate()
            .filter(|(i, _)| !is_event.get(*i).copied().unwrap_or(false))
            .map(|(i, l)| (i + 1, l));
        jobs_file::parse_lines(file, job_lines, is_event.len() - events.len())
    } else {
        jobs_file::parse(file, text)
    };
    let jobs = parsed.map_err(|e| TraceError {
        file: e.file.clone(),
        line: e.line,
        message: match &e.field {
            Some(f) => format!("field `{f}`: {}", e.message),
            None => e.message.clone(),
        },
    })?;
    for job in &jobs {
        let missing = |field: &str, what: &str| {
            err(
                job.line,
                format!("job `{}`: a trace job needs `{field}` ({what})", job.id),
            )
        };
        if job.submitted_at.is_none() {
            return Err(missing("submitted_at", "when it arrives"));
        }
        if job.runtime_s.is_none() {
            return Err(missing("runtime_s", "how long it runs once started"));
        }
        if !job.placement.is_empty() || job.started_at.is_some() {
            return Err(err(
                job.line,
                format!(
                    "job `{}`: a trace holds arrivals; `placement` and `started_at` belong in jobs files",
                    job.id
                ),
            ));
        }
    }
    check_order(file, &jobs, &events)?;
    Ok(Trace { jobs, events })
}

/// Lines must not go back in time; the first that does is named with the one before.
fn check_order(file: &str, jobs: &[Job], events: &[NodeEvent]) -> Result<(), TraceError> {
    let mut lines: Vec<(usize, i64)> = jobs
        .iter()
        .map(|j| (j.line, j.submitted_at.unwrap_or(0)))
        .chain(events.iter().map(|e| (e.line, e.at)))
        .collect();
    lines.sort_unstable();
    for pair in lines.windows(2) {
        if let [(l0, t0), (l1, t1)] = pair {
            if t1 < t0 {
                return Err(TraceError {
                    file: file.to_string(),
                    line: *l1,
                    message: format!(
                        "time {t1} is before line {l0}'s {t0}; a trace is replayed in time order, so sort it by time first"
                    ),
                });
            }
        }
    }
    Ok(())
}

fn time(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::Number(n) => n
            .as_f64()
            .filter(|s| s.is_finite() && s.abs() < 1e15)
            .map(|s| s.floor() as i64),
        serde_json::Value::String(s) => rfc3339_seconds(s),
        _ => None,
    }
}

/// A timed openb pod list as arrivals: creation time → `submitted_at`, deletion minus
/// scheduled time → `runtime_s`. Pods the original cluster never scheduled run from
/// creation to deletion; pods never deleted run to the trace's last timestamp. Sorted by
/// creation time (ties by line).
pub fn from_openb(pods: Vec<(Pod, PodTimes)>) -> Trace {
    let end = pods
        .iter()
        .flat_map(|(_, t)| [Some(t.creation), t.scheduled, t.deletion])
        .flatten()
        .max()
        .unwrap_or(0);
    let mut jobs: Vec<Job> = pods
        .into_iter()
        .map(|(pod, t)| {
            let from = t.scheduled.unwrap_or(t.creation);
            let runtime = t.deletion.unwrap_or(end).saturating_sub(from).max(0);
            Job {
                id: pod.name,
                line: t.line,
                shape: JobShape {
                    members: 1,
                    member: pod.request,
                    ..JobShape::default()
                },
                submitted_at: Some(t.creation),
                runtime_s: Some(runtime.unsigned_abs()),
                ..Job::default()
            }
        })
        .collect();
    jobs.sort_by_key(|j| (j.submitted_at, j.line));
    Trace {
        jobs,
        events: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_jobs_and_events_in_order() {
        let text = r#"{"id": "a", "submitted_at": 0, "runtime_s": 60, "gpus_per_member": 1}
{"at": 30, "event": "node_down", "node": "n1"}

{"id": "b", "submitted_at": "1970-01-01T00:01:00Z", "runtime_s": 5, "gpus_per_member": 2}
"#;
        let trace = parse("t.jsonl", text);
        let trace = trace.unwrap_or_default();
        assert_eq!(trace.jobs.len(), 2);
        assert_eq!(
            trace.jobs.get(1).map(|j| (j.line, j.submitted_at)),
            Some((4, Some(60)))
        );
        assert_eq!(
            trace.events,
            vec![NodeEvent {
                at: 30,
                kind: NodeEventKind::NodeDown,
                node: "n1".into(),
                line: 2
            }]
        );
    }

    #[test]
    fn bad_traces_name_the_line() {
        let cases = [
            (
                "{\"id\": \"a\", \"submitted_at\": 10, \"runtime_s\": 1}\n{\"id\": \"b\", \"submitted_at\": 5, \"runtime_s\": 1}\n",
                "t.jsonl:2: time 5 is before line 1's 10",
            ),
            (
                "{\"id\": \"a\", \"submitted_at\": 10}\n",
                "t.jsonl:1: job `a`: a trace job needs `runtime_s`",
            ),
            (
                "{\"id\": \"a\", \"submitted_at\": 1, \"runtime_s\": 1, \"colour\": 1}\n",
                "t.jsonl:1: field `colour`: unknown field",
            ),
            (
                "{\"at\": 1, \"event\": \"node_explodes\", \"node\": \"x\"}\n",
                "t.jsonl:1: unknown variant `node_explodes`",
            ),
            (
                "{\"at\": 1, \"event\": \"node_down\", \"node\": \"x\", \"why\": 1}\n",
                "t.jsonl:1: unknown field `why`",
            ),
        ];
        for (text, want) in cases {
            let got = parse("t.jsonl", text).err().map(|e| e.to_string());
            assert!(
                got.as_deref().is_some_and(|g| g.starts_with(want)),
                "{got:?} should start with {want:?}"
            );
        }
    }

    #[test]
    fn openb_pods_become_arrivals() {
        let csv = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
                   p2,1000,100,1,500,,LS,Running,50,400,100\n\
                   p1,1000,100,1,1000,,LS,Pending,10,70,\n";
        let pods = super::super::openb::parse_timed_pods("p.csv", csv).unwrap_or_default();
        let trace = from_openb(pods);
        let got: Vec<(String, Option<i64>, Option<u64>)> = trace
            .jobs
            .iter()
            .map(|j| (j.id.clone(), j.submitted_at, j.runtime_s))
            .collect();
        assert_eq!(
            got,
            vec![
                ("p1".to_string(), Some(10), Some(60)),
                ("p2".to_string(), Some(50), Some(300))
            ]
        );
    }
}
