//! Job files (the contract format): a JSON array of jobs or JSON Lines, one job per line.
//! Each job has an id, queue attributes (team, tier, submit time, estimates) and a shape;
//! a running job also has its placement, start and last checkpoint. Times are seconds or
//! RFC 3339.

use crate::core::alloc::Request;
use crate::core::fleet::MILLI;
use crate::core::gang::JobShape;
use lang::ir::TopologyLevel;
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsError {
    pub file: String,
    pub line: usize,
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for JobsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file, self.line)?;
        if let Some(field) = &self.field {
            write!(f, "field `{field}`: ")?;
        }
        write!(f, "{}", self.message)
    }
}

/// A job as read: its id, queue attributes, shape and, when running, where it runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Job {
    pub id: String,
    /// Line of the job in its file, for errors found later (placement, duplicates).
    pub line: usize,
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub user: Option<String>,
    pub team: Option<String>,
    pub tier: Option<String>,
    pub shape: JobShape,
    pub submitted_at: Option<i64>,
    /// What the scheduler is told the job runs for: the user's estimate or time limit.
    pub runtime_s: Option<u64>,
    /// Where `runtime_s` is an estimate only its owner stands behind (a pod's
    /// `gantry.dev/runtime`), the longer limit that is enforced (its
    /// `activeDeadlineSeconds`): what it is planned with once it has run past the
    /// estimate. From pods, or a trace (`gantry trace import` of pods).
    pub runtime_limit_s: Option<u64>,
    /// `runtime_s` is an estimate nobody enforces: a replay runs the job to its
    /// `actual_runtime_s` past it (up to `runtime_limit_s`, if given), planned with the
    /// estimate while it holds, then with the limit, then with none.
    pub estimate_only: bool,
    /// In a replayed trace, how long it really runs (the decisions never see it): it ends
    /// then, or at `runtime_s` if that comes first (a limit, as Slurm's TIMEOUT).
    pub actual_runtime_s: Option<u64>,
    /// In a replayed trace, the runs before the last that were stopped from outside (a
    /// node failure, a preemption or a requeue the source recorded), seconds each: the
    /// replay stops the job once it has run each, losing the work since its last
    /// checkpoint, and queues it again.
    pub interrupted_after_s: Vec<u64>,
    pub checkpoint_interval_s: Option<u64>,
    /// For a gang whose members arrive one by one (pods of a gang label): how many have
    /// arrived; `None` when all have.
    pub members_present: Option<u32>,
    pub interactive: bool,
    pub preemptions: u32,
    pub spot_interruptions: u32,
    /// One entry per member for a running job; empty for a pending one.
    pub placement: Vec<PlacedMember>,
    pub started_at: Option<i64>,
    pub last_checkpoint_at: Option<i64>,
    /// For a pending job: its reservation in the last plan (`reservations` there). Placed
    /// at that start, it lands on those nodes where they still hold it, so the bookings
    /// after it keep the room they were promised while other jobs come and go.
    pub booked: Option<PriorBooking>,
}

/// A reservation as the last plan made it: when it starts, on which nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorBooking {
    pub start_at: i64,
    #[serde(default)]
    pub nodes: Vec<String>,
}

/// Where one member of a running job is: a node by name and GPU indices on it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacedMember {
    pub node: String,
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// Per GPU; defaults to the job's `gpu_milli`.
    pub gpu_milli: Option<u32>,
    /// For MIG jobs: the slot each instance starts at, one per GPU entry.
    #[serde(default)]
    pub mig_starts: Vec<u32>,
}

