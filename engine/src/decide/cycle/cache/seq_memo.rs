//! [`SeqMemo`]: what a kept [`super::super::PlacementDecider`] worked out of job states given with a
//! revision (`JobState::revision`), by revision. A caller that keeps its states keeps
//! their order, so a cycle asks in nearly the order the last one did: each answer is
//! looked for a few entries on from the last one found, not hashed.
//!
//! Stale when: never by itself; a revision not asked for in a cycle is dropped at its end,
//! and its owners ([`super::job_memo`], [`super::typical_memo`], [`super::running_carry`])
//! forget it whole when what their answers mean changed. Off: [`super::keep_nothing`].

use rustc_hash::FxHashMap as HashMap;

#[derive(Debug)]
pub(in crate::decide::cycle) struct SeqMemo<V> {
    /// The last cycle's answers by revision, in the order it asked.
    last: Vec<(u64, V)>,
    /// Which of `last` this cycle has found.
    found: Vec<bool>,
    /// Where in `last` the next answer is looked for first.
    cursor: usize,
    /// `last` by revision, built once this cycle has missed often (states reordered).
    index: Option<HashMap<u64, usize>>,
    misses: usize,
    /// This cycle's answers, in order (`last` of the next cycle).
    this: Vec<(u64, V)>,
}

impl<V> Default for SeqMemo<V> {
    fn default() -> Self {
        SeqMemo {
            last: Vec::new(),
            found: Vec::new(),
            cursor: 0,
            index: None,
            misses: 0,
            this: Vec::new(),
        }
    }
}

/// How far on from the last answer the next one is looked for: past states that went
/// or changed since the last cycle.
const WINDOW: usize = 8;
/// Misses in one cycle before `last` is indexed.
pub(in crate::decide::cycle) const MISSES_BEFORE_INDEX: usize = 16;

impl<V: Copy> SeqMemo<V> {
    /// Starts a cycle: what the last one asked for and was told is what this one finds.
    pub fn begin(&mut self) {
        // Swapped, so both lists keep their room from cycle to cycle.
        std::mem::swap(&mut self.last, &mut self.this);
        self.this.clear();
        self.found.clear();
        self.found.resize(self.last.len(), false);
        self.cursor = 0;
        self.index = None;
        self.misses = 0;
    }

    /// Forgets every answer.
    pub fn forget(&mut self) {
        self.begin();
        self.last.clear();
        self.found.clear();
    }

    /// The answer for `revision` last cycle (remembered for the next one).
    #[inline]
    pub fn get(&mut self, revision: u64) -> Option<V> {
        self.find(revision, false)
    }

    /// [`SeqMemo::get`] of an answer this cycle has not found yet: one answer for each
    /// time the last cycle asked (a caller that counts what each one stands for).
    #[inline]
    pub fn take(&mut self, revision: u64) -> Option<V> {
        self.find(revision, true)
    }

    #[inline]
    fn find(&mut self, revision: u64, once: bool) -> Option<V> {
        let ahead = self.last.get(self.cursor..).unwrap_or(&[]);
        let found = match ahead.iter().take(WINDOW).position(|e| e.0 == revision) {
            Some(k) => Some(self.cursor + k),
            None => self.look_up(revision),
        };
        let at = found?;
        let (_, value) = *self.last.get(at)?;
        let seen = self.found.get_mut(at)?;
        if once && *seen {
            return None;
        }
        *seen = true;
        self.cursor = at + 1;
        self.this.push((revision, value));
        Some(value)
    }

    /// The last cycle's answers this one has not found (so far).
    pub fn unfound(&self) -> impl Iterator<Item = &V> {
        self.last
            .iter()
            .zip(&self.found)
            .filter(|(_, found)| !**found)
            .map(|((_, v), _)| v)
    }

    /// A revision not found next in order: new, or the states were reordered.
    fn look_up(&mut self, revision: u64) -> Option<usize> {
        self.misses += 1;
        if self.index.is_none() && self.misses > MISSES_BEFORE_INDEX {
            self.index = Some(
                self.last
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e.0, i))
                    .collect(),
            );
        }
        self.index.as_ref()?.get(&revision).copied()
    }

    /// Remembers `value` for `revision` for the next cycle.
    pub fn insert(&mut self, revision: u64, value: V) {
        self.this.push((revision, value));
    }

    /// How many answers the next cycle will find.
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.this.len()
    }
}

#[cfg(test)]
mod tests {
    use super::SeqMemo;

    /// `take` finds each of the last cycle's answers at most once, even for a revision
    /// asked twice, and `unfound` lists those not found.
    #[test]
    fn take_finds_each_answer_once_and_the_rest_are_unfound() {
        let mut memo: SeqMemo<u64> = SeqMemo::default();
        memo.begin();
        for r in [1, 2, 2, 3, 4] {
            memo.insert(r, r * 10);
        }
        memo.begin();
        assert_eq!(memo.take(2), Some(20));
        assert_eq!(memo.take(2), Some(20), "the second answer for 2");
        assert_eq!(memo.take(2), None, "2 was asked twice");
        assert_eq!(memo.take(4), Some(40));
        assert_eq!(memo.take(4), None);
        let unfound: Vec<u64> = memo.unfound().copied().collect();
        assert_eq!(unfound, vec![10, 30]);
        memo.forget();
        assert_eq!(memo.unfound().count(), 0);
        assert_eq!(memo.take(1), None);
    }
}
