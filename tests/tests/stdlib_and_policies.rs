//! The standard library and every bundled policy check clean and are formatted.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Policy directories under `dir`: each directory that holds `.gantry` files.
fn policy_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut has_policy = false;
        for entry in std::fs::read_dir(&d).unwrap().filter_map(Result::ok) {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "gantry") {
                has_policy = true;
            }
        }
        if has_policy {
            out.push(d);
        }
    }
    out.sort();
    out
}

fn load(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "gantry"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read_to_string(p).unwrap()))
        .collect()
}

fn render_all(checked: &lang::Checked) -> String {
    checked
        .diagnostics
        .iter()
        .map(|d| d.render(&checked.sources, false))
        .collect()
}

#[test]
fn the_whole_stdlib_type_checks() {
    let uses: String = stdlib::MODULES
        .iter()
        .map(|(name, _)| format!("use {name}\n"))
        .collect();
    let checked = lang::check(&[("all.gantry".into(), uses)]);
    assert!(checked.diagnostics.is_empty(), "{}", render_all(&checked));
    let program = checked.program.expect("a program");
    for id in [
        "H100-SXM5-80GB",
        "H100-NVL-94GB",
        "H200-141GB",
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "L40S",
        "L4",
        "A10",
        "T4",
        "V100M16",
        "V100M32",
    ] {
        assert!(
            program.gpu_models.iter().any(|g| g.id == id),
            "stdlib lacks GPU model {id}"
        );
    }
    for shape in [
        "dgx_h100",
        "dgx_a100",
        "hgx_h200",
        "p5_48xlarge",
        "p4d_24xlarge",
        "a3_highgpu_8g",
        "g5_xlarge",
    ] {
        assert!(
            program.node_shape(shape).is_some(),
            "stdlib lacks node shape {shape}"
        );
    }
    let h100 = program.gpu_model("h100_sxm5_80gb").unwrap();
    let three_g = h100
        .mig_profiles
        .iter()
        .find(|p| p.name == "3g.40gb")
        .unwrap();
    assert_eq!((three_g.width, three_g.starts.clone()), (4, vec![0, 4]));
    assert_eq!(h100.mig_profiles.len(), 6);
    let dgx = program.node_shape("dgx_h100").unwrap();
    assert_eq!((dgx.gpus, dgx.nvlink_islands.len()), (8, 1));
    let p3 = program.node_shape("p3_16xlarge").unwrap();
    assert_eq!(p3.nvlink_islands, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    assert_eq!(program.tiers.len(), 3);
}

#[test]
fn every_stdlib_module_checks_alone_and_is_formatted() {
    for (name, text) in stdlib::MODULES {
        let checked = lang::check(&[(format!("use_{name}.gantry"), format!("use {name}\n"))]);
        assert!(
            checked.diagnostics.is_empty(),
            "{name}: {}",
            render_all(&checked)
        );
        let formatted = lang::format::format_source(text).unwrap();
        assert_eq!(
            &formatted, text,
            "{name} is not formatted; run `gantry fmt stdlib/std`"
        );
    }
}

#[test]
fn bundled_policies_check_clean_and_are_formatted() {
    let dirs: Vec<PathBuf> = ["policies", "examples"]
        .iter()
        .flat_map(|d| policy_dirs(&root().join(d)))
        .collect();
    assert!(
        dirs.len() >= 3,
        "expected at least three bundled policies, found {dirs:?}"
    );
    for dir in dirs {
        let files = load(&dir);
        let checked = lang::check(&files);
        assert!(
            checked.diagnostics.is_empty(),
            "{}: {}",
            dir.display(),
            render_all(&checked)
        );
        assert!(checked.program.is_some());
        for (name, text) in &files {
            let formatted = lang::format::format_source(text).unwrap();
            assert_eq!(
                &formatted, text,
                "{name} is not formatted; run `gantry fmt`"
            );
        }
    }
}

#[test]
fn the_onprem_policy_lowers_to_what_it_says() {
    let checked = lang::check(&load(&root().join("policies/onprem-dgx")));
    let p = checked.program.expect("program");
    let training = p.pool("training").unwrap();
    assert_eq!(
        (
            training.min_nodes,
            training.max_nodes,
            p.pool_max_gpus(training)
        ),
        (16, 16, 128)
    );
    let vision = p.team("vision").unwrap();
    assert_eq!(vision.cohort.as_deref(), Some("research"));
    assert_eq!(
        vision.guaranteed.per_pool_milli.get("training"),
        Some(&40_000)
    );
    assert_eq!(
        vision.lend.as_ref().unwrap().effective_total_milli(),
        24_000
    );
    let product = p.team("product").unwrap();
    assert_eq!(product.guaranteed.effective_total_milli(), 48_000);
    assert_eq!(
        p.rules.first().map(|r| r.name.as_str()),
        Some("critical_owner")
    );
    assert_eq!(p.placement.packing, lang::ir::Packing::LeastFragmentation);
    let standard = p.tier("standard").unwrap();
    assert_eq!(
        (standard.max_lost_s, standard.min_runtime_s),
        (Some(900), 600)
    );
}

#[test]
fn the_cloud_policy_resolves_templates() {
    let checked = lang::check(&load(&root().join("policies/cloud-burst")));
    let p = checked.program.expect("program");
    let spot = p.pool("spot").unwrap();
    assert_eq!(
        (spot.capacity, spot.boot_s, spot.notice_s),
        (lang::ir::CapacityKind::Spot, 420, Some(120))
    );
    let scale = p.autoscale.iter().find(|a| a.pool == "spot").unwrap();
    assert_eq!(scale.fallback.as_deref(), Some("on_demand"));
    assert_eq!(
        (scale.up.len(), scale.down.len(), scale.cooldown_up_s),
        (1, 1, 180)
    );
    assert_eq!(scale.up[0].hold_s, 120);
    let warm = &p.warm[0];
    assert_eq!(
        (warm.zone.as_str(), warm.clamp),
        ("Europe/Berlin", Some((1.0, 6.0)))
    );
    assert_eq!(warm.windows[0].days, 0b001_1111);
    assert_eq!(
        (warm.windows[0].start_min, warm.windows[0].end_min),
        (480, 1140)
    );
    // Template rules run before the policy's own.
    let names: Vec<&str> = p.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.first(), Some(&"standard_needs_checkpoints"));
    assert_eq!(names.last(), Some(&"big_gangs_on_spot"));
}

#[test]
fn the_readme_tour_checks_clean() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("```gantry\n")
        .expect("README has a gantry tour block")
        + "```gantry\n".len();
    let len = readme[start..].find("```").unwrap();
    let tour = &readme[start..start + len];
    let checked = lang::check(&[("README.md".into(), tour.to_string())]);
    assert!(checked.diagnostics.is_empty(), "{}", render_all(&checked));
}
