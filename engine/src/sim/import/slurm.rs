//! `sacct --parsable2` exports: a header line naming the fields, then one job (or job
//! step) per line, `|`-separated. Needed fields: `JobID`, `Submit`, `Start`, `End`,
//! `NNodes`, and `AllocTRES` or `ReqTRES` (GPUs as `gres/gpu=N`); `Account`, `User`, `QOS`
//! and `Partition` name the team, tier and pool. Job steps (`123.batch`, `123.0`), jobs
//! that never started or had not ended, and jobs without GPUs are left out, and counted.
//! Times are read as UTC (Slurm prints the controller's local time without a zone; a
//! replay only uses differences).

use super::{at, Imported, Mapping, TraceJob};
use std::collections::BTreeMap;

/// The command that writes what this reads.
pub const SACCT: &str = "sacct --allusers --parsable2 --starttime 2026-01-01 --format JobID,User,Account,Partition,QOS,Submit,Start,End,State,NNodes,AllocTRES,ReqTRES";

pub fn import(file: &str, text: &str, map: &Mapping) -> Result<Imported, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(format!("{file}: empty; export with `{SACCT}`"));
    };
    let names: Vec<&str> = header.split('|').map(str::trim).collect();
    let column: BTreeMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let need = ["JobID", "Submit", "Start", "End", "NNodes"];
    let missing: Vec<&str> = need
        .iter()
        .copied()
        .filter(|n| !column.contains_key(n))
        .collect();
    if !missing.is_empty() || !(column.contains_key("AllocTRES") || column.contains_key("ReqTRES"))
    {
        return Err(at(
            file,
            1,
            format!(
                "the header lacks {}; this needs `--parsable2` output with at least JobID, Submit, Start, End, NNodes and AllocTRES or ReqTRES, e.g. `{SACCT}`",
                if missing.is_empty() { "AllocTRES and ReqTRES".to_string() } else { missing.join(", ") }
            ),
        ));
    }
    let mut out = Imported::default();
    for (i, line) in lines {
        let n = i + 1;
        let fields: Vec<&str> = line.split('|').collect();
        if fields.len() != names.len() {
            return Err(at(
                file,
                n,
                format!("{} fields, the header names {}", fields.len(), names.len()),
            ));
        }
        let get = |name: &str| {
            column
                .get(name)
                .and_then(|c| fields.get(*c))
                .map_or("", |v| v.trim())
        };
        let id = get("JobID");
        if id.contains('.') {
            out.skip("job steps");
            continue;
        }
        let (Some(start), Some(end)) = (time(get("Start")), time(get("End"))) else {
            out.skip(if time(get("Start")).is_none() {
                "never started"
            } else {
                "not ended when exported"
            });
            continue;
        };
        let submitted = time(get("Submit")).ok_or_else(|| {
            at(
                file,
                n,
                format!(
                    "Submit `{}` is not a time such as 2026-11-24T14:11:40",
                    get("Submit")
                ),
            )
        })?;
        let tres = match get("AllocTRES") {
            "" => get("ReqTRES"),
            t => t,
        };
        let gpus = gpus(tres);
        if gpus == 0 {
            out.skip("no GPUs");
            continue;
        }
        let nodes: u32 = get("NNodes").parse().map_err(|_| {
            at(
                file,
                n,
                format!("NNodes `{}` is not a count", get("NNodes")),
            )
        })?;
        let members = nodes.max(1);
        let account = get("Account");
        let user = get("User");
        let partition = get("Partition");
        out.admit(TraceJob {
            id: id.to_string(),
            team: map.team(&[account, user]),
            tier: map.tier(&[get("QOS"), partition]),
            user: (!user.is_empty()).then(|| user.to_string()),
            pools: map.pools.get(partition).cloned().into_iter().collect(),
            submitted_at: submitted,
            members,
            gpus_per_member: u32::try_from(gpus.div_ceil(u64::from(members))).unwrap_or(u32::MAX),
            runtime_s: u64::try_from(end - start).unwrap_or(0).max(1),
        });
    }
    Ok(out)
}

/// GPUs in a TRES list: `gres/gpu=N`, else the typed counts (`gres/gpu:h100=N`) added up.
fn gpus(tres: &str) -> u64 {
    let mut plain = None;
    let mut typed = 0u64;
    for item in tres.split(',') {
        let Some((key, value)) = item.split_once('=') else {
            continue;
        };
        let Ok(count) = value.trim().parse::<u64>() else {
            continue;
        };
        match key.trim() {
            "gres/gpu" => plain = Some(count),
            k if k.starts_with("gres/gpu:") => typed = typed.saturating_add(count),
            _ => {}
        }
    }
    plain.unwrap_or(typed)
}

/// Seconds since the epoch of `2026-11-24T14:11:40`; `None` for `Unknown`, `None` or empty.
fn time(s: &str) -> Option<i64> {
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
        .ok()
        .map(|t| t.and_utc().timestamp())
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: a failed lookup should fail the test"
)]
mod tests {
    use super::*;

