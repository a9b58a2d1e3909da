//! Attaches comments from the lexical pre-pass to the items and statements they belong to,
//! and records blank lines, so the formatter can print them back in place.

use super::ast::{Block, Comment, File, ItemKind, Stmt, StmtKind, Trivia};
use crate::source::Span;

/// Something that takes part in comment distribution: an item or a statement.
trait Node {
    fn span(&self) -> Span;
    fn trivia(&mut self) -> &mut Trivia;
    fn block(&mut self) -> Option<&mut Block>;
}

impl Node for super::ast::Item {
    fn span(&self) -> Span {
        self.span
    }
    fn trivia(&mut self) -> &mut Trivia {
        &mut self.trivia
    }
    fn block(&mut self) -> Option<&mut Block> {
        match &mut self.kind {
            ItemKind::Block(b) => Some(b),
            _ => None,
        }
    }
}

impl Node for Stmt {
    fn span(&self) -> Span {
        self.span
    }
    fn trivia(&mut self) -> &mut Trivia {
        &mut self.trivia
    }
    fn block(&mut self) -> Option<&mut Block> {
        match &mut self.kind {
            StmtKind::Block(b) => Some(b),
            _ => None,
        }
    }
}

pub fn attach(file: &mut File, comments: Vec<Comment>, text: &str) {
    file.dangling = distribute(&mut file.items, comments, text);
    mark_blanks(&mut file.dangling, text.len(), text);
}

/// Records which comments of a run are followed by a blank line before the next comment or
/// `until` (the node they precede).
fn mark_blanks(comments: &mut [Comment], until: usize, text: &str) {
    let ends: Vec<usize> = comments
        .iter()
        .skip(1)
        .map(|c| c.span.start as usize)
        .chain(std::iter::once(until))
        .collect();
    for (c, next) in comments.iter_mut().zip(ends) {
        let from = c.span.end as usize;
        c.blank_after = text
            .get(from..next.max(from))
            .is_some_and(|g| g.matches('\n').count() >= 2);
    }
}

/// Gives each comment to the node it documents or trails; returns the ones after the last.
fn distribute<N: Node>(nodes: &mut [N], comments: Vec<Comment>, text: &str) -> Vec<Comment> {
    let mut pending = comments.into_iter().peekable();
    let mut prev_end: Option<usize> = None;
    for i in 0..nodes.len() {
        let Some(node) = nodes.get(i) else { break };
        let span = node.span();
        let (start, end) = (span.start as usize, span.end as usize);
        let mut leading = Vec::new();
        while let Some(c) = pending.next_if(|c| (c.span.start as usize) < start) {
            match (prev_end, i.checked_sub(1).and_then(|p| nodes.get_mut(p))) {
                (Some(pe), Some(prev)) if same_line(text, pe, c.span.start as usize) => {
                    prev.trivia().trailing_mut().push(c);
                }
                _ => leading.push(c),
            }
        }
        let mut inner = Vec::new();
        while let Some(c) = pending.next_if(|c| (c.span.start as usize) < end) {
            inner.push(c);
        }
        let gap_from = prev_end.unwrap_or(0);
        let gap_to = leading.first().map_or(start, |c| c.span.start as usize);
        let blank = prev_end.is_some()
            && text
                .get(gap_from..gap_to)
                .is_some_and(|g| g.matches('\n').count() >= 2);
        mark_blanks(&mut leading, start, text);
        let Some(node) = nodes.get_mut(i) else { break };
        let trivia = node.trivia();
        trivia.set_leading(leading);
        trivia.blank_before = blank;
        match node.block() {
            Some(block) => {
                let open = text
                    .get(start..end)
                    .and_then(|t| t.find('{'))
                    .map_or(start, |o| start + o);
                let (header, body): (Vec<_>, Vec<_>) = inner
                    .into_iter()
                    .partition(|c| (c.span.start as usize) < open);
                let closing = distribute(&mut block.body, body, text);
                let mut extra = header;
                match block.body.last_mut() {
                    Some(last) => {
                        let last_end = last.span.end as usize;
                        for c in closing {
                            if same_line(text, last_end, c.span.start as usize) {
                                last.trivia.trailing_mut().push(c);
                            } else {
                                block.closing.push(c);
                            }
                        }
                    }
                    None if block.one_line => extra.extend(closing),
                    None => block.closing.extend(closing),
                }
                let close = end.saturating_sub(1);
                mark_blanks(&mut block.closing, close, text);
                node.trivia().extend_trailing(extra);
            }
            _ => node.trivia().extend_trailing(inner),
        }
        prev_end = Some(end);
    }
    let mut rest = Vec::new();
    for c in pending {
        match (prev_end, nodes.last_mut()) {
            (Some(pe), Some(last)) if same_line(text, pe, c.span.start as usize) => {
                last.trivia().trailing_mut().push(c);
            }
            _ => rest.push(c),
        }
    }
    rest
}

fn same_line(text: &str, a: usize, b: usize) -> bool {
    let (lo, hi) = (a.min(b), a.max(b));
    text.get(lo..hi).is_some_and(|t| !t.contains('\n'))
}
