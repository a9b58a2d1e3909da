//! When a waiting pod is told again. A condition and an Event are written when the
//! reason changes in *kind* — its code, the words that name who or what blocks it, its
//! place in the queue by band — not when only time passed or a count moved: a queue of
//! thousands must not be rewritten on every completion (each write is a status patch and
//! an Event, and a cycle runs on every change). So the words are compared with the times
//! they hold (`2026-11-28T14:05Z`) and GPU counts (`24 GPUs`) set aside; a time that
//! moved by more than [`TIME_SLACK_S`] is a change, smaller drifts are not.

/// How far a time a condition shows may drift before the condition is rewritten.
pub const TIME_SLACK_S: i64 = 15 * 60;

/// Where a job stands, as a condition says it: exact among the first three, then in
/// bands that widen about threefold (`4-10`, `11-30`, `31-100`, `101-300`, ...).
pub fn position_band(p: usize) -> String {
    if p <= 3 {
        return p.to_string();
    }
    // 10, 30, 100, 300, ...: the band's top alternates ×3 and ×10/3.
    let (mut low, mut high, mut thrice) = (4usize, 10usize, true);
    while p > high {
        let Some(next) = high.checked_mul(if thrice { 3 } else { 10 }) else {
            return format!("{}-", high + 1);
        };
        low = high + 1;
        high = if thrice { next } else { next / 3 };
        thrice = !thrice;
    }
    format!("{low}-{high}")
}

/// How long a band told stands before a new place in the queue alone is told: a queue
/// that moves fast would otherwise rewrite a pod at every band edge it crosses (about
/// one write per completion for each band below the queue's length). `gantry queue` and
/// `/v1/queue` show the place live.
pub const BAND_HOLD_S: i64 = 5 * 60;

/// The band a pod at position `p` is told at `now`, given the message it was told
/// before and when: the band it was told while that is under [`BAND_HOLD_S`] old, or
/// while `p` stays within a tenth of the band's edges (beyond the exact first three),
/// so a job that moves back and forth across an edge — fair share reordering teams as
/// jobs start — is not told each crossing.
pub fn sticky_band(told: Option<&str>, told_at: Option<i64>, now: i64, p: usize) -> String {
    let band = position_band(p);
    let Some(was) = told.and_then(|m| {
        let (_, rest) = m.split_once("queue position ")?;
        Some(rest.split(';').next()?.trim())
    }) else {
        return band;
    };
    if was == band {
        return band;
    }
    if told_at.is_some_and(|t| now.saturating_sub(t) < BAND_HOLD_S) {
        return was.to_string();
    }
    if p <= 3 {
        return band;
    }
    let (low, high) = match was.split_once('-') {
        Some((l, h)) => (l.parse::<usize>().ok(), h.parse::<usize>().ok()),
        None => (was.parse().ok(), was.parse().ok()),
    };
    let Some(low) = low.filter(|l| *l > 3) else {
        return band;
    };
    let high = high.unwrap_or(usize::MAX);
    let near = p >= low.saturating_sub(low / 10) && p <= high.saturating_add(high / 10);
    if near {
        was.to_string()
    } else {
        band
    }
}

/// Whether a pod told `told` (reason, message) needs telling `reason` and `message`.
/// Compared as they are read, without copying either: a settled queue compares every
/// waiting pod's condition each cycle.
pub fn needs_telling(told: Option<&(String, String)>, reason: &str, message: &str) -> bool {
    let Some((old_reason, old_message)) = told else {
        return true;
    };
    if old_reason != reason {
        return true;
    }
    if old_message == message {
        return false;
    }
    let (mut old, mut new) = (Tokens::of(old_message), Tokens::of(message));
    loop {
        match (old.next(), new.next()) {
            (None, None) => return false,
            (Some(Token::Time(a)), Some(Token::Time(b)))
                if a.abs_diff(b) > TIME_SLACK_S.unsigned_abs() =>
            {
                return true
            }
            // Times within the slack are the same kind.
            (Some(Token::Time(_)), Some(Token::Time(_))) => {}
            (a, b) if a != b => return true,
            _ => {}
        }
    }
}

/// A message's kind as it is read: its characters, with each time (Unix seconds) and
/// each GPU count (`24 GPUs`, `28 gpu`) one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Char(char),
    Time(i64),
    Gpus,
}

struct Tokens<'a> {
    message: &'a str,
    i: usize,
}

