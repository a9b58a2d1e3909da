//! One checked policy and the editor queries over it: diagnostics per file, hover,
//! go-to-definition, completion and document symbols. Pure: files in, LSP values out
//! (file names are whatever the caller passed; the server maps them to URIs).

use super::position::{self, word_at};
use lang::check::index::Definition;
use lang::codes::Severity;
use lang::{Checked, FileId, Span};
use std::collections::BTreeMap;
use tower_lsp::lsp_types::{
    CompletionItem, CompletionItemKind, Diagnostic, DiagnosticSeverity, DocumentSymbol, Hover,
    HoverContents, MarkupContent, MarkupKind, NumberOrString, Position, Range, SymbolKind,
};

/// A place in a file: its name as given (a path, or `std/gpus.gantry`) and the range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub file: String,
    pub range: Range,
}

#[derive(Debug)]
pub struct Analysis {
    checked: Checked,
    /// The user files by name.
    files: BTreeMap<String, FileId>,
}

/// A diagnostic with its other labels as places (for related information).
#[derive(Debug, Clone)]
pub struct FileDiagnostic {
    pub diagnostic: Diagnostic,
    pub related: Vec<(Place, String)>,
}

impl Analysis {
    /// Checks the policy made of `files` (name, text).
    pub fn new(files: &[(String, String)]) -> Analysis {
        let checked = lang::check_for_editor(files);
        let names = checked
            .files
            .iter()
            .map(|(id, _)| (checked.sources.name(*id).to_string(), *id))
            .collect();
        Analysis {
            checked,
            files: names,
        }
    }

    fn text(&self, id: FileId) -> &str {
        self.checked.sources.get(id).map_or("", |f| &f.text)
    }

    fn place(&self, span: Span) -> Place {
        let text = self.text(span.file);
        Place {
            file: self.checked.sources.name(span.file).to_string(),
            range: position::range(text, span.start as usize, span.end as usize),
        }
    }

    /// Every user file with its diagnostics (an empty list clears old ones). Diagnostics
    /// without a place in a user file go to the first file.
    pub fn diagnostics(&self) -> BTreeMap<String, Vec<FileDiagnostic>> {
        let mut out: BTreeMap<String, Vec<FileDiagnostic>> = self
            .files
            .keys()
            .map(|name| (name.clone(), Vec::new()))
            .collect();
        let first = self.checked.files.first().map(|(id, _)| *id);
        for d in &self.checked.diagnostics {
            let span = d
                .primary_span()
                .filter(|s| self.files.values().any(|id| *id == s.file));
            let (file, range) = match (span, first) {
                (Some(s), _) => {
                    let p = self.place(s);
                    (p.file, p.range)
                }
                (None, Some(id)) => (self.checked.sources.name(id).to_string(), Range::default()),
                (None, None) => continue,
            };
            let mut message = d.message.clone();
            if let Some(label) = d.labels.first().filter(|l| !l.message.is_empty()) {
                message.push_str(&format!(" ({})", label.message));
            }
            if let Some(help) = &d.help {
                message.push_str(&format!("\nhelp: {help}"));
            }
            let related = d
                .labels
                .iter()
                .skip(1)
                .map(|l| (self.place(l.span), l.message.clone()))
                .collect();
            out.entry(file).or_default().push(FileDiagnostic {
                diagnostic: Diagnostic {
                    range,
                    severity: Some(match d.severity {
                        Severity::Error => DiagnosticSeverity::ERROR,
                        Severity::Warning => DiagnosticSeverity::WARNING,
                    }),
                    code: Some(NumberOrString::String(d.code.to_string())),
                    source: Some("gantry".into()),
                    message,
                    ..Diagnostic::default()
                },
                related,
            });
        }
        out
    }

