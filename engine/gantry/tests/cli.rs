//! The `gantry` binary as a user runs it: exit codes, output formats, and bad input that
//! must end in a clear error rather than a panic or a hang.

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gantry(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        // Tables wrap to $COLUMNS; the README's examples are printed at the default width.
        .env_remove("COLUMNS")
        .output()
        .unwrap()
}

fn repo() -> PathBuf {
    // engine/gantry → the repository root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gantry-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn check_bundled_policies_succeeds() {
    let out = gantry(&["check", "policies/"], &repo());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("checked 3 policies"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn check_without_paths_uses_the_policies_directory() {
    let out = gantry(&["check"], &repo());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_unit_mistake_shows_where_and_how_to_fix_it() {
    let dir = tempdir("unit");
    std::fs::write(dir.join("p.gantry"), "team ml { guaranteed = 80 GiB }\n").unwrap();
    let out = gantry(&["check", "p.gantry"], &dir);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("E0302") && err.contains("expected a gpu quantity, found a byte size"),
        "{err}"
    );
    assert!(err.contains("p.gantry:1:24"), "{err}");
    assert!(err.contains("help:"), "{err}");
    // The README shows this run (on /tmp/ml.gantry) with its whole output.
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let shown = readme
        .split("gantry check /tmp/ml.gantry\n```\n\n```text\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README shows the output of `gantry check /tmp/ml.gantry`");
    std::fs::write(dir.join("ml.gantry"), "team ml { guaranteed = 80 GiB }\n").unwrap();
    let out = gantry(&["check", "ml.gantry"], &dir);
    assert_eq!(
        text(&out.stderr).replace("ml.gantry", "/tmp/ml.gantry"),
        shown
    );
}

#[test]
fn json_diagnostics_are_one_object_per_line() {
    let dir = tempdir("json");
    std::fs::write(
        dir.join("p.gantry"),
        "tier t { priority = 1; preempt = sometimes }\nrule r: deny if job.vram > 8 GB \"x\"\n",
    )
    .unwrap();
    let out = gantry(&["check", "--format", "json", "."], &dir);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", text(&out.stdout));
    let first = &lines[0];
    assert_eq!(first["code"], "E0307");
    assert_eq!(first["severity"], "error");
    assert_eq!(first["file"], "p.gantry");
    assert_eq!(
        (first["line"].as_u64(), first["column"].as_u64()),
        (Some(1), Some(34))
    );
    assert_eq!(
        (
            first["end"]["line"].as_u64(),
            first["end"]["column"].as_u64()
        ),
        (Some(1), Some(43))
    );
    assert!(
        first["help"]
            .as_str()
            .unwrap()
            .contains("`after_checkpoint`"),
        "{first}"
    );
    assert_eq!(lines[1]["severity"], "warning");
}

#[test]
fn warnings_pass_unless_denied() {
    let dir = tempdir("warn");
    std::fs::write(
        dir.join("p.gantry"),
        "rule r: deny if job.vram > 8 GB \"x\"\n",
    )
    .unwrap();
    assert_eq!(gantry(&["check", "."], &dir).status.code(), Some(0));
    assert_eq!(
        gantry(&["check", "--deny-warnings", "."], &dir)
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn missing_paths_and_empty_directories_are_usage_errors() {
    let dir = tempdir("missing");
    let out = gantry(&["check", "nope/"], &dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot read `nope/`: no such file or directory"),
        "{}",
        text(&out.stderr)
    );
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let out = gantry(&["check", "empty"], &dir);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no policy files"),
        "{}",
        text(&out.stderr)
    );
    let out = gantry(&["frobnicate"], &dir);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bad_input_gives_diagnostics_not_panics() {
    let dir = tempdir("bad");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.gantry", Vec::new(), "E0104"),
        (
            "latin1.gantry",
            b"tier caf\xe9 { priority = 1 }\n".to_vec(),
            "E0100",
        ),
        (
            "deep.gantry",
            format!(
                "rule r: deny if {}job.gpus > 1 gpu{} \"x\"\n",
                "(".repeat(10_000),
                ")".repeat(10_000)
            )
            .into_bytes(),
            "E0102",
        ),
        (
            "unterminated.gantry",
            b"rule r: deny if job.vram == none \"declare\n".to_vec(),
            "E0105",
        ),
        (
            "unit.gantry",
            b"team t { guaranteed = 8 gpuz }\n".to_vec(),
            "E0303",
        ),
        (
            "binary.gantry",
            vec![0, 159, 146, 150, 255, 0, 1, 2],
            "E0100",
        ),
        (
            "garbage.gantry",
            b"}}}{{{ ((( ]]] \"\" 12:99 $$$ ...".to_vec(),
            "E0101",
        ),
        (
            "long_expr.gantry",
            format!(
                "rule r: deny if job.gpus > 1 gpu{} \"x\"\n",
                " or job.gpus > 1 gpu".repeat(400)
            )
            .into_bytes(),
            "E0103",
        ),
    ];
    for (name, bytes, code) in cases {
        let sub = dir.join(name.trim_end_matches(".gantry"));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(name), bytes).unwrap();
        let out = gantry(&["check", sub.to_str().unwrap()], &dir);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(code),
            "{name}: expected {code} in {}",
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).contains("panicked"), "{name}");
    }
}

