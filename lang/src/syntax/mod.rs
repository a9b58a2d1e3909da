//! Syntax: the pest grammar, the syntax tree, comment handling and error recovery.

pub mod ast;
mod parser;
mod scan;
mod trivia;

pub use parser::{parse, MAX_OPERATORS};
pub use scan::MAX_DEPTH;
