//! LSP positions (line, UTF-16 code unit) and byte offsets. Out-of-range positions clamp
//! to the end of their line or of the text, as the protocol asks.

use tower_lsp::lsp_types::{Position, Range};

/// The byte offset of `pos` in `text`.
pub fn offset(text: &str, pos: Position) -> usize {
    let mut line_start = 0;
    for _ in 0..pos.line {
        match text.get(line_start..).and_then(|rest| rest.find('\n')) {
            Some(i) => line_start += i + 1,
            None => return text.len(),
        }
    }
    let line = text.get(line_start..).unwrap_or("");
    let line = line.split('\n').next().unwrap_or("");
    let mut units = 0u32;
    for (i, c) in line.char_indices() {
        if units >= pos.character {
            return line_start + i;
        }
        units += c.len_utf16() as u32;
    }
    line_start + line.len()
}

/// The position of byte `offset` in `text` (clamped to the text).
pub fn position(text: &str, offset: usize) -> Position {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = text.get(..offset).unwrap_or("");
    let line = before.matches('\n').count() as u32;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let character = before
        .get(line_start..)
        .unwrap_or("")
        .chars()
        .map(|c| c.len_utf16() as u32)
        .sum();
    Position { line, character }
}

pub fn range(text: &str, start: usize, end: usize) -> Range {
    Range {
        start: position(text, start),
        end: position(text, end),
    }
}

/// The identifier (letters, digits, `_`) around byte `offset`, with its start.
pub fn word_at(text: &str, offset: usize) -> Option<(usize, &str)> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let offset = offset.min(text.len());
    let start = text
        .get(..offset)?
        .char_indices()
        .rev()
        .take_while(|(_, c)| is_word(*c))
        .last()
        .map_or(offset, |(i, _)| i);
    let end = text
        .get(offset..)?
        .char_indices()
        .find(|(_, c)| !is_word(*c))
        .map_or(text.len(), |(i, _)| offset + i);
    let word = text.get(start..end)?;
    (!word.is_empty()).then_some((start, word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_positions_round_trip() {
        let text = "a é 𝄞 b\nsecond";
        let b = text.find('b').unwrap_or(0);
        let p = position(text, b);
        assert_eq!(
            p,
            Position {
                line: 0,
                character: 7
            }
        );
        assert_eq!(offset(text, p), b);
        assert_eq!(
            offset(
                text,
                Position {
                    line: 1,
                    character: 3
                }
            ),
            text.len() - 3
        );
        // Past the end of a line or the text: clamped.
        assert_eq!(
            offset(
                text,
                Position {
                    line: 0,
                    character: 99
                }
            ),
            text.find('\n').unwrap_or(0)
        );
        assert_eq!(
            offset(
                text,
                Position {
                    line: 9,
                    character: 0
                }
            ),
            text.len()
        );
        assert_eq!(word_at("team ml_x {", 7), Some((5, "ml_x")));
        assert_eq!(word_at("  ", 1), None);
    }
}
