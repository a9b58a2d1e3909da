//! The Gantry decision engine and its runtime. For now this crate holds the command-line
//! front end (`cli`); the pure decision core and the service join it in later milestones,
//! each in its own module, with the core kept free of I/O.

pub mod cli;
