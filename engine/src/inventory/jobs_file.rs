//! Job files (the contract format): a JSON array of jobs or JSON Lines, one job per line.
//! This reads each job's id, team, tier and shape — what placement needs; the contract's
//! queue and runtime fields (times, running placement, preemptions) are accepted and not
//! read yet.

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

/// A job as read: its id, queue attributes and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: String,
    pub team: Option<String>,
    pub tier: Option<String>,
    pub shape: JobShape,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    team: Option<String>,
    tier: Option<String>,
    #[serde(default = "one")]
    members: u32,
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
    // Queue and runtime fields of the contract: accepted so one jobs file serves every
    // command, not read until the decision cycle exists.
    #[serde(default, rename = "submitted_at")]
    _submitted_at: IgnoredAny,
    #[serde(default, rename = "runtime_s")]
    _runtime_s: IgnoredAny,
    #[serde(default, rename = "checkpoint_interval_s")]
    _checkpoint_interval_s: IgnoredAny,
    #[serde(default, rename = "placement")]
    _placement: IgnoredAny,
    #[serde(default, rename = "started_at")]
    _started_at: IgnoredAny,
    #[serde(default, rename = "last_checkpoint_at")]
    _last_checkpoint_at: IgnoredAny,
    #[serde(default, rename = "preemptions")]
    _preemptions: IgnoredAny,
}

fn one() -> u32 {
    1
}

const MAX_MEMBERS: u32 = 100_000;
const MAX_GPUS_PER_MEMBER: u32 = 64;

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
    let mut entries: Vec<(usize, Entry)> = Vec::new();
    if trimmed.starts_with('[') {
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
    } else {
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            let mut de = serde_json::Deserializer::from_str(l);
            let entry =
                serde_path_to_error::deserialize(&mut de).map_err(|e| json_error(file, i, e))?;
            entries.push((i + 1, entry));
        }
    }
    entries
        .into_iter()
        .map(|(line, e)| job(file, line, e))
        .collect()
}

fn json_error(
    file: &str,
    offset: usize,
    e: serde_path_to_error::Error<serde_json::Error>,
) -> JobsError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let message = inner.to_string();
    let message = match message.rfind(" at line ") {
        Some(i) => message.get(..i).unwrap_or(&message).to_string(),
        None => message,
    };
    JobsError {
        file: file.to_string(),
        line: offset + inner.line(),
        field: (path != ".").then_some(path),
        message: super::fleet_file::plain_types(&message),
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
    Ok(Job {
        id: e.id,
        team: e.team,
        tier: e.tier,
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
