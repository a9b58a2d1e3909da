//! Simulations over the decision core. `fill` is the FGD paper's packing experiment;
//! `replay` runs a trace through `decide` event by event and measures the outcome.

pub mod diff;
pub mod fill;
pub mod import;
pub mod metrics;
pub mod openb;
pub mod predict;
pub mod replay;
pub mod report;
pub mod trace;
