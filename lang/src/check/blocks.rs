//! Lowering of definitions: each block kind has a fixed set of fields, checked for unknown,
//! repeated and missing fields, typed, and turned into its IR struct. `from BASE` copies the
//! base block's statements first; the block's own statements override them.

use super::exprs::{list_words, Ctx};
use super::types::{self, DefKind, Ty, WordSet};
use super::{Checker, DefId, ModuleId};
use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::ir::{self, Dim, Value};
use crate::source::Span;
use crate::syntax::ast::{self, BlockKind, Direction, StmtKind, ValueKind};
use std::collections::BTreeMap;

/// Fields of each block kind; `true` marks required ones.
fn schema(kind: BlockKind) -> &'static [(&'static str, bool)] {
    match kind {
        BlockKind::Pool => &[
            ("capacity", true),
            ("node", true),
            ("nodes", true),
            ("cost", false),
            ("boot", false),
            ("notice", false),
            ("max_gang", false),
        ],
        BlockKind::Tier => &[
            ("priority", true),
            ("preempt", false),
            ("max_lost", false),
            ("reclaim_within", false),
            ("min_runtime", false),
            ("grace", false),
            ("default", false),
            ("borrow", false),
            ("default_runtime", false),
        ],
        BlockKind::Cohort => &[("fair_share", false), ("half_life", false)],
        BlockKind::Team => &[
            ("guaranteed", false),
            ("burst", false),
            ("lend", false),
            ("tiers", false),
            ("weight", false),
            ("cohort", false),
            ("default", false),
            ("default_runtime", false),
            ("namespaces", false),
            ("users", false),
            ("groups", false),
        ],
        BlockKind::Placement => &[
            ("gang", false),
            ("gang_timeout", false),
            ("topology", false),
            ("packing", false),
            ("backfill", false),
            ("backfill_window", false),
            ("max_gang", false),
            ("reserve_after_wait", false),
            ("reserve_after_overtaken", false),
        ],
        BlockKind::Warm => &[("size", true), ("during", false)],
        BlockKind::Autoscale => &[
            ("max_spend", false),
            ("cooldown", false),
            ("cooldown_up", false),
            ("cooldown_down", false),
            ("fallback", false),
        ],
        BlockKind::Gpu => &[
            ("id", true),
            ("product", false),
            ("memory", true),
            ("mig_slots", false),
        ],
        BlockKind::Mig => &[
            ("compute", true),
            ("memory", true),
            ("width", true),
            ("starts", true),
        ],
        BlockKind::Node => &[
            ("gpu", true),
            ("gpus", true),
            ("nvlink", false),
            ("cpus", false),
            ("memory", false),
            ("instance", false),
            ("list_price", false),
        ],
    }
}

/// What a team's binding patterns name.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    /// A namespace: lowercase letters, digits and `-`, at most 63 characters.
    Namespace,
    /// A user or group as the API server names it: printable, no spaces.
    Identity,
}

impl Pattern {
    fn fault(self, p: &str) -> Option<&'static str> {
        if p.is_empty() {
            return Some("is empty");
        }
        match self {
            Pattern::Namespace if p.len() > 63 => Some("is longer than a namespace name (63)"),
            Pattern::Namespace
                if !p.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'*'
                }) =>
            {
                Some("is not a namespace name or pattern")
            }
            Pattern::Identity if p.len() > 253 => Some("is longer than 253 characters"),
            Pattern::Identity if p.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                Some("holds white space")
            }
            _ => None,
        }
    }

    fn help(self) -> &'static str {
        match self {
            Pattern::Namespace => "write namespace names (lowercase letters, digits, `-`) with `*` for any run of characters, e.g. `\"ml-*\"`",
            Pattern::Identity => "write users or groups as the API server names them, e.g. `\"alice@example.com\"` or `\"system:serviceaccount:ci:*\"`",
        }
    }
}

