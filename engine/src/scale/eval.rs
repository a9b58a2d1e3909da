//! Evaluates autoscale conditions, steps and warm sizes: arithmetic over signals of what
//! is waiting and running, and percentiles over start histories.

use super::demand::Shape;
use super::warm::{self, Bucket, StartFilter};
use crate::decide::snapshot::{JobState, Snapshot};
use chrono_tz::Tz;
use lang::ir::{BinaryOp, Expr, Function, Program, Signal, UnaryOp, Value};
use std::collections::BTreeMap;

pub(super) struct Env<'a> {
    pub program: &'a Program,
    pub snapshot: &'a Snapshot,
    pub waiting: &'a [(&'a JobState, i64)],
    pub running_milli: &'a BTreeMap<String, u64>,
    /// Nodes booting per pool at the start of the cycle.
    pub booting: BTreeMap<String, u64>,
    /// Jobs that nodes added earlier in this cycle (to another pool) will hold, so two
    /// pools do not both scale for them.
    /// Job id → the pool whose new nodes will hold it, and when they are ready.
    pub covered: BTreeMap<String, (String, i64)>,
    pub now: i64,
}

#[derive(Debug, Clone)]
enum V {
    Num(f64),
    Bool(bool),
    History(Vec<f64>),
}

/// Filters of a signal: the pool it is about (`fits` or `pool`, `self` already resolved by
/// the checker), and tier and team.
struct Filters {
    pool: Option<String>,
    tier: Option<String>,
    team: Option<String>,
}

fn filters(f: &lang::ir::SmallMap<String, Value>, default_pool: &str) -> Filters {
    let name = |k: &str| match f.get(k) {
        Some(Value::Ref { name, .. }) | Some(Value::Str(name)) | Some(Value::Word(name)) => {
            Some(name.clone())
        }
        _ => None,
    };
    Filters {
        pool: name("fits")
            .or_else(|| name("pool"))
            .or_else(|| Some(default_pool.to_string())),
        tier: name("tier"),
        team: name("team"),
    }
}

