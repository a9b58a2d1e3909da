//! `sacct --parsable2` exports: a header line naming the fields, then one job (or job
//! step) per line, `|`-separated. Needed fields: `JobID`, `Submit`, `Start`, `End`,
//! `NNodes`, and `AllocTRES` or `ReqTRES` (GPUs as `gres/gpu=N`); `Account`, `User`, `QOS`
//! and `Partition` name the team, tier and pool. Job steps (`123.batch`, `123.0`), jobs
//! that never started or had not ended, jobs without GPUs and jobs whose GPUs do not
//! divide over their nodes are left out, and counted; a malformed line is skipped, named
//! and counted, and only a file with many is refused. A job requeued and listed once per
//! run (`--duplicates`) is one job, submitted when it first was: its earlier runs (ended
//! by NODE_FAIL, PREEMPTED, REQUEUED) are replayed as stopped after as long as they ran
//! (`interrupted_after_s`), its last run as what ended it; a TIMEOUT is stopped at its
//! limit. Times are read as UTC unless they carry an offset (Slurm prints the controller's
//! local time without a zone; a replay only uses differences). A job's `Timelimit` is
//! what the replay's decisions plan with (`runtime_s`), `End − Start` what it really ran
//! (`actual_runtime_s`), as Slurm planned from limits and learned ends as they came.

use super::{at, Imported, Mapping, TraceJob};
use std::collections::BTreeMap;

/// The command that writes what this reads.
pub const SACCT: &str = "sacct --allusers --parsable2 --starttime 2026-01-01 --format JobID,User,Account,Partition,QOS,Submit,Start,End,State,Timelimit,NNodes,AllocTRES,ReqTRES";

/// Malformed lines are skipped, named and counted; past this many, and past
/// [`MALFORMED_SHARE`] of the data lines, the file is refused as the wrong file.
const MALFORMED_MAX: usize = 10;
const MALFORMED_SHARE: f64 = 0.05;
/// Malformed lines named in the notes; the rest are counted.
const MALFORMED_NAMED: usize = 10;

/// One started and ended run of a job, as a line of an export gives it.
struct Run {
    start: i64,
    state: String,
    job: TraceJob,
}

/// One export (see [`import_files`]).
pub fn import(file: &str, text: &str, map: &Mapping) -> Result<Imported, String> {
    import_files(&[(file.to_string(), text.to_string())], map)
}

/// Exports (`(file, text)`), read together: a job listed in several (overlapping date
/// ranges, or its runs split between them) is one job.
pub fn import_files(files: &[(String, String)], map: &Mapping) -> Result<Imported, String> {
    let mut out = Imported::default();
    let mut runs: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    for (file, text) in files {
        read_file(file, text, map, &mut out, &mut runs)?;
    }
    let mut stopped: BTreeMap<String, usize> = BTreeMap::new();
    let (mut requeued, mut timeouts) = (0usize, 0usize);
    for (_, mut job_runs) in runs {
        // `sacct --duplicates` lists a requeued job once per run: one job, submitted
        // when it first was, whose earlier runs were each stopped after as long as they
        // ran (a node failure, a preemption, a requeue) and whose last run ended it (the
        // same run listed twice is one).
        job_runs.sort_by_key(|r| r.start);
        job_runs.dedup_by(|a, b| a.start == b.start);
        let first_submit = job_runs.iter().map(|r| r.job.submitted_at).min();
        let Some(last) = job_runs.pop() else {
            continue;
        };
        let most = crate::inventory::jobs_file::MAX_INTERRUPTIONS;
        let interrupted: Vec<u64> = job_runs
            .iter()
            .take(most)
            .map(|r| r.job.runtime_s)
            .collect();
        out.skip_n(
            &format!("runs of a requeued job past its first {most} (simulate's limit)"),
            job_runs.len().saturating_sub(most),
        );
        if !interrupted.is_empty() {
            requeued += 1;
        }
        if !matches!(last.state.as_str(), "COMPLETED" | "") {
            *stopped.entry(last.state.clone()).or_insert(0) += 1;
        }
        let mut job = last.job;
        job.submitted_at = first_submit.unwrap_or(job.submitted_at);
        job.interrupted_s = interrupted;
        // A TIMEOUT would have run on past its limit: the replay stops it there.
        if last.state == "TIMEOUT" {
            if let Some(limit) = job.limit_s {
                job.runtime_s = job.runtime_s.max(limit.saturating_add(1));
                timeouts += 1;
            }
        }
        out.admit(job);
    }
    if requeued > 0 {
        out.notes.push(format!(
            "{requeued} jobs ran more than once (requeued): each earlier run is replayed as stopped after as long as it ran, its work lost but for checkpoints, then queued again"
        ));
    }
    if !stopped.is_empty() {
        let states: Vec<String> = stopped.iter().map(|(s, n)| format!("{n} {s}")).collect();
        out.notes.push(format!(
            "jobs that did not complete are replayed as running until they stopped ({}){}",
            states.join(", "),
            if timeouts > 0 {
                "; a TIMEOUT is stopped at its limit"
            } else {
                ""
            }
        ));
    }
    Ok(out)
}

