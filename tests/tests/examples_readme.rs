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

/// The agent's ValidatingAdmissionPolicy ships in the version each Kubernetes serves
/// (issue 52): `v1beta1` for 1.28 and 1.29, `v1` from 1.30, otherwise the same policy.
#[test]
fn the_agent_policy_ships_for_1_28_and_for_1_30() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kubernetes");
    let body = |file: &str, version: &str| -> Vec<String> {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        let versions: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("apiVersion:"))
            .collect();
        assert_eq!(versions.len(), 2, "{file}: a policy and its binding");
        for v in versions {
            assert_eq!(
                v,
                &format!("apiVersion: admissionregistration.k8s.io/{version}"),
                "{file}"
            );
        }
        lines
            .into_iter()
            .filter(|l| !l.starts_with("apiVersion:"))
            .collect()
    };
    assert_eq!(
        body("agent-restrict.yaml", "v1beta1"),
        body("agent-restrict-v1.yaml", "v1")
    );
}
