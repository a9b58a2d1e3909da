//! The Gantry decision engine: the pure decision core. A policy (`lang::ir::Program`) and
//! a snapshot of the fleet and the queue in, a plan out; no clock, no I/O, no threads.
//! `core` places jobs on nodes, `decide` runs the placement cycle (quotas, preemption,
//! reservations, reasons), `scale` sizes pools over what it left waiting, `cycle` runs the
//! two as one decision, `sim` replays traces through it, and `inventory` reads fleet, job
//! and NVML-reading text given to it. The shells around it (the CLI, the service, the
//! language server, the NVML probe, the cluster view) are crates of their own beside it.

pub mod core;
pub mod cycle;
pub mod decide;
pub mod inventory;
pub mod scale;
pub mod sim;
