//! Diagnostics: a stable code, a message, labelled spans and a help line, rendered with
//! miette for terminals and as JSON objects for CI and editors.

use crate::codes::{self, Severity};
use crate::source::{LineCol, SourceMap, Span};
use serde::Serialize;

/// A labelled span inside a diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

/// One finding of any stage. Build with [`Diagnostic::new`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// A code from [`crate::codes`], e.g. `E0301`.
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
    /// The first label is the primary one: its span is where the diagnostic is reported.
    pub labels: Vec<Label>,
    pub help: Option<String>,
    /// A machine-applicable fix: the help's change as an edit.
    pub fix: Option<Fix>,
}

/// Replace the text at `span` with `replacement`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fix {
    pub span: Span,
    pub replacement: String,
}

impl Diagnostic {
    /// A diagnostic whose severity comes from its code's entry in the registry.
    pub fn new(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: codes::severity(code),
            message: message.into(),
            labels: Vec::new(),
            help: None,
            fix: None,
        }
    }

    /// The edit that applies the help: replace `span` with `replacement`.
    pub fn with_fix(mut self, span: Span, replacement: impl Into<String>) -> Diagnostic {
        self.fix = Some(Fix {
            span,
            replacement: replacement.into(),
        });
        self
    }

    pub fn with_label(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            span,
            message: message.into(),
        });
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// Adds a did-you-mean help when a close name exists.
    pub fn with_suggestion<'a>(
        self,
        name: &str,
        candidates: impl IntoIterator<Item = &'a str>,
    ) -> Diagnostic {
        match crate::suggest::closest(name, candidates) {
            Some(s) => {
                // The primary label is the misspelled name itself when it is as long.
                let fix = self
                    .primary_span()
                    .filter(|p| (p.end - p.start) as usize == name.len());
                let d = self.with_help(format!("did you mean `{s}`?"));
                match fix {
                    Some(at) => d.with_fix(at, s),
                    None => d,
                }
            }
            None => self,
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub fn primary_span(&self) -> Option<Span> {
        self.labels.first().map(|l| l.span)
    }
}

/// The JSON shape of a diagnostic (`gantry check --format json`, one object per line).
#[derive(Debug, Clone, Serialize)]
pub struct JsonDiagnostic {
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub end: LineCol,
    pub help: Option<String>,
    pub labels: Vec<JsonLabel>,
    /// The help as an edit, where it is one: replace `file` from `start` to `end` (1-based
    /// line and column, end exclusive) with `replacement`.
    pub fix: Option<JsonFix>,
}

#[derive(Debug, Clone, Serialize)]
pub struct JsonFix {
    pub file: String,
    pub start: LineCol,
    pub end: LineCol,
    pub replacement: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct JsonLabel {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub end: LineCol,
    pub message: String,
}

impl Diagnostic {
    pub fn to_json(&self, sources: &SourceMap) -> JsonDiagnostic {
        let locate = |span: Span| {
            let file = sources.get(span.file);
            let start = file.map_or(LineCol { line: 1, column: 1 }, |f| {
                f.line_col(span.start as usize)
            });
            let end = file.map_or(start, |f| f.line_col(span.end as usize));
            (sources.name(span.file).to_string(), start, end)
        };
        let (file, start, end) = self.primary_span().map(locate).unwrap_or_else(|| {
            (
                String::new(),
                LineCol { line: 0, column: 0 },
                LineCol { line: 0, column: 0 },
            )
        });
        JsonDiagnostic {
            code: self.code,
            severity: self.severity,
            message: self.message.clone(),
            file,
            line: start.line,
            column: start.column,
            end,
            help: self.help.clone(),
            fix: self.fix.as_ref().map(|f| {
                let (file, start, end) = locate(f.span);
                JsonFix {
                    file,
                    start,
                    end,
                    replacement: f.replacement.clone(),
                }
            }),
            labels: self
                .labels
                .iter()
                .map(|l| {
                    let (file, start, end) = locate(l.span);
                    JsonLabel {
                        file,
                        line: start.line,
                        column: start.column,
                        end,
                        message: l.message.clone(),
                    }
                })
                .collect(),
        }
    }

    /// Renders the diagnostic as miette draws it: code, message, source excerpt with the
    /// labels, and the help line. Labels in another file than the primary one become notes.
    pub fn render(&self, sources: &SourceMap, color: bool) -> String {
        let report = MietteReport::new(self, sources);
        let theme = if color {
            miette::GraphicalTheme::unicode()
        } else {
            miette::GraphicalTheme::unicode_nocolor()
        };
        let handler = miette::GraphicalReportHandler::new_themed(theme)
            .with_width(100)
            .with_links(false);
        let mut out = String::new();
        if handler.render_report(&mut out, &report).is_err() {
            out = format!(
                "{}[{}]: {}\n",
                self.severity.as_str(),
                self.code,
                self.message
            );
        }
        out
    }
}

/// Lines longer than this are not drawn in excerpts (the renderer pads to columns, and a
/// column past 65,535 is beyond what Rust's formatter accepts): the location is given as
/// `file:line:column` instead.
const EXCERPT_MAX_LINE: usize = 4096;

/// Adapter between [`Diagnostic`] and miette's reporting traits.
#[derive(Debug)]
struct MietteReport {
    code: &'static str,
    severity: miette::Severity,
    message: String,
    help: Option<String>,
    source: Option<miette::NamedSource<std::sync::Arc<str>>>,
    labels: Vec<miette::LabeledSpan>,
}

impl MietteReport {
    fn new(d: &Diagnostic, sources: &SourceMap) -> MietteReport {
        let primary_file = d.primary_span().map(|s| s.file);
        // An excerpt only when every labelled line is short enough to draw.
        let drawable = primary_file.and_then(|f| sources.get(f)).filter(|f| {
            d.labels
                .iter()
                .filter(|l| Some(l.span.file) == primary_file)
                .all(|l| {
                    f.line_len_at(l.span.start as usize) <= EXCERPT_MAX_LINE
                        && f.line_len_at(l.span.end as usize) <= EXCERPT_MAX_LINE
                })
        });
        let source = drawable.map(|f| miette::NamedSource::new(f.name.clone(), f.text.clone()));
        let mut labels = Vec::new();
        let mut notes = Vec::new();
        if primary_file.is_some() && drawable.is_none() {
            notes.push(format!(
                "(a line here is longer than {EXCERPT_MAX_LINE} bytes: no excerpt is drawn)"
            ));
        }
        for (i, l) in d.labels.iter().enumerate() {
            if Some(l.span.file) == primary_file && drawable.is_some() {
                let span = miette::SourceSpan::new(
                    (l.span.start as usize).into(),
                    (l.span.end.saturating_sub(l.span.start)) as usize,
                );
                let text = (!l.message.is_empty()).then(|| l.message.clone());
                labels.push(if i == 0 {
                    miette::LabeledSpan::new_primary_with_span(text, span)
                } else {
                    miette::LabeledSpan::new_with_span(text, span)
                });
            } else if let Some(f) = sources.get(l.span.file) {
                let at = f.line_col(l.span.start as usize);
                let place = format!("{}:{}:{}", f.name, at.line, at.column);
                notes.push(if l.message.is_empty() {
                    format!("at {place}")
                } else {
                    format!("{}: {place}", l.message)
                });
            }
        }
        let help = match (&d.help, notes.is_empty()) {
            (h, true) => h.clone(),
            (None, false) => Some(notes.join("\n")),
            (Some(h), false) => Some(format!("{h}\n{}", notes.join("\n"))),
        };
        MietteReport {
            code: d.code,
            severity: match d.severity {
                Severity::Error => miette::Severity::Error,
                Severity::Warning => miette::Severity::Warning,
            },
            message: d.message.clone(),
            help,
            source,
            labels,
        }
    }
}

impl std::fmt::Display for MietteReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for MietteReport {}

impl miette::Diagnostic for MietteReport {
    fn code<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        Some(Box::new(self.code))
    }
    fn severity(&self) -> Option<miette::Severity> {
        Some(self.severity)
    }
    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h.clone()) as Box<dyn std::fmt::Display>)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source.as_ref().map(|s| s as &dyn miette::SourceCode)
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            None
        } else {
            Some(Box::new(self.labels.iter().cloned()))
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: a failed lookup should fail the test"
)]
mod tests {
    #[test]
    fn a_diagnostic_past_column_65535_renders_without_an_excerpt() {
        // An unknown name 70,000 columns into one line; the renderer pads to the column.
        let text = format!(
            "tier t {{ priority = 1; preempt = never }}{}team a {{ tiers = [nope] }}\n",
            " ".repeat(70_000)
        );
        let checked = crate::check(&[("long.gantry".to_string(), text)]);
        let d = checked
            .diagnostics
            .iter()
            .find(|d| d.is_error())
            .expect("the unknown tier is reported");
        let out = d.render(&checked.sources, false);
        assert!(out.contains("long.gantry:1:700"), "{out}");
        assert!(out.contains("no excerpt is drawn"), "{out}");
        // Short lines still get their excerpt.
        let checked = crate::check(&[(
            "short.gantry".to_string(),
            "team a { tiers = [nope] }\n".to_string(),
        )]);
        let out = checked.diagnostics[0].render(&checked.sources, false);
        assert!(out.contains("team a { tiers = [nope] }"), "{out}");
    }
}