/// Reads one export's lines into `runs` by job id; lines left out and malformed ones
/// are counted (and the first malformed ones named) in `out`.
fn read_file(
    file: &str,
    text: &str,
    map: &Mapping,
    out: &mut Imported,
    runs: &mut BTreeMap<String, Vec<Run>>,
) -> Result<(), String> {
    // Windows tools save UTF-8 with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
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
    let (mut data, mut malformed) = (0usize, Vec::new());
    for (i, line) in lines {
        data += 1;
        match read_line(line, &names, &column, map) {
            Ok(Line::Run(run)) => runs.entry(run.job.id.clone()).or_default().push(*run),
            Ok(Line::Skip(why)) => out.skip(why),
            Err(e) => malformed.push(at(file, i + 1, e)),
        }
    }
    if malformed.len() > MALFORMED_MAX && malformed.len() as f64 > MALFORMED_SHARE * data as f64 {
        return Err(format!(
            "{} of {data} lines are malformed (more than {MALFORMED_MAX} and {}%): not a `sacct --parsable2` export this can read; the first: {}",
            malformed.len(),
            MALFORMED_SHARE * 100.0,
            malformed.first().map_or("", String::as_str)
        ));
    }
    for m in malformed.iter().take(MALFORMED_NAMED) {
        out.notes.push(format!("{m} (skipped)"));
    }
    out.skip_n("malformed lines", malformed.len());
    Ok(())
}

