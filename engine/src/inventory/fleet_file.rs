//! Fleet files (the contract format, JSON or TOML with the same fields): a list of nodes,
//! each with CPU, memory, pool, labels and GPUs. A node with `count` expands to `count`
//! nodes named `<name>-0 … <name>-<count-1>`; `gpus` is a list of GPU entries or the
//! shorthand `{count, model, memory_mib}`. Every error names the file, the line and the
//! field, and says what would be accepted.

use crate::core::fleet::{Fleet, Gpu, MigInstance, Node};
use crate::core::mig::{self, SlotMask};
use lang::ir::GpuModel;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Largest values accepted, so a typo cannot ask for an absurd fleet.
const MAX_COUNT: u64 = 100_000;
const MAX_GPUS_PER_NODE: u32 = 64;
const MAX_CPU_MILLI: u64 = 100_000_000;
const MAX_MEMORY_MIB: u64 = 1 << 32;
const MAX_GPU_MEMORY_MIB: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetError {
    pub file: String,
    pub line: Option<usize>,
    /// Path of the field, e.g. `nodes[2].gpus.count`.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "field `{field}`: ")?;
        }
        write!(f, "{}", self.message)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    nodes: Vec<NodeEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    name: String,
    count: Option<u64>,
    pool: Option<String>,
    cpu_milli: u64,
    memory_mib: u64,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    gpus: Option<Gpus>,
}

#[derive(Debug)]
enum Gpus {
    List(Vec<GpuEntry>),
    Short(GpuShort),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuShort {
    count: u32,
    model: String,
    memory_mib: Option<u64>,
    /// Split the GPUs evenly into this many NVLink islands (e.g. 2 on a node with two
    /// NVLink bridges of 4).
    nvlink_islands: Option<u32>,
    #[serde(default)]
    mig: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuEntry {
    index: Option<u32>,
    uuid: Option<String>,
    pci_bus_id: Option<String>,
    model: String,
    memory_mib: Option<u64>,
    nvlink_island: Option<u32>,
    mig: Option<MigEntry>,
    #[serde(default = "yes")]
    healthy: bool,
}

fn yes() -> bool {
    true
}

/// `true`/`false` (MIG mode with no instances in use), or the instances in use.
#[derive(Debug)]
enum MigEntry {
    Enabled(bool),
    Instances(Vec<MigInstanceEntry>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MigInstanceEntry {
    profile: String,
    start: u32,
}

impl<'de> Deserialize<'de> for Gpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Gpus, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Gpus;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of GPU entries or {count, model, memory_mib}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Gpus, A::Error> {
                Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Gpus::List)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Gpus, A::Error> {
                Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(Gpus::Short)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for MigEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MigEntry, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MigEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false, or a list of {profile, start} instances in use")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<MigEntry, E> {
                Ok(MigEntry::Enabled(b))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<MigEntry, A::Error> {
                Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(MigEntry::Instances)
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads a fleet from `text`; TOML when `file` ends in `.toml`, JSON otherwise. `models`
/// gives memory defaults and MIG tables (see `catalog`).
pub fn parse(file: &str, text: &str, models: &[GpuModel]) -> Result<Fleet, FleetError> {
    let toml = file.ends_with(".toml");
    let doc = if toml {
        parse_toml(file, text)?
    } else {
        parse_json(file, text)?
    };
    let locate = Locator { text, toml };
    build(file, &locate, doc, models)
}

fn parse_json(file: &str, text: &str) -> Result<Doc, FleetError> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        FleetError {
            file: file.to_string(),
            line: Some(inner.line()),
            field: (path != ".").then_some(path),
            message: strip_position(&inner.to_string()),
        }
    })
}

fn parse_toml(file: &str, text: &str) -> Result<Doc, FleetError> {
    let de = toml::Deserializer::parse(text).map_err(|e| toml_error(file, text, None, &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        toml_error(file, text, (path != ".").then_some(path), e.inner())
    })
}

fn toml_error(file: &str, text: &str, field: Option<String>, e: &toml::de::Error) -> FleetError {
    let line = e.span().map(|s| {
        text.get(..s.start)
            .map_or(1, |t| t.matches('\n').count() + 1)
    });
    FleetError {
        file: file.to_string(),
        line,
        field,
        message: plain_types(e.message().trim()),
    }
}

/// serde_json appends " at line L column C"; the line is reported separately.
fn strip_position(message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(i) => message.get(..i).unwrap_or(message),
        None => message,
    };
    plain_types(message)
}

/// serde names Rust types; users think in numbers.
pub fn plain_types(message: &str) -> String {
    message
        .replace("expected u64", "expected a whole number of zero or more")
        .replace("expected u32", "expected a whole number of zero or more")
        .replace("expected f64", "expected a number")
}

/// Finds lines for errors found after parsing: the `i`-th node starts at the `i`-th
/// `"name"` key (JSON) or `[[nodes]]` header (TOML); a field is the first line after that
/// start, before the next node, that names it.
struct Locator<'a> {
    text: &'a str,
    toml: bool,
}

impl Locator<'_> {
    fn node_starts(&self) -> Vec<usize> {
        self.text
            .lines()
            .enumerate()
            .filter(|(_, l)| {
                if self.toml {
                    l.trim_start().starts_with("[[nodes]]")
                } else {
                    l.contains("\"name\"")
                }
            })
            .map(|(i, _)| i + 1)
            .collect()
    }

