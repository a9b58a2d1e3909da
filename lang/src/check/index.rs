//! Facts about a checked policy for editors: every definition (the policy's and the
//! stdlib's) with its span, block span and doc comment, the names visible in the policy,
//! and the type of every expression the checker typed. Built whether or not the policy has
//! errors, so hover and go-to-definition keep working while a file is being edited.

use super::{Checker, ModuleId};
use crate::source::Span;
use crate::syntax::ast::{self, ItemKind, StmtKind, Trivia};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub name: String,
    /// `pool`, `team`, `GPU model`, ...
    pub kind: &'static str,
    /// The name where it is defined.
    pub span: Span,
    /// The whole block or rule.
    pub item_span: Span,
    /// The comment lines just above it, `#` stripped.
    pub doc: String,
    /// `<policy>` or the stdlib module (`std.gpus`).
    pub module: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    pub definitions: Vec<Definition>,
    /// Names visible in the policy (its own and imported ones) → `definitions` index.
    pub scope: BTreeMap<String, usize>,
    /// Expressions with the type the checker gave them (`a gpu quantity`), in the order
    /// typed: inner expressions before the ones containing them.
    pub types: Vec<(Span, std::sync::Arc<str>)>,
}

impl Index {
    /// The definition a name in the policy refers to.
    pub fn resolve(&self, name: &str) -> Option<&Definition> {
        self.definitions.get(*self.scope.get(name)?)
    }

    /// The innermost typed expression containing byte `offset` of `file`.
    pub fn type_at(&self, file: u32, offset: u32) -> Option<(Span, &str)> {
        self.types
            .iter()
            .filter(|(s, _)| s.file == file && s.start <= offset && offset <= s.end)
            .min_by_key(|(s, _)| s.end - s.start)
            .map(|(s, t)| (*s, &**t))
    }
}

/// Where each named item sits and its leading comments, by the span of its name.
fn items_by_name(asts: &BTreeMap<u32, ast::File>) -> BTreeMap<Span, (Span, &Trivia)> {
    let mut out = BTreeMap::new();
    fn block<'f>(
        b: &'f ast::Block,
        span: Span,
        trivia: &'f Trivia,
        out: &mut BTreeMap<Span, (Span, &'f Trivia)>,
    ) {
        if let Some(n) = &b.name {
            out.insert(n.span, (span, trivia));
        }
        for s in &b.body {
            if let StmtKind::Block(inner) = &s.kind {
                block(inner, s.span, &s.trivia, out);
            }
        }
    }
    for file in asts.values() {
        for item in &file.items {
            match &item.kind {
                ItemKind::Block(b) => block(b, item.span, &item.trivia, &mut out),
                ItemKind::Rule(r) => {
                    out.insert(r.name.span, (item.span, &item.trivia));
                }
                ItemKind::Use(_) => {}
            }
        }
    }
    out
}

fn doc(trivia: &Trivia) -> String {
    trivia
        .leading()
        .iter()
        .map(|c| {
            let t = c.text.trim_start_matches('#');
            t.strip_prefix(' ').unwrap_or(t).trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Checker<'_> {
    pub(super) fn index(&mut self, policy: ModuleId) -> Index {
        let items = items_by_name(self.asts);
        let definitions = self
            .defs
            .iter()
            .map(|d| {
                let (item_span, trivia) = items.get(&d.span).copied().unwrap_or((d.span, &EMPTY));
                Definition {
                    name: d.name.to_string(),
                    kind: d.kind.noun(),
                    span: d.span,
                    item_span,
                    doc: doc(trivia),
                    module: self
                        .world
                        .modules
                        .get(d.module)
                        .map(|m| m.name.clone())
                        .unwrap_or_default(),
                }
            })
            .collect();
        Index {
            definitions,
            scope: self
                .visible_entries(policy)
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            types: std::mem::take(&mut self.typed),
        }
    }
}

static EMPTY: Trivia = Trivia::EMPTY;
