//! The Gantry policy language: parsing, name resolution, type checking, lowering to the
//! [`ir::Program`] the engine runs, formatting, and diagnostics.
//!
//! Nothing here does I/O: callers hand in file contents and get back values and diagnostics.

pub mod codes;
pub mod diagnostic;
pub mod small_map;
pub mod source;
pub mod suggest;
pub mod syntax;

pub use diagnostic::{Diagnostic, Fix};
pub use source::{FileId, SourceMap, Span};
pub mod check;
pub mod ir;
pub mod tenancy;

pub use check::{check, check_for_editor, check_owned, Checked};
pub mod format;
