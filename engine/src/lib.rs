//! The Gantry decision engine and its runtime: the pure decision core (`core`), simulations
//! over it (`sim`), and the command-line front end (`cli`). The core does no I/O.

pub mod cli;
pub mod core;
pub mod cycle;
pub mod decide;
pub mod inventory;
pub mod lsp;
pub mod pages;
pub mod scale;
pub mod serve;
pub mod sim;
