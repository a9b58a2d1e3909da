//! Syntax: the pest grammar, the syntax tree, comment handling and error recovery.

pub mod ast;
mod parser;
mod scan;
mod trivia;

pub use parser::{parse, MAX_OPERATORS};
pub use scan::MAX_DEPTH;

/// The grammar's reserved words (they cannot name anything).
pub const RESERVED: &[&str] = &[
    "and", "or", "not", "if", "in", "to", "with", "for", "when", "clamp", "true", "false", "none",
    "self", "use", "rule", "deny", "warn", "route", "annotate", "from", "template",
];