/// A block's effective statements after inheritance, each with the module it resolves in.
pub(crate) struct Fields<'a> {
    pub assigns: Vec<(&'a ast::Ident, &'a ast::Value, ModuleId)>,
    pub triggers: Vec<(&'a ast::Trigger, ModuleId, Span)>,
    pub nested: Vec<(&'a ast::Block, ModuleId)>,
    /// Where to point when a required field is missing.
    pub header: Span,
}

impl<'a> Fields<'a> {
    fn get(&self, key: &str) -> Option<(&'a ast::Value, ModuleId)> {
        self.assigns
            .iter()
            .find(|(k, _, _)| k.name == key)
            .map(|(_, v, m)| (*v, *m))
    }
}

const MAX_INHERITANCE: usize = 8;

impl<'a> Checker<'a> {
    /// Checks a block's own statements against its schema and merges in its base's.
    pub(crate) fn fields<'b>(
        &mut self,
        b: &'b ast::Block,
        module: ModuleId,
        depth: usize,
    ) -> Fields<'b>
    where
        'a: 'b,
    {
        let header = b.name.as_ref().map_or(b.kind_span, |n| n.span);
        let mut fields = Fields {
            assigns: Vec::new(),
            triggers: Vec::new(),
            nested: Vec::new(),
            header,
        };
        if let Some(base) = &b.base {
            match self
                .lookup(module, &base.name)
                .map(|d| (d.block, d.module, d.kind, d.span))
            {
                Some((Some(base_block), base_module, _, _)) if base_block.kind == b.kind => {
                    if depth >= MAX_INHERITANCE {
                        self.error(
                            Diagnostic::new(
                                codes::WRONG_KIND,
                                "`from` chain is too long or circular",
                            )
                            .with_label(base.span, "inherits from here")
                            .with_help(
                                "a block may inherit through at most 8 bases, without cycles",
                            ),
                        );
                    } else {
                        let inherited = self.fields(base_block, base_module, depth + 1);
                        fields.assigns = inherited.assigns;
                        fields.triggers = inherited.triggers;
                        fields.nested = inherited.nested;
                    }
                }
                Some((_, _, kind, span)) => self.error(
                    Diagnostic::new(
                        codes::WRONG_KIND,
                        format!(
                            "`{}` is a {}, not a `{}` block",
                            base.name,
                            kind.noun(),
                            b.kind.keyword()
                        ),
                    )
                    .with_label(base.span, "cannot inherit from this")
                    .with_label(span, "defined here")
                    .with_help(format!(
                        "`from` names another `{}` block or template",
                        b.kind.keyword()
                    )),
                ),
                None if self.broken(&base.name) => {}
                None => {
                    let names = self.visible_names(module, None);
                    self.error(
                        Diagnostic::new(
                            codes::UNKNOWN_NAME,
                            format!("unknown base `{}`", base.name),
                        )
                        .with_label(base.span, "not defined in this policy or its imports")
                        .with_suggestion(&base.name, names.iter().copied()),
                    );
                }
            }
        }
        let known = schema(b.kind);
        let mut seen: BTreeMap<&str, Span> = BTreeMap::new();
        let mut own_triggers = Vec::new();
        for s in &b.body {
            match &s.kind {
                StmtKind::Assign { key, value } => {
                    if !known.iter().any(|(k, _)| *k == key.name) {
                        let d = Diagnostic::new(
                            codes::UNKNOWN_FIELD,
                            format!("`{}` blocks have no field `{}`", b.kind.keyword(), key.name),
                        )
                        .with_label(key.span, "unknown field")
                        .with_suggestion(&key.name, known.iter().map(|(k, _)| *k));
                        let d = if d.help.is_none() {
                            d.with_help(format!(
                                "`{}` fields are {}",
                                b.kind.keyword(),
                                list_words(&known.iter().map(|(k, _)| *k).collect::<Vec<_>>())
                            ))
                        } else {
                            d
                        };
                        self.error(d);
                        continue;
                    }
                    if let Some(prev) = seen.insert(key.name.as_str(), key.span) {
                        self.error(
                            Diagnostic::new(
                                codes::FIELD_TWICE,
                                format!("`{}` is set twice", key.name),
                            )
                            .with_label(key.span, "set again here")
                            .with_label(prev, "first set here")
                            .with_help("remove one of them"),
                        );
                        continue;
                    }
                    fields.assigns.retain(|(k, _, _)| k.name != key.name);
                    fields.assigns.push((key, value, module));
                }
                StmtKind::Trigger(t) => {
                    if b.kind == BlockKind::Autoscale {
                        own_triggers.push((&**t, module, s.span));
                    } else {
                        self.error(
                            Diagnostic::new(
                                codes::MISPLACED_BLOCK,
                                format!(
                                    "`up`/`down` triggers belong in an `autoscale` block, not `{}`",
                                    b.kind.keyword()
                                ),
                            )
                            .with_label(s.span, "trigger here")
                            .with_help("move it into `autoscale POOL { ... }`"),
                        );
                    }
                }
                StmtKind::Block(inner) => {
                    let allowed = matches!(
                        (b.kind, inner.kind),
                        (BlockKind::Cohort, BlockKind::Team) | (BlockKind::Gpu, BlockKind::Mig)
                    );
                    if allowed {
                        fields.nested.push((inner, module));
                    } else {
                        self.error(
                            Diagnostic::new(
                                codes::MISPLACED_BLOCK,
                                format!("a `{}` block cannot be inside a `{}` block", inner.kind.keyword(), b.kind.keyword()),
                            )
                            .with_label(inner.kind_span, "not allowed here")
                            .with_help("only `team` nests in `cohort` and `mig` in `gpu`; define it at the top level"),
                        );
                    }
                }
            }
        }
        if !own_triggers.is_empty() {
            fields.triggers = own_triggers;
        }
        if !b.template {
            for (key, required) in known {
                if *required && fields.get(key).is_none() {
                    self.error(
                        Diagnostic::new(
                            codes::MISSING_FIELD,
                            format!("`{}` block is missing `{key}`", b.kind.keyword()),
                        )
                        .with_label(header, format!("needs `{key} = ...`"))
                        .with_help(missing_help(b.kind, key)),
                    );
                }
            }
        }
        fields
    }

    // ---- typed field accessors ---------------------------------------------------------

    fn field_expr<'b>(&mut self, f: &Fields<'b>, key: &str) -> Option<(&'b ast::Expr, ModuleId)> {
        let (v, m) = f.get(key)?;
        match &v.kind {
            ValueKind::Expr(e) => Some((e, m)),
            _ => {
                self.error(
                    Diagnostic::new(
                        codes::TYPE_MISMATCH,
                        format!("`{key}` takes a single value"),
                    )
                    .with_label(v.span, "not a single value")
                    .with_help(format!("write `{key} = VALUE`")),
                );
                None
            }
        }
    }

    /// A constant of the given type, as a number in base units.
    fn const_of(&mut self, e: &ast::Expr, ty: &Ty, module: ModuleId) -> Option<f64> {
        let t = self.expr(e, Some(ty), &Ctx::plain(module))?;
        match t.ir.as_const_number() {
            Some(n) => Some(n),
            None => {
                self.error(
                    Diagnostic::new(codes::TYPE_MISMATCH, "expected a constant")
                        .with_label(e.span, "this is computed")
                        .with_help("write a constant value here"),
                );
                None
            }
        }
    }

    fn field_quantity(&mut self, f: &Fields<'_>, key: &str, dim: Dim) -> Option<f64> {
        let (e, m) = self.field_expr(f, key)?;
        let n = self.const_of(e, &Ty::Q(dim), m)?;
        if n < 0.0 {
            self.error(
                Diagnostic::new(codes::OUT_OF_RANGE, format!("`{key}` cannot be negative"))
                    .with_label(e.span, "negative")
                    .with_help("write zero or more"),
            );
            return None;
        }
        Some(n)
    }

    fn seconds(&mut self, f: &Fields<'_>, key: &str) -> Option<u64> {
        self.field_quantity(f, key, Dim::Duration)
            .map(|s| s.round() as u64)
    }

    fn mib(&mut self, f: &Fields<'_>, key: &str) -> Option<u64> {
        self.field_quantity(f, key, Dim::Bytes)
            .map(|s| s.round() as u64)
    }

    /// A whole, non-negative count (plain number or nodes).
    fn count_expr(&mut self, e: &ast::Expr, module: ModuleId, what: &str) -> Option<u32> {
        let ty = if what.contains("node count") {
            Ty::Q(Dim::Nodes)
        } else {
            Ty::Number
        };
        let n = self.const_of(e, &ty, module)?;
        if n < 0.0 || n.fract() != 0.0 || n > f64::from(u32::MAX) {
            self.error(
                Diagnostic::new(
                    codes::OUT_OF_RANGE,
                    format!("{what} must be a whole number of zero or more"),
                )
                .with_label(e.span, format!("`{n}` is not a whole count"))
                .with_help("write a whole number such as `4`"),
            );
            return None;
        }
        Some(n as u32)
    }

    fn count(&mut self, f: &Fields<'_>, key: &str) -> Option<u32> {
        let (e, m) = self.field_expr(f, key)?;
        self.count_expr(e, m, &format!("`{key}`"))
    }

    fn word(&mut self, f: &Fields<'_>, key: &str, set: WordSet) -> Option<String> {
        let (e, m) = self.field_expr(f, key)?;
        let t = self.expr(e, Some(&Ty::Word(set)), &Ctx::plain(m))?;
        match t.ir {
            ir::Expr::Const(Value::Word(w)) => Some(w),
            _ => None,
        }
    }

    fn string(&mut self, f: &Fields<'_>, key: &str) -> Option<String> {
        let (e, m) = self.field_expr(f, key)?;
        let t = self.expr(e, Some(&Ty::Str), &Ctx::plain(m))?;
        match t.ir {
            ir::Expr::Const(Value::Str(s)) => Some(s),
            _ => None,
        }
    }

    fn reference(&mut self, f: &Fields<'_>, key: &str, kind: DefKind) -> Option<String> {
        let (e, m) = self.field_expr(f, key)?;
        self.reference_expr(e, m, kind)
    }

    fn reference_expr(&mut self, e: &ast::Expr, module: ModuleId, kind: DefKind) -> Option<String> {
        let t = self.expr(e, Some(&Ty::Ref(kind)), &Ctx::plain(module))?;
        match t.ir {
            ir::Expr::Const(Value::Ref { name, .. }) => Some(name),
            _ => None,
        }
    }

    fn remember(&mut self, key: String, span: Span) {
        self.spans.insert(key, span);
    }

    fn value_span(f: &Fields<'_>, key: &str) -> Option<Span> {
        f.get(key).map(|(v, _)| v.span)
    }

    // ---- definitions ---------------------------------------------------------------------

    pub(crate) fn lower_pool(
        &mut self,
        b: &ast::Block,
        module: ModuleId,
        name: &str,
    ) -> Option<ir::Pool> {
        let f = self.fields(b, module, 0);
        let capacity = match self.word(&f, "capacity", types::CAPACITY).as_deref() {
            Some("reserved") => Some(ir::CapacityKind::Reserved),
            Some("on_demand") => Some(ir::CapacityKind::OnDemand),
            Some("spot") => Some(ir::CapacityKind::Spot),
            _ => None,
        };
        let node = self.reference(&f, "node", DefKind::Node);
        let nodes = self.node_range(&f);
        let cost = self.field_quantity(&f, "cost", Dim::Rate);
        let boot_s = self.seconds(&f, "boot").unwrap_or(0);
        let notice_s = self.seconds(&f, "notice");
        let max_gang = self
            .field_quantity(&f, "max_gang", Dim::Gpu)
            .map(|g| g.ceil() as u32);
        if let Some(s) = Self::value_span(&f, "max_gang") {
            self.remember(format!("pool/{name}/max_gang"), s);
        }
        if let Some(s) = Self::value_span(&f, "nodes") {
            self.remember(format!("pool/{name}/nodes"), s);
        }
        self.remember(format!("pool/{name}"), f.header);
        if b.template {
            return None;
        }
        let (min_nodes, max_nodes) = nodes?;
        Some(ir::Pool {
            name: name.to_string(),
            capacity: capacity?,
            node: node?,
            min_nodes,
            max_nodes,
            cost_per_node_hour: cost,
            boot_s,
            notice_s,
            max_gang_gpus: max_gang,
        })
    }

    fn node_range(&mut self, f: &Fields<'_>) -> Option<(u32, u32)> {
        let (v, m) = f.get("nodes")?;
        match &v.kind {
            ValueKind::Expr(e) => self.count_expr(e, m, "a node count").map(|n| (n, n)),
            ValueKind::Range(lo, hi) => {
                let lo_n = self.count_expr(lo, m, "a node count");
                let hi_n = self.count_expr(hi, m, "a node count");
                let (lo_n, hi_n) = (lo_n?, hi_n?);
                if lo_n > hi_n {
                    self.error(
                        Diagnostic::new(
                            codes::OUT_OF_RANGE,
                            format!("node range `{lo_n}..{hi_n}` is empty"),
                        )
                        .with_label(v.span, "lower end is above the upper end")
                        .with_help(format!("write `{hi_n}..{lo_n}`")),
                    );
                    return None;
                }
                Some((lo_n, hi_n))
            }
            _ => {
                self.error(
                    Diagnostic::new(codes::TYPE_MISMATCH, "expected a node count or range")
                        .with_label(v.span, "not a node count")
                        .with_help("write `nodes = 4` or `nodes = 0..16`"),
                );
                None
            }
        }
    }

    pub(crate) fn lower_tier(
        &mut self,
        b: &ast::Block,
        module: ModuleId,
        name: &str,
    ) -> Option<ir::Tier> {
        let f = self.fields(b, module, 0);
        let priority = match self.field_expr(&f, "priority") {
            Some((e, m)) => {
                let n = self.const_of(e, &Ty::Number, m);
                match n {
                    Some(n) if n.fract() != 0.0 || n.abs() > 1e12 => {
                        self.error(
                            Diagnostic::new(codes::OUT_OF_RANGE, "priority must be a whole number")
                                .with_label(e.span, "not a whole number")
                                .with_help("write e.g. `priority = 500`"),
                        );
                        None
                    }
                    other => other.map(|n| n as i64),
                }
            }
            None => None,
        };
        let preempt = match self.word(&f, "preempt", types::PREEMPT).as_deref() {
            Some("after_checkpoint") => ir::PreemptMode::AfterCheckpoint,
            Some("immediately") => ir::PreemptMode::Immediately,
            _ => ir::PreemptMode::Never,
        };
        let max_lost_s = self.seconds(&f, "max_lost");
        let reclaim_within_s = self.seconds(&f, "reclaim_within");
        let min_runtime_s = self.seconds(&f, "min_runtime").unwrap_or(0);
        let grace_s = self.seconds(&f, "grace").unwrap_or(120);
        let default = self.flag(&f, "default", &format!("tier/{name}/default"));
        let borrow = self.flag(&f, "borrow", &format!("tier/{name}/borrow"));
        let default_runtime_s = self.seconds(&f, "default_runtime");
        self.remember(format!("tier/{name}"), f.header);
        if b.template {
            return None;
        }
        Some(ir::Tier {
            name: name.to_string(),
            priority: priority?,
            preempt,
            max_lost_s,
            reclaim_within_s,
            min_runtime_s,
            grace_s,
            default,
            borrow,
            default_runtime_s,
        })
    }

    pub(crate) fn lower_team(
        &mut self,
        b: &ast::Block,
        module: ModuleId,
        name: &str,
        cohort: Option<&str>,
    ) -> Option<ir::Team> {
        let f = self.fields(b, module, 0);
        let guaranteed = self.quota(&f, "guaranteed", name);
        let burst = self.quota(&f, "burst", name);
        let lend = self.quota(&f, "lend", name);
        // A guarantee that did not lower (it names a pool whose definition is broken, or
        // holds an error of its own) is not 0: what is checked against it (lend, burst)
        // would only repeat that error, so those are left out too.
        let (guaranteed, burst, lend) = match guaranteed {
            Some(g) => (g, burst, lend),
            None if self.field_expr(&f, "guaranteed").is_some() => {
                self.unlowered_guarantees.insert(name.to_string());
                (ir::Quota::default(), None, None)
            }
            None => (ir::Quota::default(), burst, lend),
        };
        let tiers = match self.field_expr(&f, "tiers") {
            Some((e, m)) => {
                let t = self.expr(
                    e,
                    Some(&Ty::List(Box::new(Ty::Ref(DefKind::Tier)))),
                    &Ctx::plain(m),
                );
                match t.map(|t| t.ir) {
                    Some(ir::Expr::List(items)) => Some(
                        items
                            .into_iter()
                            .filter_map(|i| match i {
                                ir::Expr::Const(Value::Ref { name, .. }) => Some(name),
                                _ => None,
                            })
                            .collect(),
                    ),
                    _ => None,
                }
            }
            None => None,
        };
        let weight = match self.field_expr(&f, "weight") {
            Some((e, m)) => match self.const_of(e, &Ty::Number, m) {
                Some(w) if w <= 0.0 => {
                    self.error(
                        Diagnostic::new(codes::OUT_OF_RANGE, "`weight` must be above zero")
                            .with_label(e.span, "not above zero")
                            .with_help("weights scale fair share; `1` is the default"),
                    );
                    1.0
                }
                Some(w) => w,
                None => 1.0,
            },
            None => 1.0,
        };
        let cohort = match cohort {
            Some(c) => Some(c.to_string()),
            None => self.reference(&f, "cohort", DefKind::Cohort),
        };
        let default = self.flag(&f, "default", &format!("team/{name}/default"));
        let default_runtime_s = self.seconds(&f, "default_runtime");
        let namespaces = self.patterns(&f, "namespaces", name, Pattern::Namespace);
        let users = self.patterns(&f, "users", name, Pattern::Identity);
        let groups = self.patterns(&f, "groups", name, Pattern::Identity);
        self.remember(format!("team/{name}"), f.header);
        if b.template {
            return None;
        }
        Some(ir::Team {
            name: name.to_string(),
            cohort,
            guaranteed,
            burst,
            lend,
            tiers,
            weight,
            default,
            default_runtime_s,
            namespaces,
            users,
            groups,
        })
    }

    /// A list of name patterns (`["ml-*", "vision"]`) for who may submit as `team`; its
    /// span is remembered under `team/TEAM/KEY`. Each entry is checked for what a
    /// namespace name or an identity may hold, with `*` for any run of characters.
    fn patterns(
        &mut self,
        f: &Fields<'_>,
        key: &str,
        team: &str,
        kind: Pattern,
    ) -> Option<Vec<String>> {
        let (e, m) = self.field_expr(f, key)?;
        self.remember(format!("team/{team}/{key}"), e.span);
        let t = self.expr(e, Some(&Ty::List(Box::new(Ty::Str))), &Ctx::plain(m))?;
        let ir::Expr::List(items) = t.ir else {
            return None;
        };
        let mut out = Vec::new();
        for item in items {
            let ir::Expr::Const(Value::Str(p)) = item else {
                continue;
            };
            if let Some(why) = kind.fault(&p) {
                self.error(
                    Diagnostic::new(codes::OUT_OF_RANGE, format!("`{key}` entry `{p}` {why}"))
                        .with_label(e.span, "in this list")
                        .with_help(kind.help()),
                );
                continue;
            }
            out.push(p);
        }
        Some(out)
    }

    /// A `true`/`false` field (absent: false); its span is remembered under `key`.
    fn flag(&mut self, f: &Fields<'_>, field: &str, key: &str) -> bool {
        let Some((e, m)) = self.field_expr(f, field) else {
            return false;
        };
        self.remember(key.to_string(), e.span);
        match self.expr(e, Some(&Ty::Bool), &Ctx::plain(m)).map(|t| t.ir) {
            Some(ir::Expr::Const(Value::Bool(b))) => b,
            Some(_) => {
                self.error(
                    Diagnostic::new(
                        codes::TYPE_MISMATCH,
                        format!("`{field}` must be a constant"),
                    )
                    .with_label(e.span, "not `true` or `false`")
                    .with_help(format!("write `{field} = true`")),
                );
                false
            }
            None => false,
        }
    }

    /// `16 gpu`, `8 gpu in dgx`, or a list of those.
    fn quota(&mut self, f: &Fields<'_>, key: &str, team: &str) -> Option<ir::Quota> {
        let (e, m) = self.field_expr(f, key)?;
        self.remember(format!("team/{team}/{key}"), e.span);
        let parts: Vec<&ast::Expr> = match &e.kind {
            ast::ExprKind::List(items) => items.iter().collect(),
            _ => vec![e],
        };
        let mut quota = ir::Quota::default();
        let mut ok = true;
        for part in parts {
            let (amount, pool) = match &part.kind {
                ast::ExprKind::Binary {
                    op: ast::BinaryOp::In,
                    lhs,
                    rhs,
                } => (&**lhs, Some(&**rhs)),
                _ => (part, None),
            };
            let Some(gpus) = self.const_of(amount, &Ty::Q(Dim::Gpu), m) else {
                ok = false;
                continue;
            };
            if gpus < 0.0 {
                self.error(
                    Diagnostic::new(codes::OUT_OF_RANGE, format!("`{key}` cannot be negative"))
                        .with_label(amount.span, "negative")
                        .with_help("write zero or more GPUs"),
                );
                ok = false;
                continue;
            }
            let milli = (gpus * 1000.0).round() as u64;
            match pool {
                Some(p) => match self.reference_expr(p, m, DefKind::Pool) {
                    Some(pool) => {
                        self.remember(format!("team/{team}/{key}/{pool}"), part.span);
                        quota.per_pool_milli.update(pool, || 0, |m| *m += milli);
                    }
                    None => ok = false,
                },
                None => *quota.total_milli.get_or_insert(0) += milli,
            }
        }
        ok.then_some(quota)
    }

    pub(crate) fn lower_cohort(
        &mut self,
        b: &ast::Block,
        module: ModuleId,
        name: &str,
    ) -> Option<ir::Cohort> {
        let f = self.fields(b, module, 0);
        let fair_share = match self.word(&f, "fair_share", types::FAIR_SHARE).as_deref() {
            Some("off") => ir::FairShare::Off,
            _ => ir::FairShare::Drf,
        };
        let half_life_s = self.seconds(&f, "half_life").unwrap_or(7 * 86400);
        let teams = f
            .nested
            .iter()
            .filter_map(|(t, _)| t.name.as_ref().map(|n| n.name.to_string()))
            .collect();
        if b.template {
            return None;
        }
        Some(ir::Cohort {
            name: name.to_string(),
            fair_share,
            half_life_s,
            teams,
        })
    }

    pub(crate) fn lower_placement(&mut self, b: &ast::Block, module: ModuleId) -> ir::Placement {
        let f = self.fields(b, module, 0);
        let mut p = ir::Placement::default();
        if let Some(g) = self.word(&f, "gang", types::GANG) {
            p.gang = if g == "best_effort" {
                ir::GangMode::BestEffort
            } else {
                ir::GangMode::AllOrNothing
            };
        }
        p.gang_timeout_s = self.seconds(&f, "gang_timeout");
        if let Some((e, m)) = self.field_expr(&f, "topology") {
            if let Some(t) = self.expr(e, Some(&Ty::Topology), &Ctx::plain(m)) {
                let (required, preferred) = topology(&t.ir);
                p.topology_required = required;
                p.topology_preferred = preferred;
            }
        }
        if let Some(w) = self.word(&f, "packing", types::PACKING) {
            p.packing = match w.as_str() {
                "best_fit" => ir::Packing::BestFit,
                "spread" => ir::Packing::Spread,
                "gpu_packing" => ir::Packing::GpuPacking,
                _ => ir::Packing::LeastFragmentation,
            };
        }
        if let Some((e, m)) = self.field_expr(&f, "backfill") {
            if let Some((on, depth)) = self.backfill_mode(e, m) {
                p.backfill = on;
                p.reservation_depth = depth;
            }
        }
        if let Some(s) = self.seconds(&f, "backfill_window") {
            p.backfill_window_s = s;
        }
        if let Some(s) = self.seconds(&f, "reserve_after_wait") {
            p.reserve_after_wait_s = s;
        }
        if let Some(n) = self.count(&f, "reserve_after_overtaken") {
            p.reserve_after_overtaken = n;
        }
        p.max_gang_gpus = self
            .field_quantity(&f, "max_gang", Dim::Gpu)
            .map(|g| g.ceil() as u32);
        if let Some(s) = Self::value_span(&f, "max_gang") {
            self.remember("placement/max_gang".into(), s);
        }
        p
    }

    /// `on`/`easy` (one reservation), `off`, `conservative` or `conservative(depth = K)`
    /// with K a count or `all`: (backfill on, reservation depth).
    fn backfill_mode(&mut self, e: &ast::Expr, m: ModuleId) -> Option<(bool, u32)> {
        const HELP: &str = "write `backfill = on` (EASY: a reservation for the first blocked job), `backfill = conservative(depth = 100)` (the first 100 blocked jobs each get one; `depth = all` for every one) or `backfill = off`";
        match &e.kind {
            ast::ExprKind::Path(p) if p.len() == 1 => {
                let word = p.first().map(|i| i.name.as_str()).unwrap_or_default();
                match word {
                    "on" | "easy" => return Some((true, 1)),
                    "off" => return Some((false, 1)),
                    "conservative" => return Some((true, ir::DEFAULT_CONSERVATIVE_DEPTH)),
                    _ => {}
                }
            }
            ast::ExprKind::Call(call) if call.func.name == "conservative" => {
                let args = &call.args;
                let mut depth = ir::DEFAULT_CONSERVATIVE_DEPTH;
                for a in args {
                    let named_depth = a.name.as_ref().is_some_and(|n| n.name == "depth");
                    if !named_depth {
                        self.error(
                            Diagnostic::new(
                                codes::BAD_ARGUMENTS,
                                "`conservative` takes one argument, `depth = K` or `depth = all`",
                            )
                            .with_label(
                                a.name.as_ref().map_or(a.value.span, |n| n.span),
                                "not `depth = …`",
                            )
                            .with_help(HELP),
                        );
                        return None;
                    }
                    if let ast::ExprKind::Path(p) = &a.value.kind {
                        if p.len() == 1 && p.first().is_some_and(|i| i.name == "all") {
                            depth = u32::MAX;
                            continue;
                        }
                    }
                    depth = self.count_expr(&a.value, m, "`depth`")?;
                    if depth == 0 {
                        self.error(
                            Diagnostic::new(codes::OUT_OF_RANGE, "`depth` must be at least 1")
                                .with_label(a.value.span, "no job would get a reservation")
                                .with_help("write `backfill = off` to turn backfill off"),
                        );
                        return None;
                    }
                }
                return Some((true, depth));
            }
            _ => {}
        }
        self.error(
            Diagnostic::new(
                codes::UNKNOWN_VARIANT,
                "`backfill` is `on`, `off`, `easy`, `conservative` or `conservative(depth = K)`",
            )
            .with_label(e.span, "not a backfill mode")
            .with_help(HELP),
        );
        None
    }

    pub(crate) fn lower_warm(
        &mut self,
        b: &ast::Block,
        module: ModuleId,
        name: &str,
    ) -> Option<ir::WarmPool> {
        let f = self.fields(b, module, 0);
        let pool = match &b.target {
            Some(t) => self.reference_expr(
                &ast::Expr {
                    kind: ast::ExprKind::Path(vec![t.clone()]),
                    span: t.span,
                },
                module,
                DefKind::Pool,
            ),
            None if b.template => Some(String::from("self")),
            None => {
                self.error(
                    Diagnostic::new(
                        codes::MISSING_FIELD,
                        format!("warm pool `{name}` does not say which pool it keeps warm"),
                    )
                    .with_label(f.header, "needs `in POOL`")
                    .with_help(format!("write `warm {name} in POOL {{ ... }}`")),
                );
                None
            }
        };
        let ctx_pool = pool.clone().unwrap_or_else(|| "self".into());
        let (size, clamp) = match f.get("size") {
            Some((v, m)) => {
                self.remember(format!("warm/{name}/size"), v.span);
                let ctx = Ctx {
                    module: m,
                    job: false,
                    signals: true,
                    idle: false,
                    self_pool: Some(&ctx_pool),
                };
                let nodes = Ty::Q(Dim::Nodes);
                match &v.kind {
                    ValueKind::Expr(e) => (self.expr(e, Some(&nodes), &ctx).map(|t| t.ir), None),
                    ValueKind::Clamp { expr, lo, hi } => {
                        let size = self.expr(expr, Some(&nodes), &ctx).map(|t| t.ir);
                        let lo_n = self.const_of(lo, &nodes, m);
                        let hi_n = self.const_of(hi, &nodes, m);
                        let clamp = match (lo_n, hi_n) {
                            (Some(a), Some(b)) if a > b => {
                                self.error(
                                    Diagnostic::new(
                                        codes::OUT_OF_RANGE,
                                        format!("clamp range `{a}..{b}` is empty"),
                                    )
                                    .with_label(
                                        lo.span.to(hi.span),
                                        "lower end is above the upper end",
                                    )
                                    .with_help(format!("write `{b}..{a}`")),
                                );
                                None
                            }
                            (Some(a), Some(b)) => Some((a, b)),
                            _ => None,
                        };
                        (size, clamp)
                    }
                    _ => {
                        self.error(
                            Diagnostic::new(codes::TYPE_MISMATCH, "expected a node count")
                                .with_label(v.span, "not a size")
                                .with_help("write e.g. `size = 2 nodes` or `size = p75(concurrent_starts(), over = 14d) clamp 1..4 nodes`"),
                        );
                        (None, None)
                    }
                }
            }
            None => (None, None),
        };
        let (windows, zone) = match f.get("during") {
            Some((v, m)) => self.windows(v, m, name)?,
            None => (Vec::new(), String::from("UTC")),
        };
        if b.template {
            return None;
        }
        Some(ir::WarmPool {
            name: name.to_string(),
            pool: pool?,
            size: size?,
            clamp,
            windows,
            zone,
        })
    }

    fn windows(
        &mut self,
        v: &ast::Value,
        _m: ModuleId,
        warm: &str,
    ) -> Option<(Vec<ir::TimeWindow>, String)> {
        let ValueKind::Windows(ws) = &v.kind else {
            self.error(
                Diagnostic::new(codes::TYPE_MISMATCH, "expected time windows")
                    .with_label(v.span, "not a time window")
                    .with_help("write e.g. `during = weekdays 08:00..19:00 \"Europe/Berlin\"`"),
            );
            return None;
        };
        let mut ok = true;
        let zone = match &ws.zone {
            Some(z) => {
                if z.value == "UTC" || z.value.parse::<chrono_tz::Tz>().is_ok() {
                    z.value.to_string()
                } else {
                    let names = chrono_tz::TZ_VARIANTS.iter().map(|t| t.name());
                    self.error(
                        Diagnostic::new(
                            codes::UNKNOWN_TIMEZONE,
                            format!("unknown time zone `{}`", z.value),
                        )
                        .with_label(z.span, "not an IANA time-zone name")
                        .with_suggestion(&z.value, names),
                    );
                    ok = false;
                    String::new()
                }
            }
            None => String::from("UTC"),
        };
        let mut out = Vec::new();
        for (i, w) in ws.windows.iter().enumerate() {
            let days = match &w.days {
                Some(d) => self.days(d),
                None => Some(0x7f),
            };
            let start = self.time_of_day(&w.start);
            let end = self.time_of_day(&w.end);
            let (Some(days), Some(start), Some(end)) = (days, start, end) else {
                ok = false;
                continue;
            };
            self.remember(format!("warm/{warm}/window/{i}"), w.span);
            out.push(ir::TimeWindow {
                days,
                start_min: start,
                end_min: end,
            });
        }
        ok.then_some((out, zone))
    }

    fn days(&mut self, d: &ast::DaySpec) -> Option<u8> {
        const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
        const ALL: [&str; 10] = [
            "mon", "tue", "wed", "thu", "fri", "sat", "sun", "weekdays", "weekends", "daily",
        ];
        let mut mask = 0u8;
        for (first, last) in &d.ranges {
            let mut index = |id: &ast::Ident| -> Option<usize> {
                let found = DAYS.iter().position(|x| *x == id.name.to_ascii_lowercase());
                if found.is_none() {
                    self.error(
                        Diagnostic::new(codes::UNKNOWN_DAY, format!("unknown day `{}`", id.name))
                            .with_label(id.span, "not a day")
                            .with_suggestion(&id.name, ALL.iter().copied()),
                    );
                }
                found
            };
            match (first.name.as_str(), last) {
                ("weekdays", None) => mask |= 0b001_1111,
                ("weekends", None) => mask |= 0b110_0000,
                ("daily", None) => mask |= 0b111_1111,
                (_, None) => mask |= 1 << index(first)?,
                (_, Some(l)) => {
                    let (a, b) = (index(first)?, index(l)?);
                    let mut i = a;
                    loop {
                        mask |= 1 << i;
                        if i == b {
                            break;
                        }
                        i = (i + 1) % 7;
                    }
                }
            }
        }
        Some(mask)
    }

    pub(crate) fn lower_autoscale(
        &mut self,
        b: &ast::Block,
        module: ModuleId,
    ) -> Option<ir::Autoscale> {
        let f = self.fields(b, module, 0);
        let pool = if b.template {
            Some(String::from("self"))
        } else {
            match &b.name {
                Some(n) => self.reference_expr(
                    &ast::Expr {
                        kind: ast::ExprKind::Path(vec![n.clone()]),
                        span: n.span,
                    },
                    module,
                    DefKind::Pool,
                ),
                None => {
                    self.error(
                        Diagnostic::new(
                            codes::MISSING_FIELD,
                            "`autoscale` block does not name its pool",
                        )
                        .with_label(b.kind_span, "needs a pool name")
                        .with_help("write `autoscale POOL { ... }`"),
                    );
                    None
                }
            }
        };
        let pool_name = pool.clone().unwrap_or_else(|| "self".into());
        let mut up = Vec::new();
        let mut down = Vec::new();
        let mut ok = true;
        for (t, m, span) in &f.triggers {
            let is_down = t.direction == Direction::Down;
            let ctx = Ctx {
                module: *m,
                job: false,
                signals: true,
                idle: is_down,
                self_pool: Some(&pool_name),
            };
            let condition = self.expr(&t.condition, Some(&Ty::Bool), &ctx).map(|t| t.ir);
            let hold_s = match &t.hold {
                Some(h) => self
                    .const_of(h, &Ty::Q(Dim::Duration), *m)
                    .map(|s| s.max(0.0).round() as u64),
                None => Some(0),
            };
            let step = match &t.action {
                Some(a) => {
                    let wrong_verb = (a.verb == ast::ScaleVerb::Add) == is_down;
                    if wrong_verb {
                        self.error(
                            Diagnostic::new(
                                codes::TYPE_MISMATCH,
                                if is_down {
                                    "a `down` trigger removes nodes"
                                } else {
                                    "an `up` trigger adds nodes"
                                },
                            )
                            .with_label(*span, "wrong direction")
                            .with_help(if is_down {
                                "write `=> remove N nodes`"
                            } else {
                                "write `=> add N nodes`"
                            }),
                        );
                        ok = false;
                    }
                    if !is_down {
                        self.remember(
                            format!("autoscale/{pool_name}/up/{}", up.len()),
                            a.amount.span,
                        );
                    }
                    match self.expr(&a.amount, Some(&Ty::Q(Dim::Nodes)), &ctx) {
                        Some(t) => Some(Some(t.ir)),
                        None => None,
                    }
                }
                None if !is_down => {
                    self.error(
                        Diagnostic::new(
                            codes::MISSING_FIELD,
                            "an `up` trigger must say how many nodes to add",
                        )
                        .with_label(*span, "no `=> add ...`")
                        .with_help("write `=> add pending_nodes(fits = self)` or `=> add 2 nodes`"),
                    );
                    None
                }
                None => Some(None),
            };
            match (condition, hold_s, step) {
                (Some(condition), Some(hold_s), Some(step)) => {
                    let trigger = ir::ScaleTrigger {
                        condition,
                        hold_s,
                        step,
                    };
                    if is_down {
                        down.push(trigger);
                    } else {
                        up.push(trigger);
                    }
                }
                _ => ok = false,
            }
        }
        let max_spend = self.field_quantity(&f, "max_spend", Dim::Rate);
        if let Some((v, _)) = f.get("max_spend") {
            self.remember(format!("autoscale/{pool_name}/max_spend"), v.span);
        }
        let cooldown = self.seconds(&f, "cooldown");
        let cooldown_up_s = self.seconds(&f, "cooldown_up").or(cooldown).unwrap_or(0);
        let cooldown_down_s = self.seconds(&f, "cooldown_down").or(cooldown).unwrap_or(0);
        let fallback = self.reference(&f, "fallback", DefKind::Pool);
        if b.template || !ok {
            return None;
        }
        // Most blocks have one trigger each way; a pushed-to list has room for four.
        up.shrink_to_fit();
        down.shrink_to_fit();
        Some(ir::Autoscale {
            pool: pool?,
            up,
            down,
            max_spend_per_hour: max_spend,
            cooldown_up_s,
            cooldown_down_s,
            fallback,
        })
    }

    pub(crate) fn lower_gpu(
        &mut self,
        b: &ast::Block,
        module: ModuleId,
        name: &str,
    ) -> Option<ir::GpuModel> {
        let f = self.fields(b, module, 0);
        self.remember(format!("gpu/{name}"), f.header);
        let id = self.string(&f, "id");
        let product = self.string(&f, "product");
        let memory_mib = self.mib(&f, "memory");
        let mig_slots = self.count(&f, "mig_slots").unwrap_or(0);
        let mut profiles = Vec::new();
        for (mig, m) in f.nested.clone() {
            let Some(profile_name) = mig.name.as_ref() else {
                continue;
            };
            let mf = self.fields(mig, m, 0);
            let compute = self.count(&mf, "compute");
            let mem = self.mib(&mf, "memory");
            let width = self.count(&mf, "width");
            let starts = match self.field_expr(&mf, "starts") {
                Some((e, m2)) => match &e.kind {
                    ast::ExprKind::List(items) => items
                        .iter()
                        .map(|i| self.count_expr(i, m2, "a start slot"))
                        .collect::<Option<Vec<u32>>>(),
                    _ => {
                        self.mismatch(e.span, &Ty::Number, &Ty::List(Box::new(Ty::Number)));
                        None
                    }
                },
                None => None,
            };
            self.remember(
                format!("gpu/{name}/mig/{}", profile_name.name),
                profile_name.span,
            );
            if let (Some(compute_slices), Some(memory_mib), Some(width), Some(starts)) =
                (compute, mem, width, starts)
            {
                profiles.push(ir::MigProfile {
                    name: profile_name.name.to_string(),
                    compute_slices,
                    memory_mib,
                    width,
                    starts,
                });
            }
        }
        if b.template {
            return None;
        }
        Some(ir::GpuModel {
            name: name.to_string(),
            id: id?,
            product,
            memory_mib: memory_mib?,
            mig_slots,
            mig_profiles: profiles,
        })
    }

    pub(crate) fn lower_node(
        &mut self,
        b: &ast::Block,
        module: ModuleId,
        name: &str,
    ) -> Option<ir::NodeShape> {
        let f = self.fields(b, module, 0);
        let gpu = self.reference(&f, "gpu", DefKind::Gpu);
        let gpus = self.count(&f, "gpus");
        let nvlink = match self.field_expr(&f, "nvlink") {
            Some((e, m)) => self.islands(e, m, gpus.unwrap_or(0)),
            None => None,
        };
        let cpus = match self.field_expr(&f, "cpus") {
            Some((e, m)) => self.const_of(e, &Ty::Number, m),
            None => None,
        };
        let memory_mib = self.mib(&f, "memory").unwrap_or(0);
        let instance = self.string(&f, "instance");
        let list_price = self.field_quantity(&f, "list_price", Dim::Rate);
        if b.template {
            return None;
        }
        let gpus = gpus?;
        let islands = nvlink.unwrap_or_else(|| (0..gpus).map(|g| vec![g]).collect());
        Some(ir::NodeShape {
            name: name.to_string(),
            gpu_model: gpu?,
            gpus,
            nvlink_islands: islands,
            cpu_milli: cpus.map_or(0, |c| (c * 1000.0).round() as u64),
            memory_mib,
            instance,
            list_price_per_hour: list_price,
        })
    }

    /// `nvlink = [[0, 1, 2, 3], [4, 5, 6, 7]]`: every GPU index once, below the GPU count.
    fn islands(&mut self, e: &ast::Expr, module: ModuleId, gpus: u32) -> Option<Vec<Vec<u32>>> {
        let ast::ExprKind::List(groups) = &e.kind else {
            self.mismatch(
                e.span,
                &Ty::Number,
                &Ty::List(Box::new(Ty::List(Box::new(Ty::Number)))),
            );
            return None;
        };
        let mut seen = vec![false; gpus as usize];
        let mut out = Vec::new();
        for g in groups {
            let ast::ExprKind::List(items) = &g.kind else {
                self.mismatch(g.span, &Ty::Number, &Ty::List(Box::new(Ty::Number)));
                return None;
            };
            let mut island = Vec::new();
            for i in items {
                let idx = self.count_expr(i, module, "a GPU index")?;
                match seen.get_mut(idx as usize) {
                    Some(s) if !*s => *s = true,
                    _ => {
                        self.error(
                            Diagnostic::new(
                                codes::OUT_OF_RANGE,
                                format!("GPU index {idx} is out of range or listed twice"),
                            )
                            .with_label(
                                i.span,
                                format!(
                                    "indices run 0 to {} and appear once",
                                    gpus.saturating_sub(1)
                                ),
                            )
                            .with_help("list each GPU index in exactly one NVLink island"),
                        );
                        return None;
                    }
                }
                island.push(idx);
            }
            out.push(island);
        }
        for (i, s) in seen.iter().enumerate() {
            if !s {
                out.push(vec![i as u32]);
            }
        }
        Some(out)
    }

    pub(crate) fn lower_rule(&mut self, r: &ast::RuleDecl, module: ModuleId) -> Option<ir::Rule> {
        let ctx = Ctx {
            module,
            job: true,
            signals: false,
            idle: false,
            self_pool: None,
        };
        let moved = self.detached.condition(r);
        let condition = moved.as_ref().unwrap_or(&r.condition);
        let condition = self.expr(condition, Some(&Ty::Bool), &ctx).map(|t| t.ir);
        let message = r.message.as_ref().map(|m| m.value.to_string());
        let action = match r.action {
            ast::RuleAction::Deny => Some(ir::RuleAction::Deny {
                message: message.unwrap_or_default(),
            }),
            ast::RuleAction::Warn => Some(ir::RuleAction::Warn {
                message: message.unwrap_or_default(),
            }),
            ast::RuleAction::Route => {
                let pool = r.route_to.as_ref().and_then(|p| {
                    self.reference_expr(
                        &ast::Expr {
                            kind: ast::ExprKind::Path(vec![ast::Ident::clone(p)]),
                            span: p.span,
                        },
                        module,
                        DefKind::Pool,
                    )
                });
                pool.map(|pool| ir::RuleAction::Route { pool, message })
            }
            ast::RuleAction::Annotate => match r.annotation.as_deref() {
                Some((key, value)) => {
                    self.expr(value, None, &ctx)
                        .map(|t| ir::RuleAction::Annotate {
                            key: key.value.to_string(),
                            value: Box::new(t.ir),
                        })
                }
                None => None,
            },
        };
        Some(ir::Rule {
            name: r.name.name.to_string(),
            condition: condition?,
            action: action?,
        })
    }

    /// Lowers one definition by id (used for every module, so the stdlib is checked too).
    pub(crate) fn lower_def(&mut self, id: DefId) -> Option<Lowered> {
        let def = self.defs.get(id)?.clone();
        let name = def.name;
        if let Some(r) = def.rule {
            return self.lower_rule(r, def.module).map(Lowered::Rule);
        }
        let b = def.block?;
        // A plain check moved the block out of the tree (`detach`): lowered from there
        // and dropped after.
        let whole = self.detached.block(b);
        let b = whole.as_ref().unwrap_or(b);
        Some(match def.kind {
            DefKind::Pool => Lowered::Pool(self.lower_pool(b, def.module, name)?),
            DefKind::Tier => Lowered::Tier(self.lower_tier(b, def.module, name)?),
            DefKind::Team => Lowered::Team(self.lower_team(b, def.module, name, def.cohort)?),
            DefKind::Cohort => Lowered::Cohort(self.lower_cohort(b, def.module, name)?),
            DefKind::Warm => Lowered::Warm(self.lower_warm(b, def.module, name)?),
            DefKind::Gpu => Lowered::Gpu(self.lower_gpu(b, def.module, name)?),
            DefKind::Node => Lowered::Node(self.lower_node(b, def.module, name)?),
            DefKind::Autoscale => {
                self.lower_autoscale(b, def.module);
                return None;
            }
            DefKind::Placement => {
                self.lower_placement(b, def.module);
                return None;
            }
            DefKind::Rule => return None,
        })
    }
}

