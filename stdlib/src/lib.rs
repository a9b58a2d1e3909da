//! The Gantry standard library: modules written in Gantry (`stdlib/std/*.gantry`), embedded
//! in the binary so that `use std.gpus` works without files on disk.

/// Every module: its `use` path and its source.
pub const MODULES: &[(&str, &str)] = &[
    ("std.gpus", include_str!("../std/gpus.gantry")),
    ("std.nodes", include_str!("../std/nodes.gantry")),
    ("std.tiers", include_str!("../std/tiers.gantry")),
    (
        "std.templates.three_tier",
        include_str!("../std/templates/three_tier.gantry"),
    ),
    (
        "std.templates.spot_burst",
        include_str!("../std/templates/spot_burst.gantry"),
    ),
];

/// The source of a module by its `use` path, e.g. `std.nodes`.
pub fn module(path: &str) -> Option<&'static str> {
    MODULES
        .iter()
        .find(|(name, _)| *name == path)
        .map(|(_, text)| *text)
}

/// The file name diagnostics show for a module: `std/nodes.gantry`.
pub fn file_name(path: &str) -> String {
    format!("{}.gantry", path.replace('.', "/"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_is_embedded_and_named_after_its_file() {
        for (name, text) in super::MODULES {
            assert!(!text.trim().is_empty(), "{name} is empty");
            assert!(name.starts_with("std."), "{name}");
        }
        assert_eq!(
            super::file_name("std.templates.spot_burst"),
            "std/templates/spot_burst.gantry"
        );
    }
}
