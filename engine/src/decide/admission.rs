//! Admission rules: each pending job runs through the policy's rules in order. The first
//! `deny` that matches ends it (the decision names the rule); the first matching `route`
//! sends the job to a pool; every matching `warn` and `annotate` is collected.

use super::snapshot::JobState;
use crate::core::fleet::MILLI;
use lang::ir::{BinaryOp, Dim, Expr, JobField, Program, RuleAction, UnaryOp, Value};
use std::collections::BTreeMap;

/// What the rules made of one job.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Admission {
    /// `(rule, message)` of the deny rule that matched.
    pub denied: Option<(String, String)>,
    /// `(rule, pool)` of the route rule that matched.
    pub routed: Option<(String, String)>,
    pub warnings: Vec<String>,
    pub annotations: BTreeMap<String, String>,
}

pub fn admit(program: &Program, job: &JobState, now: i64) -> Admission {
    let mut out = Admission::default();
    let env = Env { program, job, now };
    for rule in &program.rules {
        if !matches!(env.eval(&rule.condition), Some(Val::Bool(true))) {
            continue;
        }
        match &rule.action {
            RuleAction::Deny { message } => {
                out.denied = Some((rule.name.clone(), message.clone()));
                return out;
            }
            RuleAction::Route { pool, .. } => {
                if out.routed.is_none() {
                    out.routed = Some((rule.name.clone(), pool.clone()));
                }
            }
            RuleAction::Warn { message } => out.warnings.push(message.clone()),
            RuleAction::Annotate { key, value } => {
                let text = env.eval(value).map(|v| v.text()).unwrap_or_default();
                out.annotations.insert(key.clone(), text);
            }
        }
    }
    out
}

/// Each rule in order and whether it matched, up to the first `deny` that did (the rules
/// `admit` reads), for a job's story.
pub fn rule_results(program: &Program, job: &JobState, now: i64) -> Vec<(String, bool)> {
    let env = Env { program, job, now };
    let mut out = Vec::new();
    for rule in &program.rules {
        let matched = matches!(env.eval(&rule.condition), Some(Val::Bool(true)));
        out.push((rule.name.clone(), matched));
        if matched && matches!(rule.action, RuleAction::Deny { .. }) {
            break;
        }
    }
    out
}

/// A value during evaluation; quantities are in the IR's base units.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Num(f64),
    Q(Dim, f64),
    Bool(bool),
    Str(String),
    None,
    /// A named definition: its kind key (as in the IR) and its name.
    Ref(&'static str, String),
    Word(String),
    List(Vec<Val>),
}

impl Val {
    fn number(&self) -> Option<f64> {
        match self {
            Val::Num(n) | Val::Q(_, n) => Some(*n),
            _ => None,
        }
    }

    fn text(&self) -> String {
        match self {
            Val::Num(n) | Val::Q(_, n) => format!("{n}"),
            Val::Bool(b) => b.to_string(),
            Val::Str(s) | Val::Word(s) | Val::Ref(_, s) => s.clone(),
            Val::None => "none".into(),
            Val::List(items) => items.iter().map(Val::text).collect::<Vec<_>>().join(","),
        }
    }
}

struct Env<'a> {
    program: &'a Program,
    job: &'a JobState,
    now: i64,
}

