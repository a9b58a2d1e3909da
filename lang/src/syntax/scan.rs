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
    })
}
