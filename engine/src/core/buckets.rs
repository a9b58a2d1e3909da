//! A counting sort by a small integer key (a node index): one pass to count, one to place,
//! stable within a key, with none of the comparisons of a general sort.

/// `items` ordered by `key` (each below `keys`; others are dropped), stable within a key,
/// each kept as its `value`, written into `sorted`, and where each key's run starts into
/// `starts`: key `k`'s values are `sorted[starts[k]..starts[k + 1]]`. Both vectors are
/// emptied first and keep their room (a caller that sorts every cycle allocates nothing).
pub fn by_key_into<T, V: Copy + Default>(
    items: &[T],
    keys: usize,
    key: impl Fn(&T) -> usize,
    value: impl Fn(&T) -> V,
    starts: &mut Vec<usize>,
    sorted: &mut Vec<V>,
) {
    starts.clear();
    starts.resize(keys.saturating_add(1), 0);
    // Counted at each key's own slot, summed to each run's end, then counted down to
    // its start while placing from the back (which keeps each run in order).
    for item in items {
        let k = key(item);
        if let Some(c) = starts.get_mut(k).filter(|_| k < keys) {
            *c += 1;
        }
    }
    let mut sum = 0;
    for c in starts.iter_mut() {
        sum += *c;
        *c = sum;
    }
    sorted.clear();
    sorted.resize(sum, V::default());
    for item in items.iter().rev() {
        let k = key(item);
        let Some(at) = starts.get_mut(k).filter(|_| k < keys) else {
            continue;
        };
        *at -= 1;
        if let Some(slot) = sorted.get_mut(*at) {
            *slot = value(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_run_by_key_in_their_order_and_keys_out_of_range_drop() {
        let items = [(2, 'a'), (0, 'b'), (2, 'c'), (7, 'x'), (0, 'd'), (1, 'e')];
        let (mut starts, mut sorted) = (Vec::new(), Vec::new());
        by_key_into(&items, 3, |i| i.0, |i| i.1, &mut starts, &mut sorted);
        assert_eq!(sorted, vec!['b', 'd', 'e', 'a', 'c']);
        assert_eq!(starts, vec![0, 2, 3, 5]);
        // Again into the same buffers: emptied first.
        by_key_into(
            &[] as &[(usize, char)],
            2,
            |i| i.0,
            |i| i.1,
            &mut starts,
            &mut sorted,
        );
        assert_eq!((starts, sorted), (vec![0, 0, 0], vec![]));
    }
}