    /// Quick fixes in `file` whose diagnostic overlaps `range`: the diagnostic's help as
    /// a title and its fix as an edit, which may be in another file of the policy (W0404
    /// points at a stdlib tier and fixes the `use` line).
    pub fn fixes(&self, file: &str, range: Range) -> Vec<(String, Place, String)> {
        let Some(&id) = self.files.get(file) else {
            return Vec::new();
        };
        self.checked
            .diagnostics
            .iter()
            .filter_map(|d| {
                let fix = d.fix.as_ref()?;
                // Offered where the diagnostic is shown: at its span, or at the fix for a
                // diagnostic whose span is outside the user's files.
                let shown = d
                    .primary_span()
                    .filter(|s| self.files.values().any(|f| *f == s.file))
                    .unwrap_or(fix.span);
                if shown.file != id {
                    return None;
                }
                let at = self.place(shown).range;
                let overlaps = at.start <= range.end && range.start <= at.end;
                overlaps.then(|| {
                    let title = d
                        .help
                        .clone()
                        .unwrap_or_else(|| format!("replace with `{}`", fix.replacement));
                    (
                        format!("{}: {title}", d.code),
                        self.place(fix.span),
                        fix.replacement.clone(),
                    )
                })
            })
            .collect()
    }

    /// The byte offset of `pos` in a user file, and the file's id and text.
    fn locate(&self, file: &str, pos: Position) -> Option<(FileId, &str, usize)> {
        let id = *self.files.get(file)?;
        let text = self.text(id);
        Some((id, text, position::offset(text, pos)))
    }

