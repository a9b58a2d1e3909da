//! Expression typing and lowering: units are types, names resolve to definitions, and every
//! expression becomes an [`ir::Expr`] or a diagnostic.

use super::types::{self, DefKind, Ty, WordSet};
use super::{Checker, ModuleId};
use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::ir::{self, Dim, Function, JobField, Signal, Value};
use crate::source::Span;
use crate::syntax::ast::{self, BinaryOp, ExprKind, UnaryOp};

/// Where an expression appears, which decides what it may read.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'c> {
    pub module: ModuleId,
    /// Job fields (`job.gpus`): rule conditions only.
    pub job: bool,
    /// Live signals (`pending_gpus`, ...): autoscale and warm blocks.
    pub signals: bool,
    /// `idle`: autoscale `down` triggers only.
    pub idle: bool,
    /// What `self` names: the pool of a template, warm or autoscale block.
    pub self_pool: Option<&'c str>,
}

impl<'c> Ctx<'c> {
    pub fn plain(module: ModuleId) -> Ctx<'c> {
        Ctx {
            module,
            job: false,
            signals: false,
            idle: false,
            self_pool: None,
        }
    }
}

/// A typed, lowered expression.
#[derive(Debug, Clone)]
pub struct Typed {
    pub ty: Ty,
    pub ir: ir::Expr,
    /// The literal `0`, which fits any quantity.
    pub zero: bool,
}

/// The fields a rule condition can read as `job.FIELD`.
pub const JOB_FIELDS: &[&str] = &[
    "id",
    "name",
    "namespace",
    "user",
    "team",
    "tier",
    "pool",
    "gpus",
    "gpus_per_member",
    "gpu_fraction",
    "members",
    "gang",
    "vram",
    "cpu",
    "memory",
    "runtime",
    "checkpoint_interval",
    "preemptions",
    "spot_interruptions",
    "models",
    "topology",
    "wait",
    "interactive",
    "mig",
];

fn job_field(name: &str) -> Option<(JobField, Ty)> {
    Some(match name {
        "id" => (JobField::Id, Ty::Str),
        "name" => (JobField::Name, Ty::Str),
        "namespace" => (JobField::Namespace, Ty::Str),
        "user" => (JobField::User, Ty::Str),
        "team" => (JobField::Team, Ty::Ref(DefKind::Team)),
        "tier" => (JobField::Tier, Ty::Ref(DefKind::Tier)),
        "pool" => (JobField::Pool, Ty::Ref(DefKind::Pool)),
        "gpus" => (JobField::Gpus, Ty::Q(Dim::Gpu)),
        "gpus_per_member" => (JobField::GpusPerMember, Ty::Q(Dim::Gpu)),
        "gpu_fraction" => (JobField::GpuFraction, Ty::Q(Dim::Gpu)),
        "members" => (JobField::Members, Ty::Number),
        "gang" => (JobField::Gang, Ty::Bool),
        "vram" => (JobField::Vram, Ty::Q(Dim::Bytes)),
        "cpu" => (JobField::Cpu, Ty::Number),
        "memory" => (JobField::Memory, Ty::Q(Dim::Bytes)),
        "runtime" => (JobField::Runtime, Ty::Q(Dim::Duration)),
        "checkpoint_interval" => (JobField::CheckpointInterval, Ty::Q(Dim::Duration)),
        "preemptions" => (JobField::Preemptions, Ty::Number),
        "spot_interruptions" => (JobField::SpotInterruptions, Ty::Number),
        "models" => (JobField::Models, Ty::List(Box::new(Ty::Ref(DefKind::Gpu)))),
        "topology" => (JobField::Topology, Ty::Word(types::TOPOLOGY)),
        "wait" => (JobField::Wait, Ty::Q(Dim::Duration)),
        "interactive" => (JobField::Interactive, Ty::Bool),
        "mig" => (JobField::Mig, Ty::Str),
        _ => return None,
    })
}

const FUNCTIONS: &[&str] = &[
    "ceil",
    "floor",
    "round",
    "min",
    "max",
    "pending_gpus",
    "pending_nodes",
    "pending_jobs",
    "running_gpus",
    "utilization",
    "queue_wait",
    "idle",
    "concurrent_starts",
    "gpu_demand",
    "p50",
    "p75",
    "p90",
    "p95",
    "p99",
    "mean",
    "peak",
    "prefer",
    "require",
];