    const EXPORT: &str = "JobID|User|Account|Partition|QOS|Submit|Start|End|State|NNodes|AllocTRES|ReqTRES
7|alice|physics|gpu|normal|2026-11-24T10:00:00|2026-11-24T10:00:05|2026-11-24T11:00:05|COMPLETED|1|billing=4,cpu=4,gres/gpu=4,mem=16G,node=1|billing=4,cpu=4,gres/gpu=4,mem=16G,node=1
7.batch|||||2026-11-24T10:00:05|2026-11-24T10:00:05|2026-11-24T11:00:05|COMPLETED|1|cpu=4,gres/gpu=4,mem=16G,node=1|
8|bob|bio|gpu|high|2026-11-24T10:01:00|2026-11-24T10:30:00|2026-11-24T12:30:00|TIMEOUT|2|cpu=2,gres/gpu:h100=16,mem=8G,node=2|cpu=2,gres/gpu:h100=16,node=2
9|carol|bio|gpu|normal|2026-11-24T10:02:00|Unknown|Unknown|PENDING|1||cpu=1,gres/gpu=1,node=1
10|dan|web|cpu|normal|2026-11-24T10:03:00|2026-11-24T10:03:00|2026-11-24T10:04:00|COMPLETED|1|cpu=1,mem=1G,node=1|cpu=1,node=1
11|erin|bio|gpu|normal|2026-11-24T10:04:00|2026-11-24T10:05:00|Unknown|RUNNING|1|gres/gpu=2,node=1|gres/gpu=2
";

    #[test]
    fn an_export_becomes_jobs_with_mapped_teams_and_tiers() {
        let map = Mapping::parse(
            "map.toml",
            "[teams]\nphysics = \"research\"\n[tiers]\nhigh = \"critical\"\n[pools]\ngpu = \"train\"\n[defaults]\ntier = \"standard\"\n",
        )
        .unwrap();
        let mut got = import("sacct.txt", EXPORT, &map).unwrap();
        assert_eq!(got.jobs.len(), 2);
        let (a, b) = (&got.jobs[0], &got.jobs[1]);
        assert_eq!(
            (a.id.as_str(), a.team.as_deref(), a.tier.as_deref()),
            ("7", Some("research"), Some("standard"))
        );
        assert_eq!((a.members, a.gpus_per_member, a.runtime_s), (1, 4, 3600));
        assert_eq!(a.pools, ["train"]);
        // Two nodes with 16 typed GPUs: 2 members of 8; an unmapped account keeps its name.
        assert_eq!(
            (b.team.as_deref(), b.tier.as_deref()),
            (Some("bio"), Some("critical"))
        );
        assert_eq!((b.members, b.gpus_per_member, b.runtime_s), (2, 8, 7200));
        assert_eq!(b.submitted_at - a.submitted_at, 60);
        let skipped: Vec<(&str, usize)> =
            got.skipped.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            skipped,
            [
                ("job steps", 1),
                ("never started", 1),
                ("no GPUs", 1),
                ("not ended when exported", 1)
            ]
        );
        let first = got.to_jsonl();
        assert!(
            first.starts_with("{\"gpus_per_member\":4,\"id\":\"7\""),
            "{first}"
        );
    }

    /// Counts that `simulate` would refuse, or that would wrap, are skipped at import and
    /// counted with why.
    #[test]
    fn jobs_past_simulates_limits_are_skipped_with_the_reason() {
        let header = EXPORT.lines().next().unwrap_or_default();
        let export = format!(
            "{header}
20|a|x|gpu|normal|2026-11-24T10:00:00|2026-11-24T10:00:05|2026-11-24T11:00:05|COMPLETED|1|gres/gpu=128,node=1|
21|a|x|gpu|normal|2026-11-24T10:00:00|2026-11-24T10:00:05|2026-11-24T11:00:05|COMPLETED|200000|gres/gpu=200000,node=200000|
22|a|x|gpu|normal|2026-11-24T10:00:00|2026-11-24T10:00:05|2026-11-24T11:00:05|COMPLETED|1|gres/gpu:a=18446744073709551615,gres/gpu:b=2,node=1|
23|a|x|gpu|normal|2026-11-24T10:00:00|2026-11-24T10:00:05|2026-11-24T11:00:05|COMPLETED|2|gres/gpu=16,node=2|
"
        );
        let got = import("sacct.txt", &export, &Mapping::default()).unwrap();
        assert_eq!(got.jobs.len(), 1, "{:?}", got.jobs);
        assert_eq!(got.jobs[0].gpus_per_member, 8);
        assert_eq!(
            got.skipped
                .get("more than 64 GPUs per member (simulate's limit)"),
            Some(&2)
        );
        assert_eq!(
            got.skipped
                .get("more than 100000 members (simulate's limit)"),
            Some(&1)
        );
    }

    #[test]
    fn a_wrong_file_says_what_the_export_needs() {
        let e = import("x.txt", "JobID|State\n1|COMPLETED\n", &Mapping::default()).unwrap_err();
        assert!(
            e.contains("x.txt:1")
                && e.contains("Submit, Start, End, NNodes")
                && e.contains("sacct"),
            "{e}"
        );
        let e = import(
            "x.txt",
            "JobID|Submit|Start|End|NNodes|AllocTRES\n1|2026|x\n",
            &Mapping::default(),
        )
        .unwrap_err();
        assert!(e.contains("x.txt:2") && e.contains("3 fields"), "{e}");
        let e = import("x.txt", "", &Mapping::default()).unwrap_err();
        assert!(e.contains("empty"), "{e}");
    }
}