/// A time: seconds (a number) or an RFC 3339 string. Read by hand rather than as an
/// untagged enum, which buffers every value to try each variant (a fifth of reading a
/// large jobs file).
#[derive(Debug, Clone)]
enum Time {
    Seconds(f64),
    Text(String),
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Time;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a time: seconds or RFC 3339 text")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Time, E> {
                Ok(Time::Seconds(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Time, E> {
                Ok(Time::Seconds(v as f64))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Time, E> {
                Ok(Time::Seconds(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Time, E> {
                Ok(Time::Text(v.to_string()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    team: Option<String>,
    tier: Option<String>,
    #[serde(default = "one")]
    members: u32,
    members_present: Option<u32>,
    #[serde(default)]
    gpus_per_member: u32,
    gpu_milli: Option<u32>,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    vram_mib: u64,
    #[serde(default)]
    cpu_milli: u64,
    #[serde(default)]
    memory_mib: u64,
    /// A MIG profile per GPU instead of whole GPUs, e.g. `3g.40gb`.
    mig: Option<String>,
    #[serde(default)]
    pools: Vec<String>,
    topology: Option<String>,
    topology_preferred: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    user: Option<String>,
    submitted_at: Option<Time>,
    runtime_s: Option<u64>,
    runtime_limit_s: Option<u64>,
    #[serde(default)]
    estimate_only: bool,
    actual_runtime_s: Option<u64>,
    #[serde(default)]
    interrupted_after_s: Vec<u64>,
    checkpoint_interval_s: Option<u64>,
    #[serde(default)]
    interactive: bool,
    #[serde(default)]
    preemptions: u32,
    #[serde(default)]
    spot_interruptions: u32,
    #[serde(default)]
    placement: Vec<PlacedMember>,
    started_at: Option<Time>,
    last_checkpoint_at: Option<Time>,
    booked: Option<PriorBooking>,
    /// Free-form labels and annotations: accepted, not read.
    #[serde(default, rename = "labels")]
    _labels: IgnoredAny,
}

fn one() -> u32 {
    1
}

/// The most members and GPUs per member a job may have (imports apply them too).
pub const MAX_MEMBERS: u32 = 100_000;
pub const MAX_GPUS_PER_MEMBER: u32 = 64;
/// Interrupted runs one trace job may list (`interrupted_after_s`).
pub const MAX_INTERRUPTIONS: usize = 1000;

pub fn level(name: &str) -> Option<TopologyLevel> {
    Some(match name {
        "node" => TopologyLevel::Node,
        "nvlink_island" => TopologyLevel::NvlinkIsland,
        "nvlink_domain" => TopologyLevel::NvlinkDomain,
        "rack" => TopologyLevel::Rack,
        "leaf" => TopologyLevel::Leaf,
        "any" => TopologyLevel::Any,
        _ => return None,
    })
}

const LEVELS: &str = "node, nvlink_island, nvlink_domain, rack, leaf, any";

/// Parses a JSON array of jobs, or JSON Lines (one object per line, blank lines skipped).
pub fn parse(file: &str, text: &str) -> Result<Vec<Job>, JobsError> {
    let trimmed = text.trim_start();
    if !trimmed.starts_with('[') {
        let lines = text.lines().count();
        return parse_lines(
            file,
            text.lines().enumerate().map(|(i, l)| (i + 1, l)),
            lines,
        );
    }
    let mut entries: Vec<(usize, Entry)> = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let list: Vec<serde_json::Value> =
        serde_path_to_error::deserialize(&mut de).map_err(|e| json_error(file, 0, e))?;
    // Re-read each element for its own line and field path.
    let lines = element_lines(text);
    for (k, value) in list.into_iter().enumerate() {
        let line = lines.get(k).copied().unwrap_or(1);
        let entry = serde_path_to_error::deserialize(value).map_err(|e| JobsError {
            file: file.to_string(),
            line,
            field: Some(format!("[{k}].{}", e.path())),
            message: super::fleet_file::plain_types(&e.into_inner().to_string()),
        })?;
        entries.push((line, entry));
    }
    entries
        .into_iter()
        .map(|(line, e)| job(file, line, e))
        .collect()
}

/// JSON Lines given as (line number, text), blank lines skipped, about `expected` of
/// them. Each line becomes its job at once: a million-line trace is never held as
/// parsed entries and as jobs both. The first line in error is reported.
pub fn parse_lines<'t>(
    file: &str,
    lines: impl Iterator<Item = (usize, &'t str)>,
    expected: usize,
) -> Result<Vec<Job>, JobsError> {
    let mut jobs = Vec::with_capacity(expected);
    for (line, l) in lines {
        if l.trim().is_empty() {
            continue;
        }
        // Read plainly; only a line in error is read again for its field's path.
        let entry = match serde_json::from_str::<Entry>(l) {
            Ok(entry) => entry,
            Err(plain) => {
                let mut de = serde_json::Deserializer::from_str(l);
                return Err(
                    match serde_path_to_error::deserialize::<_, Entry>(&mut de) {
                        Err(e) => json_error(file, line.saturating_sub(1), e),
                        // Read whole, but more follows it on the line.
                        Ok(_) => JobsError {
                            file: file.to_string(),
                            line,
                            field: None,
                            message: format!(
                                "{} at column {}; one job per line",
                                without_position(&plain.to_string()),
                                plain.column()
                            ),
                        },
                    },
                );
            }
        };
        jobs.push(job(file, line, entry)?);
    }
    Ok(jobs)
}

fn json_error(
    file: &str,
    offset: usize,
    e: serde_path_to_error::Error<serde_json::Error>,
) -> JobsError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    JobsError {
        file: file.to_string(),
        line: offset + inner.line(),
        field: (path != ".").then_some(path),
        message: super::fleet_file::plain_types(&without_position(&inner.to_string())),
    }
}

/// A serde_json message without its ` at line L column C` (the line is given apart).
fn without_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message.get(..i).unwrap_or(message).to_string(),
        None => message.to_string(),
    }
}

/// Lines where the top-level array's objects start (depth-1 `{`), outside strings.
fn element_lines(text: &str) -> Vec<usize> {
    let (mut depth, mut line, mut in_str, mut escaped) = (0i32, 1usize, false, false);
    let mut out = Vec::new();
    for c in text.chars() {
        if c == '\n' {
            line += 1;
        }
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '[' | '{' => {
                if depth == 1 && c == '{' {
                    out.push(line);
                }
                depth += 1;
            }
            ']' | '}' => depth -= 1,
            _ => {}
        }
    }
    out
}

fn job(file: &str, line: usize, e: Entry) -> Result<Job, JobsError> {
    let err = |field: &str, message: String| JobsError {
        file: file.to_string(),
        line,
        field: Some(field.to_string()),
        message,
    };
    if e.id.trim().is_empty() {
        return Err(err("id", "a job needs a non-empty id".into()));
    }
    if e.members == 0 || e.members > MAX_MEMBERS {
        return Err(err(
            "members",
            format!("{} is out of range; give 1 to {MAX_MEMBERS}", e.members),
        ));
    }
    if let Some(present) = e.members_present {
        if present > e.members {
            return Err(err(
                "members_present",
                format!(
                    "{present} members present for a gang of {}; give 0 to {}",
                    e.members, e.members
                ),
            ));
        }
        if !e.placement.is_empty() && present < e.members {
            return Err(err(
                "members_present",
                "a running job has all its members; drop `members_present`".into(),
            ));
        }
    }
    if e.gpus_per_member > MAX_GPUS_PER_MEMBER {
        return Err(err(
            "gpus_per_member",
            format!(
                "{} is above the limit of {MAX_GPUS_PER_MEMBER}",
                e.gpus_per_member
            ),
        ));
    }
    let gpu_milli = e.gpu_milli.unwrap_or(MILLI);
    if gpu_milli == 0 || gpu_milli > MILLI {
        return Err(err(
            "gpu_milli",
            format!("{gpu_milli} is out of range; give 1 to 1000 (1000 is a whole GPU)"),
        ));
    }
    if gpu_milli < MILLI && e.gpus_per_member > 1 {
        return Err(err(
            "gpu_milli",
            format!(
                "a fraction of a GPU ({gpu_milli}m) needs gpus_per_member = 1, not {}",
                e.gpus_per_member
            ),
        ));
    }
    if e.mig.is_some() && e.gpus_per_member == 0 {
        return Err(err(
            "mig",
            "a MIG job needs gpus_per_member ≥ 1 (instances per member)".into(),
        ));
    }
    let parse_level = |field: &str, v: &Option<String>| match v {
        None => Ok(None),
        Some(s) => level(s).map(Some).ok_or_else(|| {
            err(
                field,
                format!("unknown topology `{s}`; expected one of {LEVELS}"),
            )
        }),
    };
    let time = |field: &str, t: &Option<Time>| -> Result<Option<i64>, JobsError> {
        match t {
            None => Ok(None),
            Some(Time::Seconds(s)) if s.is_finite() && s.abs() < 1e15 => Ok(Some(s.floor() as i64)),
            Some(Time::Seconds(s)) => Err(err(field, format!("{s} is not a usable time"))),
            Some(Time::Text(text)) => rfc3339_seconds(text).map(Some).ok_or_else(|| {
                err(
                    field,
                    format!(
                        "`{text}` is not a time; give seconds or RFC 3339 (2026-11-21T09:30:00Z)"
                    ),
                )
            }),
        }
    };
    if !e.placement.is_empty() && e.placement.len() != e.members as usize {
        return Err(err(
            "placement",
            format!(
                "a running job has one placement entry per member: {} entries for {} members",
                e.placement.len(),
                e.members
            ),
        ));
    }
    if e.interrupted_after_s.len() > MAX_INTERRUPTIONS {
        return Err(err(
            "interrupted_after_s",
            format!(
                "{} interrupted runs; at most {MAX_INTERRUPTIONS} are replayed",
                e.interrupted_after_s.len()
            ),
        ));
    }
    let estimate_only = e.estimate_only || e.runtime_limit_s.is_some();
    match (e.runtime_s, e.runtime_limit_s) {
        (None, _) if estimate_only => {
            return Err(err(
                "runtime_s",
                "an estimate (`estimate_only`, `runtime_limit_s`) needs `runtime_s`, the runtime planned with first".into(),
            ));
        }
        (Some(estimate), Some(limit)) if limit <= estimate => {
            return Err(err(
                "runtime_limit_s",
                format!(
                    "{limit} is not longer than runtime_s ({estimate}); a limit no longer than the estimate is the runtime: give it as runtime_s alone"
                ),
            ));
        }
        _ => {}
    }
    if e.interrupted_after_s.contains(&0) {
        return Err(err(
            "interrupted_after_s",
            "a run that was interrupted ran at least a second; remove the 0".into(),
        ));
    }
    if let Some(b) = &e.booked {
        if b.nodes.len() > e.members as usize {
            return Err(err(
                "booked",
                format!(
                    "{} nodes for {} members; a reservation holds at most one node per member",
                    b.nodes.len(),
                    e.members
                ),
            ));
        }
        if !e.placement.is_empty() {
            return Err(err(
                "booked",
                "a running job holds no reservation; remove `booked` or `placement`".into(),
            ));
        }
    }
    let submitted_at = time("submitted_at", &e.submitted_at)?;
    let started_at = time("started_at", &e.started_at)?;
    let last_checkpoint_at = time("last_checkpoint_at", &e.last_checkpoint_at)?;
    if !e.placement.is_empty() && started_at.is_none() {
        return Err(err(
            "started_at",
            "a job with a placement is running and needs `started_at`".into(),
        ));
    }
    Ok(Job {
        id: e.id,
        line,
        name: e.name,
        namespace: e.namespace,
        user: e.user,
        team: e.team,
        tier: e.tier,
        submitted_at,
        runtime_s: e.runtime_s,
        runtime_limit_s: e.runtime_limit_s,
        estimate_only,
        actual_runtime_s: e.actual_runtime_s,
        interrupted_after_s: e.interrupted_after_s,
        checkpoint_interval_s: e.checkpoint_interval_s,
        members_present: e.members_present.filter(|p| *p < e.members),
        interactive: e.interactive,
        preemptions: e.preemptions,
        spot_interruptions: e.spot_interruptions,
        placement: e.placement,
        started_at,
        last_checkpoint_at,
        booked: e.booked,
        shape: JobShape {
            members: e.members,
            member: Request {
                cpu_milli: e.cpu_milli,
                memory_mib: e.memory_mib,
                num_gpu: e.gpus_per_member,
                gpu_milli: if e.gpus_per_member == 0 { 0 } else { gpu_milli },
                models: e.models,
                vram_mib: e.vram_mib,
                mig_profile: e.mig,
            },
            pools: e.pools,
            topology_required: parse_level("topology", &e.topology)?,
            topology_preferred: parse_level("topology_preferred", &e.topology_preferred)?,
        },
    })
}

/// Seconds since the Unix epoch of an RFC 3339 time (`2026-11-21T09:30:00Z`,
/// `2026-11-21T10:30:00.5+01:00`); `None` if it is not one.
pub fn rfc3339_seconds(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = text.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let sep = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = text.get(19..)?;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = frac.get(digits..)?;
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            let tz = rest.get(1..)?;
            if tz.len() != 5 || tz.as_bytes().get(2) != Some(&b':') {
                return None;
            }
            let h: i64 = tz.get(0..2)?.parse().ok()?;
            let m: i64 = tz.get(3..5)?.parse().ok()?;
            sign * (h * 3600 + m * 60)
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
mod tests {
    use super::{parse, rfc3339_seconds, MAX_INTERRUPTIONS};

    #[test]
    fn interrupted_runs_are_read_and_bounded() {
        let line = |runs: &str| {
            format!(
                r#"{{"id": "a", "gpus_per_member": 1, "runtime_s": 60, "interrupted_after_s": {runs}}}"#
            )
        };
        let jobs = parse("t.jsonl", &line("[30, 40]")).unwrap();
        assert_eq!(jobs[0].interrupted_after_s, [30, 40]);
        let zero = parse("t.jsonl", &line("[30, 0]")).unwrap_err();
        assert_eq!(zero.field.as_deref(), Some("interrupted_after_s"));
        assert!(zero.message.contains("remove the 0"), "{}", zero.message);
        let many = format!("[{}]", vec!["1"; MAX_INTERRUPTIONS + 1].join(","));
        let too_many = parse("t.jsonl", &line(&many)).unwrap_err();
        assert!(too_many.message.contains("at most"), "{}", too_many.message);
    }

    #[test]
    fn an_estimate_and_the_limit_behind_it_are_read_and_checked() {
        let job = |fields: &str| format!(r#"{{"id": "a", "gpus_per_member": 1, {fields}}}"#);
        let jobs = parse("t.jsonl", &job(r#""runtime_s": 60, "runtime_limit_s": 90"#)).unwrap();
        assert_eq!(
            (jobs[0].runtime_limit_s, jobs[0].estimate_only),
            (Some(90), true)
        );
        let only = parse("t.jsonl", &job(r#""runtime_s": 60, "estimate_only": true"#)).unwrap();
        assert_eq!(
            (only[0].runtime_limit_s, only[0].estimate_only),
            (None, true)
        );
        let short = parse("t.jsonl", &job(r#""runtime_s": 60, "runtime_limit_s": 60"#));
        let short = short.unwrap_err();
        assert_eq!(short.field.as_deref(), Some("runtime_limit_s"));
        assert!(
            short.message.contains("not longer than runtime_s"),
            "{}",
            short.message
        );
        let none = parse("t.jsonl", &job(r#""estimate_only": true"#)).unwrap_err();
        assert_eq!(none.field.as_deref(), Some("runtime_s"));
    }

    #[test]
    fn booked_nodes_are_read_for_pending_jobs_only() {
        let jobs = parse(
            "t.jsonl",
            r#"{"id": "a", "members": 2, "gpus_per_member": 8, "booked": {"start_at": 600, "nodes": ["n-0", "n-1"]}}"#,
        )
        .unwrap();
        let booked = jobs[0].booked.as_ref().unwrap();
        assert_eq!(
            (booked.start_at, booked.nodes.clone()),
            (600, vec!["n-0".to_string(), "n-1".to_string()])
        );
        let many = parse(
            "t.jsonl",
            r#"{"id": "a", "gpus_per_member": 8, "booked": {"start_at": 600, "nodes": ["n-0", "n-1"]}}"#,
        )
        .unwrap_err();
        assert_eq!(many.field.as_deref(), Some("booked"));
        assert!(
            many.message.contains("one node per member"),
            "{}",
            many.message
        );
        let running = parse(
            "t.jsonl",
            r#"{"id": "a", "gpus_per_member": 1, "booked": {"start_at": 600, "nodes": ["n-0"]}, "started_at": 0, "placement": [{"node": "n-0"}]}"#,
        )
        .unwrap_err();
        assert!(
            running.message.contains("no reservation"),
            "{}",
            running.message
        );
    }

    #[test]
    fn times_are_seconds_or_text_and_a_line_in_error_names_its_field() {
        let job =
            |at: &str| format!(r#"{{"id": "a", "gpus_per_member": 1, "submitted_at": {at}}}"#);
        for (at, seconds) in [
            ("600", 600),
            ("-5", -5),
            ("600.75", 600),
            (r#""1970-01-01T00:10:00Z""#, 600),
        ] {
            let jobs = parse("t.jsonl", &job(at)).unwrap();
            assert_eq!(jobs[0].submitted_at, Some(seconds), "{at}");
        }
        let text = parse("t.jsonl", &job(r#""soon""#)).unwrap_err();
        assert_eq!(text.field.as_deref(), Some("submitted_at"));
        assert!(text.message.contains("not a time"), "{}", text.message);
        let kind = parse("t.jsonl", &format!("\n{}", job("[1]"))).unwrap_err();
        assert_eq!(
            (kind.line, kind.field.as_deref()),
            (2, Some("submitted_at"))
        );
        assert!(
            kind.message.contains("seconds or RFC 3339"),
            "{}",
            kind.message
        );
        let unknown = parse("t.jsonl", r#"{"id": "a", "gpus": 1}"#).unwrap_err();
        assert!(
            unknown.message.contains("unknown field `gpus`"),
            "{}",
            unknown.message
        );
        let trailing = parse("t.jsonl", &format!("{} {{}}", job("1"))).unwrap_err();
        assert!(
            trailing.message.contains("trailing characters")
                && trailing.message.contains("one job per line"),
            "{}",
            trailing.message
        );
    }

    #[test]
    fn rfc3339_times_become_unix_seconds() {
        assert_eq!(rfc3339_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_seconds("2026-11-21T09:30:00Z"), Some(1_795_253_400));
        assert_eq!(
            rfc3339_seconds("2026-11-21T10:30:00.25+01:00"),
            Some(1_795_253_400)
        );
        assert_eq!(rfc3339_seconds("2000-02-29T00:00:00Z"), Some(951_782_400));
        for bad in [
            "2026-13-01T00:00:00Z",
            "yesterday",
            "2026-11-21",
            "2026-11-21T09:30:00",
        ] {
            assert_eq!(rfc3339_seconds(bad), None, "{bad}");
        }
    }
}
