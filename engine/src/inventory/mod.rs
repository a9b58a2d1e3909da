//! Where the fleet comes from, outside the pure core: fleet files (JSON or TOML) and the
//! catalog of known GPU models.

pub mod catalog;
pub mod fleet_file;
pub mod jobs_file;
pub mod nvml;