    fn line(&self, node: usize, key: Option<&str>) -> Option<usize> {
        let starts = self.node_starts();
        let start = *starts.get(node)?;
        let Some(key) = key else {
            return Some(start);
        };
        let end = starts.get(node + 1).copied().unwrap_or(usize::MAX);
        let needle = if self.toml {
            key.to_string()
        } else {
            format!("\"{key}\"")
        };
        self.text
            .lines()
            .enumerate()
            .skip(start - 1)
            .take_while(|(i, _)| i + 1 < end)
            .find(|(_, l)| l.contains(&needle))
            .map(|(i, _)| i + 1)
            .or(Some(start))
    }
}

fn build(file: &str, at: &Locator<'_>, doc: Doc, models: &[GpuModel]) -> Result<Fleet, FleetError> {
    let err = |node: usize, key: Option<&str>, field: String, message: String| FleetError {
        file: file.to_string(),
        line: at.line(node, key),
        field: Some(field),
        message,
    };
    if doc.nodes.is_empty() {
        return Err(FleetError {
            file: file.to_string(),
            line: Some(1),
            field: Some("nodes".into()),
            message: "the fleet has no nodes; add at least one entry such as {\"name\": \"gpu\", \"cpu_milli\": 64000, \"memory_mib\": 262144, \"gpus\": {\"count\": 8, \"model\": \"H100-SXM5-80GB\"}}".into(),
        });
    }
    let mut nodes = Vec::new();
    let mut names = BTreeSet::new();
    for (i, entry) in doc.nodes.into_iter().enumerate() {
        let field = |f: &str| format!("nodes[{i}].{f}");
        if entry.name.trim().is_empty() {
            return Err(err(
                i,
                Some("name"),
                field("name"),
                "a node needs a non-empty name".into(),
            ));
        }
        let count = entry.count.unwrap_or(1);
        if count == 0 || count > MAX_COUNT {
            return Err(err(
                i,
                Some("count"),
                field("count"),
                format!(
                    "{count} is out of range; give 1 to {MAX_COUNT} (or leave it out for one node)"
                ),
            ));
        }
        if entry.cpu_milli > MAX_CPU_MILLI {
            return Err(err(
                i,
                Some("cpu_milli"),
                field("cpu_milli"),
                format!(
                    "{} is above the limit of {MAX_CPU_MILLI} (milli-CPU: 64 cores is 64000)",
                    entry.cpu_milli
                ),
            ));
        }
        if entry.memory_mib > MAX_MEMORY_MIB {
            return Err(err(
                i,
                Some("memory_mib"),
                field("memory_mib"),
                format!(
                    "{} MiB is above the limit of {MAX_MEMORY_MIB}",
                    entry.memory_mib
                ),
            ));
        }
        for key in entry.labels.keys() {
            if key.trim().is_empty() {
                return Err(err(
                    i,
                    Some("labels"),
                    field("labels"),
                    "label names must not be empty".into(),
                ));
            }
        }
        let gpus = match &entry.gpus {
            None => Vec::new(),
            Some(g) => gpus(g, models).map_err(|(key, f, m)| err(i, Some(key), field(&f), m))?,
        };
        let expanded: Vec<String> = if entry.count.is_some() {
            (0..count).map(|k| format!("{}-{k}", entry.name)).collect()
        } else {
            vec![entry.name.clone()]
        };
        for name in expanded {
            if !names.insert(name.clone()) {
                return Err(err(i, Some("name"), field("name"), format!("node `{name}` is defined twice; node names must be unique (a node with `count` expands to <name>-0, <name>-1, …)")));
            }
            nodes.push(Node {
                name,
                pool: entry.pool.clone(),
                cpu_milli: entry.cpu_milli,
                memory_mib: entry.memory_mib,
                labels: entry.labels.clone(),
                gpus: gpus.clone(),
            });
        }
    }
    Ok(Fleet { nodes })
}

