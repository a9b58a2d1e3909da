//! Teams' past usage, as fair share reads it: resource-seconds per team in hourly buckets
//! for the last day and daily ones for 30 days. The queue controller keeps it in its
//! memory between cycles and `simulate` between events, both through [`account`], so a
//! replay weighs fair share as the running queue does.

use super::snapshot::UsageRecord;
use crate::core::alloc::Request;
use std::collections::BTreeMap;

pub const HOUR: i64 = 3_600;
pub const DAY: i64 = 86_400;
/// Usage older than this is dropped.
pub const HORIZON: i64 = 30 * DAY;

/// What a team's running jobs (one or many) use per second: GPUs, CPUs, memory MiB.
#[derive(Debug, Clone, Copy)]
pub struct Use<'a> {
    pub team: &'a str,
    pub rate: [f64; 3],
}

/// What `members` members of `member` use per second.
pub fn rate(member: &Request, members: usize) -> [f64; 3] {
    let gpus = if member.mig_profile.is_some() {
        f64::from(member.num_gpu) / 7.0
    } else {
        f64::from(member.num_gpu) * f64::from(member.gpu_milli) / 1000.0
    };
    let n = members as f64;
    [
        gpus * n,
        member.cpu_milli as f64 / 1000.0 * n,
        member.memory_mib as f64 * n,
    ]
}

/// Adds what `running` used since `accounted_to` up to `now` to `usage`, each hour's part
/// in that hour's bucket, then compacts old buckets when a new hour has begun. With
/// `max_step`, at most that many seconds are charged (the controller: after a gap with no
/// leader, the jobs running now may not have run through it). The first call only
/// starts the clock.
pub fn account<'a>(
    usage: &mut Vec<UsageRecord>,
    accounted_to: &mut Option<i64>,
    running: impl IntoIterator<Item = Use<'a>>,
    now: i64,
    max_step: Option<i64>,
) {
    let last = accounted_to.unwrap_or(now).min(now);
    *accounted_to = Some(now);
    let since = max_step.map_or(last, |m| last.max(now - m.max(0)));
    if now <= since {
        return;
    }
    // Keyed by borrowed names: this runs at every event of a replay.
    let mut added: BTreeMap<(&str, i64), (f64, f64, f64)> = BTreeMap::new();
    for u in running {
        let [gpus, cpus, memory] = u.rate;
        // Hour by hour: a replay's step between events may span many.
        let mut at = since;
        while at < now {
            let bucket = at - at.rem_euclid(HOUR);
            let until = (bucket + HOUR).min(now);
            let dt = (until - at) as f64;
            let e = added.entry((u.team, bucket)).or_default();
            e.0 += gpus * dt;
            e.1 += cpus * dt;
            e.2 += memory * dt;
            at = until;
        }
    }
    for ((team, bucket), (gpu_s, cpu_s, memory_mib_s)) in added {
        match usage.iter_mut().find(|u| u.team == team && u.at == bucket) {
            Some(u) => {
                u.gpu_s += gpu_s;
                u.cpu_s += cpu_s;
                u.memory_mib_s += memory_mib_s;
            }
            None => usage.push(UsageRecord {
                team: team.to_string(),
                at: bucket,
                gpu_s,
                cpu_s,
                memory_mib_s,
            }),
        }
    }
    // Buckets age into daily ones and out by the hour: compacted when an hour begins.
    if last.div_euclid(HOUR) != now.div_euclid(HOUR) {
        compact(usage, now);
    }
}

/// Hourly buckets older than a day become daily ones; anything past the horizon goes.
pub fn compact(usage: &mut Vec<UsageRecord>, now: i64) {
    let mut kept: BTreeMap<(String, i64), UsageRecord> = BTreeMap::new();
    for u in usage.drain(..) {
        if now - u.at > HORIZON {
            continue;
        }
        let at = if now - u.at > DAY {
            u.at - u.at.rem_euclid(DAY)
        } else {
            u.at
        };
        let e = kept
            .entry((u.team.clone(), at))
            .or_insert_with(|| UsageRecord {
                team: u.team.clone(),
                at,
                gpu_s: 0.0,
                cpu_s: 0.0,
                memory_mib_s: 0.0,
            });
        e.gpu_s += u.gpu_s;
        e.cpu_s += u.cpu_s;
        e.memory_mib_s += u.memory_mib_s;
    }
    *usage = kept.into_values().collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u32) -> Request {
        Request {
            num_gpu: n,
            gpu_milli: 1000,
            ..Request::default()
        }
    }

    fn gpu_s(usage: &[UsageRecord], team: &str) -> f64 {
        usage
            .iter()
            .filter(|u| u.team == team)
            .map(|u| u.gpu_s)
            .sum()
    }

    #[test]
    fn a_long_step_is_charged_hour_by_hour() {
        let (mut usage, mut to) = (Vec::new(), None);
        let t0 = 1_795_500_000 - 1_795_500_000 % DAY;
        let eight = Use {
            team: "a",
            rate: rate(&gpus(8), 1),
        };
        account(&mut usage, &mut to, [eight], t0 + 1800, None);
        assert!(usage.is_empty(), "the first call only starts the clock");
        // Five hours in one step, from half an hour into the first.
        account(&mut usage, &mut to, [eight], t0 + 5 * HOUR + 1800, None);
        assert_eq!(gpu_s(&usage, "a"), 8.0 * 5.0 * 3600.0);
        let buckets: Vec<(i64, f64)> = usage.iter().map(|u| (u.at - t0, u.gpu_s)).collect();
        assert_eq!(
            buckets,
            [
                (0, 8.0 * 1800.0),
                (HOUR, 8.0 * 3600.0),
                (2 * HOUR, 8.0 * 3600.0),
                (3 * HOUR, 8.0 * 3600.0),
                (4 * HOUR, 8.0 * 3600.0),
                (5 * HOUR, 8.0 * 1800.0),
            ]
        );
        // With a step limit, a long gap is charged that much at most.
        account(&mut usage, &mut to, [eight], t0 + 10 * HOUR, Some(300));
        assert_eq!(gpu_s(&usage, "a"), 8.0 * (5.0 * 3600.0 + 300.0));
    }
}
