//! Ids in the order people read them: runs of digits compare as numbers (`job-2` before
//! `job-10`, Slurm's `123_2` before `123_10`), everything else byte by byte. Ids equal so
//! (`a01`, `a1`) fall back to byte order, so the order is total and agrees with `==`.

use std::cmp::Ordering;

/// An id ordered naturally (see the module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NaturalId<'a>(pub &'a str);

impl Ord for NaturalId<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        natural_cmp(self.0, other.0).then_with(|| self.0.cmp(other.0))
    }
}

impl PartialOrd for NaturalId<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `a` against `b`, runs of digits as numbers (leading zeros aside).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (na, ra) = digits(a);
                let (nb, rb) = digits(b);
                let order = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if order != Ordering::Equal {
                    return order;
                }
                (a, b) = (ra, rb);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (
                    a.get(1..).unwrap_or_default(),
                    b.get(1..).unwrap_or_default(),
                );
            }
        }
    }
}

/// The leading run of digits of `s` without its leading zeros, and the rest.
fn digits(s: &[u8]) -> (&[u8], &[u8]) {
    let end = s
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    let (run, rest) = s.split_at(end);
    let zeros = run.iter().take_while(|c| **c == b'0').count();
    (run.get(zeros..).unwrap_or_default(), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_order_as_numbers() {
        let mut ids = vec![
            "10", "9", "123_10", "123_2", "job-10", "job-9", "a01", "a1", "a", "",
        ];
        ids.sort_by(|a, b| NaturalId(a).cmp(&NaturalId(b)));
        assert_eq!(
            ids,
            ["", "9", "10", "123_2", "123_10", "a", "a01", "a1", "job-9", "job-10"]
        );
    }

    #[test]
    fn the_order_agrees_with_equality() {
        assert_eq!(NaturalId("a1").cmp(&NaturalId("a1")), Ordering::Equal);
        assert_ne!(NaturalId("a01").cmp(&NaturalId("a1")), Ordering::Equal);
        assert_eq!(natural_cmp("x007y", "x7y"), Ordering::Equal);
        assert_eq!(natural_cmp("x7y", "x7z"), Ordering::Less);
    }
}
