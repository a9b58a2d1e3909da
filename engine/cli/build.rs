//! Records the git commit the binary is built from, for `gantry --version`: the
//! `GANTRY_GIT_COMMIT` environment variable when set (a container build without `.git`),
//! else `git rev-parse`, else `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=GANTRY_GIT_COMMIT");
    // Rebuild when HEAD moves: HEAD itself, the branch it names, and packed refs. Only
    // paths that exist: cargo reruns a build script on every build for a missing one.
    let git = Path::new("../../.git");
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            watch.push(branch.to_string());
        }
    }
    for path in watch.iter().filter(|p| git.join(p).exists()) {
        println!("cargo:rerun-if-changed=../../.git/{path}");
    }
    // Outside a git checkout (a container build) only the variable and this file matter.
    println!("cargo:rerun-if-changed=build.rs");
    let commit = std::env::var("GANTRY_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=GANTRY_GIT_COMMIT={commit}");
}
