//! A lexical pre-pass over a file, before pest sees it: collects comments (pest skips them),
//! finds unterminated strings and nesting too deep for a recursive-descent parser, and cuts
//! the file into top-level chunks so that parsing can resume after a syntax error.

use super::ast::Comment;
use crate::source::{FileId, Span};

/// How deep `(`, `[` and `{` may nest.
pub const MAX_DEPTH: usize = 64;

/// Top-level keywords that start a chunk when they begin a line.
pub(crate) const ITEM_KEYWORDS: [&str; 12] = [
    "use",
    "rule",
    "template",
    "pool",
    "tier",
    "cohort",
    "team",
    "placement",
    "warm",
    "autoscale",
    "gpu",
    "node",
];

#[derive(Debug, Default)]
pub struct Scan {
    pub comments: Vec<Comment>,
    /// Spans from an opening quote to the end of its line.
    pub unterminated: Vec<Span>,
    /// The first bracket past [`MAX_DEPTH`], if any, per chunk start.
    pub too_deep: Vec<Span>,
}

pub fn scan(file: FileId, text: &str) -> Scan {
    let mut out = Scan::default();
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut reported_depth = false;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'#' => {
                let end = text
                    .get(i..)
                    .and_then(|r| r.find('\n'))
                    .map_or(text.len(), |n| i + n);
                let body = text.get(i..end).unwrap_or("").trim_end_matches('\r');
                out.comments.push(Comment {
                    text: body.to_string(),
                    span: Span::new(file, i, i + body.len()),
                    blank_after: false,
                });
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                loop {
                    match bytes.get(j) {
                        Some(b'\\') => j += 2,
                        Some(b'"') => {
                            j += 1;
                            break;
                        }
                        Some(b'\n') | None => {
                            out.unterminated.push(Span::new(file, i, j.min(text.len())));
                            break;
                        }
                        Some(_) => j += 1,
                    }
                }
                i = j;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH && !reported_depth {
                    out.too_deep.push(Span::new(file, i, i + 1));
                    reported_depth = true;
                }
                i += 1;
            }
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    reported_depth = false;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// Byte ranges of top-level chunks: each starts at a line that begins, in the first column,
/// with an item keyword. Text before the first such line forms a chunk of its own.
pub fn chunks(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut starts = vec![0];
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if offset > 0 && starts_item(line) {
            starts.push(offset);
        }
        offset += line.len();
    }
    starts.push(text.len());
    starts
        .windows(2)
        .filter_map(|w| match w {
            [a, b] if a < b => Some(*a..*b),
            _ => None,
        })
        .collect()
}

fn starts_item(line: &str) -> bool {
    ITEM_KEYWORDS.iter().any(|kw| {
        line.strip_prefix(kw)
            .is_some_and(|rest| rest.starts_with([' ', '\t', '{']))
    }) || misspelled_block(line)
}

/// `word name {` in the first column: a block whose keyword is misspelled (`tem vision {`),
/// so that the error stays in its own chunk and the definitions around it survive.
fn misspelled_block(line: &str) -> bool {
    let Some((first, rest)) = word(line) else {
        return false;
    };
    let Some(rest) = rest.strip_prefix([' ', '\t']) else {
        return false;
    };
    !crate::syntax::RESERVED.contains(&first)
        && word(rest.trim_start()).is_some_and(|(_, after)| after.trim_start().starts_with('{'))
}

/// An identifier at the start of `s` and what follows it.
fn word(s: &str) -> Option<(&str, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    let first = s.chars().next()?;
    (end > 0 && (first.is_ascii_alphabetic() || first == '_')).then(|| s.split_at(end))
}

/// Names that `text` (a chunk that did not parse) set out to define: `KEYWORD name` for a
/// definition keyword, or `word name {` (a misspelled keyword), on any line. Their uses
/// elsewhere are not reported again as unknown.
pub fn names_defined_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((first, rest)) = word(line.trim_start()) else {
            continue;
        };
        let Some((name, after)) = rest
            .strip_prefix([' ', '\t'])
            .and_then(|r| word(r.trim_start()))
        else {
            continue;
        };
        let after = after.trim_start();
        let keyword = ITEM_KEYWORDS.contains(&first) && first != "use";
        if (keyword || after.starts_with('{')) && !crate::syntax::RESERVED.contains(&name) {
            out.push(name.to_string());
        }
    }
    out
}

/// In `text` (a chunk with more `{` than `}`), the `{` that is most likely never closed:
/// a `}` whose line is indented like an outer `{`'s line, not like the innermost open
/// one's, closes the outer block, so the inner one is the unclosed one (rustc's reading of
/// indentation). Otherwise the innermost `{` still open at the end. Byte offset in `text`;
/// braces in strings and comments are skipped.
pub fn unclosed_brace(text: &str) -> Option<usize> {
    let indent = |at: usize| {
        let start = text
            .get(..at)
            .and_then(|s| s.rfind('\n'))
            .map_or(0, |i| i + 1);
        text.get(start..)
            .map_or(0, |l| l.len() - l.trim_start_matches([' ', '\t']).len())
    };
    let mut open: Vec<usize> = Vec::new();
    let mut suspect: Option<usize> = None;
    let (mut in_string, mut in_comment) = (false, false);
    for (i, c) in text.char_indices() {
        match c {
            '\n' => (in_string, in_comment) = (false, false),
            _ if in_comment => {}
            '"' => in_string = !in_string,
            _ if in_string => {}
            '#' => in_comment = true,
            '{' => open.push(i),
            '}' => {
                let Some(top) = open.pop() else { continue };
                let here = indent(i);
                if suspect.is_none()
                    && indent(top) != here
                    && open.iter().any(|&o| indent(o) == here)
                {
                    suspect = Some(top);
                }
            }
            _ => {}
        }
    }
    if open.is_empty() {
        return None;
    }
    suspect.or(open.last().copied())
}
