//! `examples/README.md` lists every example that exists: each folder, and each manifest
//! of `examples/kubernetes/`, so a new example cannot go unmentioned.

#![allow(clippy::unwrap_used, reason = "test code")]

use std::path::Path;

#[test]
fn the_examples_readme_lists_every_example() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let readme = std::fs::read_to_string(examples.join("README.md")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&examples).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() && !readme.contains(&format!("`{name}/`")) {
            missing.push(format!("{name}/"));
        }
    }
    for entry in std::fs::read_dir(examples.join("kubernetes")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let listed = readme.contains(&format!("`{name}`"))
            || (name.starts_with("rbac") && readme.contains("`rbac*.yaml`"));
        if name.ends_with(".yaml") && !listed {
            missing.push(format!("kubernetes/{name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "examples/README.md does not mention: {missing:?}"
    );
}