/// What one line of the export is.
enum Line {
    Run(Box<Run>),
    Skip(&'static str),
}

/// One data line: a run of a job, a line left out and why, or what is wrong with it.
fn read_line(
    line: &str,
    names: &[&str],
    column: &BTreeMap<&str, usize>,
    map: &Mapping,
) -> Result<Line, String> {
    let fields: Vec<&str> = line.split('|').collect();
    if fields.len() != names.len() {
        return Err(format!(
            "{} fields, the header names {}",
            fields.len(),
            names.len()
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
        return Ok(Line::Skip("job steps"));
    }
    let submitted = time(get("Submit")).ok_or_else(|| {
        format!(
            "Submit `{}` is not a time such as 2026-11-24T14:11:40",
            get("Submit")
        )
    })?;
    let (Some(start), Some(end)) = (time(get("Start")), time(get("End"))) else {
        return Ok(Line::Skip(if time(get("Start")).is_none() {
            "never started"
        } else {
            "not ended when exported"
        }));
    };
    if end < start {
        return Ok(Line::Skip("ended before it started"));
    }
    let tres = match get("AllocTRES") {
        "" => get("ReqTRES"),
        t => t,
    };
    let gpus = gpus(tres);
    if gpus == 0 {
        return Ok(Line::Skip("no GPUs"));
    }
    let nodes: u32 = get("NNodes")
        .parse()
        .map_err(|_| format!("NNodes `{}` is not a count", get("NNodes")))?;
    let members = nodes.max(1);
    if !gpus.is_multiple_of(u64::from(members)) {
        // A member per node: uneven counts would be rounded up to GPUs it never had.
        return Ok(Line::Skip(
            "GPUs that do not divide evenly over their nodes",
        ));
    }
    // `CANCELLED by 1000` names who cancelled it.
    let state = get("State")
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let account = get("Account");
    let user = get("User");
    let partition = get("Partition");
    Ok(Line::Run(Box::new(Run {
        start,
        state,
        job: TraceJob {
            id: id.to_string(),
            team: map.team(&[account, user]),
            tier: map.tier(&[get("QOS"), partition]),
            user: (!user.is_empty()).then(|| user.to_string()),
            pools: map.pools.get(partition).cloned().into_iter().collect(),
            submitted_at: submitted,
            members,
            gpus_per_member: u32::try_from(gpus / u64::from(members)).unwrap_or(u32::MAX),
            runtime_s: u64::try_from(end - start).unwrap_or(0).max(1),
            limit_s: limit(get("Timelimit")),
            interrupted_s: Vec::new(),
            // Slurm enforces a time limit (TIMEOUT).
            estimate_only: false,
            enforced_s: None,
        },
    })))
}

/// Seconds of a `Timelimit` as Slurm prints it (`[days-]hours:minutes:seconds`, or
/// shorter: `minutes`, `minutes:seconds`, `days-hours[:minutes]`); `None` for
/// `UNLIMITED`, `Partition_Limit` and anything else.
fn limit(s: &str) -> Option<u64> {
    let s = s.trim();
    let (days, rest) = match s.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, s),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let (h, m, sec) = match (s.contains('-'), parts.as_slice()) {
        (false, [m]) => (0, *m, 0),
        (false, [m, sec]) => (0, *m, *sec),
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        (_, [h, m, sec]) => (*h, *m, *sec),
        _ => return None,
    };
    let total = days
        .checked_mul(86_400)?
        .checked_add(h.checked_mul(3_600)?)?
        .checked_add(m.checked_mul(60)?)?
        .checked_add(sec)?;
    (total > 0).then_some(total)
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

/// Seconds since the epoch of a time as `sacct` prints it: `2026-11-24T14:11:40`, with
/// fractions of a second or a UTC offset (`Z`, `+01:00`, `+0100`) where the site's
/// `SLURM_TIME_FORMAT` adds them; read as UTC without one. `None` for `Unknown`, `None`
/// or empty.
fn time(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp());
    }
    if let Ok(t) = chrono::DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f%z") {
        return Some(t.timestamp());
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())
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
        // A file that is mostly not an export is refused, naming the first bad line.
        let bad = "1|2026|x\n".repeat(12);
        let e = import(
            "x.txt",
            &format!("JobID|Submit|Start|End|NNodes|AllocTRES\n{bad}"),
            &Mapping::default(),
        )
        .unwrap_err();
        assert!(
            e.contains("12 of 12 lines are malformed") && e.contains("x.txt:2: 3 fields"),
            "{e}"
        );
        let e = import("x.txt", "", &Mapping::default()).unwrap_err();
        assert!(e.contains("empty"), "{e}");
    }

    /// What real exports hold (issue 54): each becomes a job, a counted skip or a note.
    #[test]
    fn real_exports_import_whole_and_say_what_they_did() {
        let header = EXPORT.lines().next().unwrap_or_default();
        let row = |id: &str,
                   submit: &str,
                   start: &str,
                   end: &str,
                   state: &str,
                   nodes: u32,
                   gpus: u32| {
            format!("{id}|u|acct|gpu|normal|{submit}|{start}|{end}|{state}|{nodes}|gres/gpu={gpus},node={nodes}|\n")
        };
        let t = |s: &str| format!("2026-11-24T10:{s}");
        let mut export = format!("\u{feff}{header}\n");
        // Submitted in the same second: 10 after 2, 123_10 after 123_2.
        export += &row(
            "10",
            &t("00:00"),
            &t("00:00"),
            &t("10:00"),
            "COMPLETED",
            1,
            1,
        );
        export += &row(
            "2",
            &t("00:00"),
            &t("00:00"),
            &t("10:00"),
            "COMPLETED",
            1,
            1,
        );
        export += &row(
            "123_10",
            &t("00:00"),
            &t("00:00"),
            &t("10:00"),
            "COMPLETED",
            1,
            1,
        );
        export += &row(
            "123_2",
            &t("00:00"),
            &t("00:00"),
            &t("10:00"),
            "COMPLETED",
            1,
            1,
        );
        // Fractions of a second and UTC offsets, as SLURM_TIME_FORMAT may print them.
        export += &row(
            "30",
            "2026-11-24T10:00:00.250",
            "2026-11-24T11:00:00+01:00",
            "2026-11-24T10:30:00Z",
            "TIMEOUT",
            1,
            2,
        );
        // 10 GPUs on 3 nodes, an end before its start, a malformed line.
        export += &row(
            "31",
            &t("00:00"),
            &t("00:00"),
            &t("10:00"),
            "COMPLETED",
            3,
            10,
        );
        export += &row(
            "32",
            &t("00:00"),
            &t("10:00"),
            &t("05:00"),
            "COMPLETED",
            1,
            1,
        );
        export += "33|u|acct|gpu\n";
        // Requeued after a node failure (sacct --duplicates): one job, its first run
        // replayed as stopped after the minute it ran, its last run as what ended it.
        export += &row(
            "40",
            &t("00:00"),
            &t("01:00"),
            &t("02:00"),
            "NODE_FAIL",
            1,
            4,
        );
        export += &row(
            "40",
            &t("02:30"),
            &t("03:00"),
            &t("23:00"),
            "CANCELLED by 1000",
            1,
            4,
        );
        let mut got = import("sacct.txt", &export, &Mapping::default()).unwrap();
        let ids: Vec<String> = {
            got.to_jsonl();
            got.jobs.iter().map(|j| j.id.clone()).collect()
        };
        assert_eq!(ids, ["2", "10", "30", "40", "123_2", "123_10"]);
        let job = |id: &str| got.jobs.iter().find(|j| j.id == id).unwrap();
        // 11:00+01:00 is 10:00 UTC: a 30-minute run; submitted at 10:00:00 (fraction dropped).
        assert_eq!(job("30").runtime_s, 1800);
        assert_eq!(job("40").submitted_at, job("2").submitted_at);
        assert_eq!(job("40").runtime_s, 20 * 60);
        assert_eq!(job("40").interrupted_s, [60]);
        let skipped = |why: &str| got.skipped.get(why).copied().unwrap_or(0);
        assert_eq!(
            skipped("GPUs that do not divide evenly over their nodes"),
            1
        );
        assert_eq!(skipped("ended before it started"), 1);
        assert_eq!(skipped("malformed lines"), 1);
        assert!(
            got.notes
                .iter()
                .any(|n| n.starts_with("1 jobs ran more than once (requeued)")),
            "{:?}",
            got.notes
        );
        assert!(
            got.notes
                .iter()
                .any(|n| n.starts_with("sacct.txt:9: 4 fields")),
            "{:?}",
            got.notes
        );
        assert!(
            got.notes
                .iter()
                .any(|n| n.contains("1 CANCELLED, 1 TIMEOUT")),
            "{:?}",
            got.notes
        );
    }

    /// `Timelimit` is what decisions plan with; `End − Start` what the job really ran.
    #[test]
    fn time_limits_become_the_runtime_decisions_see() {
        assert_eq!(limit("00:10:00"), Some(600));
        assert_eq!(limit("1-02:00:00"), Some(93_600));
        assert_eq!(limit("30"), Some(1_800));
        assert_eq!(limit("5:30"), Some(330));
        assert_eq!(limit("2-12"), Some(216_000));
        assert_eq!(limit("UNLIMITED"), None);
        assert_eq!(limit("Partition_Limit"), None);
        let export = "JobID|Submit|Start|End|State|Timelimit|NNodes|AllocTRES
1|2026-11-24T10:00:00|2026-11-24T10:00:00|2026-11-24T10:03:00|COMPLETED|00:10:00|1|gres/gpu=1
2|2026-11-24T10:00:00|2026-11-24T10:00:00|2026-11-24T10:05:00|TIMEOUT|00:05:00|1|gres/gpu=1
3|2026-11-24T10:00:00|2026-11-24T10:00:00|2026-11-24T10:02:00|COMPLETED|UNLIMITED|1|gres/gpu=1
";
        let mut got = import("sacct.txt", export, &Mapping::default()).unwrap();
        let lines: Vec<serde_json::Value> = got
            .to_jsonl()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let pair = |i: usize| {
            (
                lines[i]["runtime_s"].clone(),
                lines[i]["actual_runtime_s"].clone(),
            )
        };
        assert_eq!(pair(0), (600.into(), 180.into()));
        // A TIMEOUT would have run on: the replay stops it at its limit.
        assert_eq!(pair(1), (300.into(), 301.into()));
        assert_eq!(pair(2), (120.into(), serde_json::Value::Null));
    }

    /// Exports of overlapping date ranges list a job twice: it is one job; a requeued
    /// job's runs split between two files are one job too.
    #[test]
    fn jobs_listed_in_several_exports_are_one_job() {
        let header = "JobID|Submit|Start|End|State|NNodes|AllocTRES";
        let a = format!(
            "{header}\n1|2026-11-24T10:00:00|2026-11-24T10:00:00|2026-11-24T10:30:00|COMPLETED|1|gres/gpu=1\n2|2026-11-24T10:00:00|2026-11-24T10:00:00|2026-11-24T10:10:00|NODE_FAIL|1|gres/gpu=2\n"
        );
        let b = format!(
            "{header}\n1|2026-11-24T10:00:00|2026-11-24T10:00:00|2026-11-24T10:30:00|COMPLETED|1|gres/gpu=1\n2|2026-11-24T10:12:00|2026-11-24T10:15:00|2026-11-24T11:15:00|COMPLETED|1|gres/gpu=2\n"
        );
        let files = [("a.txt".to_string(), a), ("b.txt".to_string(), b)];
        let got = import_files(&files, &Mapping::default()).unwrap();
        let ids: Vec<&str> = got.jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["1", "2"]);
        assert_eq!(got.jobs[1].runtime_s, 3600);
        // The run in a.txt ended by NODE_FAIL after 10 minutes.
        assert_eq!(got.jobs[1].interrupted_s, [600]);
    }
}
