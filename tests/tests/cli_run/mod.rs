//! `gantry` run in-process on its arguments, as the test files that drive the CLI share
//! it: (exit code, standard output, standard error).

pub fn gantry(args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = {
        let mut io = cli::Io::captured(&mut out, &mut err);
        let mut all = vec!["gantry"];
        all.extend_from_slice(args);
        cli::run(all, &mut io)
    };
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// `gantry simulate --json -` of `trace` under the policy and fleet in `dir`
/// (`policy.gantry`, `fleet.toml`): the metrics, or a failed test saying why not.
pub fn simulate_json(dir: &std::path::Path, trace: &str) -> serde_json::Value {
    simulate_json_with(dir, trace, &[])
}

/// [`simulate_json`] with `extra` arguments (`--estimates predicted`).
pub fn simulate_json_with(dir: &std::path::Path, trace: &str, extra: &[&str]) -> serde_json::Value {
    let p = |f: &str| dir.join(f).display().to_string();
    let (policy, fleet) = (p("policy.gantry"), p("fleet.toml"));
    let mut args = vec![
        "simulate", "--policy", &policy, "--fleet", &fleet, "--trace", trace, "--json", "-",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = gantry(&args);
    assert_eq!(code, 0, "{}: {err}", dir.display());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}
