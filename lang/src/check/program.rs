//! Assembles the [`Program`]: lowers every definition of every loaded module (so imported
//! stdlib code is checked too), keeps what the policy can see, then runs the analyses.

use super::blocks::Lowered;
use super::types::DefKind;
use super::Checker;
use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::ir::Program;
use crate::source::Span;
use crate::syntax::ast;

/// The policy's own module.
const POLICY: usize = 0;

impl Checker<'_> {
    pub(crate) fn lower(&mut self) -> Program {
        let mut program = Program::default();
        // Rules from imported modules run before the policy's own, in import order.
        let mut imported_rules = Vec::new();
        // Sized once: a large policy is mostly rules, and a list grown by doubling leaves
        // its old buffers behind as freed pages the allocator has not yet returned.
        let mut own_rules = Vec::with_capacity(
            self.defs
                .iter()
                .filter(|d| d.kind == DefKind::Rule && d.module == POLICY)
                .count(),
        );
        // The other lists too: each at most the definitions of its kind.
        let count = |kind: DefKind| self.defs.iter().filter(|d| d.kind == kind).count();
        program.pools.reserve_exact(count(DefKind::Pool));
        program.tiers.reserve_exact(count(DefKind::Tier));
        program.teams.reserve_exact(count(DefKind::Team));
        program.cohorts.reserve_exact(count(DefKind::Cohort));
        program.warm.reserve_exact(count(DefKind::Warm));
        for id in 0..self.defs.len() {
            let Some(def) = self.defs.get(id) else {
                continue;
            };
            // Visible in the policy: its name there resolves to this definition.
            let in_scope = self.visible_id(POLICY, def.name) == Some(id);
            let module = def.module;
            let Some(lowered) = self.lower_def(id) else {
                continue;
            };
            match lowered {
                Lowered::Gpu(g) => program.gpu_models.push(g),
                Lowered::Node(n) => program.node_shapes.push(n),
                _ if !in_scope => {}
                Lowered::Pool(p) => program.pools.push(p),
                Lowered::Tier(t) => program.tiers.push(t),
                Lowered::Team(t) => program.teams.push(t),
                Lowered::Cohort(c) => program.cohorts.push(c),
                Lowered::Warm(w) => program.warm.push(w),
                Lowered::Rule(r) if module == POLICY => own_rules.push(r),
                Lowered::Rule(r) => imported_rules.push(r),
            }
        }
        // In place: a large policy's rules are not held twice.
        own_rules.splice(0..0, imported_rules);
        program.rules = own_rules;
        self.lower_unnamed(&mut program);
        self.analyse(&program);
        program
    }

    /// Placement and autoscale blocks: the policy's own, then those of modules it imports whole.
    fn lower_unnamed(&mut self, program: &mut Program) {
        let mut modules = vec![POLICY];
        if let Some(m) = self.world.modules.get(POLICY) {
            modules.extend(
                m.imports
                    .iter()
                    .filter(|i| i.names.is_none())
                    .map(|i| i.module),
            );
        }
        let mut placement: Option<&ast::Block> = None;
        // Pools already autoscaled, by name: looked up once per block.
        let mut autoscaled: std::collections::HashMap<String, ast::Ident> =
            std::collections::HashMap::new();
        for module in modules {
            let blocks = self.unnamed.get(module).cloned().unwrap_or_default();
            for header in blocks {
                let whole = self.detached.block(header);
                let b = whole.as_ref().unwrap_or(header);
                match b.kind {
                    ast::BlockKind::Placement => {
                        if let Some(first) = placement {
                            if module == POLICY {
                                self.error(
                                    Diagnostic::new(
                                        codes::DUPLICATE,
                                        "a policy has one `placement` block",
                                    )
                                    .with_label(b.kind_span, "second `placement` block")
                                    .with_label(first.kind_span, "first one here")
                                    .with_help("merge the two blocks into one"),
                                );
                            }
                            continue;
                        }
                        placement = Some(header);
                        program.placement = self.lower_placement(b, module);
                    }
                    ast::BlockKind::Autoscale => {
                        if let Some(name) = &b.name {
                            if let Some(prev) = autoscaled.get(name.name.as_str()) {
                                self.error(
                                    Diagnostic::new(
                                        codes::DUPLICATE,
                                        format!("pool `{}` has two `autoscale` blocks", name.name),
                                    )
                                    .with_label(name.span, "second block")
                                    .with_label(prev.span, "first block")
                                    .with_help("merge the triggers into one block"),
                                );
                                continue;
                            }
                            autoscaled.insert(name.name.to_string(), name.clone());
                        }
                        if let Some(a) = self.lower_autoscale(b, module) {
                            program.autoscale.push(a);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// The analyses, quiet about definitions that already have an error: a team with a
    /// misspelled `guarnteed` is not also told it lends more than its (missing) guarantee.
    fn analyse(&mut self, program: &Program) {
        let failed = self.failed_definitions();
        let before = self.diags.len();
        super::analysis::run(self, program);
        self.drop_reports_on(&failed, before);
    }

    /// Drops the diagnostics from index `from` on that point into a `failed` definition
    /// (`failed` sorted, as [`Self::failed_definitions`] returns it).
    pub(super) fn drop_reports_on(&mut self, failed: &[Span], from: usize) {
        if failed.is_empty() {
            return;
        }
        let key = |s: &Span| (s.file, s.start, s.end);
        let quiet: Vec<bool> = self
            .diags
            .iter()
            .skip(from)
            .map(|d| {
                d.labels.iter().any(|l| {
                    self.definitions_around(l.span)
                        .iter()
                        .any(|def| failed.binary_search_by_key(&key(def), key).is_ok())
                })
            })
            .collect();
        let mut i = 0;
        self.diags.retain(|_| {
            i += 1;
            i <= from || !quiet.get(i - from - 1).copied().unwrap_or(false)
        });
    }

    /// The innermost block or rule around each error reported so far, sorted.
    pub(super) fn failed_definitions(&self) -> Vec<Span> {
        let mut failed: Vec<Span> = self
            .diags
            .iter()
            .filter(|d| d.is_error())
            .filter_map(Diagnostic::primary_span)
            .filter_map(|at| self.definitions_around(at).last().copied())
            .collect();
        failed.sort_by_key(|s| (s.file, s.start, s.end));
        failed.dedup();
        failed
    }

    /// The definitions (top-level item, then the blocks nested in it) that contain `at`,
    /// outermost first. Items are in file order, so the item is found by binary search.
    fn definitions_around(&self, at: Span) -> Vec<Span> {
        let contains = |s: Span| s.file == at.file && s.start <= at.start && at.end <= s.end;
        let Some(file) = self.asts.get(&at.file) else {
            return Vec::new();
        };
        let next = file
            .items
            .partition_point(|item| item.span.start <= at.start);
        let Some(item) = next.checked_sub(1).and_then(|i| file.items.get(i)) else {
            return Vec::new();
        };
        if !contains(item.span) {
            return Vec::new();
        }
        let mut out = vec![item.span];
        let mut body = match &item.kind {
            ast::ItemKind::Block(b) => b.body.as_slice(),
            _ => &[],
        };
        while let Some((span, inner)) = body.iter().find_map(|s| match &s.kind {
            ast::StmtKind::Block(b) if contains(s.span) => Some((s.span, b)),
            _ => None,
        }) {
            out.push(span);
            body = &inner.body;
        }
        out
    }
}