fn signal(name: &str) -> Option<(Signal, Ty, &'static [&'static str])> {
    const FILTERS: &[&str] = &["fits", "pool", "tier", "team"];
    Some(match name {
        "pending_gpus" => (Signal::PendingGpus, Ty::Q(Dim::Gpu), FILTERS),
        "pending_nodes" => (Signal::PendingNodes, Ty::Q(Dim::Nodes), FILTERS),
        "pending_jobs" => (Signal::PendingJobs, Ty::Number, FILTERS),
        "running_gpus" => (Signal::RunningGpus, Ty::Q(Dim::Gpu), FILTERS),
        "utilization" => (Signal::Utilization, Ty::Q(Dim::Percent), &["pool"]),
        "queue_wait" => (Signal::QueueWait, Ty::Q(Dim::Duration), FILTERS),
        "idle" => (Signal::Idle, Ty::Q(Dim::Duration), &[]),
        "concurrent_starts" => (
            Signal::ConcurrentStarts,
            Ty::History(Box::new(Ty::Number)),
            FILTERS,
        ),
        "gpu_demand" => (
            Signal::GpuDemand,
            Ty::History(Box::new(Ty::Q(Dim::Gpu))),
            FILTERS,
        ),
        _ => return None,
    })
}

fn filter_kind(arg: &str) -> DefKind {
    match arg {
        "tier" => DefKind::Tier,
        "team" => DefKind::Team,
        _ => DefKind::Pool,
    }
}

fn lower_op(op: BinaryOp) -> ir::BinaryOp {
    match op {
        BinaryOp::Or => ir::BinaryOp::Or,
        BinaryOp::And => ir::BinaryOp::And,
        BinaryOp::Eq => ir::BinaryOp::Eq,
        BinaryOp::Ne => ir::BinaryOp::Ne,
        BinaryOp::Lt => ir::BinaryOp::Lt,
        BinaryOp::Le => ir::BinaryOp::Le,
        BinaryOp::Gt => ir::BinaryOp::Gt,
        BinaryOp::Ge => ir::BinaryOp::Ge,
        BinaryOp::Add => ir::BinaryOp::Add,
        BinaryOp::Sub => ir::BinaryOp::Sub,
        BinaryOp::Mul => ir::BinaryOp::Mul,
        BinaryOp::Div => ir::BinaryOp::Div,
        BinaryOp::In => ir::BinaryOp::In,
    }
}

fn typed(ty: Ty, ir: ir::Expr) -> Option<Typed> {
    Some(Typed {
        ty,
        ir,
        zero: false,
    })
}

