//! Time windows in IANA zones (DST-correct through chrono-tz) and the start histories that
//! warm-pool sizes are computed from.

use crate::decide::scale_memory::Start;
use chrono::{DateTime, Datelike, Duration, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use lang::ir::TimeWindow;

/// The zone named by a policy (checked at compile time); UTC if it does not parse.
pub fn zone(name: &str) -> Tz {
    name.parse().unwrap_or(Tz::UTC)
}

fn local(now: i64, tz: Tz) -> Option<DateTime<Tz>> {
    Utc.timestamp_opt(now, 0)
        .single()
        .map(|t| t.with_timezone(&tz))
}

/// Whether `now` falls in any of `windows` in zone `tz`; no windows means always.
pub fn active(windows: &[TimeWindow], tz: Tz, now: i64) -> bool {
    if windows.is_empty() {
        return true;
    }
    let Some(t) = local(now, tz) else {
        return false;
    };
    let day = t.weekday().num_days_from_monday();
    let minute = t.hour() * 60 + t.minute();
    let has = |d: u32| windows_day(d);
    windows.iter().any(|w| {
        let on = |d: u32| w.days & has(d) != 0;
        if w.start_min < w.end_min {
            on(day) && (w.start_min..w.end_min).contains(&minute)
        } else {
            // Wraps past midnight: the evening part today, the morning part from yesterday.
            (on(day) && minute >= w.start_min) || (on((day + 6) % 7) && minute < w.end_min)
        }
    })
}

fn windows_day(d: u32) -> u8 {
    1u8 << d
}

/// How history samples are bucketed: the same local hour of the week, of the day, or every
/// hour of the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    HourOfWeek,
    HourOfDay,
    All,
}

/// Which starts a history counts.
#[derive(Debug, Clone, Default)]
pub struct StartFilter {
    pub pool: Option<String>,
    pub team: Option<String>,
    pub tier: Option<String>,
}

impl StartFilter {
    fn matches(&self, s: &Start) -> bool {
        let ok = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        ok(&self.pool, &s.pool) && ok(&self.team, &s.team) && ok(&self.tier, &s.tier)
    }
}

/// One sample per past hour that matches `bucket` (in zone `tz`) within `over` seconds
/// before `now`: the number of matching starts in that hour (`gpus`: their GPUs). Hours
/// with no start are samples of 0, so gaps in the history lower the value rather than
/// vanish; starts out of order or in the future are fine (the history is sorted here).
pub fn samples(
    history: &[Start],
    filter: &StartFilter,
    gpus: bool,
    over: i64,
    bucket: Bucket,
    tz: Tz,
    now: i64,
) -> Vec<f64> {
    let mut starts: Vec<&Start> = history.iter().filter(|s| filter.matches(s)).collect();
    starts.sort_by_key(|s| s.at);
    let Some(here) = local(now, tz) else {
        return Vec::new();
    };
    let Some(this_hour) = here
        .with_minute(0)
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_nanosecond(0))
    else {
        return Vec::new();
    };
    let step = match bucket {
        Bucket::HourOfWeek => Duration::weeks(1),
        Bucket::HourOfDay => Duration::days(1),
        Bucket::All => Duration::hours(1),
    };
    let mut out = Vec::new();
    let mut k = 1;
    loop {
        // The same local wall-clock hour k steps back: across a DST change the hour keeps
        // its local time, not its distance in seconds.
        let naive = this_hour.naive_local() - step * k;
        let Some(start) = tz.from_local_datetime(&naive).earliest() else {
            k += 1;
            if k > 10_000 {
                break;
            }
            continue;
        };
        let from = start.timestamp();
        if from < now - over {
            break;
        }
        let to = from + 3600;
        let lo = starts.partition_point(|s| s.at < from);
        let hi = starts.partition_point(|s| s.at < to);
        let in_hour = starts.get(lo..hi).unwrap_or(&[]);
        out.push(if gpus {
            in_hour.iter().map(|s| s.gpus).sum()
        } else {
            in_hour.len() as f64
        });
        k += 1;
    }
    out
}

