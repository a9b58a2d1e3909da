//! The typed intermediate representation the engine consumes. Quantities are in base units
//! (GPUs, MiB, seconds, dollars, dollars per hour, percent, nodes); names are resolved; there
//! are no spans and no syntax. Collections are ordered so iteration is deterministic.

use serde::Serialize;

pub use crate::small_map::SmallMap;

/// A checked policy.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Program {
    pub gpu_models: Vec<GpuModel>,
    pub node_shapes: Vec<NodeShape>,
    pub pools: Vec<Pool>,
    pub tiers: Vec<Tier>,
    pub cohorts: Vec<Cohort>,
    pub teams: Vec<Team>,
    pub placement: Placement,
    pub warm: Vec<WarmPool>,
    pub autoscale: Vec<Autoscale>,
    /// Admission rules in evaluation order.
    pub rules: Vec<Rule>,
}

impl Program {
    pub fn pool(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }
    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.name == name)
    }
    pub fn team(&self, name: &str) -> Option<&Team> {
        self.teams.iter().find(|t| t.name == name)
    }
    /// The tier of jobs that name none (`default = true`).
    pub fn default_tier(&self) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.default)
    }
    /// The team charged for jobs that name none (`default = true`).
    pub fn default_team(&self) -> Option<&Team> {
        self.teams.iter().find(|t| t.default)
    }
    pub fn node_shape(&self, name: &str) -> Option<&NodeShape> {
        self.node_shapes.iter().find(|n| n.name == name)
    }
    pub fn gpu_model(&self, name: &str) -> Option<&GpuModel> {
        self.gpu_models.iter().find(|g| g.name == name)
    }
    /// GPUs in a pool at its largest size.
    pub fn pool_max_gpus(&self, pool: &Pool) -> u64 {
        let per_node = self.node_shape(&pool.node).map_or(0, |n| u64::from(n.gpus));
        u64::from(pool.max_nodes) * per_node
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuModel {
    pub name: String,
    /// The model string fleets and NVML inventories use, e.g. `H100-SXM5-80GB`.
    pub id: String,
    pub product: Option<String>,
    pub memory_mib: u64,
    /// MIG placement slots (8 on A100/H100/H200); 0 when the GPU has no MIG.
    pub mig_slots: u32,
    pub mig_profiles: Vec<MigProfile>,
}

/// A MIG profile and where NVIDIA lets it start: `starts` are slot indices, each instance
/// occupying `width` slots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigProfile {
    pub name: String,
    pub compute_slices: u32,
    pub memory_mib: u64,
    pub width: u32,
    pub starts: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeShape {
    pub name: String,
    pub gpu_model: String,
    pub gpus: u32,
    /// GPU indices grouped by NVLink island; GPUs in no island are listed alone.
    pub nvlink_islands: Vec<Vec<u32>>,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub instance: Option<String>,
    pub list_price_per_hour: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityKind {
    Reserved,
    OnDemand,
    Spot,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pool {
    pub name: String,
    pub capacity: CapacityKind,
    pub node: String,
    pub min_nodes: u32,
    pub max_nodes: u32,
    /// Cost of one node for one hour, if declared (or the node shape's list price).
    pub cost_per_node_hour: Option<f64>,
    pub boot_s: u64,
    pub notice_s: Option<u64>,
    /// The largest gang (in GPUs) this pool admits, if limited.
    pub max_gang_gpus: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptMode {
    Never,
    AfterCheckpoint,
    Immediately,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tier {
    pub name: String,
    pub priority: i64,
    pub preempt: PreemptMode,
    pub max_lost_s: Option<u64>,
    /// For `after_checkpoint` with `max_lost`: how long a job of a team that borrows stays
    /// protected once past `max_lost` without a checkpoint, so a lender's guarantee comes
    /// back within a bound. `None`: `max_lost` again.
    pub reclaim_within_s: Option<u64>,
    pub min_runtime_s: u64,
    /// Time a victim gets to checkpoint before it is stopped.
    pub grace_s: u64,
    /// The tier of jobs that name none (Kubernetes' PriorityClass `globalDefault`).
    pub default: bool,
    /// For a `preempt = never` tier: whether its jobs may borrow beyond their team's
    /// guarantee (a lender then cannot reclaim those GPUs). Off unless the policy says.
    pub borrow: bool,
    /// The runtime estimate of a job of this tier that gives none (Slurm's partition
    /// `DefaultTime`); a team's own default wins.
    pub default_runtime_s: Option<u64>,
}

/// GPUs overall and per pool, in milli-GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Quota {
    pub total_milli: Option<u64>,
    pub per_pool_milli: SmallMap<String, u64>,
}

impl Quota {
    /// The overall amount, or the sum of the per-pool amounts.
    pub fn effective_total_milli(&self) -> u64 {
        self.total_milli
            .unwrap_or_else(|| self.per_pool_milli.values().sum())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Team {
    pub name: String,
    pub cohort: Option<String>,
    pub guaranteed: Quota,
    pub burst: Option<Quota>,
    pub lend: Option<Quota>,
    /// Tiers the team may use; `None` means all.
    pub tiers: Option<Vec<String>>,
    pub weight: f64,
    /// The team charged for jobs that name none.
    pub default: bool,
    /// The runtime estimate of the team's jobs that give none (before the tier's).
    pub default_runtime_s: Option<u64>,
    /// Who may submit as the team (`crate::tenancy`): namespace patterns, user patterns
    /// and group patterns; `None` leaves that part open.
    pub namespaces: Option<Vec<String>>,
    pub users: Option<Vec<String>>,
    pub groups: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FairShare {
    Drf,
    Off,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cohort {
    pub name: String,
    pub fair_share: FairShare,
    pub half_life_s: u64,
    pub teams: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyLevel {
    NvlinkIsland,
    Node,
    NvlinkDomain,
    Rack,
    Leaf,
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Packing {
    LeastFragmentation,
    BestFit,
    Spread,
    GpuPacking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GangMode {
    AllOrNothing,
    BestEffort,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub gang: GangMode,
    pub gang_timeout_s: Option<u64>,
    /// A level every gang must fit in, if any.
    pub topology_required: Option<TopologyLevel>,
    /// Levels scored in order of preference.
    pub topology_preferred: Vec<TopologyLevel>,
    pub packing: Packing,
    pub backfill: bool,
    /// How many blocked jobs, in queue order, get a reservation: 1 is EASY backfill
    /// (`backfill = on`), more is conservative backfill (`conservative(depth = K)`;
    /// `u32::MAX` for `depth = all`, Slurm's behaviour).
    pub reservation_depth: u32,
    pub backfill_window_s: u64,
    pub max_gang_gpus: Option<u32>,
    /// Starvation bound: a blocked job that has waited this long gets a reservation of
    /// its own even past `reservation_depth`.
    pub reserve_after_wait_s: u64,
    /// … or that this many later-submitted jobs of its priority or lower, running now,
    /// started ahead of.
    pub reserve_after_overtaken: u32,
}

/// `backfill = conservative` without a depth.
pub const DEFAULT_CONSERVATIVE_DEPTH: u32 = 100;

impl Default for Placement {
    fn default() -> Placement {
        Placement {
            gang: GangMode::AllOrNothing,
            gang_timeout_s: None,
            topology_required: None,
            topology_preferred: vec![TopologyLevel::NvlinkIsland, TopologyLevel::Node],
            packing: Packing::LeastFragmentation,
            backfill: true,
            reservation_depth: 1,
            backfill_window_s: 24 * 3600,
            max_gang_gpus: None,
            reserve_after_wait_s: 24 * 3600,
            reserve_after_overtaken: 100,
        }
    }
}

/// When a warm pool is active: days of the week (bit 0 = Monday) and minutes of the day.
/// `end_min` may be below `start_min` for windows that wrap past midnight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimeWindow {
    pub days: u8,
    pub start_min: u32,
    pub end_min: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarmPool {
    pub name: String,
    pub pool: String,
    /// Target size in nodes.
    pub size: Expr,
    pub clamp: Option<(f64, f64)>,
    /// Empty means always active.
    pub windows: Vec<TimeWindow>,
    /// IANA time zone of the windows.
    pub zone: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleTrigger {
    pub condition: Expr,
    pub hold_s: u64,
    /// Nodes to add or remove; `None` on a `down` trigger means every idle node beyond the
    /// warm target.
    pub step: Option<Expr>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Autoscale {
    pub pool: String,
    pub up: Vec<ScaleTrigger>,
    pub down: Vec<ScaleTrigger>,
    pub max_spend_per_hour: Option<f64>,
    pub cooldown_up_s: u64,
    pub cooldown_down_s: u64,
    pub fallback: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum RuleAction {
    Deny {
        message: String,
    },
    Warn {
        message: String,
    },
    Route {
        pool: String,
        message: Option<String>,
    },
    Annotate {
        key: String,
        /// Boxed, as most rules deny or warn and every rule is as large as its largest action.
        value: Box<Expr>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    pub name: String,
    pub condition: Expr,
    #[serde(flatten)]
    pub action: RuleAction,
}

/// The dimension of a quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dim {
    Gpu,
    Bytes,
    Duration,
    Money,
    Rate,
    Percent,
    Nodes,
}

impl Dim {
    /// The base unit values of this dimension are stored in.
    pub fn base_unit(self) -> &'static str {
        match self {
            Dim::Gpu => "gpu",
            Dim::Bytes => "MiB",
            Dim::Duration => "s",
            Dim::Money => "$",
            Dim::Rate => "$/h",
            Dim::Percent => "%",
            Dim::Nodes => "nodes",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Value {
    Number(f64),
    Quantity {
        dim: Dim,
        amount: f64,
    },
    Bool(bool),
    Str(String),
    None,
    /// Minutes since midnight.
    Time(u32),
    /// A named definition: `{kind: "tier", name: "critical"}`.
    Ref {
        /// One of the fixed kind keys, so not allocated per reference.
        kind: &'static str,
        name: String,
    },
    /// A word from a fixed set, e.g. a topology level.
    Word(String),
}

/// Job attributes a rule condition can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobField {
    Id,
    Name,
    Namespace,
    User,
    Team,
    Tier,
    Pool,
    Gpus,
    GpusPerMember,
    GpuFraction,
    Members,
    Gang,
    Vram,
    Cpu,
    Memory,
    Runtime,
    CheckpointInterval,
    Preemptions,
    SpotInterruptions,
    Models,
    Topology,
    Wait,
    Interactive,
    Mig,
}

/// Live or historical signals autoscale and warm expressions read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    PendingGpus,
    PendingNodes,
    PendingJobs,
    RunningGpus,
    Utilization,
    QueueWait,
    Idle,
    ConcurrentStarts,
    GpuDemand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Function {
    Ceil,
    Floor,
    Round,
    Min,
    Max,
    /// A percentile (0–100) of a history.
    Percentile(u8),
    Mean,
    Peak,
    Prefer,
    Require,
}

impl Function {
    /// The value of an arithmetic function (`ceil`, `floor`, `round`, `min`, `max`) of
    /// numbers; `None` for the others or the wrong number of arguments.
    pub fn apply(self, args: &[f64]) -> Option<f64> {
        match (self, args) {
            (Function::Ceil, [x]) => Some(x.ceil()),
            (Function::Floor, [x]) => Some(x.floor()),
            (Function::Round, [x]) => Some(x.round()),
            (Function::Min, [first, rest @ ..]) => Some(rest.iter().fold(*first, |a, b| a.min(*b))),
            (Function::Max, [first, rest @ ..]) => Some(rest.iter().fold(*first, |a, b| a.max(*b))),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    Neg,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    In,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expr {
    Const(Value),
    Field(JobField),
    /// A signal with its filters (`fits`, `tier`, `team`, `pool`), by argument name.
    Signal {
        signal: Signal,
        filters: SmallMap<String, Value>,
    },
    Call {
        function: Function,
        args: Vec<Expr>,
        /// Boxed: few calls name arguments, and every expression node is as large as
        /// its largest variant.
        named: Box<SmallMap<String, Expr>>,
    },
    List(Vec<Expr>),
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinaryOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
}

impl Expr {
    /// The value of a constant expression, folding arithmetic on constants.
    pub fn as_const_number(&self) -> Option<f64> {
        match self {
            Expr::Const(Value::Number(n)) => Some(*n),
            Expr::Const(Value::Quantity { amount, .. }) => Some(*amount),
            Expr::Unary {
                op: UnaryOp::Neg,
                operand,
            } => operand.as_const_number().map(|n| -n),
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (lhs.as_const_number()?, rhs.as_const_number()?);
                match op {
                    BinaryOp::Add => Some(a + b),
                    BinaryOp::Sub => Some(a - b),
                    BinaryOp::Mul => Some(a * b),
                    BinaryOp::Div if b != 0.0 => Some(a / b),
                    _ => None,
                }
            }
            Expr::Call { function, args, .. } => {
                let vals: Option<Vec<f64>> = args.iter().map(Expr::as_const_number).collect();
                function.apply(&vals?)
            }
            _ => None,
        }
    }
}