type EntryError = (&'static str, String, String);

fn model_memory(
    model: &str,
    given: Option<u64>,
    models: &[GpuModel],
    field: &str,
) -> Result<u64, EntryError> {
    if let Some(m) = given {
        if m == 0 || m > MAX_GPU_MEMORY_MIB {
            return Err(("memory_mib", format!("{field}.memory_mib"), format!("{m} MiB is out of range; give the GPU's memory in MiB (an H100 80GB has 81559)")));
        }
        return Ok(m);
    }
    match models.iter().find(|x| x.id == model) {
        Some(known) => Ok(known.memory_mib),
        None => {
            let ids: Vec<&str> = models.iter().map(|x| x.id.as_str()).collect();
            let hint = lang::suggest::closest(model, ids.iter().copied())
                .map(|s| format!("did you mean `{s}`? "))
                .unwrap_or_default();
            Err(("model", format!("{field}.model"), format!("unknown GPU model `{model}`; {hint}give `memory_mib` for a model Gantry does not know, or use one of {}", ids.join(", "))))
        }
    }
}

fn gpus(g: &Gpus, models: &[GpuModel]) -> Result<Vec<Gpu>, EntryError> {
    match g {
        Gpus::Short(s) => {
            if s.count == 0 || s.count > MAX_GPUS_PER_NODE {
                return Err(("count", "gpus.count".into(), format!("{} GPUs is out of range; give 1 to {MAX_GPUS_PER_NODE} (leave `gpus` out for a CPU-only node)", s.count)));
            }
            let memory = model_memory(&s.model, s.memory_mib, models, "gpus")?;
            let islands = s.nvlink_islands.unwrap_or(0);
            if islands > s.count || (islands > 0 && s.count % islands != 0) {
                return Err(("nvlink_islands", "gpus.nvlink_islands".into(), format!("{islands} islands do not divide {} GPUs evenly; list the GPUs with `nvlink_island` each instead", s.count)));
            }
            if s.mig && mig_profiles(models, &s.model).is_empty() {
                return Err((
                    "mig",
                    "gpus.mig".into(),
                    format!("model `{}` has no MIG profiles Gantry knows", s.model),
                ));
            }
            Ok((0..s.count)
                .map(|index| Gpu {
                    nvlink_island: (islands > 0).then(|| index / (s.count / islands)),
                    mig: s.mig.then(Vec::new),
                    ..Gpu::new(index, &s.model, memory)
                })
                .collect())
        }
        Gpus::List(list) => {
            if list.is_empty() || list.len() > MAX_GPUS_PER_NODE as usize {
                return Err((
                    "gpus",
                    "gpus".into(),
                    format!("{} GPU entries; give 1 to {MAX_GPUS_PER_NODE}", list.len()),
                ));
            }
            let mut out = Vec::new();
            let mut seen = BTreeSet::new();
            for (k, e) in list.iter().enumerate() {
                let field = format!("gpus[{k}]");
                let index = e.index.unwrap_or(k as u32);
                if !seen.insert(index) {
                    return Err((
                        "index",
                        format!("{field}.index"),
                        format!("GPU index {index} appears twice"),
                    ));
                }
                let memory = model_memory(&e.model, e.memory_mib, models, &field)?;
                let mig = match &e.mig {
                    None | Some(MigEntry::Enabled(false)) => None,
                    Some(MigEntry::Enabled(true)) => Some(Vec::new()),
                    Some(MigEntry::Instances(list)) => {
                        Some(instances(models, &e.model, list, &field)?)
                    }
                };
                if mig.is_some() && mig_profiles(models, &e.model).is_empty() {
                    return Err((
                        "mig",
                        format!("{field}.mig"),
                        format!("model `{}` has no MIG profiles Gantry knows", e.model),
                    ));
                }
                out.push(Gpu {
                    index,
                    uuid: e.uuid.clone(),
                    pci_bus_id: e.pci_bus_id.clone(),
                    model: e.model.clone(),
                    memory_mib: memory,
                    nvlink_island: e.nvlink_island,
                    healthy: e.healthy,
                    mig,
                });
            }
            Ok(out)
        }
    }
}

fn mig_profiles<'m>(models: &'m [GpuModel], model: &str) -> &'m [lang::ir::MigProfile] {
    models
        .iter()
        .find(|m| m.id == model)
        .map_or(&[], |m| m.mig_profiles.as_slice())
}