#[test]
fn a_ten_megabyte_file_is_checked_without_trouble() {
    let dir = tempdir("big");
    let mut policy = String::from("tier standard { priority = 500 }\n");
    let mut i = 0;
    while policy.len() < 10 * 1024 * 1024 {
        policy.push_str(&format!(
            "rule r{i}: warn if job.gpus > {i} gpu and job.tier == standard \"rule number {i}\"\n"
        ));
        i += 1;
    }
    // One mistake near the end must still be found.
    policy.push_str("rule last: deny if job.vram > 2h \"x\"\n");
    std::fs::write(dir.join("big.gantry"), policy).unwrap();
    let out = gantry(&["check", "--format", "json", "big.gantry"], &dir);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("E0301"));
}

#[test]
fn fmt_check_shows_a_diff_and_fmt_rewrites() {
    let dir = tempdir("fmt");
    let messy = "tier   standard {priority=500 ;preempt=never}   # keep me\n\n\n\nteam ml {\nguaranteed=8 gpu\n}\n";
    std::fs::write(dir.join("p.gantry"), messy).unwrap();
    let out = gantry(&["fmt", "--check", "p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(1));
    let diff = text(&out.stdout);
    assert!(
        diff.contains("-tier   standard")
            && diff.contains("+tier standard { priority = 500; preempt = never }  # keep me"),
        "{diff}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("p.gantry")).unwrap(),
        messy,
        "--check must not write"
    );
    let out = gantry(&["fmt", "p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let formatted = std::fs::read_to_string(dir.join("p.gantry")).unwrap();
    assert_eq!(formatted, "tier standard { priority = 500; preempt = never }  # keep me\n\nteam ml {\n  guaranteed = 8 gpu\n}\n");
    assert_eq!(
        gantry(&["fmt", "--check", "p.gantry"], &dir).status.code(),
        Some(0)
    );
}

#[test]
fn fmt_refuses_files_with_syntax_errors_and_leaves_them_alone() {
    let dir = tempdir("fmt-bad");
    let broken = "tier standard { priority = = 500 }\n";
    std::fs::write(dir.join("p.gantry"), broken).unwrap();
    let out = gantry(&["fmt", "p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("E0101"));
    assert_eq!(
        std::fs::read_to_string(dir.join("p.gantry")).unwrap(),
        broken
    );
}

const MESSY: &str = "tier   t {priority=1}\n";
const TIDY: &str = "tier t { priority = 1 }\n";

/// Files in `dir` other than `keep`: what a write left behind.
fn leftovers(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

#[cfg(unix)]
#[test]
fn fmt_keeps_a_symlinked_policy_a_symlink_and_never_follows_a_planted_temp_link() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let dir = tempdir("fmt-links");
    let real = dir.join("real");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(real.join("p.gantry"), MESSY).unwrap();
    std::fs::set_permissions(
        real.join("p.gantry"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let linked = dir.join("policy");
    std::fs::create_dir_all(&linked).unwrap();
    symlink(real.join("p.gantry"), linked.join("p.gantry")).unwrap();
    // A link planted where an older gantry wrote its temporary file.
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    symlink(&victim, real.join(".p.gantry.gantry-fmt.tmp")).unwrap();
    symlink(&victim, linked.join(".p.gantry.gantry-fmt.tmp")).unwrap();

    let out = gantry(&["fmt", "policy/p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let meta = std::fs::symlink_metadata(linked.join("p.gantry")).unwrap();
    assert!(
        meta.file_type().is_symlink(),
        "the policy file is still a symlink"
    );
    assert_eq!(
        std::fs::read_to_string(real.join("p.gantry")).unwrap(),
        TIDY
    );
    let mode = std::fs::metadata(real.join("p.gantry"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640, "mode kept");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(leftovers(&real, &["p.gantry", ".p.gantry.gantry-fmt.tmp"]).is_empty());
}

#[cfg(unix)]
#[test]
fn fmt_refuses_a_read_only_policy_and_leaves_no_temporary_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir("fmt-readonly");
    std::fs::write(dir.join("p.gantry"), MESSY).unwrap();
    std::fs::set_permissions(dir.join("p.gantry"), std::fs::Permissions::from_mode(0o444)).unwrap();
    let out = gantry(&["fmt", "p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("read-only"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("p.gantry")).unwrap(),
        MESSY
    );
    assert!(leftovers(&dir, &["p.gantry"]).is_empty());
    // --check still works on it.
    let out = gantry(&["fmt", "--check", "p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(1));
}

#[cfg(unix)]
#[test]
fn fmt_as_root_keeps_the_owner_of_the_policy() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempdir("fmt-owner");
    std::fs::write(dir.join("p.gantry"), MESSY).unwrap();
    if std::fs::metadata(dir.join("p.gantry")).unwrap().uid() != 0 {
        return; // only root can hand a file to another user
    }
    std::os::unix::fs::chown(dir.join("p.gantry"), Some(65534), Some(65534)).unwrap();
    let out = gantry(&["fmt", "p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let meta = std::fs::metadata(dir.join("p.gantry")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    assert_eq!(std::fs::read_to_string(dir.join("p.gantry")).unwrap(), TIDY);
}

/// Issue 16, item 8: reporting tens of thousands of errors among thousands of names once
/// took time growing with their product (a did-you-mean over every name for every error).
#[test]
fn forty_thousand_errors_are_reported_without_quadratic_work() {
    let dir = tempdir("many-errors");
    let policy: String = (0..40_000)
        .map(|i| format!("pool p{i} {{ nodes = abc }}\n"))
        .collect();
    std::fs::write(dir.join("errs.gantry"), policy).unwrap();
    let out = gantry(&["check", "errs.gantry"], &dir);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("120000 errors"),
        "{}",
        text(&out.stderr).lines().last().unwrap_or_default()
    );
}

/// Issue 16, item 8: `fmt --check` on a 120,000-line file gives its diff (it once took
/// minutes to find the smallest one).
#[test]
fn fmt_check_diffs_a_huge_file() {
    let dir = tempdir("huge-fmt");
    let policy: String = (0..120_000)
        .map(|i| {
            if i % 3 == 0 {
                format!("rule r{i}: warn if  job.gpus > {} gpu \"x\"\n", i % 50 + 1)
            } else {
                format!("rule r{i}: warn if job.gpus > {} gpu \"x\"\n", i % 50 + 1)
            }
        })
        .collect();
    std::fs::write(dir.join("big.gantry"), policy).unwrap();
    let out = gantry(&["fmt", "--check", "big.gantry"], &dir);
    assert_eq!(out.status.code(), Some(1));
    let diff = text(&out.stdout);
    // Every changed line is in it (past the deadline the diff may also repeat some
    // unchanged ones, as removed and added).
    let removed = diff.lines().filter(|l| l.starts_with("-rule")).count();
    let added = diff.lines().filter(|l| l.starts_with("+rule")).count();
    assert!(
        removed >= 40_000 && removed == added,
        "{removed} removed, {added} added"
    );
    assert_eq!(
        diff.lines().filter(|l| l.contains("if  job")).count(),
        40_000
    );
}

#[test]
fn fmt_reads_standard_input() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["fmt", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"tier t {priority=1}")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(text(&out.stdout), "tier t { priority = 1 }\n");
}

#[test]
fn explain_knows_every_code_and_rejects_unknown_ones() {
    let out = gantry(&["explain", "E0301"], &repo());
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("mismatched units"));
    let out = gantry(&["explain", "E0999"], &repo());
    assert_eq!(out.status.code(), Some(2));
    let out = gantry(&["explain"], &repo());
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("W0405"));
}

#[test]
fn simulate_fill_writes_metrics_and_rejects_bad_csv() {
    let dir = tempdir("fill");
    let mut nodes = String::from("sn,cpu_milli,memory_mib,gpu,model\n");
    for i in 0..6 {
        nodes.push_str(&format!("node-{i},64000,262144,8,V100M16\n"));
    }
    let mut pods = String::from("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n");
    for i in 0..40 {
        let (n, m) = [(1, 300), (1, 1000), (2, 1000), (1, 650)][i % 4];
        pods.push_str(&format!("pod-{i:03},4000,8192,{n},{m},,LS\n"));
    }
    std::fs::write(dir.join("nodes.csv"), nodes).unwrap();
    std::fs::write(dir.join("pods.csv"), &pods).unwrap();
    let out = gantry(
        &[
            "simulate",
            "fill",
            "--nodes",
            "nodes.csv",
            "--pods",
            "pods.csv",
            "--seeds",
            "1..3",
            "--packing",
            "best_fit",
            "--json",
            "out.json",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("out.json")).unwrap()).unwrap();
    assert_eq!(json["seeds"].as_array().map(Vec::len), Some(3));
    let alloc = json["allocation_ratio_pct"]["130"].as_f64().unwrap();
    assert!(alloc > 50.0 && alloc <= 100.0, "{json}");
    assert!(json["frag_ratio_pct"]["100"].is_number());

    std::fs::write(
        dir.join("bad.csv"),
        pods.replace("pod-005,4000", "pod-005,lots"),
    )
    .unwrap();
    let out = gantry(
        &[
            "simulate",
            "fill",
            "--nodes",
            "nodes.csv",
            "--pods",
            "bad.csv",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("bad.csv:7: field `cpu_milli`"),
        "{}",
        text(&out.stderr)
    );
    let out = gantry(
        &[
            "simulate",
            "fill",
            "--nodes",
            "nodes.csv",
            "--pods",
            "pods.csv",
            "--packing",
            "magic",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn fleet_file_errors_name_file_line_and_field() {
    let dir = tempdir("fleet-errors");
    let cases: &[(&str, &str, &str)] = &[
        ("empty.json", r#"{"nodes": []}"#, "empty.json:1: field `nodes`: the fleet has no nodes"),
        (
            "typo.json",
            "{\"nodes\": [\n  {\"name\": \"a\", \"cpu_milli\": 1000, \"memory_mib\": 10,\n   \"gpus\": {\"count\": 8, \"model\": \"H100-SXM5-80G\"}}\n]}",
            "typo.json:3: field `nodes[0].gpus.model`: unknown GPU model `H100-SXM5-80G`; did you mean `H100-SXM5-80GB`?",
        ),
        (
            "negative.json",
            "{\"nodes\": [\n {\"name\": \"a\",\n  \"cpu_milli\": -4, \"memory_mib\": 1}]}",
            "negative.json:3: field `nodes[0].cpu_milli`: invalid value: integer `-4`, expected a whole number",
        ),
        (
            "absurd.json",
            "{\"nodes\": [{\"name\": \"a\", \"count\": 100000000, \"cpu_milli\": 1, \"memory_mib\": 1}]}",
            "absurd.json:1: field `nodes[0].count`: 100000000 is out of range",
        ),
        (
            "unknown.toml",
            "[[nodes]]\nname = \"x\"\ncpu_milli = 1000\nmemory_mib = 100\ngpu = 3\n",
            "unknown.toml:5: field `nodes[0].gpu`: unknown field `gpu`, expected one of",
        ),
        (
            "dup.json",
            "{\"nodes\": [{\"name\": \"a\", \"count\": 2, \"cpu_milli\": 1, \"memory_mib\": 1},\n {\"name\": \"a-1\", \"cpu_milli\": 1, \"memory_mib\": 1}]}",
            "dup.json:2: field `nodes[1].name`: node `a-1` is defined twice",
        ),
        (
            "mig.json",
            "{\"nodes\": [{\"name\": \"a\", \"cpu_milli\": 1, \"memory_mib\": 1,\n \"gpus\": [{\"model\": \"H100-SXM5-80GB\", \"mig\": [{\"profile\": \"3g.40gb\", \"start\": 2}]}]}]}",
            "field `nodes[0].gpus[0].mig[0].start`: 3g.40gb cannot start at slot 2; NVIDIA allows [0, 4]",
        ),
        ("broken.json", "{\"nodes\": [", "broken.json:1: field `nodes`: EOF while parsing"),
    ];
    for (name, body, expected) in cases {
        std::fs::write(dir.join(name), body).unwrap();
        let out = gantry(&["inventory", "--source", name], &dir);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(expected),
            "{name}: expected `{expected}` in\n{err}"
        );
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
}

#[test]
fn inventory_expands_counts_and_gpu_shorthand() {
    let dir = tempdir("inventory");
    std::fs::write(
        dir.join("fleet.toml"),
        "[[nodes]]\nname = \"dgx\"\ncount = 2\npool = \"dgx\"\ncpu_milli = 224000\nmemory_mib = 2097152\nlabels = { rack = \"r1\" }\ngpus = { count = 8, model = \"H100-SXM5-80GB\", nvlink_islands = 2 }\n",
    )
    .unwrap();
    let out = gantry(&["inventory", "--source", "fleet.toml"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1]["name"], "dgx-1");
    assert_eq!(nodes[0]["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(
        nodes[0]["gpus"][7]["memory_mib"], 81559,
        "memory from the stdlib model"
    );
    assert_eq!(nodes[0]["gpus"][4]["nvlink_island"], 1);
    assert_eq!(nodes[0]["labels"]["rack"], "r1");
}

#[test]
fn place_reports_bad_jobs_with_line_and_field() {
    let dir = tempdir("place-jobs");
    std::fs::write(
        dir.join("fleet.json"),
        r#"{"nodes": [{"name": "a", "cpu_milli": 8000, "memory_mib": 1024, "gpus": {"count": 1, "model": "L4"}}]}"#,
    )
    .unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "{\"id\": \"a\"}\n{\"id\": \"b\", \"members\": 0}\n",
            "jobs.jsonl:2: field `members`: 0 is out of range",
        ),
        (
            "{\"id\": \"a\", \"gpu_milli\": 5000, \"gpus_per_member\": 1}\n",
            "field `gpu_milli`: 5000 is out of range",
        ),
        (
            "{\"id\": \"a\", \"topology\": \"same_rack\"}\n",
            "unknown topology `same_rack`; expected one of node",
        ),
        (
            "{\"id\": \"a\", \"gpus\": 2}\n",
            "jobs.jsonl:1: field `gpus`: unknown field `gpus`",
        ),
        ("not json\n", "jobs.jsonl:1:"),
    ];
    for (body, expected) in cases {
        std::fs::write(dir.join("jobs.jsonl"), body).unwrap();
        let out = gantry(
            &["place", "--fleet", "fleet.json", "--jobs", "jobs.jsonl"],
            &dir,
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{body}: {err}");
        assert!(err.contains(expected), "expected `{expected}` in\n{err}");
    }
    std::fs::write(
        dir.join("jobs.json"),
        "[\n {\"id\": \"ok\", \"gpus_per_member\": 1},\n {\"id\": \"bad\", \"vram_mib\": -1}\n]",
    )
    .unwrap();
    let out = gantry(
        &["place", "--fleet", "fleet.json", "--jobs", "jobs.json"],
        &dir,
    );
    assert!(
        text(&out.stderr).contains("jobs.json:3: field `[1].vram_mib`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn place_uses_the_policy_packing_and_models() {
    let dir = tempdir("place-policy");
    std::fs::create_dir_all(dir.join("policy")).unwrap();
    std::fs::write(
        dir.join("policy/p.gantry"),
        "use std.gpus\nplacement { packing = spread }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("fleet.json"),
        r#"{"nodes": [{"name": "a", "count": 2, "cpu_milli": 8000, "memory_mib": 1024, "gpus": {"count": 2, "model": "L4"}}]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("jobs.jsonl"),
        "{\"id\": \"x\", \"gpus_per_member\": 1}\n{\"id\": \"y\", \"gpus_per_member\": 1}\n",
    )
    .unwrap();
    let out = gantry(
        &[
            "place",
            "--fleet",
            "fleet.json",
            "--jobs",
            "jobs.jsonl",
            "--policy",
            "policy",
        ],
        &dir,
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Spread puts the two jobs on different nodes.
    assert!(
        stdout.contains("a-0[") && stdout.contains("a-1["),
        "{stdout}"
    );
    assert!(stdout.contains("Spread"), "{stdout}");
}

/// The README shows `$ gantry ARGS` followed by its output; the command must print exactly
/// that.
fn assert_readme_example(args: &[&str]) {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let marker = format!("$ gantry {}\n", args.join(" "));
    let start = readme
        .find(&marker)
        .unwrap_or_else(|| panic!("README shows `{marker}`"))
        + marker.len();
    let len = readme[start..].find("```").unwrap();
    let out = gantry(args, &repo());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), &readme[start..start + len]);
}

#[test]
fn the_readme_placement_example_is_what_gantry_prints() {
    assert_readme_example(&[
        "place",
        "--fleet",
        "examples/placement/fleet.toml",
        "--jobs",
        "examples/placement/jobs.jsonl",
    ]);
}

#[test]
fn the_readme_plan_example_is_what_gantry_prints() {
    assert_readme_example(&[
        "plan",
        "--policy",
        "examples/plan/policy.gantry",
        "--fleet",
        "examples/plan/fleet.toml",
        "--jobs",
        "examples/plan/jobs.jsonl",
    ]);
}

#[test]
fn the_readme_simulate_and_diff_examples_are_what_gantry_prints() {
    let example = [
        "--fleet",
        "examples/autoscale/fleet.toml",
        "--trace",
        "examples/autoscale/trace.jsonl",
        "--history",
        "examples/autoscale/history.jsonl",
    ];
    let mut simulate = vec!["simulate", "--policy", "examples/autoscale/policy.gantry"];
    simulate.extend(example);
    assert_readme_example(&simulate);
    let mut diff = vec![
        "diff",
        "--old",
        "examples/autoscale/on-demand/policy.gantry",
        "--new",
        "examples/autoscale/policy.gantry",
    ];
    diff.extend(example);
    diff.extend(["--max-jobs", "5"]);
    assert_readme_example(&diff);
}

/// A policy and a two-node fleet for the plan error tests.
fn plan_fixture(dir: &Path) {
    std::fs::write(
        dir.join("p.gantry"),
        "use std.nodes.{dgx_h100}\nuse std.tiers\npool gpu { capacity = reserved; node = dgx_h100; nodes = 2 }\nteam a { guaranteed = 8 gpu }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("fleet.toml"),
        "[[nodes]]\nname = \"n\"\ncount = 2\npool = \"gpu\"\ncpu_milli = 224000\nmemory_mib = 2097152\ngpus = { count = 8, model = \"H100-SXM5-80GB\" }\n",
    )
    .unwrap();
}

fn plan_with(dir: &Path, jobs: &str) -> Output {
    std::fs::write(dir.join("jobs.jsonl"), jobs).unwrap();
    gantry(
        &[
            "plan",
            "--policy",
            "p.gantry",
            "--fleet",
            "fleet.toml",
            "--jobs",
            "jobs.jsonl",
            "--format",
            "json",
        ],
        dir,
    )
}

#[test]
fn plan_rejects_jobs_that_corrupt_the_snapshot_naming_job_line_and_field() {
    let dir = tempdir("plan-bad");
    plan_fixture(&dir);
    let cases = [
        (
            "{\"id\": \"x\", \"gpus_per_member\": 1}\n{\"id\": \"x\", \"gpus_per_member\": 2}\n",
            "line 2: job `x`: field `id`: duplicate id; it is also used on line 1",
        ),
        (
            "{\"id\": \"r\", \"gpus_per_member\": 1, \"placement\": [{\"node\": \"n-9\", \"gpus\": [0]}], \"started_at\": 0}\n",
            "field `placement[0]`: node `n-9` is not in the fleet",
        ),
        (
            "{\"id\": \"r\", \"gpus_per_member\": 1, \"placement\": [{\"node\": \"n-0\", \"gpus\": [8]}], \"started_at\": 0}\n",
            "GPU 8 does not exist on n-0 (8 GPUs)",
        ),
        (
            "{\"id\": \"r1\", \"gpus_per_member\": 1, \"placement\": [{\"node\": \"n-0\", \"gpus\": [3]}], \"started_at\": 0}\n{\"id\": \"r2\", \"gpus_per_member\": 1, \"placement\": [{\"node\": \"n-0\", \"gpus\": [3]}], \"started_at\": 0}\n",
            "job `r2`: field `placement[0]`: GPU 3 on n-0 is already taken",
        ),
        (
            "{\"id\": \"r\", \"gpus_per_member\": 1, \"placement\": [{\"node\": \"n-0\", \"gpus\": [0]}]}\n",
            "field `started_at`: a job with a placement is running and needs `started_at`",
        ),
        (
            "{\"id\": \"t\", \"submitted_at\": \"last tuesday\"}\n",
            "field `submitted_at`: `last tuesday` is not a time",
        ),
    ];
    for (jobs, expected) in cases {
        let out = plan_with(&dir, jobs);
        assert_eq!(out.status.code(), Some(2), "{jobs}");
        let err = text(&out.stderr);
        assert!(err.contains(expected), "{jobs}\n{err}");
        assert!(err.contains("jobs.jsonl"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn plan_gives_unknown_teams_tiers_and_models_a_reason_not_an_error() {
    let dir = tempdir("plan-reasons");
    plan_fixture(&dir);
    let out = plan_with(
        &dir,
        "{\"id\": \"t\", \"team\": \"ghost\", \"gpus_per_member\": 1}\n{\"id\": \"u\", \"team\": \"a\", \"tier\": \"platinum\", \"gpus_per_member\": 1}\n{\"id\": \"m\", \"team\": \"a\", \"tier\": \"standard\", \"gpus_per_member\": 1, \"models\": [\"B200\"]}\n{\"id\": \"ok\", \"team\": \"a\", \"tier\": \"standard\", \"gpus_per_member\": 1}\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let find = |id: &str| {
        plan["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["job"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(find("t")["reason"]["code"], "invalid_job");
    assert!(find("t")["reason"]["message"]
        .as_str()
        .unwrap()
        .contains("team `ghost` is not defined"));
    assert_eq!(find("u")["reason"]["code"], "invalid_job");
    assert_eq!(find("m")["reason"]["code"], "no_such_model");
    assert_eq!(find("m")["reason"]["message"], "no node has model B200");
    assert_eq!(find("ok")["action"], "place");
}

#[test]
fn plan_with_a_broken_policy_or_bad_now_fails_cleanly() {
    let dir = tempdir("plan-policy");
    plan_fixture(&dir);
    std::fs::write(dir.join("jobs.jsonl"), "{\"id\": \"a\"}\n").unwrap();
    let out = gantry(
        &[
            "plan",
            "--policy",
            "p.gantry",
            "--fleet",
            "fleet.toml",
            "--jobs",
            "jobs.jsonl",
            "--now",
            "soon",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--now `soon` is not a time"));
    std::fs::write(dir.join("p.gantry"), "team a { guaranteed = 8 GiB }\n").unwrap();
    let out = plan_with(&dir, "{\"id\": \"a\"}\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("has errors"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_readme_autoscale_example_is_what_gantry_prints() {
    assert_readme_example(&[
        "plan",
        "--policy",
        "examples/autoscale/policy.gantry",
        "--fleet",
        "examples/autoscale/fleet.toml",
        "--jobs",
        "examples/autoscale/jobs.jsonl",
        "--history",
        "examples/autoscale/history.jsonl",
        "--state",
        "examples/autoscale/state.json",
        "--now",
        "2026-11-17T09:10:00+01:00",
    ]);
}

#[test]
fn plan_rejects_a_bad_state_history_or_event_file_naming_file_and_line() {
    let dir = tempdir("plan-scale-bad");
    plan_fixture(&dir);
    std::fs::write(dir.join("jobs.jsonl"), "{\"id\": \"a\"}\n").unwrap();
    std::fs::write(
        dir.join("state.json"),
        "{\"pools\": {\"gpu\": {\"booting\": [{\"nodes\": -1, \"ready_at\": 0}]}}}",
    )
    .unwrap();
    std::fs::write(
        dir.join("history.jsonl"),
        "{\"at\": 1}\n{\"at\": \"noon\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("events.jsonl"),
        "{\"at\": 1, \"event\": \"spot_interrupt\", \"node\": \"zz\"}\n",
    )
    .unwrap();
    let base = [
        "plan",
        "--policy",
        "p.gantry",
        "--fleet",
        "fleet.toml",
        "--jobs",
        "jobs.jsonl",
    ];
    for (flag, file, expected) in [
        (
            "--state",
            "state.json",
            "field `pools.gpu.booting[0].nodes`",
        ),
        ("--history", "history.jsonl", "history.jsonl:2:"),
        ("--events", "events.jsonl", "node `zz` is not in the fleet"),
    ] {
        let mut args = base.to_vec();
        args.extend([flag, file]);
        let out = gantry(&args, &dir);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = text(&out.stderr);
        assert!(err.contains(expected), "{flag}: {err}");
    }
}

#[test]
fn diff_reads_the_old_policy_from_git() {
    let dir = tempdir("git-diff");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args([
                "-c",
                "user.name=gantry",
                "-c",
                "user.email=gantry@example.com",
            ])
            .args(args)
            .current_dir(&dir)
            .output()
    };
    if git(&["init", "-q"]).map_or(true, |o| !o.status.success()) {
        eprintln!("git is not available; skipping");
        return;
    }
    let case = repo().join("tests/simulate/sequential");
    std::fs::create_dir_all(dir.join("pol")).unwrap();
    for (from, to) in [
        ("policy.gantry", "pol/main.gantry"),
        ("fleet.toml", "fleet.toml"),
        ("trace.jsonl", "trace.jsonl"),
    ] {
        std::fs::copy(case.join(from), dir.join(to)).unwrap();
    }
    assert!(git(&["add", "."]).unwrap().status.success());
    assert!(git(&["commit", "-q", "-m", "one node"])
        .unwrap()
        .status
        .success());
    let diff_old = |old: &str| {
        gantry(
            &[
                "diff",
                "--old",
                old,
                "--new",
                "pol",
                "--fleet",
                "fleet.toml",
                "--trace",
                "trace.jsonl",
            ],
            &dir,
        )
    };
    // The working tree's policy denies big jobs; the committed one does not.
    let policy = std::fs::read_to_string(dir.join("pol/main.gantry")).unwrap();
    std::fs::write(
        dir.join("pol/main.gantry"),
        policy + "\nrule small_only: deny if job.gpus > 4 gpu \"small jobs only\"\n",
    )
    .unwrap();
    let out = diff_old("HEAD:pol");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("old: HEAD:pol (fnv1a:"), "{stdout}");
    assert!(stdout.contains("\nnew: pol (fnv1a:"), "{stdout}");
    assert!(stdout.contains("2 jobs decided differently"), "{stdout}");
    assert!(
        stdout.contains("a: completed, started after 0s on p → denied by small_only"),
        "{stdout}"
    );
    let out = diff_old("HEAD:nowhere");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no `.gantry` files at `nowhere` in HEAD"),
        "{}",
        text(&out.stderr)
    );
    let out = diff_old("nosuchrev:pol");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("`nosuchrev:pol`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_diagnostic_on_a_very_long_line_is_reported_not_a_panic() {
    let dir = tempdir("long-line");
    // A checker error (check) and a syntax error (fmt), 70,000 columns into the line.
    let unknown = dir.join("long.gantry");
    let pad = " ".repeat(70_000);
    std::fs::write(&unknown, format!("{pad}team a {{ tiers = [nope] }}\n")).unwrap();
    let broken = dir.join("broken.gantry");
    std::fs::write(&broken, format!("{pad}team a {{ tiers = = }}\n")).unwrap();
    for (args, at) in [
        (vec!["check", unknown.to_str().unwrap()], "long.gantry:1:70"),
        (
            vec!["fmt", "--check", broken.to_str().unwrap()],
            "broken.gantry:1:70",
        ),
    ] {
        let out = gantry(&args, &dir);
        let err = text(&out.stderr) + &text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(at), "{args:?}: {err}");
        assert!(err.contains("no excerpt is drawn"), "{args:?}: {err}");
    }
}

#[test]
fn serve_says_why_it_cannot_reach_a_cluster() {
    let dir = tempdir("serve-kubeconfig");
    let policy = repo().join("policies/onprem-dgx");
    let policy = policy.to_str().unwrap();
    let missing = dir.join("no-such-kubeconfig");
    let out = gantry(
        &[
            "serve",
            "--policy",
            policy,
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            missing.to_str().unwrap(),
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("kubeconfig") && err.contains("no-such-kubeconfig"),
        "{err}"
    );
    // A fleet file and a cluster view are two inventories: refused, not guessed.
    let out = gantry(
        &[
            "serve",
            "--policy",
            policy,
            "--listen",
            "127.0.0.1:0",
            "--inventory",
            "fleet.toml",
            "--in-cluster",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("exclude each other"),
        "{}",
        text(&out.stderr)
    );
    // The queue needs a cluster to act on.
    let out = gantry(
        &[
            "serve",
            "--policy",
            policy,
            "--listen",
            "127.0.0.1:0",
            "--queue",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--queue needs a cluster view"),
        "{}",
        text(&out.stderr)
    );
    // A kubeconfig naming a server nobody answers on: it gives up after --sync-timeout.
    let config = dir.join("kubeconfig");
    std::fs::write(
        &config,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n",
    )
    .unwrap();
    let out = gantry(
        &[
            "serve",
            "--policy",
            policy,
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            config.to_str().unwrap(),
            "--sync-timeout",
            "2",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("still waiting for the first complete list") && err.contains("127.0.0.1:1"),
        "{err}"
    );
}

#[test]
fn queue_says_why_it_cannot_show_the_queue() {
    let dir = tempdir("queue-errors");
    for (args, want) in [
        (
            vec!["queue", "--server", "http://127.0.0.1:1"],
            "cannot reach 127.0.0.1:1",
        ),
        (
            vec!["queue", "--server", "ftp://example"],
            "give http://HOST:PORT or https://HOST:PORT",
        ),
        (
            vec!["queue", "--server", "https://127.0.0.1:1"],
            "https needs --cacert",
        ),
    ] {
        let out = gantry(&args, &dir);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // A gantry that does not run the queue says so (404 from `serve` without --queue).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answer = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        let body =
            r#"{"error":"this gantry does not run the queue (serve --queue with a cluster view)"}"#;
        let _ = write!(
            s,
            "HTTP/1.1 404 Not Found\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
    });
    let out = gantry(
        &["queue", "--server", &format!("http://127.0.0.1:{port}")],
        &dir,
    );
    answer.join().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("404: this gantry does not run the queue"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn version_names_the_crate_version_and_the_commit() {
    let out = gantry(&["--version"], &repo());
    assert_eq!(out.status.code(), Some(0));
    let line = text(&out.stdout);
    let commit = line
        .trim()
        .strip_prefix(concat!("gantry ", env!("CARGO_PKG_VERSION"), " (commit "))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{line}"
    );
}

#[test]
fn check_of_one_file_checks_the_policy_it_belongs_to() {
    // As a pre-commit hook passing changed files does: the file uses names its siblings
    // define, so it is checked with them and reported for itself.
    let dir = tempdir("check-one-file");
    for entry in std::fs::read_dir(repo().join("policies/onprem-dgx")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "gantry") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    let out = gantry(&["check", "teams.gantry"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("0 errors"),
        "{}",
        text(&out.stderr)
    );
    // A mistake in the named file is reported; one in a sibling only counted.
    let teams = std::fs::read_to_string(dir.join("teams.gantry")).unwrap();
    std::fs::write(
        dir.join("teams.gantry"),
        teams + "\nteam extra { guarnteed = 8 gpu }\n",
    )
    .unwrap();
    let fleet = std::fs::read_to_string(dir.join("fleet.gantry")).unwrap();
    std::fs::write(
        dir.join("fleet.gantry"),
        fleet + "\npool broken { capacity = nope }\n",
    )
    .unwrap();
    let out = gantry(&["check", "teams.gantry"], &dir);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no field `guarnteed`"), "{err}");
    assert!(!err.contains("broken"), "{err}");
    assert!(err.contains("in other files of this policy"), "{err}");
    assert!(err.contains("1 error"), "{err}");
}

/// Issue 23: the human output ends with one `gantry explain` line (not one per
/// diagnostic), and `--format json` carries the did-you-mean as an edit a tool can apply.
#[test]
fn check_ends_with_one_explain_line_and_json_carries_fixes() {
    let dir = tempdir("explain-fix");
    let policy = "use std.nodes.{dgx_h100}\nuse std.tiers.{standard}\n\
        pool training { capacity = reserved; node = dgx_h100; nodes = 4 }\n\
        team vision { guarnteed = 8 gpu in training; tiers = [standard] }\n\
        team nlp { guarnted = 8 gpu in training; tiers = [standard] }\n";
    std::fs::write(dir.join("p.gantry"), policy).unwrap();
    let out = gantry(&["check", "p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.matches("gantry explain").count(), 1, "{err}");
    assert!(
        err.contains("for more on E0205, run `gantry explain E0205`"),
        "{err}"
    );
    let out = gantry(&["check", "--format", "json", "p.gantry"], &dir);
    let fixes: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["fix"].clone())
        .collect();
    assert_eq!(fixes.len(), 2);
    for fix in &fixes {
        assert_eq!(fix["replacement"], "guaranteed", "{fix}");
        assert_eq!(fix["file"], "p.gantry");
    }
    // Applying both edits (columns are 1-based characters, end exclusive) gives a policy
    // that checks.
    let mut lines: Vec<String> = policy.lines().map(String::from).collect();
    for fix in &fixes {
        let line = &mut lines[fix["start"]["line"].as_u64().unwrap() as usize - 1];
        let (start, end) = (
            fix["start"]["column"].as_u64().unwrap() as usize - 1,
            fix["end"]["column"].as_u64().unwrap() as usize - 1,
        );
        line.replace_range(start..end, fix["replacement"].as_str().unwrap());
    }
    std::fs::write(dir.join("p.gantry"), lines.join("\n") + "\n").unwrap();
    let out = gantry(&["check", "p.gantry"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("gantry explain"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 23: `plan --format table` fits the terminal: reasons wrap to $COLUMNS (under
/// their row when the reason column would be too narrow), long names are cut with `…`.
#[test]
fn plan_table_fits_the_terminal_width() {
    let dir = tempdir("plan-width");
    let jobs = std::fs::read_to_string(repo().join("examples/plan/jobs.jsonl")).unwrap();
    let long = "a-job-name-far-longer-than-any-table-column-should-be";
    std::fs::write(
        dir.join("jobs.jsonl"),
        jobs.replacen("\"vision-big\"", &format!("\"{long}\""), 1),
    )
    .unwrap();
    for columns in ["80", "120", "200"] {
        let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args([
                "plan",
                "--policy",
                "examples/plan/policy.gantry",
                "--fleet",
                "examples/plan/fleet.toml",
            ])
            .arg("--jobs")
            .arg(dir.join("jobs.jsonl"))
            .current_dir(repo())
            .env("COLUMNS", columns)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let width: usize = columns.parse().unwrap();
        let table: Vec<&str> = stdout
            .lines()
            .take_while(|l| !l.starts_with("preempt "))
            .collect();
        for line in &table {
            assert!(
                line.chars().count() <= width,
                "{columns} columns: {line:?}\n{stdout}"
            );
        }
        assert!(stdout.contains("a-job-name-far-longer-than-…"), "{stdout}");
        assert_eq!(table[0].ends_with("reason"), columns != "80", "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
