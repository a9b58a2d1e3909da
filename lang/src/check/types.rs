//! Types of expressions (units are types) and how units are spelled.

use crate::ir::Dim;

/// Kinds of named definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DefKind {
    Pool,
    Tier,
    Cohort,
    Team,
    Gpu,
    Node,
    Rule,
    Warm,
    /// Only `template autoscale NAME` blocks are named definitions.
    Autoscale,
    /// Only `template placement NAME` blocks are named definitions.
    Placement,
}

impl DefKind {
    pub fn noun(self) -> &'static str {
        match self {
            DefKind::Pool => "pool",
            DefKind::Tier => "tier",
            DefKind::Cohort => "cohort",
            DefKind::Team => "team",
            DefKind::Gpu => "GPU model",
            DefKind::Node => "node shape",
            DefKind::Rule => "rule",
            DefKind::Warm => "warm pool",
            DefKind::Autoscale => "autoscale template",
            DefKind::Placement => "placement template",
        }
    }

    /// The name used in IR references (`{kind: "tier"}`).
    pub fn key(self) -> &'static str {
        match self {
            DefKind::Pool => "pool",
            DefKind::Tier => "tier",
            DefKind::Cohort => "cohort",
            DefKind::Team => "team",
            DefKind::Gpu => "gpu",
            DefKind::Node => "node",
            DefKind::Rule => "rule",
            DefKind::Warm => "warm",
            DefKind::Autoscale => "autoscale",
            DefKind::Placement => "placement",
        }
    }
}

/// A fixed set of words a field or comparison accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WordSet {
    pub name: &'static str,
    pub words: &'static [&'static str],
}

pub const CAPACITY: WordSet = WordSet {
    name: "capacity kind",
    words: &["reserved", "on_demand", "spot"],
};
pub const PREEMPT: WordSet = WordSet {
    name: "preemption mode",
    words: &["never", "after_checkpoint", "immediately"],
};
pub const FAIR_SHARE: WordSet = WordSet {
    name: "fair-share mode",
    words: &["drf", "off"],
};
pub const GANG: WordSet = WordSet {
    name: "gang mode",
    words: &["all_or_nothing", "best_effort"],
};
pub const PACKING: WordSet = WordSet {
    name: "packing strategy",
    words: &["least_fragmentation", "best_fit", "spread", "gpu_packing"],
};
pub const SWITCH: WordSet = WordSet {
    name: "switch",
    words: &["on", "off"],
};
pub const TOPOLOGY: WordSet = WordSet {
    name: "topology level",
    words: &[
        "nvlink_island",
        "node",
        "nvlink_domain",
        "rack",
        "leaf",
        "any",
    ],
};
pub const HISTORY_BUCKET: WordSet = WordSet {
    name: "history bucket",
    words: &["hour_of_week", "hour_of_day", "all"],
};

#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    Number,
    Q(Dim),
    Bool,
    Str,
    Time,
    Ref(DefKind),
    Word(WordSet),
    List(Box<Ty>),
    /// A usage history whose samples have the inner type.
    History(Box<Ty>),
    Topology,
    None,
    /// The element type of an empty list: fits any list.
    Unknown,
}

impl Ty {
    pub fn describe(&self) -> String {
        match self {
            Ty::Number => "a plain number".into(),
            Ty::Q(d) => describe_dim(*d).into(),
            Ty::Bool => "a condition (true or false)".into(),
            Ty::Str => "a string".into(),
            Ty::Time => "a time of day".into(),
            Ty::Ref(k) => format!("a {}", k.noun()),
            Ty::Word(w) => format!("a {}", w.name),
            Ty::List(inner) => format!("a list of {}", plural(inner)),
            Ty::History(_) => "a usage history".into(),
            Ty::Topology => "a topology preference".into(),
            Ty::None => "`none`".into(),
            Ty::Unknown => "a value".into(),
        }
    }

    /// Whether a value of type `self` may stand where `expected` is required.
    pub fn fits(&self, expected: &Ty) -> bool {
        match (self, expected) {
            (_, Ty::Unknown) | (Ty::Unknown, _) => true,
            (Ty::Number, Ty::Q(Dim::Nodes)) => true,
            (Ty::Q(Dim::Nodes), Ty::Number) => true,
            (Ty::Word(a), Ty::Word(b)) => a.name == b.name,
            (Ty::Word(w), Ty::Topology) => w.name == TOPOLOGY.name,
            (Ty::List(a), Ty::List(b)) => a.fits(b),
            (a, b) => a == b,
        }
    }

    pub fn is_numeric(&self) -> bool {
        matches!(self, Ty::Number | Ty::Q(_))
    }
}

fn plural(t: &Ty) -> String {
    match t {
        Ty::Ref(k) => format!("{}s", k.noun()),
        Ty::Str => "strings".into(),
        Ty::Number => "numbers".into(),
        Ty::Word(w) => format!("{}s", w.name),
        other => other.describe(),
    }
}

pub fn describe_dim(d: Dim) -> &'static str {
    match d {
        Dim::Gpu => "a gpu quantity",
        Dim::Bytes => "a byte size",
        Dim::Duration => "a duration",
        Dim::Money => "an amount of money",
        Dim::Rate => "a cost rate",
        Dim::Percent => "a percentage",
        Dim::Nodes => "a node count",
    }
}

/// A unit's dimension and its factor to the dimension's base unit.
pub fn unit(word: &str) -> Option<(Dim, f64)> {
    const MIB: f64 = 1024.0 * 1024.0;
    Some(match word {
        "gpu" | "gpus" => (Dim::Gpu, 1.0),
        "m gpu" | "m gpus" => (Dim::Gpu, 0.001),
        "node" | "nodes" => (Dim::Nodes, 1.0),
        "KiB" => (Dim::Bytes, 1.0 / 1024.0),
        "MiB" => (Dim::Bytes, 1.0),
        "GiB" => (Dim::Bytes, 1024.0),
        "TiB" => (Dim::Bytes, 1024.0 * 1024.0),
        "KB" => (Dim::Bytes, 1e3 / MIB),
        "MB" => (Dim::Bytes, 1e6 / MIB),
        "GB" => (Dim::Bytes, 1e9 / MIB),
        "TB" => (Dim::Bytes, 1e12 / MIB),
        "s" => (Dim::Duration, 1.0),
        "m" => (Dim::Duration, 60.0),
        "h" => (Dim::Duration, 3600.0),
        "d" => (Dim::Duration, 86400.0),
        "w" => (Dim::Duration, 7.0 * 86400.0),
        "$" => (Dim::Money, 1.0),
        "$/h" => (Dim::Rate, 1.0),
        "%" => (Dim::Percent, 1.0),
        _ => return None,
    })
}

pub const UNITS: &[&str] = &[
    "gpu", "gpus", "m gpu", "node", "nodes", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB",
    "s", "m", "h", "d", "w", "$", "$/h", "%",
];

/// The binary unit a decimal byte unit was probably meant as.
pub fn binary_for_decimal(word: &str) -> Option<&'static str> {
    Some(match word {
        "KB" => "KiB",
        "MB" => "MiB",
        "GB" => "GiB",
        "TB" => "TiB",
        _ => return None,
    })
}
