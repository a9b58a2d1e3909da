//! Did-you-mean suggestions by edit distance.

/// Candidate comparisons one `check` may spend on suggestions: a file with tens of
/// thousands of unknown names among thousands of definitions would otherwise take time
/// growing with their product. Past it, diagnostics come without "did you mean".
const BUDGET: usize = 2_000_000;

thread_local! {
    static SPENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether suggestions may still be computed in this check.
pub fn budget_left() -> bool {
    SPENT.with(|s| s.get() < BUDGET)
}

/// Starts a new budget (at the start of each check).
pub fn reset_budget() {
    SPENT.with(|s| s.set(0));
}

/// The candidate closest to `name`, if it is close enough to be a plausible typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = name.chars().count();
    let limit = (len / 3).max(1);
    let lower = name.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        let spent = SPENT.with(|s| {
            let v = s.get().saturating_add(1);
            s.set(v);
            v
        });
        if spent > BUDGET {
            return None;
        }
        // An edit distance is at least the difference in length.
        if c == name || c.chars().count().abs_diff(len) > limit {
            continue;
        }
        let c_lower = c.to_lowercase();
        let d = if c_lower == lower {
            0
        } else {
            distance(&lower, &c_lower)
        };
        if d <= limit && best.is_none_or(|(bd, bc)| (d, c) < (bd, bc)) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance over characters, with adjacent transpositions counted as one edit.
pub fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    let at = |i: usize, j: usize| i * w + j;
    for i in 0..=a.len() {
        if let Some(x) = d.get_mut(at(i, 0)) {
            *x = i;
        }
    }
    for j in 0..=b.len() {
        if let Some(x) = d.get_mut(at(0, j)) {
            *x = j;
        }
    }
    let get = |d: &[usize], i: usize, j: usize| d.get(at(i, j)).copied().unwrap_or(usize::MAX / 2);
    for (i, ca) in a.iter().enumerate() {
        for (j, cb) in b.iter().enumerate() {
            let (i1, j1) = (i + 1, j + 1);
            let cost = usize::from(ca != cb);
            let mut best = (get(&d, i, j1) + 1)
                .min(get(&d, i1, j) + 1)
                .min(get(&d, i, j) + cost);
            if i > 0 && j > 0 && a.get(i - 1) == Some(cb) && b.get(j - 1) == Some(ca) {
                best = best.min(get(&d, i - 1, j - 1) + 1);
            }
            if let Some(x) = d.get_mut(at(i1, j1)) {
                *x = best;
            }
        }
    }
    get(&d, a.len(), b.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_typos() {
        assert_eq!(
            closest("gauranteed", ["guaranteed", "burst"]),
            Some("guaranteed")
        );
        assert_eq!(closest("GB", ["GiB", "MiB"]), Some("GiB"));
        assert_eq!(closest("zzzz", ["guaranteed"]), None);
    }

    #[test]
    fn the_budget_bounds_the_work_of_one_check() {
        reset_budget();
        // One plausible candidate among 1,000 (the others too long to be compared).
        let mut many: Vec<String> = (0..999)
            .map(|i| format!("a_much_longer_name_{i}"))
            .collect();
        many.push("pool1y".to_string());
        let mut found = 0;
        for _ in 0..5000 {
            found += usize::from(closest("pool1x", many.iter().map(String::as_str)).is_some());
        }
        // 2,000,000 comparisons: the first 2,000 lookups suggest, the rest give up.
        assert_eq!(found, 2000);
        reset_budget();
        assert_eq!(closest("gauranteed", ["guaranteed"]), Some("guaranteed"));
    }
}