impl Env<'_> {
    pub fn truthy(&self, e: &Expr, pool: &str, idle: Option<i64>) -> bool {
        matches!(self.eval(e, pool, idle, Tz::UTC), Some(V::Bool(true)))
    }

    pub fn number(&self, e: &Expr, pool: &str, tz: Tz) -> Option<f64> {
        match self.eval(e, pool, None, tz)? {
            V::Num(n) => Some(n),
            _ => None,
        }
    }

    /// Pending jobs a pool's node shape could hold, with the nodes each needs.
    fn fitting(&self, f: &Filters) -> Vec<(&JobState, i64, f64)> {
        let Some(pool) = &f.pool else {
            return Vec::new();
        };
        let Some(shape) = Shape::of(self.program, pool) else {
            return Vec::new();
        };
        self.waiting
            .iter()
            .filter(|(j, _)| !self.covered.contains_key(j.id()))
            .filter(|(j, _)| j.job.shape.pools.is_empty() || j.job.shape.pools.contains(pool))
            .filter(|(j, _)| {
                f.tier
                    .as_ref()
                    .is_none_or(|t| j.job.tier.as_ref() == Some(t))
            })
            .filter(|(j, _)| {
                f.team
                    .as_ref()
                    .is_none_or(|t| j.job.team.as_ref() == Some(t))
            })
            .filter_map(|(j, wait)| Some((*j, *wait, shape.nodes_for(j)?)))
            .collect()
    }

    fn booting(&self, pool: &str) -> u64 {
        self.booting.get(pool).copied().unwrap_or(0)
    }

    /// The waiting jobs that `nodes` new nodes of `pool` would hold (in queue order, the
    /// plan's, skipping jobs too big for what is left), and the nodes they take. With
    /// `partial`, a job that may also run on another pool's nodes takes what is left
    /// (the rest of it may come from there).
    fn held_by(&self, pool: &str, nodes: u64, partial: bool) -> (Vec<String>, f64) {
        let f = Filters {
            pool: Some(pool.to_string()),
            tier: None,
            team: None,
        };
        let mut left = nodes as f64;
        let mut ids = Vec::new();
        for (j, _, n) in self.fitting(&f) {
            if n > left + 1e-9 {
                if partial && !self.only_in(j, pool) {
                    left = 0.0;
                }
                continue;
            }
            left -= n;
            ids.push(j.id().to_string());
        }
        (ids, nodes as f64 - left)
    }

    /// Whether `pool` is the only pool whose nodes can hold a member of `job`.
    fn only_in(&self, job: &JobState, pool: &str) -> bool {
        let member = &job.job.shape.member;
        !self.program.pools.iter().any(|p| {
            p.name != pool
                && (job.job.shape.pools.is_empty() || job.job.shape.pools.contains(&p.name))
                && Shape::of(self.program, &p.name).is_some_and(|s| s.members_per_node(member) > 0)
        })
    }

    /// Of `nodes` new nodes of `pool`, how many the waiting jobs would use. A gang that
    /// can run only on this pool needs all of its nodes: two nodes for a gang of four are
    /// worth nothing.
    pub fn usable(&self, pool: &str, nodes: u64) -> u64 {
        let (_, used) = self.held_by(pool, nodes, true);
        ((used - 1e-9).ceil().max(0.0) as u64).min(nodes)
    }

    /// The fewest nodes of `pool` the smallest waiting job that fits it needs.
    pub fn smallest_need(&self, pool: &str) -> Option<u64> {
        let f = Filters {
            pool: Some(pool.to_string()),
            tier: None,
            team: None,
        };
        self.fitting(&f)
            .iter()
            .map(|(_, _, n)| (n - 1e-9).ceil().max(1.0) as u64)
            .min()
    }

    /// Marks the waiting jobs that `nodes` new nodes of `pool` will hold.
    pub fn cover(&mut self, pool: &str, nodes: u64, ready_at: i64) {
        let (ids, _) = self.held_by(pool, nodes, false);
        self.covered
            .extend(ids.into_iter().map(|id| (id, (pool.to_string(), ready_at))));
    }

    /// Nodes of demand after what is already booting.
    fn pending_nodes(&self, f: &Filters) -> f64 {
        let need: f64 = self.fitting(f).iter().map(|(_, _, n)| n).sum();
        let booting = f.pool.as_deref().map_or(0, |p| self.booting(p));
        (need.ceil() - booting as f64).max(0.0)
    }

    /// "3 jobs (24 GPUs) waiting up to 4m fit cloud_spot" for reasons.
    pub fn describe_demand(&self, pool: &str) -> String {
        let f = Filters {
            pool: Some(pool.to_string()),
            tier: None,
            team: None,
        };
        let jobs = self.fitting(&f);
        if jobs.is_empty() {
            return format!("no waiting job fits {pool}");
        }
        let gpus: f64 = jobs
            .iter()
            .map(|(j, _, _)| j.gpu_milli() as f64 / 1000.0)
            .sum();
        let gangs = jobs
            .iter()
            .filter(|(j, _, _)| j.job.shape.members > 1)
            .count();
        let wait = jobs.iter().map(|(_, w, _)| *w).max().unwrap_or(0);
        let nodes: f64 = jobs.iter().map(|(_, _, n)| n).sum();
        format!(
            "{} job{} ({gpus} GPUs{}) waiting up to {wait}s need {} node{} of {pool}'s shape",
            jobs.len(),
            if jobs.len() == 1 { "" } else { "s" },
            if gangs > 0 {
                format!(", {gangs} gang{}", if gangs == 1 { "" } else { "s" })
            } else {
                String::new()
            },
            nodes.ceil(),
            if nodes.ceil() == 1.0 { "" } else { "s" }
        )
    }

    fn signal(
        &self,
        s: Signal,
        f: &lang::ir::SmallMap<String, Value>,
        pool: &str,
        idle: Option<i64>,
    ) -> Option<V> {
        let f = filters(f, pool);
        let pool_gpus = |p: &str| -> f64 {
            self.snapshot
                .fleet
                .nodes
                .iter()
                .filter(|n| n.pool.as_deref() == Some(p))
                .map(|n| n.gpus.len() as f64)
                .sum()
        };
        Some(V::Num(match s {
            Signal::PendingNodes => self.pending_nodes(&f),
            Signal::PendingGpus => {
                let need: f64 = self
                    .fitting(&f)
                    .iter()
                    .map(|(j, _, _)| j.gpu_milli() as f64 / 1000.0)
                    .sum();
                let per_node = f
                    .pool
                    .as_deref()
                    .and_then(|p| Shape::of(self.program, p))
                    .map_or(0.0, |s| f64::from(s.node.gpus));
                let booting = f.pool.as_deref().map_or(0, |p| self.booting(p)) as f64 * per_node;
                (need - booting).max(0.0)
            }
            Signal::PendingJobs => self.fitting(&f).len() as f64,
            Signal::QueueWait => self
                .fitting(&f)
                .iter()
                .map(|(_, w, _)| *w)
                .max()
                .unwrap_or(0) as f64,
            Signal::RunningGpus => {
                f.pool
                    .as_ref()
                    .and_then(|p| self.running_milli.get(p))
                    .copied()
                    .unwrap_or(0) as f64
                    / 1000.0
            }
            Signal::Utilization => {
                let p = f.pool.as_deref().unwrap_or(pool);
                let total = pool_gpus(p);
                if total == 0.0 {
                    0.0
                } else {
                    100.0 * self.running_milli.get(p).copied().unwrap_or(0) as f64 / 1000.0 / total
                }
            }
            Signal::Idle => idle? as f64,
            // Histories are read by the functions that summarise them.
            Signal::ConcurrentStarts | Signal::GpuDemand => return None,
        }))
    }

    fn history(
        &self,
        e: &Expr,
        named: &lang::ir::SmallMap<String, Expr>,
        pool: &str,
        tz: Tz,
    ) -> Option<Vec<f64>> {
        let Expr::Signal { signal, filters: f } = e else {
            return None;
        };
        let gpus = match signal {
            Signal::ConcurrentStarts => false,
            Signal::GpuDemand => true,
            _ => return None,
        };
        let fl = filters(f, pool);
        let filter = StartFilter {
            pool: if f.contains_key("pool") || f.contains_key("fits") {
                fl.pool
            } else {
                None
            },
            team: fl.team,
            tier: fl.tier,
        };
        let over = named
            .get("over")
            .and_then(Expr::as_const_number)
            .map_or(14 * 86_400, |s| s as i64);
        let bucket = match named.get("by") {
            Some(Expr::Const(Value::Word(w))) if w == "hour_of_week" => Bucket::HourOfWeek,
            Some(Expr::Const(Value::Word(w))) if w == "hour_of_day" => Bucket::HourOfDay,
            _ => Bucket::All,
        };
        Some(warm::samples(
            &self.snapshot.starts,
            &filter,
            gpus,
            over,
            bucket,
            tz,
            self.now,
        ))
    }

    fn eval(&self, e: &Expr, pool: &str, idle: Option<i64>, tz: Tz) -> Option<V> {
        Some(match e {
            Expr::Const(Value::Number(n)) => V::Num(*n),
            Expr::Const(Value::Quantity { amount, .. }) => V::Num(*amount),
            Expr::Const(Value::Bool(b)) => V::Bool(*b),
            Expr::Const(_) => return None,
            Expr::Field(_) | Expr::List(_) => return None,
            Expr::Signal { signal, filters } => return self.signal(*signal, filters, pool, idle),
            Expr::Unary { op, operand } => match (op, self.eval(operand, pool, idle, tz)?) {
                (UnaryOp::Not, V::Bool(b)) => V::Bool(!b),
                (UnaryOp::Neg, V::Num(n)) => V::Num(-n),
                _ => return None,
            },
            Expr::Binary { op, lhs, rhs } => {
                if let BinaryOp::And | BinaryOp::Or = op {
                    let a = matches!(self.eval(lhs, pool, idle, tz), Some(V::Bool(true)));
                    if (*op == BinaryOp::And) != a {
                        return Some(V::Bool(a));
                    }
                    return Some(V::Bool(matches!(
                        self.eval(rhs, pool, idle, tz),
                        Some(V::Bool(true))
                    )));
                }
                let (V::Num(a), V::Num(b)) = (
                    self.eval(lhs, pool, idle, tz)?,
                    self.eval(rhs, pool, idle, tz)?,
                ) else {
                    return None;
                };
                match op {
                    BinaryOp::Add => V::Num(a + b),
                    BinaryOp::Sub => V::Num(a - b),
                    BinaryOp::Mul => V::Num(a * b),
                    BinaryOp::Div if b != 0.0 => V::Num(a / b),
                    BinaryOp::Div => return None,
                    BinaryOp::Eq => V::Bool((a - b).abs() < 1e-9),
                    BinaryOp::Ne => V::Bool((a - b).abs() >= 1e-9),
                    BinaryOp::Lt => V::Bool(a < b),
                    BinaryOp::Le => V::Bool(a <= b),
                    BinaryOp::Gt => V::Bool(a > b),
                    BinaryOp::Ge => V::Bool(a >= b),
                    BinaryOp::In | BinaryOp::And | BinaryOp::Or => return None,
                }
            }
            Expr::Call {
                function,
                args,
                named,
            } => {
                if let Function::Percentile(_) | Function::Mean | Function::Peak = function {
                    let samples = match self.eval_history(args.first()?, named, pool, tz)? {
                        V::History(s) => s,
                        _ => return None,
                    };
                    return Some(V::Num(match function {
                        Function::Percentile(p) => warm::percentile(&samples, *p),
                        Function::Mean if samples.is_empty() => 0.0,
                        Function::Mean => samples.iter().sum::<f64>() / samples.len() as f64,
                        _ => samples.iter().copied().fold(0.0, f64::max),
                    }));
                }
                let nums: Vec<f64> = args
                    .iter()
                    .map(|a| match self.eval(a, pool, idle, tz)? {
                        V::Num(n) => Some(n),
                        _ => None,
                    })
                    .collect::<Option<_>>()?;
                V::Num(function.apply(&nums)?)
            }
        })
    }

    fn eval_history(
        &self,
        e: &Expr,
        named: &lang::ir::SmallMap<String, Expr>,
        pool: &str,
        tz: Tz,
    ) -> Option<V> {
        self.history(e, named, pool, tz).map(V::History)
    }
}
