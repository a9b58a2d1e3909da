//! Simulations over the decision core. `fill` is the FGD paper's packing experiment.

pub mod fill;
pub mod openb;
