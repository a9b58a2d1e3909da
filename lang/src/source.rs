//! Source files, spans and line/column lookup shared by every stage.

use serde::Serialize;

/// Index of a file in a [`SourceMap`].
pub type FileId = u32;

/// A byte range in one source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Span {
    pub file: FileId,
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(file: FileId, start: usize, end: usize) -> Span {
        Span {
            file,
            start: u32::try_from(start).unwrap_or(u32::MAX),
            end: u32::try_from(end).unwrap_or(u32::MAX),
        }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span {
            file: self.file,
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// One loaded file: a user policy file or an embedded standard-library module.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// What diagnostics call the file: a path, or `std/gpus.gantry` for the stdlib.
    pub name: String,
    /// Shared so diagnostics can render excerpts without copying the file.
    pub text: std::sync::Arc<str>,
    /// Byte offsets where each line starts (u32, as spans are: a large policy has a
    /// line every few dozen bytes).
    line_starts: Vec<u32>,
    /// (byte offset, characters before it) about every [`MARK_EVERY`] bytes; empty for an
    /// ASCII file, where a column is a byte count. A column is then counted from the
    /// nearest mark, not from its line's start: a diagnostic on a line of megabytes costs
    /// no more than one on a short line.
    char_marks: Vec<(usize, usize)>,
}

/// Bytes between [`SourceFile::char_marks`].
const MARK_EVERY: usize = 4096;

/// A 1-based line and column (columns count characters, as editors do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LineCol {
    pub line: usize,
    pub column: usize,
}

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        let text: String = text.into();
        let line_starts = std::iter::once(0)
            .chain(
                text.match_indices('\n')
                    .map(|(i, _)| u32::try_from(i + 1).unwrap_or(u32::MAX)),
            )
            .collect();
        let char_marks = if text.is_ascii() {
            Vec::new()
        } else {
            let mut marks = vec![(0, 0)];
            let mut next = MARK_EVERY;
            for (chars, (i, _)) in text.char_indices().enumerate() {
                if i >= next {
                    marks.push((i, chars));
                    next = i + MARK_EVERY;
                }
            }
            marks
        };
        SourceFile {
            name: name.into(),
            text: text.into(),
            line_starts,
            char_marks,
        }
    }

    /// Characters before byte `offset`, a character boundary.
    fn chars_before(&self, offset: usize) -> Option<usize> {
        if self.char_marks.is_empty() {
            return Some(offset);
        }
        let k = self
            .char_marks
            .partition_point(|&(b, _)| b <= offset)
            .max(1)
            - 1;
        let (byte, chars) = self.char_marks.get(k).copied().unwrap_or((0, 0));
        Some(chars + self.text.get(byte..offset)?.chars().count())
    }

    /// The 0-based line holding byte `offset` (clamped to the file) and where it starts.
    fn line_at(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self
            .line_starts
            .partition_point(|&s| s as usize <= offset)
            .max(1)
            - 1;
        let start = self.line_starts.get(line).map_or(0, |&s| s as usize);
        (line, start)
    }

    /// The length in bytes of the line holding byte `offset`.
    pub fn line_len_at(&self, offset: usize) -> usize {
        let (line, start) = self.line_at(offset);
        let end = self
            .line_starts
            .get(line + 1)
            .map_or(self.text.len(), |&s| s as usize);
        end - start
    }

    pub fn line_col(&self, offset: usize) -> LineCol {
        let offset = offset.min(self.text.len());
        let (line, start) = self.line_at(offset);
        let column = self
            .chars_before(offset)
            .zip(self.chars_before(start))
            .map_or(offset - start, |(o, s)| o - s);
        LineCol {
            line: line + 1,
            column: column + 1,
        }
    }

    /// The byte offset of a 1-based line and column, clamped to the file.
    pub fn offset(&self, pos: LineCol) -> usize {
        let Some(start) = self
            .line_starts
            .get(pos.line.saturating_sub(1))
            .map(|&s| s as usize)
        else {
            return self.text.len();
        };
        let line = self.text.get(start..).unwrap_or("");
        let line = line.split('\n').next().unwrap_or("");
        start
            + line
                .char_indices()
                .nth(pos.column.saturating_sub(1))
                .map_or(line.len(), |(i, _)| i)
    }
}

/// Every file taking part in one check, indexed by [`FileId`].
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        self.files.push(SourceFile::new(name, text));
        FileId::try_from(self.files.len() - 1).unwrap_or(FileId::MAX)
    }

    pub fn get(&self, id: FileId) -> Option<&SourceFile> {
        self.files.get(id as usize)
    }

    pub fn name(&self, id: FileId) -> &str {
        self.get(id).map_or("<unknown>", |f| f.name.as_str())
    }

    pub fn text(&self, span: Span) -> &str {
        self.get(span.file)
            .and_then(|f| f.text.get(span.range()))
            .unwrap_or("")
    }

    pub fn files(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId::try_from(i).unwrap_or(FileId::MAX), f))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
mod tests {
    use super::*;

    /// Columns as counted from each line's start, the slow way.
    fn naive(text: &str, offset: usize) -> LineCol {
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        LineCol {
            line,
            column: before[start..].chars().count() + 1,
        }
    }

    #[test]
    fn columns_count_characters_on_long_lines_and_short() {
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(if i % 7 == 0 { "é" } else { "ab" });
            if i % 997 == 0 {
                text.push('\n');
            }
            if i % 13 == 0 {
                text.push_str("日本");
            }
        }
        let file = SourceFile::new("t.gantry", text.clone());
        assert!(!file.char_marks.is_empty());
        for (offset, _) in text.char_indices().chain([(text.len(), ' ')]) {
            assert_eq!(file.line_col(offset), naive(&text, offset), "at {offset}");
        }
        let ascii = "x = 1\n".repeat(2000) + &"y".repeat(10_000);
        let file = SourceFile::new("a.gantry", ascii.clone());
        assert!(file.char_marks.is_empty());
        for offset in (0..=ascii.len()).step_by(37) {
            assert_eq!(file.line_col(offset), naive(&ascii, offset));
        }
    }
}