#[derive(Debug)]
pub(crate) enum Lowered {
    Pool(ir::Pool),
    Tier(ir::Tier),
    Team(ir::Team),
    Cohort(ir::Cohort),
    Warm(ir::WarmPool),
    Gpu(ir::GpuModel),
    Node(ir::NodeShape),
    Rule(ir::Rule),
}

/// Splits a lowered topology expression into a required level and preferred levels.
fn topology(e: &ir::Expr) -> (Option<ir::TopologyLevel>, Vec<ir::TopologyLevel>) {
    let level = |e: &ir::Expr| match e {
        ir::Expr::Const(Value::Word(w)) => Some(match w.as_str() {
            "nvlink_island" => ir::TopologyLevel::NvlinkIsland,
            "node" => ir::TopologyLevel::Node,
            "nvlink_domain" => ir::TopologyLevel::NvlinkDomain,
            "rack" => ir::TopologyLevel::Rack,
            "leaf" => ir::TopologyLevel::Leaf,
            _ => ir::TopologyLevel::Any,
        }),
        _ => None,
    };
    match e {
        ir::Expr::Call {
            function: ir::Function::Require,
            args,
            ..
        } => (args.first().and_then(level), Vec::new()),
        ir::Expr::Call {
            function: ir::Function::Prefer,
            args,
            ..
        } => (None, args.iter().filter_map(level).collect()),
        other => (None, level(other).into_iter().collect()),
    }
}

fn missing_help(kind: BlockKind, key: &str) -> String {
    let example = match (kind, key) {
        (BlockKind::Pool, "capacity") => "capacity = reserved",
        (BlockKind::Pool, "node") => "node = dgx_h100",
        (BlockKind::Pool, "nodes") => "nodes = 4",
        (BlockKind::Tier, "priority") => "priority = 500",
        (BlockKind::Warm, "size") => "size = 1 nodes",
        (BlockKind::Gpu, "id") => "id = \"H100-SXM5-80GB\"",
        (BlockKind::Gpu, "memory") => "memory = 80 GiB",
        (BlockKind::Node, "gpu") => "gpu = h100_sxm5_80gb",
        (BlockKind::Node, "gpus") => "gpus = 8",
        (BlockKind::Mig, "starts") => "starts = [0, 4]",
        _ => "",
    };
    if example.is_empty() {
        format!("add `{key} = ...`")
    } else {
        format!("add e.g. `{example}`")
    }
}
