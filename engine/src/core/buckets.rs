//! A counting sort by a small integer key (a node index): one pass to count, one to place,
//! stable within a key, with none of the comparisons of a general sort.

/// `items` ordered by `key` (each below `keys`; others are dropped), stable within a key,
/// and where each key's run starts: key `k`'s items are `sorted[starts[k]..starts[k + 1]]`.
pub fn by_key<T: Copy>(
    items: &[T],
    keys: usize,
    key: impl Fn(&T) -> usize,
) -> (Vec<usize>, Vec<T>) {
    let mut starts = vec![0usize; keys.saturating_add(1)];
    for item in items {
        if let Some(c) = starts.get_mut(key(item).saturating_add(1)) {
            *c += 1;
        }
    }
    let mut sum = 0;
    for c in starts.iter_mut() {
        sum += *c;
        *c = sum;
    }
    let mut next = starts.clone();
    let mut sorted: Vec<T> = Vec::with_capacity(sum);
    if let Some(first) = items.first() {
        sorted.resize(sum, *first);
    }
    for item in items {
        let Some(at) = next.get_mut(key(item)) else {
            continue;
        };
        if let Some(slot) = sorted.get_mut(*at) {
            *slot = *item;
        }
        *at += 1;
    }
    (starts, sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_run_by_key_in_their_order_and_keys_out_of_range_drop() {
        let items = [(2, 'a'), (0, 'b'), (2, 'c'), (7, 'x'), (0, 'd'), (1, 'e')];
        let (starts, sorted) = by_key(&items, 3, |i| i.0);
        assert_eq!(
            sorted,
            vec![(0, 'b'), (0, 'd'), (1, 'e'), (2, 'a'), (2, 'c')]
        );
        assert_eq!(starts, vec![0, 2, 3, 5]);
        let (starts, sorted) = by_key(&[] as &[(usize, char)], 2, |i| i.0);
        assert_eq!((starts, sorted), (vec![0, 0, 0], vec![]));
    }
}