/// Nearest-rank percentile (0–100) of `samples`; 0 when there are none.
pub fn percentile(samples: &[f64], p: u8) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (f64::from(p) / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len()) - 1)
        .copied()
        .unwrap_or(0.0)
}

/// A readable local time for reasons: `Mon 09:00 Europe/Berlin`.
pub fn describe(now: i64, tz: Tz) -> String {
    local(now, tz).map_or_else(
        || now.to_string(),
        |t| {
            format!(
                "{} {:02}:{:02} {}",
                t.weekday(),
                t.hour(),
                t.minute(),
                tz.name()
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i32, m: u32, d: u32, h: u32, min: u32, tz: Tz) -> i64 {
        tz.with_ymd_and_hms(y, m, d, h, min, 0).unwrap().timestamp()
    }

    #[test]
    fn windows_follow_the_zone_across_dst() {
        let berlin = zone("Europe/Berlin");
        // Weekdays 08:00..19:00.
        let w = [TimeWindow {
            days: 0b0001_1111,
            start_min: 8 * 60,
            end_min: 19 * 60,
        }];
        // Friday 27 March 2026 (CET, UTC+1) and Monday 30 March (CEST, UTC+2): 08:00 local
        // is 07:00 UTC before the change and 06:00 UTC after it.
        assert!(active(&w, berlin, at(2026, 3, 27, 8, 0, berlin)));
        assert!(!active(&w, berlin, at(2026, 3, 27, 7, 59, berlin)));
        assert!(active(&w, berlin, at(2026, 3, 30, 8, 0, berlin)));
        assert!(!active(&w, berlin, at(2026, 3, 30, 7, 59, berlin)));
        assert_eq!(
            at(2026, 3, 30, 8, 0, berlin),
            at(2026, 3, 30, 6, 0, Tz::UTC)
        );
        assert!(
            !active(&w, berlin, at(2026, 3, 28, 10, 0, berlin)),
            "Saturday"
        );
        // Wrapping window 22:00..06:00 on Fridays: Saturday 03:00 is inside.
        let night = [TimeWindow {
            days: 0b0001_0000,
            start_min: 22 * 60,
            end_min: 6 * 60,
        }];
        assert!(active(&night, berlin, at(2026, 3, 28, 3, 0, berlin)));
        assert!(!active(&night, berlin, at(2026, 3, 27, 3, 0, berlin)));
    }

    #[test]
    fn hour_of_week_samples_keep_local_time_across_dst() {
        let berlin = zone("Europe/Berlin");
        let now = at(2026, 3, 30, 9, 30, berlin); // Monday after the change
        let start = |at: i64| Start {
            at,
            pool: None,
            team: None,
            tier: None,
            gpus: 1.0,
        };
        let hist = vec![
            // Monday 09:xx local, one and two weeks back (before the change).
            start(at(2026, 3, 23, 9, 10, berlin)),
            start(at(2026, 3, 23, 9, 50, berlin)),
            start(at(2026, 3, 16, 9, 5, berlin)),
            // 08:xx local: another hour, not counted.
            start(at(2026, 3, 23, 8, 59, berlin)),
        ];
        let weekly = |h: &[Start], days: i64| {
            samples(
                h,
                &StartFilter::default(),
                false,
                days * 86_400,
                Bucket::HourOfWeek,
                berlin,
                now,
            )
        };
        let s = weekly(&hist, 14);
        assert_eq!(s, vec![2.0, 1.0]);
        assert_eq!(percentile(&s, 75), 2.0);
        assert_eq!(percentile(&[], 75), 0.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50), 2.0);
        // Out of order, and with a start in the future: the same samples.
        let mut shuffled = hist.clone();
        shuffled.reverse();
        shuffled.push(start(now + 3600));
        assert_eq!(weekly(&shuffled, 14), s);
        // Weeks without starts (gaps) are samples of zero.
        assert_eq!(weekly(&hist, 28), vec![2.0, 1.0, 0.0, 0.0]);
    }
}