    /// The definition the word at `pos` names, unless the word is a job field.
    fn definition_at<'t>(
        &self,
        text: &'t str,
        offset: usize,
    ) -> Option<(usize, &'t str, &Definition)> {
        let (start, word) = word_at(text, offset)?;
        if text.get(..start)?.ends_with("job.") {
            return None;
        }
        Some((start, word, self.checked.index.resolve(word)?))
    }

    pub fn definition(&self, file: &str, pos: Position) -> Option<Place> {
        let (_, text, offset) = self.locate(file, pos)?;
        let (_, _, def) = self.definition_at(text, offset)?;
        Some(self.place(def.span))
    }

    pub fn hover(&self, file: &str, pos: Position) -> Option<Hover> {
        let (id, text, offset) = self.locate(file, pos)?;
        if let Some((start, word, def)) = self.definition_at(text, offset) {
            return Some(markdown(
                self.describe(def),
                position::range(text, start, start + word.len()),
            ));
        }
        let (span, ty) = self.checked.index.type_at(id, offset as u32)?;
        let source = text.get(span.range()).unwrap_or("");
        Some(markdown(
            format!("```gantry\n{source}\n```\n{ty}"),
            position::range(text, span.start as usize, span.end as usize),
        ))
    }

    /// A definition's hover: its source (up to 16 lines), doc comment and origin.
    fn describe(&self, def: &Definition) -> String {
        let text = self.text(def.item_span.file);
        let source = text.get(def.item_span.range()).unwrap_or(&def.name);
        let mut lines: Vec<&str> = source.lines().take(16).collect();
        if source.lines().count() > 16 {
            lines.push("  ...");
        }
        let mut out = format!("```gantry\n{}\n```\n", lines.join("\n"));
        if !def.doc.is_empty() {
            out.push_str(&format!("\n{}\n", def.doc));
        }
        let origin = if def.module == "<policy>" {
            "this policy".to_string()
        } else {
            format!("`{}`", def.module)
        };
        out.push_str(&format!(
            "\n*{}* `{}`, defined in {origin}",
            def.kind, def.name
        ));
        out
    }

    pub fn completion(&self, file: &str, pos: Position) -> Vec<CompletionItem> {
        let Some((_, text, offset)) = self.locate(file, pos) else {
            return Vec::new();
        };
        let line_start = text
            .get(..offset)
            .and_then(|t| t.rfind('\n'))
            .map_or(0, |i| i + 1);
        let before = text.get(line_start..offset).unwrap_or("");
        let partial_start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
            .last()
            .map_or(before.len(), |(i, _)| i);
        let head = before.get(..partial_start).unwrap_or("");
        let item = |label: &str, kind, detail: &str| CompletionItem {
            label: label.to_string(),
            kind: Some(kind),
            detail: Some(detail.to_string()),
            ..CompletionItem::default()
        };
        if head.ends_with("job.") {
            return lang::check::JOB_FIELDS
                .iter()
                .map(|f| item(f, CompletionItemKind::FIELD, "job field"))
                .collect();
        }
        if head.trim_end().ends_with(|c: char| c.is_ascii_digit()) {
            return lang::check::types::UNITS
                .iter()
                .filter(|u| !u.contains(' '))
                .map(|u| item(u, CompletionItemKind::UNIT, "unit"))
                .collect();
        }
        let block_keywords = lang::syntax::ast::BlockKind::ALL.map(|k| k.keyword());
        let mut items: Vec<CompletionItem> = block_keywords
            .iter()
            .chain(lang::syntax::RESERVED)
            .map(|k| item(k, CompletionItemKind::KEYWORD, "keyword"))
            .collect();
        for (name, id) in &self.checked.index.scope {
            if let Some(def) = self.checked.index.definitions.get(*id) {
                let kind = match def.kind {
                    "GPU model" | "node shape" => CompletionItemKind::CLASS,
                    "rule" => CompletionItemKind::FUNCTION,
                    "tier" => CompletionItemKind::ENUM_MEMBER,
                    _ => CompletionItemKind::VARIABLE,
                };
                let mut it = item(name, kind, def.kind);
                if !def.doc.is_empty() {
                    it.documentation =
                        Some(tower_lsp::lsp_types::Documentation::String(def.doc.clone()));
                }
                items.push(it);
            }
        }
        // Every GPU model the stdlib knows, imported or not (`use std.gpus` brings them in).
        for m in engine::inventory::catalog::stdlib_models() {
            if !self.checked.index.scope.contains_key(&m.name) {
                let mut it = item(&m.name, CompletionItemKind::CLASS, "GPU model (std.gpus)");
                it.documentation = Some(tower_lsp::lsp_types::Documentation::String(format!(
                    "{} ({}), {} MiB",
                    m.id,
                    m.product.as_deref().unwrap_or("?"),
                    m.memory_mib
                )));
                items.push(it);
            }
        }
        if head.contains("rule ") || head.trim_start().starts_with("rule") {
            items.push(item(
                "job",
                CompletionItemKind::VARIABLE,
                "the job being admitted",
            ));
        }
        items
    }

    /// The definitions in one user file: pools, tiers, teams (inside their cohorts),
    /// rules, GPU models, node shapes, templates.
    #[allow(
        deprecated,
        reason = "DocumentSymbol::deprecated has no replacement field"
    )]
    pub fn symbols(&self, file: &str) -> Vec<DocumentSymbol> {
        let Some(id) = self.files.get(file).copied() else {
            return Vec::new();
        };
        let text = self.text(id);
        let mut flat: Vec<(Span, DocumentSymbol)> = self
            .checked
            .index
            .definitions
            .iter()
            .filter(|d| d.span.file == id)
            .map(|d| {
                let kind = match d.kind {
                    "pool" => SymbolKind::MODULE,
                    "cohort" => SymbolKind::NAMESPACE,
                    "team" => SymbolKind::STRUCT,
                    "tier" => SymbolKind::ENUM_MEMBER,
                    "rule" => SymbolKind::FUNCTION,
                    "GPU model" | "node shape" => SymbolKind::CLASS,
                    _ => SymbolKind::OBJECT,
                };
                let symbol = DocumentSymbol {
                    name: d.name.clone(),
                    detail: Some(d.kind.to_string()),
                    kind,
                    tags: None,
                    deprecated: None,
                    range: position::range(
                        text,
                        d.item_span.start as usize,
                        d.item_span.end as usize,
                    ),
                    selection_range: position::range(
                        text,
                        d.span.start as usize,
                        d.span.end as usize,
                    ),
                    children: None,
                };
                (d.item_span, symbol)
            })
            .collect();
        flat.sort_by_key(|(s, _)| (s.start, std::cmp::Reverse(s.end)));
        // Nest each symbol in the last open one that contains it (teams in cohorts).
        let mut roots: Vec<(Span, DocumentSymbol)> = Vec::new();
        for (span, symbol) in flat {
            match roots.last_mut() {
                Some((outer, parent)) if outer.start <= span.start && span.end <= outer.end => {
                    parent.children.get_or_insert_with(Vec::new).push(symbol);
                }
                _ => roots.push((span, symbol)),
            }
        }
        roots.into_iter().map(|(_, s)| s).collect()
    }

    /// Text of every stdlib module the policy loaded, by name, for go-to-definition
    /// targets outside the workspace.
    pub fn stdlib_files(&self) -> Vec<(String, String)> {
        self.checked
            .sources
            .files()
            .filter(|(id, _)| !self.files.values().any(|u| u == id))
            .map(|(_, f)| (f.name.clone(), f.text.to_string()))
            .collect()
    }
}

fn markdown(value: String, range: Range) -> Hover {
    Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value,
        }),
        range: Some(range),
    }
}
