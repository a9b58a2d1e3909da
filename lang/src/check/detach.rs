//! A plain check (not an editor's) frees the policy's syntax tree as it lowers it: before
//! the checker borrows the tree, the blocks and rule conditions that nothing reads after
//! their own lowering move out of it, and each is dropped once lowered. A large policy's
//! tree is then never alive beside the whole lowered program (issue 55: a 10 MB policy
//! peaked at 25× its size with both).
//!
//! What stays in the tree: every block's header (kind, name, `in`, `from`, spans;
//! definitions borrow their names from it) with its body moved out, blocks another block
//! inherits from (`from NAME` reads them whenever that block is lowered), blocks with
//! nested blocks (the innermost definition around an error is looked up in the tree after
//! lowering), cohorts (their teams move out one by one), `use` items and the rest of each
//! rule.

use crate::source::FileId;
use crate::syntax::ast::{self, BlockKind, ItemKind, StmtKind};
use std::collections::{BTreeMap, BTreeSet};

/// Where a moved part was: its file and the offset of its block's keyword or its rule's name.
type At = (FileId, u32);

/// The parts moved out of the tree, in tree order (found by binary search). An entry is
/// `None` once lowered, so a part lowered a second time is told from one never moved
/// (that would read an empty body).
#[derive(Debug, Default)]
pub(crate) struct Detached {
    bodies: Vec<(At, Option<Vec<ast::Stmt>>)>,
    conditions: Vec<(At, Option<ast::Expr>)>,
}

fn block_at(b: &ast::Block) -> At {
    (b.kind_span.file, b.kind_span.start)
}

fn rule_at(r: &ast::RuleDecl) -> At {
    (r.name.span.file, r.name.span.start)
}

impl Detached {
    /// Moves the freeable parts of `files` (the policy's own) out of `asts`. Inheritance is
    /// by name and may cross modules, so every name any loaded block inherits from stays.
    pub(crate) fn take(files: &[FileId], asts: &mut BTreeMap<FileId, ast::File>) -> Detached {
        let mut bases = BTreeSet::new();
        for file in asts.values() {
            for item in &file.items {
                if let ItemKind::Block(b) = &item.kind {
                    collect_bases(b, &mut bases);
                }
            }
        }
        let mut out = Detached::default();
        let mut files = files.to_vec();
        files.sort_unstable();
        for id in files {
            let Some(file) = asts.get_mut(&id) else {
                continue;
            };
            for item in &mut file.items {
                match &mut item.kind {
                    ItemKind::Rule(r) => {
                        let placeholder = ast::Expr {
                            kind: ast::ExprKind::Error,
                            span: r.condition.span,
                        };
                        let condition = std::mem::replace(&mut r.condition, placeholder);
                        out.conditions.push((rule_at(r), Some(condition)));
                    }
                    ItemKind::Block(b) if b.kind == BlockKind::Cohort => {
                        for s in &mut b.body {
                            if let StmtKind::Block(team) = &mut s.kind {
                                out.take_body(team, &bases);
                            }
                        }
                    }
                    ItemKind::Block(b) => out.take_body(b, &bases),
                    ItemKind::Use(_) => {}
                }
            }
        }
        out.bodies.shrink_to_fit();
        out.conditions.shrink_to_fit();
        out
    }

    fn take_body(&mut self, b: &mut ast::Block, bases: &BTreeSet<String>) {
        let inherited = b
            .name
            .as_ref()
            .is_some_and(|n| bases.contains(n.name.as_str()));
        let nests = b.body.iter().any(|s| matches!(s.kind, StmtKind::Block(_)));
        if inherited || nests {
            return;
        }
        self.bodies
            .push((block_at(b), Some(std::mem::take(&mut b.body))));
    }

    /// The whole block whose body was moved out of `b`, if it was (each is handed out once):
    /// `b`'s header (its body empty) around its body.
    pub(crate) fn block(&mut self, b: &ast::Block) -> Option<ast::Block> {
        let body = take_at(&mut self.bodies, block_at(b), "block")?;
        Some(ast::Block { body, ..b.clone() })
    }

    /// The condition of rule `r`, if it was moved out (each is handed out once).
    pub(crate) fn condition(&mut self, r: &ast::RuleDecl) -> Option<ast::Expr> {
        take_at(&mut self.conditions, rule_at(r), "rule")
    }
}

fn take_at<T>(parts: &mut [(At, Option<T>)], at: At, what: &str) -> Option<T> {
    let i = parts.binary_search_by_key(&at, |(a, _)| *a).ok()?;
    let part = parts.get_mut(i)?.1.take();
    debug_assert!(
        part.is_some(),
        "a {what} moved out of the tree was lowered twice"
    );
    part
}

fn collect_bases(b: &ast::Block, out: &mut BTreeSet<String>) {
    if let Some(base) = &b.base {
        out.insert(base.name.to_string());
    }
    for s in &b.body {
        if let StmtKind::Block(inner) = &s.kind {
            collect_bases(inner, out);
        }
    }
}