impl Env<'_> {
    fn eval(&self, e: &Expr) -> Option<Val> {
        Some(match e {
            Expr::Const(v) => constant(v),
            Expr::Field(f) => self.field(*f),
            Expr::List(items) => {
                Val::List(items.iter().map(|x| self.eval(x)).collect::<Option<_>>()?)
            }
            Expr::Unary { op, operand } => match (op, self.eval(operand)?) {
                (UnaryOp::Not, Val::Bool(b)) => Val::Bool(!b),
                (UnaryOp::Neg, Val::Num(n)) => Val::Num(-n),
                (UnaryOp::Neg, Val::Q(d, n)) => Val::Q(d, -n),
                _ => return None,
            },
            Expr::Binary { op, lhs, rhs } => return self.binary(*op, lhs, rhs),
            Expr::Call { function, args, .. } => {
                let vals: Vec<Val> = args.iter().map(|a| self.eval(a)).collect::<Option<_>>()?;
                let dim = vals.iter().find_map(|v| match v {
                    Val::Q(d, _) => Some(*d),
                    _ => None,
                });
                let nums: Vec<f64> = vals.iter().map(Val::number).collect::<Option<_>>()?;
                let x = function.apply(&nums)?;
                match dim {
                    Some(d) => Val::Q(d, x),
                    None => Val::Num(x),
                }
            }
            // Signals belong to autoscale and warm expressions, not to job rules.
            Expr::Signal { .. } => return None,
        })
    }

    fn binary(&self, op: BinaryOp, lhs: &Expr, rhs: &Expr) -> Option<Val> {
        // `and`/`or` short-circuit, so a rule can guard a field that may be none.
        if let BinaryOp::And | BinaryOp::Or = op {
            let a = matches!(self.eval(lhs), Some(Val::Bool(true)));
            if (op == BinaryOp::And) != a {
                return Some(Val::Bool(a));
            }
            return Some(Val::Bool(matches!(self.eval(rhs), Some(Val::Bool(true)))));
        }
        let (a, b) = (self.eval(lhs)?, self.eval(rhs)?);
        let cmp = |f: fn(f64, f64) -> bool| -> Option<Val> {
            Some(Val::Bool(f(a.number()?, b.number()?)))
        };
        match op {
            BinaryOp::Eq => Some(Val::Bool(same(&a, &b))),
            BinaryOp::Ne => Some(Val::Bool(!same(&a, &b))),
            BinaryOp::Lt => cmp(|x, y| x < y),
            BinaryOp::Le => cmp(|x, y| x <= y),
            BinaryOp::Gt => cmp(|x, y| x > y),
            BinaryOp::Ge => cmp(|x, y| x >= y),
            BinaryOp::In => match (&a, &b) {
                (_, Val::List(items)) => Some(Val::Bool(items.iter().any(|x| same(&a, x)))),
                (Val::List(items), _) => Some(Val::Bool(items.iter().any(|x| same(x, &b)))),
                _ => Some(Val::Bool(same(&a, &b))),
            },
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
                let (x, y) = (a.number()?, b.number()?);
                let v = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    _ if y == 0.0 => return None,
                    _ => x / y,
                };
                Some(match (&a, &b) {
                    (Val::Q(d, _), Val::Q(_, _)) if matches!(op, BinaryOp::Div) => {
                        let _ = d;
                        Val::Num(v)
                    }
                    (Val::Q(d, _), _) | (_, Val::Q(d, _)) => Val::Q(*d, v),
                    _ => Val::Num(v),
                })
            }
            BinaryOp::And | BinaryOp::Or => None,
        }
    }

    fn field(&self, f: JobField) -> Val {
        let job = &self.job.job;
        let shape = &job.shape;
        let fraction = f64::from(shape.member.gpu_milli) / f64::from(MILLI);
        // A MIG member weighs what it counts for in quotas: its instances' share of the
        // GPU's compute slices (a 3g of 7 is 0.428 gpu), as `plan` shows it.
        let per_member = if shape.member.mig_profile.is_some() {
            self.job.member_milli as f64 / f64::from(MILLI)
        } else {
            f64::from(shape.member.num_gpu) * fraction
        };
        let opt_str = |s: &Option<String>| s.clone().map_or(Val::None, Val::Str);
        let seconds = |s: Option<u64>| s.map_or(Val::None, |x| Val::Q(Dim::Duration, x as f64));
        match f {
            JobField::Id => Val::Str(job.id.clone()),
            JobField::Name => Val::Str(job.name.clone().unwrap_or_else(|| job.id.clone())),
            JobField::Namespace => opt_str(&job.namespace),
            JobField::User => opt_str(&job.user),
            JobField::Team => job.team.clone().map_or(Val::None, |t| Val::Ref("team", t)),
            JobField::Tier => job.tier.clone().map_or(Val::None, |t| Val::Ref("tier", t)),
            JobField::Pool => shape
                .pools
                .first()
                .cloned()
                .map_or(Val::None, |p| Val::Ref("pool", p)),
            JobField::Gpus => Val::Q(Dim::Gpu, per_member * f64::from(shape.members)),
            JobField::GpusPerMember => Val::Q(Dim::Gpu, per_member),
            JobField::GpuFraction => Val::Q(Dim::Gpu, fraction),
            JobField::Members => Val::Num(f64::from(shape.members)),
            JobField::Gang => Val::Bool(shape.members > 1),
            JobField::Vram => match shape.member.vram_mib {
                0 => Val::None,
                v => Val::Q(Dim::Bytes, v as f64),
            },
            JobField::Cpu => Val::Num(
                shape.member.cpu_milli as f64 * f64::from(shape.members) / f64::from(MILLI),
            ),
            JobField::Memory => Val::Q(
                Dim::Bytes,
                shape.member.memory_mib as f64 * f64::from(shape.members),
            ),
            JobField::Runtime => seconds(job.runtime_s),
            JobField::CheckpointInterval => seconds(job.checkpoint_interval_s),
            JobField::Preemptions => Val::Num(f64::from(job.preemptions)),
            JobField::SpotInterruptions => Val::Num(f64::from(job.spot_interruptions)),
            JobField::Models => Val::List(
                shape
                    .member
                    .models
                    .iter()
                    .map(|id| {
                        let name = self
                            .program
                            .gpu_models
                            .iter()
                            .find(|g| g.id == *id || g.name == *id)
                            .map_or_else(|| id.clone(), |g| g.name.clone());
                        Val::Ref("gpu", name)
                    })
                    .collect(),
            ),
            JobField::Topology => shape.topology_required.map_or(Val::None, |l| {
                Val::Word(crate::core::gang::level_name(l).into())
            }),
            JobField::Wait => Val::Q(
                Dim::Duration,
                job.submitted_at
                    .map_or(0.0, |s| (self.now - s).max(0) as f64),
            ),
            JobField::Interactive => Val::Bool(job.interactive),
            JobField::Mig => opt_str(&shape.member.mig_profile),
        }
    }
}

fn constant(v: &Value) -> Val {
    match v {
        Value::Number(n) => Val::Num(*n),
        Value::Quantity { dim, amount } => Val::Q(*dim, *amount),
        Value::Bool(b) => Val::Bool(*b),
        Value::Str(s) => Val::Str(s.clone()),
        Value::None => Val::None,
        Value::Time(t) => Val::Num(f64::from(*t)),
        Value::Ref { kind, name } => Val::Ref(kind, name.clone()),
        Value::Word(w) => Val::Word(w.clone()),
    }
}

/// Equality across the value kinds a rule compares: numbers and quantities by amount
/// (with a tolerance for unit conversions), names by name.
fn same(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Num(x) | Val::Q(_, x), Val::Num(y) | Val::Q(_, y)) => {
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        (Val::Ref(_, x), Val::Ref(_, y))
        | (Val::Ref(_, x), Val::Word(y) | Val::Str(y))
        | (Val::Word(x) | Val::Str(x), Val::Ref(_, y)) => x == y,
        _ => a == b,
    }
}
