//! What a pod declares of itself in plain words: durations in its `gantry.dev/…`
//! annotations (`900`, `15m`, `1h30m`), and the runtime a scheduler may plan it with. One
//! reading for the webhook, the queue controller and `gantry trace import`, so a replay
//! of imported pods plans with what the controller would have planned with.

/// Seconds of a duration as a pod's annotations write it: a number of seconds (`900`),
/// or numbers with units `s`, `m`, `h`, `d` (`15m`, `1h30m`); `None` for anything else
/// or past `u64`.
pub fn duration_s(text: &str) -> Option<u64> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(seconds);
    }
    let (mut total, mut number) = (0u64, None::<u64>);
    for c in text.chars() {
        if let Some(d) = c.to_digit(10) {
            number = Some(
                number
                    .unwrap_or(0)
                    .checked_mul(10)?
                    .checked_add(u64::from(d))?,
            );
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return None,
        };
        total = total.checked_add(number.take()?.checked_mul(unit)?)?;
    }
    (number.is_none() && !text.is_empty()).then_some(total)
}

/// The runtime to plan a pod with, from what it declares: its `gantry.dev/runtime`
/// estimate and its `activeDeadlineSeconds`, the limit the kubelet enforces (as Slurm
/// enforces a time limit). The shorter of the two, and the limit behind it where the
/// estimate is shorter: an estimate is a claim nobody enforces, so once a pod has run
/// past it the limit is what it is planned with ([`Runtime::after`]).
/// The longest runtime a pod may declare, seconds (a year): longer claims are planned as
/// this long, so no sum of times a decision makes from a claim can overflow.
pub const MAX_DECLARED_S: u64 = 366 * 86_400;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Runtime {
    pub estimate_s: Option<u64>,
    /// The enforced limit where it is longer than the estimate.
    pub limit_s: Option<u64>,
    /// `estimate_s` is the pod's own claim, which nobody enforces (a deadline, where
    /// there is one, is longer).
    pub estimate_only: bool,
}

impl Runtime {
    pub fn declared(estimate_s: Option<u64>, deadline_s: Option<u64>) -> Runtime {
        let read = |s: Option<u64>| s.filter(|s| *s > 0).map(|s| s.min(MAX_DECLARED_S));
        let (estimate, deadline) = (read(estimate_s), read(deadline_s));
        match (estimate, deadline) {
            (Some(e), Some(d)) if e < d => Runtime {
                estimate_s: Some(e),
                limit_s: Some(d),
                estimate_only: true,
            },
            (e, d) => Runtime {
                estimate_s: d.or(e),
                limit_s: None,
                estimate_only: d.is_none() && e.is_some(),
            },
        }
    }

    /// What to plan a job with that has run `ran_s`: its estimate while it holds, then its
    /// limit while that holds; `None` (no estimate) past both.
    pub fn after(&self, ran_s: i64) -> Option<u64> {
        let holds = |s: &u64| i64::try_from(*s).is_ok_and(|s| s > ran_s);
        self.estimate_s
            .filter(holds)
            .or_else(|| self.limit_s.filter(holds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_pods_write_them() {
        assert_eq!(duration_s("900"), Some(900));
        assert_eq!(duration_s("15m"), Some(900));
        assert_eq!(duration_s("1h30m"), Some(5400));
        assert_eq!(duration_s(" 2d "), Some(172_800));
        for bad in ["", "1w", "m", "1h30", "-5", "99999999999999999999h"] {
            assert_eq!(duration_s(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_enforced_limit_bounds_the_estimate_and_follows_it() {
        // The estimate alone, the deadline alone.
        assert_eq!(Runtime::declared(Some(600), None).after(0), Some(600));
        assert_eq!(Runtime::declared(None, Some(900)).after(0), Some(900));
        // Both: the shorter; an estimate past the deadline is cut to it.
        let r = Runtime::declared(Some(600), Some(3600));
        assert_eq!(r.after(0), Some(600));
        assert_eq!(
            Runtime::declared(Some(7200), Some(3600)).after(0),
            Some(3600)
        );
        // Run past its estimate: the deadline; past both: nothing to go by.
        assert_eq!(r.after(600), Some(3600));
        assert_eq!(r.after(3600), None);
        assert_eq!(Runtime::declared(Some(600), None).after(601), None);
        // Zero declares nothing; a claim past a year is planned as a year.
        assert_eq!(Runtime::declared(Some(0), Some(0)), Runtime::default());
        let huge = Runtime::declared(Some(u64::MAX), Some(i64::MAX as u64));
        assert_eq!(huge.after(0), Some(MAX_DECLARED_S));
    }
}
