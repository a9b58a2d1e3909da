//! Assembles the [`Program`]: lowers every definition of every loaded module (so imported
//! stdlib code is checked too), keeps what the policy can see, then runs the analyses.

use super::blocks::Lowered;
use super::Checker;
use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::ir::Program;
use crate::source::Span;
use crate::syntax::ast;
use std::collections::BTreeSet;

/// The policy's own module.
const POLICY: usize = 0;

impl Checker<'_> {
    pub(crate) fn lower(&mut self) -> Program {
        let mut program = Program::default();
        let visible: BTreeSet<usize> = self
            .scope
            .get(POLICY)
            .map(|s| s.values().copied().collect())
            .unwrap_or_default();
        // Rules from imported modules run before the policy's own, in import order.
        let mut imported_rules = Vec::new();
        let mut own_rules = Vec::new();
        for id in 0..self.defs.len() {
            let Some(def) = self.defs.get(id) else {
                continue;
            };
            let (module, in_scope) = (def.module, visible.contains(&id));
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
        program.rules = imported_rules.into_iter().chain(own_rules).collect();
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
        let mut autoscaled: Vec<(String, ast::Ident)> = Vec::new();
        for module in modules {
            let blocks = self.unnamed.get(module).cloned().unwrap_or_default();
            for b in blocks {
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
                        placement = Some(b);
                        program.placement = self.lower_placement(b, module);
                    }
                    ast::BlockKind::Autoscale => {
                        if let Some(name) = &b.name {
                            if let Some((_, prev)) =
                                autoscaled.iter().find(|(n, _)| *n == name.name)
                            {
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
                            autoscaled.push((name.name.clone(), name.clone()));
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

    /// Drops the diagnostics from index `from` on that point into a `failed` definition.
    pub(super) fn drop_reports_on(&mut self, failed: &[Span], from: usize) {
        if failed.is_empty() {
            return;
        }
        let inside = |s: &Span| {
            failed
                .iter()
                .any(|f| f.file == s.file && f.start <= s.start && s.end <= f.end)
        };
        let mut i = 0;
        self.diags.retain(|d| {
            i += 1;
            i <= from || !d.labels.iter().any(|l| inside(&l.span))
        });
    }

    /// The innermost block or rule around each error reported so far.
    pub(super) fn failed_definitions(&self) -> Vec<Span> {
        fn blocks(body: &[ast::Stmt], out: &mut Vec<Span>) {
            for s in body {
                if let ast::StmtKind::Block(b) = &s.kind {
                    out.push(s.span);
                    blocks(&b.body, out);
                }
            }
        }
        let mut defs = Vec::new();
        for file in self.asts.values() {
            for item in &file.items {
                defs.push(item.span);
                if let ast::ItemKind::Block(b) = &item.kind {
                    blocks(&b.body, &mut defs);
                }
            }
        }
        let mut failed: Vec<Span> = self
            .diags
            .iter()
            .filter(|d| d.is_error())
            .filter_map(Diagnostic::primary_span)
            .filter_map(|at| {
                defs.iter()
                    .filter(|d| d.file == at.file && d.start <= at.start && at.end <= d.end)
                    .min_by_key(|d| d.end - d.start)
                    .copied()
            })
            .collect();
        failed.sort_by_key(|s| (s.file, s.start, s.end));
        failed.dedup();
        failed
    }
}