/// MIG instances in use on one GPU: known profiles, allowed starts, no overlap.
fn instances(
    models: &[GpuModel],
    model: &str,
    list: &[MigInstanceEntry],
    field: &str,
) -> Result<Vec<MigInstance>, EntryError> {
    let profiles = mig_profiles(models, model);
    let mut used: SlotMask = 0;
    let mut out = Vec::new();
    for (k, inst) in list.iter().enumerate() {
        let f = format!("{field}.mig[{k}]");
        let Some(p) = profiles.iter().find(|p| p.name == inst.profile) else {
            let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
            return Err((
                "profile",
                format!("{f}.profile"),
                format!(
                    "`{}` is not a MIG profile of {model}; it has {}",
                    inst.profile,
                    names.join(", ")
                ),
            ));
        };
        if !p.starts.contains(&inst.start) {
            return Err((
                "start",
                format!("{f}.start"),
                format!(
                    "{} cannot start at slot {}; NVIDIA allows {:?}",
                    p.name, inst.start, p.starts
                ),
            ));
        }
        let m = mig::mask(p, inst.start);
        if m & used != 0 {
            return Err((
                "start",
                format!("{f}.start"),
                format!(
                    "{} at slot {} overlaps another instance on this GPU",
                    p.name, inst.start
                ),
            ));
        }
        used |= m;
        out.push(MigInstance {
            profile: inst.profile.clone(),
            start: inst.start,
        });
    }
    Ok(out)
}

/// A fleet in the fleet format (JSON), every node and GPU spelled out; what `parse`
/// reads back to the same fleet.
pub fn to_json(fleet: &Fleet) -> serde_json::Value {
    let nodes: Vec<serde_json::Value> = fleet
        .nodes
        .iter()
        .map(|n| {
            let gpus: Vec<serde_json::Value> = n
                .gpus
                .iter()
                .map(|g| {
                    let mut v = json!({
                        "index": g.index, "model": g.model, "memory_mib": g.memory_mib, "healthy": g.healthy,
                    });
                    if let Some(u) = &g.uuid {
                        set(&mut v, "uuid", json!(u));
                    }
                    if let Some(b) = &g.pci_bus_id {
                        set(&mut v, "pci_bus_id", json!(b));
                    }
                    if let Some(i) = g.nvlink_island {
                        set(&mut v, "nvlink_island", json!(i));
                    }
                    if let Some(m) = &g.mig {
                        set(&mut v, "mig", m.iter().map(|i| json!({"profile": i.profile, "start": i.start})).collect::<Vec<_>>());
                    }
                    v
                })
                .collect();
            let mut v = json!({
                "name": n.name, "cpu_milli": n.cpu_milli, "memory_mib": n.memory_mib, "gpus": gpus,
            });
            if let Some(p) = &n.pool {
                set(&mut v, "pool", json!(p));
            }
            if !n.labels.is_empty() {
                set(&mut v, "labels", json!(n.labels));
            }
            v
        })
        .collect();
    json!({ "nodes": nodes })
}

/// Adds `key` to a JSON object (a no-op on anything else).
fn set(v: &mut serde_json::Value, key: &str, value: impl Into<serde_json::Value>) {
    if let Some(o) = v.as_object_mut() {
        o.insert(key.to_string(), value.into());
    }
}