impl Checker<'_> {
    /// Types and lowers `e`. With `expected`, bare words resolve against it (an option of a
    /// word set, or a definition of that kind) and a mismatch is reported here.
    pub fn expr(&mut self, e: &ast::Expr, expected: Option<&Ty>, ctx: &Ctx<'_>) -> Option<Typed> {
        let t = self.infer(e, expected, ctx)?;
        if let Some(want) = expected {
            if !(t.ty.fits(want) || (t.zero && matches!(want, Ty::Q(_)))) {
                self.mismatch(e.span, &t.ty, want);
                return None;
            }
            if t.zero {
                if let Ty::Q(d) = want {
                    return typed(
                        want.clone(),
                        ir::Expr::Const(Value::Quantity {
                            dim: *d,
                            amount: 0.0,
                        }),
                    );
                }
            }
        }
        Some(t)
    }

    pub fn mismatch(&mut self, span: Span, found: &Ty, want: &Ty) {
        let help = match (found, want) {
            (Ty::Number, Ty::Q(d)) => format!("add a unit, e.g. `{}`", example_unit(*d)),
            (Ty::Q(Dim::Gpu), Ty::Q(Dim::Nodes)) | (Ty::Q(Dim::Gpu), Ty::Number) => {
                "nodes are counted in nodes; to turn GPUs into nodes divide by GPUs per node with its unit (`/ 8 gpu`), or use `pending_nodes(...)`".into()
            }
            (Ty::Q(Dim::Bytes), Ty::Q(Dim::Gpu)) | (Ty::Q(Dim::Gpu), Ty::Q(Dim::Bytes)) => {
                "GPU counts and GPU memory are different things: `8 gpu` vs `80 GiB`".into()
            }
            (Ty::Str, Ty::Ref(k)) => format!("write the {} name without quotes", k.noun()),
            _ => format!("this needs {}", want.describe()),
        };
        self.error(
            Diagnostic::new(
                codes::TYPE_MISMATCH,
                format!("expected {}, found {}", want.describe(), found.describe()),
            )
            .with_label(span, format!("this is {}", found.describe()))
            .with_help(help),
        );
    }

    fn infer(&mut self, e: &ast::Expr, expected: Option<&Ty>, ctx: &Ctx<'_>) -> Option<Typed> {
        let t = self.infer_kind(e, expected, ctx)?;
        if !self.editor {
            return Some(t);
        }
        let described = t.ty.describe();
        let name = match self.type_names.get(&described) {
            Some(name) => name.clone(),
            None => {
                let name: std::sync::Arc<str> = described.as_str().into();
                self.type_names.insert(described, name.clone());
                name
            }
        };
        self.typed.push((e.span, name));
        Some(t)
    }

    fn infer_kind(&mut self, e: &ast::Expr, expected: Option<&Ty>, ctx: &Ctx<'_>) -> Option<Typed> {
        match &e.kind {
            ExprKind::Error => None,
            ExprKind::Quantity(q) => self.quantity(q.value, &q.text, q.unit.as_ref(), e.span),
            ExprKind::Time(t) => {
                let minutes = self.time_of_day(t)?;
                typed(Ty::Time, ir::Expr::Const(Value::Time(minutes)))
            }
            ExprKind::Str(s) => typed(Ty::Str, ir::Expr::Const(Value::Str(s.value.to_string()))),
            ExprKind::Bool(b) => typed(Ty::Bool, ir::Expr::Const(Value::Bool(*b))),
            ExprKind::None => typed(Ty::None, ir::Expr::Const(Value::None)),
            ExprKind::SelfRef => match ctx.self_pool {
                Some(pool) => typed(
                    Ty::Ref(DefKind::Pool),
                    ir::Expr::Const(Value::Ref {
                        kind: "pool",
                        name: pool.to_string(),
                    }),
                ),
                None => {
                    self.error(
                        Diagnostic::new(codes::NOT_IN_CONTEXT, "`self` is not available here")
                            .with_label(e.span, "no pool to refer to")
                            .with_help("`self` names the pool of a template, `warm` or `autoscale` block; write the pool's name"),
                    );
                    None
                }
            },
            ExprKind::Paren(inner) => self.infer(inner, expected, ctx),
            ExprKind::List(items) => {
                let elem_expected = match expected {
                    Some(Ty::List(inner)) => Some((**inner).clone()),
                    _ => None,
                };
                let mut elem_ty = elem_expected.clone().unwrap_or(Ty::Unknown);
                let mut out = Vec::new();
                let mut ok = true;
                for item in items {
                    let want = if elem_ty == Ty::Unknown {
                        None
                    } else {
                        Some(elem_ty.clone())
                    };
                    match self.expr(item, want.as_ref(), ctx) {
                        Some(t) => {
                            if elem_ty == Ty::Unknown {
                                elem_ty = t.ty.clone();
                            }
                            out.push(t.ir);
                        }
                        None => ok = false,
                    }
                }
                ok.then(|| Typed {
                    ty: Ty::List(Box::new(elem_ty)),
                    ir: ir::Expr::List(out),
                    zero: false,
                })
            }
            ExprKind::Path(parts) => self.path(parts, e.span, expected, ctx),
            ExprKind::Call(c) => self.call(&c.func, &c.args, e.span, expected, ctx),
            ExprKind::Unary { op, operand } => {
                let t = self.infer(operand, None, ctx)?;
                match op {
                    UnaryOp::Not => {
                        if t.ty != Ty::Bool {
                            self.mismatch(operand.span, &t.ty, &Ty::Bool);
                            return None;
                        }
                        typed(
                            Ty::Bool,
                            ir::Expr::Unary {
                                op: ir::UnaryOp::Not,
                                operand: Box::new(t.ir),
                            },
                        )
                    }
                    UnaryOp::Neg => {
                        if !t.ty.is_numeric() {
                            self.mismatch(operand.span, &t.ty, &Ty::Number);
                            return None;
                        }
                        typed(
                            t.ty,
                            ir::Expr::Unary {
                                op: ir::UnaryOp::Neg,
                                operand: Box::new(t.ir),
                            },
                        )
                    }
                }
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(*op, lhs, rhs, ctx),
        }
    }

    fn quantity(
        &mut self,
        value: f64,
        text: &str,
        unit: Option<&ast::Ident>,
        span: Span,
    ) -> Option<Typed> {
        if !value.is_finite() {
            self.error(
                Diagnostic::new(
                    codes::OUT_OF_RANGE,
                    format!("`{text}` is not a usable number"),
                )
                .with_label(span, "too large")
                .with_help("write a smaller number"),
            );
            return None;
        }
        let Some(unit) = unit else {
            return Some(Typed {
                ty: Ty::Number,
                ir: ir::Expr::Const(Value::Number(value)),
                zero: value == 0.0,
            });
        };
        let Some((dim, factor)) = types::unit(&unit.name) else {
            let d = Diagnostic::new(codes::UNKNOWN_UNIT, format!("unknown unit `{}`", unit.name))
                .with_label(unit.span, "not a unit Gantry knows");
            let d = match crate::suggest::closest(&unit.name, types::UNITS.iter().copied()) {
                Some(s) => d.with_help(format!("did you mean `{s}`?")),
                None => d.with_help(format!(
                    "units are {}",
                    types::UNITS
                        .iter()
                        .map(|u| format!("`{u}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            };
            self.error(d);
            return None;
        };
        if let Some(binary) = types::binary_for_decimal(&unit.name) {
            self.error(
                Diagnostic::new(
                    codes::DECIMAL_BYTES,
                    format!(
                        "`{}` is a decimal unit ({} bytes)",
                        unit.name,
                        decimal_size(&unit.name)
                    ),
                )
                .with_label(unit.span, "decimal unit")
                .with_help(format!(
                    "GPU and host memory are sized in binary units: did you mean `{binary}`?"
                )),
            );
        }
        typed(
            Ty::Q(dim),
            ir::Expr::Const(Value::Quantity {
                dim,
                amount: value * factor,
            }),
        )
    }

    pub fn time_of_day(&mut self, t: &ast::TimeLit) -> Option<u32> {
        if t.minute > 59 || t.hour > 24 || (t.hour == 24 && t.minute > 0) {
            self.error(
                Diagnostic::new(
                    codes::BAD_TIME,
                    format!("`{:02}:{:02}` is not a time of day", t.hour, t.minute),
                )
                .with_label(t.span, "hours run 0 to 24, minutes 0 to 59")
                .with_help("write `HH:MM`; `24:00` means the end of the day"),
            );
            return None;
        }
        Some(t.hour * 60 + t.minute)
    }

    fn path(
        &mut self,
        parts: &[ast::Ident],
        span: Span,
        expected: Option<&Ty>,
        ctx: &Ctx<'_>,
    ) -> Option<Typed> {
        let [first, rest @ ..] = parts else {
            return None;
        };
        if first.name == "job" && self.lookup(ctx.module, "job").is_none() {
            let [field] = rest else {
                self.error(
                    Diagnostic::new(codes::UNKNOWN_NAME, "a job field is written `job.FIELD`")
                        .with_label(span, "expected one field after `job.`")
                        .with_help(format!("job fields are {}", JOB_FIELDS.join(", "))),
                );
                return None;
            };
            let Some((f, ty)) = job_field(&field.name) else {
                self.error(
                    Diagnostic::new(
                        codes::UNKNOWN_NAME,
                        format!("jobs have no field `{}`", field.name),
                    )
                    .with_label(field.span, "unknown job field")
                    .with_suggestion(&field.name, JOB_FIELDS.iter().copied()),
                );
                return None;
            };
            if !ctx.job {
                self.error(
                    Diagnostic::new(
                        codes::NOT_IN_CONTEXT,
                        "job fields are only available in rule conditions",
                    )
                    .with_label(span, "no job here")
                    .with_help("use a constant here; `job.*` belongs in `rule NAME: deny if ...`"),
                );
                return None;
            }
            return typed(ty, ir::Expr::Field(f));
        }
        if !rest.is_empty() {
            self.error(
                Diagnostic::new(
                    codes::UNKNOWN_NAME,
                    format!("`{}` has no fields", first.name),
                )
                .with_label(span, "only `job.FIELD` has fields")
                .with_help("write the name alone"),
            );
            return None;
        }
        let name = first.name.as_str();
        // A word of the expected set wins over a definition with the same name.
        if let Some(set) = word_set(expected) {
            if set.words.contains(&name) {
                return typed(
                    Ty::Word(set),
                    ir::Expr::Const(Value::Word(name.to_string())),
                );
            }
        }
        if name == "idle" && signal("idle").is_some() && self.lookup(ctx.module, name).is_none() {
            return self.signal_call(first, &[], span, ctx);
        }
        if let Some(def) = self.lookup(ctx.module, name) {
            let (kind, def_name) = (def.kind, def.name);
            if let Some(Ty::Ref(want)) = expected {
                if *want != kind {
                    let d = Diagnostic::new(
                        codes::WRONG_KIND,
                        format!(
                            "`{name}` is a {}, but a {} is needed here",
                            kind.noun(),
                            want.noun()
                        ),
                    )
                    .with_label(first.span, format!("this is a {}", kind.noun()))
                    .with_label(def.span, "defined here");
                    let candidates = self.visible_names(ctx.module, Some(*want));
                    let d = match crate::suggest::closest(name, candidates.iter().copied()) {
                        Some(s) => d.with_help(format!("did you mean the {} `{s}`?", want.noun())),
                        None => d.with_help(format!(
                            "name a {} defined in this policy or its imports",
                            want.noun()
                        )),
                    };
                    self.error(d);
                    return None;
                }
            }
            return typed(
                Ty::Ref(kind),
                ir::Expr::Const(Value::Ref {
                    kind: kind.key(),
                    name: def_name.to_string(),
                }),
            );
        }
        if self.broken(name) {
            return None;
        }
        let d = match (word_set(expected), ref_kind(expected)) {
            (Some(set), _) => Diagnostic::new(
                codes::UNKNOWN_VARIANT,
                format!("unknown {} `{name}`", set.name),
            )
            .with_label(
                first.span,
                format!("expected one of {}", list_words(set.words)),
            )
            .with_suggestion(name, set.words.iter().copied()),
            (None, Some(kind)) => {
                let candidates = self.visible_names(ctx.module, Some(kind));
                Diagnostic::new(
                    codes::UNKNOWN_NAME,
                    format!("unknown {} `{name}`", kind.noun()),
                )
                .with_label(first.span, "not defined in this policy or its imports")
                .with_suggestion(name, candidates.iter().copied())
            }
            _ => {
                let candidates = self.visible_names(ctx.module, None);
                Diagnostic::new(codes::UNKNOWN_NAME, format!("unknown name `{name}`"))
                    .with_label(first.span, "not defined in this policy or its imports")
                    .with_suggestion(name, candidates.iter().copied())
            }
        };
        let d = match (
            d.help.is_none(),
            word_set(expected),
            stdlib_module_defining(name),
        ) {
            (true, None, Some(module)) => d.with_help(format!(
                "`{name}` is defined in `{module}`; add `use {module}`"
            )),
            (true, Some(set), _) => d.with_help(format!("choose one of {}", list_words(set.words))),
            _ => d,
        };
        self.error(d);
        None
    }

    fn call(
        &mut self,
        func: &ast::Ident,
        args: &[ast::Arg],
        span: Span,
        expected: Option<&Ty>,
        ctx: &Ctx<'_>,
    ) -> Option<Typed> {
        let name = func.name.as_str();
        if signal(name).is_some() {
            return self.signal_call(func, args, span, ctx);
        }
        match name {
            "ceil" | "floor" | "round" | "min" | "max" => {
                let function = match name {
                    "ceil" => Function::Ceil,
                    "floor" => Function::Floor,
                    "round" => Function::Round,
                    "min" => Function::Min,
                    _ => Function::Max,
                };
                let single = matches!(function, Function::Ceil | Function::Floor | Function::Round);
                if args.iter().any(|a| a.name.is_some())
                    || (single && args.len() != 1)
                    || (!single && args.len() < 2)
                {
                    self.bad_args(
                        span,
                        if single {
                            format!("`{name}` takes one value")
                        } else {
                            format!("`{name}` takes two or more values")
                        },
                    );
                    return None;
                }
                let mut ty: Option<Ty> = expected.filter(|t| t.is_numeric()).cloned();
                let mut out = Vec::new();
                for a in args {
                    let t = self.expr(&a.value, ty.as_ref(), ctx)?;
                    if !t.ty.is_numeric() {
                        self.mismatch(a.value.span, &t.ty, &Ty::Number);
                        return None;
                    }
                    ty.get_or_insert(t.ty);
                    out.push(t.ir);
                }
                typed(
                    ty.unwrap_or(Ty::Number),
                    ir::Expr::Call {
                        function,
                        args: out,
                        named: Box::default(),
                    },
                )
            }
            "p50" | "p75" | "p90" | "p95" | "p99" | "mean" | "peak" => {
                let function = match name {
                    "mean" => Function::Mean,
                    "peak" => Function::Peak,
                    _ => Function::Percentile(
                        name.get(1..).and_then(|p| p.parse().ok()).unwrap_or(50),
                    ),
                };
                let (positional, named): (Vec<_>, Vec<_>) =
                    args.iter().partition(|a| a.name.is_none());
                let [history] = positional.as_slice() else {
                    self.bad_args(span, format!("`{name}` takes one history, e.g. `{name}(concurrent_starts(), over = 14d)`"));
                    return None;
                };
                let h = self.expr(&history.value, None, ctx)?;
                let Ty::History(sample) = h.ty else {
                    self.mismatch(
                        history.value.span,
                        &h.ty,
                        &Ty::History(Box::new(Ty::Number)),
                    );
                    return None;
                };
                let mut named_ir = ir::SmallMap::new();
                for a in named {
                    let Some(arg) = &a.name else { continue };
                    let want = match arg.name.as_str() {
                        "over" => Ty::Q(Dim::Duration),
                        "by" => Ty::Word(types::HISTORY_BUCKET),
                        other => {
                            self.error(
                                Diagnostic::new(
                                    codes::BAD_ARGUMENTS,
                                    format!("`{name}` has no argument `{other}`"),
                                )
                                .with_label(arg.span, "unknown argument")
                                .with_suggestion(other, ["over", "by"]),
                            );
                            return None;
                        }
                    };
                    let t = self.expr(&a.value, Some(&want), ctx)?;
                    named_ir.insert(arg.name.to_string(), t.ir);
                }
                typed(
                    *sample,
                    ir::Expr::Call {
                        function,
                        args: vec![h.ir],
                        named: Box::new(named_ir),
                    },
                )
            }
            "prefer" | "require" => {
                let function = if name == "prefer" {
                    Function::Prefer
                } else {
                    Function::Require
                };
                if args.is_empty()
                    || args.iter().any(|a| a.name.is_some())
                    || (name == "require" && args.len() != 1)
                {
                    self.bad_args(
                        span,
                        format!(
                            "`{name}` takes topology levels: {}",
                            list_words(types::TOPOLOGY.words)
                        ),
                    );
                    return None;
                }
                let mut out = Vec::new();
                for a in args {
                    out.push(
                        self.expr(&a.value, Some(&Ty::Word(types::TOPOLOGY)), ctx)?
                            .ir,
                    );
                }
                typed(
                    Ty::Topology,
                    ir::Expr::Call {
                        function,
                        args: out,
                        named: Box::default(),
                    },
                )
            }
            _ => {
                self.error(
                    Diagnostic::new(
                        codes::UNKNOWN_FUNCTION,
                        format!("unknown function `{name}`"),
                    )
                    .with_label(func.span, "not a built-in function")
                    .with_suggestion(name, FUNCTIONS.iter().copied()),
                );
                None
            }
        }
    }

    fn signal_call(
        &mut self,
        func: &ast::Ident,
        args: &[ast::Arg],
        span: Span,
        ctx: &Ctx<'_>,
    ) -> Option<Typed> {
        let name = func.name.as_str();
        let (sig, ty, filters) = signal(name)?;
        if sig == Signal::Idle && !ctx.idle {
            self.error(
                Diagnostic::new(
                    codes::NOT_IN_CONTEXT,
                    "`idle` is only available in an autoscale `down` trigger",
                )
                .with_label(span, "not in a `down` trigger")
                .with_help("write `down when idle > 15m` inside an `autoscale` block"),
            );
            return None;
        }
        if !ctx.signals {
            self.error(
                Diagnostic::new(
                    codes::NOT_IN_CONTEXT,
                    format!("`{name}` is only available in `autoscale` and `warm` blocks"),
                )
                .with_label(span, "no live signals here")
                .with_help("use a constant here"),
            );
            return None;
        }
        let mut out = ir::SmallMap::new();
        for a in args {
            let Some(arg) = &a.name else {
                self.bad_args(
                    a.value.span,
                    format!("`{name}` takes named filters: {}", filters.join(", ")),
                );
                return None;
            };
            if !filters.contains(&arg.name.as_str()) {
                let d = Diagnostic::new(
                    codes::BAD_ARGUMENTS,
                    format!("`{name}` has no argument `{}`", arg.name),
                )
                .with_label(arg.span, "unknown argument")
                .with_suggestion(&arg.name, filters.iter().copied());
                let d = if d.help.is_none() {
                    d.with_help(if filters.is_empty() {
                        format!("`{name}` takes no arguments")
                    } else {
                        format!("`{name}` takes {}", filters.join(", "))
                    })
                } else {
                    d
                };
                self.error(d);
                return None;
            }
            let want = Ty::Ref(filter_kind(&arg.name));
            let t = self.expr(&a.value, Some(&want), ctx)?;
            let ir::Expr::Const(v) = t.ir else {
                return None;
            };
            if out.insert(arg.name.to_string(), v).is_some() {
                self.bad_args(arg.span, format!("argument `{}` given twice", arg.name));
                return None;
            }
        }
        typed(
            ty,
            ir::Expr::Signal {
                signal: sig,
                filters: out,
            },
        )
    }

    fn bad_args(&mut self, span: Span, message: String) {
        self.error(
            Diagnostic::new(codes::BAD_ARGUMENTS, message.clone())
                .with_label(span, "wrong arguments")
                .with_help("see `gantry explain E0210`"),
        );
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        lhs: &ast::Expr,
        rhs: &ast::Expr,
        ctx: &Ctx<'_>,
    ) -> Option<Typed> {
        let build = |l: ir::Expr, r: ir::Expr| ir::Expr::Binary {
            op: lower_op(op),
            lhs: Box::new(l),
            rhs: Box::new(r),
        };
        match op {
            BinaryOp::And | BinaryOp::Or => {
                let l = self.expr(lhs, Some(&Ty::Bool), ctx);
                let r = self.expr(rhs, Some(&Ty::Bool), ctx);
                typed(Ty::Bool, build(l?.ir, r?.ir))
            }
            BinaryOp::In => {
                let l = self.infer(lhs, None, ctx)?;
                let r = self.expr(rhs, Some(&Ty::List(Box::new(l.ty.clone()))), ctx)?;
                typed(Ty::Bool, build(l.ir, r.ir))
            }
            _ => {
                // Type the side that is not a bare word first, so words resolve against it.
                let lhs_is_word = matches!(&lhs.kind, ExprKind::Path(p) if p.len() == 1);
                let (l, r) = if lhs_is_word && op.is_comparison() {
                    let r = self.infer(rhs, None, ctx)?;
                    let l = self.infer(lhs, Some(&r.ty), ctx)?;
                    (l, r)
                } else {
                    let l = self.infer(lhs, None, ctx)?;
                    let hint = if op.is_comparison() {
                        Some(l.ty.clone())
                    } else {
                        None
                    };
                    let r = self.infer(rhs, hint.as_ref(), ctx)?;
                    (l, r)
                };
                let ty = self.combine(op, &l, &r, lhs.span, rhs.span)?;
                let (li, ri) = (coerce_zero(&l, &r), coerce_zero(&r, &l));
                typed(ty, build(li, ri))
            }
        }
    }

    /// The result type of `l op r`, or a unit-mismatch diagnostic labelling both operands.
    fn combine(&mut self, op: BinaryOp, l: &Typed, r: &Typed, ls: Span, rs: Span) -> Option<Ty> {
        let same = l.ty.fits(&r.ty) || r.ty.fits(&l.ty);
        let zero_ok = (l.zero && r.ty.is_numeric()) || (r.zero && l.ty.is_numeric());
        let result = match op {
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => {
                let ordered = matches!(
                    op,
                    BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
                );
                let none_cmp = !ordered && (l.ty == Ty::None || r.ty == Ty::None);
                if none_cmp
                    || ((same || zero_ok) && (!ordered || l.ty.is_numeric() || l.ty == Ty::Time))
                {
                    Some(Ty::Bool)
                } else {
                    None
                }
            }
            BinaryOp::Add | BinaryOp::Sub => {
                if (same || zero_ok) && l.ty.is_numeric() && r.ty.is_numeric() {
                    Some(if l.zero { r.ty.clone() } else { l.ty.clone() })
                } else {
                    None
                }
            }
            BinaryOp::Mul => match (&l.ty, &r.ty) {
                (Ty::Number, t) | (t, Ty::Number) if t.is_numeric() => Some(t.clone()),
                (Ty::Q(Dim::Percent), t) | (t, Ty::Q(Dim::Percent)) if t.is_numeric() => {
                    Some(t.clone())
                }
                (Ty::Q(Dim::Rate), Ty::Q(Dim::Duration))
                | (Ty::Q(Dim::Duration), Ty::Q(Dim::Rate)) => Some(Ty::Q(Dim::Money)),
                _ => None,
            },
            BinaryOp::Div => match (&l.ty, &r.ty) {
                (t, Ty::Number) if t.is_numeric() => Some(t.clone()),
                (Ty::Q(Dim::Money), Ty::Q(Dim::Duration)) => Some(Ty::Q(Dim::Rate)),
                (Ty::Q(a), Ty::Q(b)) if a == b => Some(Ty::Number),
                _ => None,
            },
            BinaryOp::And | BinaryOp::Or | BinaryOp::In => Some(Ty::Bool),
        };
        if result.is_none() {
            let how = match op {
                BinaryOp::Add => "add",
                BinaryOp::Sub => "subtract",
                BinaryOp::Mul => "multiply",
                BinaryOp::Div => "divide",
                _ => "compare",
            };
            let help = match op {
                BinaryOp::Mul | BinaryOp::Div => {
                    "multiply or divide by a plain number, divide like units to get a number, or money by time to get a rate".to_string()
                }
                _ if matches!((&l.ty, &r.ty), (Ty::Number, Ty::Q(_)) | (Ty::Q(_), Ty::Number)) => {
                    let d = match (&l.ty, &r.ty) {
                        (Ty::Q(d), _) | (_, Ty::Q(d)) => *d,
                        _ => Dim::Gpu,
                    };
                    format!("write the number with its unit, e.g. `{}`", example_unit(d))
                }
                _ if !same && l.ty.is_numeric() && r.ty.is_numeric() => {
                    "both sides need the same unit; convert one side or fix the unit".to_string()
                }
                _ => format!("`{}` needs operands of the same type", op.symbol()),
            };
            self.error(
                Diagnostic::new(
                    codes::UNIT_MISMATCH,
                    format!("cannot {how} {} and {}", l.ty.describe(), r.ty.describe()),
                )
                .with_label(ls, format!("this is {}", l.ty.describe()))
                .with_label(rs, format!("this is {}", r.ty.describe()))
                .with_help(help),
            );
        }
        result
    }
}

/// A literal zero next to a quantity takes the quantity's unit.
fn coerce_zero(this: &Typed, other: &Typed) -> ir::Expr {
    match (&other.ty, this.zero) {
        (Ty::Q(d), true) => ir::Expr::Const(Value::Quantity {
            dim: *d,
            amount: 0.0,
        }),
        _ => this.ir.clone(),
    }
}

fn ref_kind(expected: Option<&Ty>) -> Option<DefKind> {
    match expected {
        Some(Ty::Ref(k)) => Some(*k),
        Some(Ty::List(inner)) => ref_kind(Some(inner)),
        _ => None,
    }
}

fn word_set(expected: Option<&Ty>) -> Option<WordSet> {
    match expected {
        Some(Ty::Word(w)) => Some(*w),
        Some(Ty::Topology) => Some(types::TOPOLOGY),
        Some(Ty::List(inner)) => word_set(Some(inner)),
        _ => None,
    }
}

/// The standard-library module that defines `name`, found by reading definition headers
/// once per process: a policy naming many unknown things pays one lookup each, not a
/// read of the whole standard library.
fn stdlib_module_defining(name: &str) -> Option<&'static str> {
    static DEFINED: std::sync::OnceLock<std::collections::HashMap<&'static str, &'static str>> =
        std::sync::OnceLock::new();
    DEFINED
        .get_or_init(|| {
            let mut defined = std::collections::HashMap::new();
            for (module, text) in stdlib::MODULES {
                for line in text.lines() {
                    let mut words = line.split_whitespace().skip_while(|w| *w == "template");
                    let kind = words.next().unwrap_or("");
                    let name = words.next().unwrap_or("").trim_end_matches(':');
                    if ast::BlockKind::from_keyword(kind).is_some() || kind == "rule" {
                        // The first module that defines it, as the scan in module order found.
                        defined.entry(name).or_insert(*module);
                    }
                }
            }
            defined
        })
        .get(name)
        .copied()
}

pub fn list_words(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!("`{w}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn example_unit(d: Dim) -> &'static str {
    match d {
        Dim::Gpu => "8 gpu",
        Dim::Bytes => "80 GiB",
        Dim::Duration => "15m",
        Dim::Money => "100 $",
        Dim::Rate => "12.50 $/h",
        Dim::Percent => "80%",
        Dim::Nodes => "4 nodes",
    }
}

fn decimal_size(unit: &str) -> &'static str {
    match unit {
        "KB" => "10^3",
        "MB" => "10^6",
        "GB" => "10^9",
        _ => "10^12",
    }
}