impl<'a> Tokens<'a> {
    fn of(message: &'a str) -> Tokens<'a> {
        Tokens { message, i: 0 }
    }
}

impl Iterator for Tokens<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        let (message, i) = (self.message, self.i);
        let bytes = message.as_bytes();
        if i >= bytes.len() {
            return None;
        }
        let at = |i: usize| bytes.get(i).copied().unwrap_or_default();
        if let Some(t) = time_at(bytes, i) {
            self.i = i + TIME_LEN;
            return Some(Token::Time(t));
        }
        let before = i.checked_sub(1).map(at);
        let starts_number = at(i).is_ascii_digit()
            && before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == b'.'));
        if starts_number {
            let end = (i..bytes.len())
                .find(|&j| !(at(j).is_ascii_digit() || at(j) == b'.'))
                .unwrap_or(bytes.len());
            let unit = message.get(end..end + 4);
            if unit.is_some_and(|u| u.eq_ignore_ascii_case(" gpu")) {
                self.i = end + 4;
                if at(self.i).eq_ignore_ascii_case(&b's') {
                    self.i += 1;
                }
                return Some(Token::Gpus);
            }
        }
        // `i` is always at a character boundary here.
        let ch = message
            .get(i..)
            .and_then(|r| r.chars().next())
            .unwrap_or('\u{0}');
        self.i = i + ch.len_utf8().max(1);
        Some(Token::Char(ch))
    }
}

/// `2026-11-28T14:05Z`.
const TIME_LEN: usize = 17;

