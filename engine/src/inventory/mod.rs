//! Where the fleet and the jobs come from, as text given to the core: fleet files (JSON or
//! TOML), jobs files, NVML readings (the `probe` crate reads the driver) and the catalog
//! of known GPU models.

pub mod catalog;
pub mod fleet_file;
pub mod jobs_file;
pub mod nvml;
