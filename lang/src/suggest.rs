//! Did-you-mean suggestions by edit distance.

/// The candidate closest to `name`, if it is close enough to be a plausible typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    let lower = name.to_lowercase();
    candidates
        .into_iter()
        .filter(|c| *c != name)
        .map(|c| {
            let d = if c.to_lowercase() == lower {
                0
            } else {
                distance(&lower, &c.to_lowercase())
            };
            (d, c)
        })
        .filter(|(d, _)| *d <= limit)
        .min_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(b.1)))
        .map(|(_, c)| c)
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
}