fn time_at(bytes: &[u8], i: usize) -> Option<i64> {
    let s = bytes.get(i..i + TIME_LEN)?;
    let shape = b"dddd-dd-ddTdd:ddZ";
    let fits = s.iter().zip(shape).all(|(c, want)| match want {
        b'd' => c.is_ascii_digit(),
        w => c == w,
    });
    if !fits {
        return None;
    }
    let text = std::str::from_utf8(s).ok()?;
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%MZ")
        .ok()
        .map(|t| t.and_utc().timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told(reason: &str, message: &str) -> Option<(String, String)> {
        Some((reason.to_string(), message.to_string()))
    }

    #[test]
    fn bands_widen() {
        let bands: Vec<String> = [1, 3, 4, 10, 11, 30, 31, 100, 101, 300, 301, 1000, 1001]
            .iter()
            .map(|p| position_band(*p))
            .collect();
        assert_eq!(
            bands,
            [
                "1",
                "3",
                "4-10",
                "4-10",
                "11-30",
                "11-30",
                "31-100",
                "31-100",
                "101-300",
                "101-300",
                "301-1000",
                "301-1000",
                "1001-3000"
            ]
        );
        assert!(position_band(usize::MAX).ends_with('-'));
    }

    #[test]
    fn times_and_gpu_counts_are_not_a_change_of_kind() {
        let was = told(
            "QuotaExhausted",
            "team a uses 24 GPUs and may burst to 32 GPUs; expected to start by 2026-11-28T14:05Z",
        );
        let drifted =
            "team a uses 28 gpu and may burst to 32 GPUs; expected to start by 2026-11-28T14:19Z";
        assert!(!needs_telling(was.as_ref(), "QuotaExhausted", drifted));
        let moved =
            "team a uses 28 GPUs and may burst to 32 GPUs; expected to start by 2026-11-28T14:21Z";
        assert!(needs_telling(was.as_ref(), "QuotaExhausted", moved));
        let gone = "team a uses 28 GPUs and may burst to 32 GPUs";
        assert!(needs_telling(was.as_ref(), "QuotaExhausted", gone));
        assert!(needs_telling(was.as_ref(), "NoCapacity", drifted));
        assert!(needs_telling(None, "NoCapacity", drifted));
    }

    #[test]
    fn who_blocks_and_the_band_are_a_change_of_kind() {
        let was = told(
            "WaitingForReservation",
            "reserved for ml/job-17 from 2026-11-28T14:05Z; queue position 4-10",
        );
        for now in [
            "reserved for ml/job-18 from 2026-11-28T14:05Z; queue position 4-10",
            "reserved for ml/job-17 from 2026-11-28T14:05Z; queue position 11-30",
            "reserved for ml/job-17 on n002 from 2026-11-28T14:05Z; queue position 4-10",
        ] {
            assert!(
                needs_telling(was.as_ref(), "WaitingForReservation", now),
                "{now}"
            );
        }
        // Node names and numbers that are not GPU counts stay part of the kind.
        let on = |n: &str| format!("placed once the pods stopping on {n} are gone");
        assert!(needs_telling(
            told("WaitingForStop", &on("n001")).as_ref(),
            "WaitingForStop",
            &on("n002")
        ));
        assert!(!needs_telling(
            told("WaitingForStop", &on("n001")).as_ref(),
            "WaitingForStop",
            &on("n001")
        ));
    }

    #[test]
    fn a_band_holds_until_the_position_is_clearly_past_its_edge() {
        let told = |band: &str| format!("needs 1 GPU; queue position {band}; fits when ...");
        let old = Some(0);
        let now = BAND_HOLD_S;
        let band = |was: &str, p| sticky_band(Some(&told(was)), old, now, p);
        // Across the 300/301 edge and back: the band told stands.
        assert_eq!(band("301-1000", 295), "301-1000");
        assert_eq!(band("301-1000", 271), "301-1000");
        assert_eq!(band("301-1000", 270), "101-300");
        assert_eq!(band("101-300", 330), "101-300");
        assert_eq!(band("101-300", 331), "301-1000");
        // The first three are exact; a new pod, or one told no band, gets its own.
        assert_eq!(band("4-10", 3), "3");
        assert_eq!(band("2", 4), "4-10");
        assert_eq!(sticky_band(None, None, now, 295), "101-300");
        assert_eq!(sticky_band(Some("no position"), old, now, 295), "101-300");
        assert_eq!(band("x-y", 295), "101-300");
    }

    #[test]
    fn a_band_told_recently_stands_wherever_the_job_moved() {
        let told = "needs 1 GPU; queue position 101-300; fits when ...";
        let at = Some(1_000);
        assert_eq!(
            sticky_band(Some(told), at, 1_000 + BAND_HOLD_S - 1, 1),
            "101-300"
        );
        assert_eq!(sticky_band(Some(told), at, 1_000 + BAND_HOLD_S, 1), "1");
        // No time known: only the edges hold it.
        assert_eq!(sticky_band(Some(told), None, 1_000, 1), "1");
    }

    #[test]
    fn any_text_reads_without_panic() {
        for s in [
            "",
            "é 2026-",
            "2026-13-40T99:99Z",
            "1.2.3 GPUs",
            "x9 GPU",
            "٣ GPU",
        ] {
            assert!(Tokens::of(s).count() <= s.len());
            assert!(!needs_telling(told("R", s).as_ref(), "R", s));
        }
    }

    /// The comparison as it was first written (copies of both messages, times and GPU
    /// counts set aside), to check the streaming one against.
    fn kind_reference(message: &str) -> (String, Vec<i64>) {
        let bytes = message.as_bytes();
        let at = |i: usize| bytes.get(i).copied().unwrap_or_default();
        let mut out = String::with_capacity(message.len());
        let mut times = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if let Some(t) = time_at(bytes, i) {
                times.push(t);
                out.push('\u{1}');
                i += TIME_LEN;
                continue;
            }
            let before = i.checked_sub(1).map(at);
            let starts_number = at(i).is_ascii_digit()
                && before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == b'.'));
            if starts_number {
                let end = (i..bytes.len())
                    .find(|&j| !(at(j).is_ascii_digit() || at(j) == b'.'))
                    .unwrap_or(bytes.len());
                let unit = message.get(end..end + 4);
                if unit.is_some_and(|u| u.eq_ignore_ascii_case(" gpu")) {
                    out.push('\u{2}');
                    i = end + 4;
                    if at(i).eq_ignore_ascii_case(&b's') {
                        i += 1;
                    }
                    continue;
                }
            }
            // `i` is always at a character boundary here.
            let ch = message
                .get(i..)
                .and_then(|r| r.chars().next())
                .unwrap_or('\u{0}');
            out.push(ch);
            i += ch.len_utf8();
        }
        (out, times)
    }

    fn needs_telling_reference(
        told: Option<&(String, String)>,
        reason: &str,
        message: &str,
    ) -> bool {
        let Some((old_reason, old_message)) = told else {
            return true;
        };
        if old_reason != reason {
            return true;
        }
        let (old_kind, old_times) = kind_reference(old_message);
        let (new_kind, new_times) = kind_reference(message);
        old_kind != new_kind
            || old_times.len() != new_times.len()
            || old_times
                .iter()
                .zip(&new_times)
                .any(|(a, b)| a.abs_diff(*b) > TIME_SLACK_S.unsigned_abs())
    }

    fn message() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just("team a uses ".to_string()),
            Just(" GPUs".to_string()),
            Just(" gpu".to_string()),
            Just("; ".to_string()),
            Just("é".to_string()),
            Just(".".to_string()),
            (0u32..40).prop_map(|n| n.to_string()),
            (0u32..3).prop_map(|n| format!("{n} GPUs")),
            (0i64..4).prop_map(|m| format!("2026-11-28T14:{:02}Z", m * 10)),
            Just("2026-11-28T1".to_string()),
            "[a-z ]{0,3}",
        ];
        proptest::collection::vec(piece, 0..8).prop_map(|v| v.concat())
    }

    proptest::proptest! {
        /// Read as it streams, a message changes kind exactly when its copies did.
        #[test]
        fn the_streaming_comparison_agrees_with_the_copies(a in message(), b in message(), same_reason: bool) {
            let was = told("R", &a);
            let reason = if same_reason { "R" } else { "S" };
            proptest::prop_assert_eq!(
                needs_telling(was.as_ref(), reason, &b),
                needs_telling_reference(was.as_ref(), reason, &b)
            );
            proptest::prop_assert!(!needs_telling(was.as_ref(), "R", &a));
        }
    }
}
