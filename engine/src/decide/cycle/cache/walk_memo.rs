//! What earliest-start walks found, kept with their room index so the next walk of the
//! same shape reads only the topology groups that changed since.
//!
//! A walk releases running jobs in order of expected end until some group holds every
//! member; the first group to get there wins. A group's own timeline depends only on its
//! nodes: their free resources now and the holders on them (any change to either logs the
//! node in `Cycle::changed`). So when the last winner's group has not changed, every other
//! unchanged group still gets there later than it did, and only the changed groups can
//! overtake: a walk over them alone, cut off at the last winning event, settles it. The
//! cycle's budget of 64 walks went to a few gang shapes walked again and again after small
//! changes elsewhere in the fleet (each full walk released ~6,700 jobs at 12,500 nodes).
//!
//! Stale when: a node of the kept walk's winning group changed (the walk is done afresh);
//! a change elsewhere only marks its group to be walked again. Off: [`super::memos_off`]
//! (the room index that holds it is built afresh at each use, so every walk is afresh;
//! debug builds also compare each reused walk with a full one).

use super::super::reserve::Landing;

/// When a walk's winning group got room for every member: `(i64::MIN, 0, group)` when
/// it had room before any job ended (the lowest such group wins), else the ending
/// `(time, holder, member)` that gave it, in walk order. Booking boundaries are
/// `(time, usize::MAX - 1, node)`, out of walk order: walks with bookings are kept only
/// for reuse when nothing changed.
pub(in crate::decide::cycle) type EventKey = (i64, usize, usize);

/// An earliest start: when, where the members go, which group, and the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::decide::cycle) struct Walked {
    pub start: i64,
    pub landing: Vec<Landing>,
    pub group: usize,
    pub key: EventKey,
}

/// What a kept walk depends on besides the room index: how many members, and with
/// bookings, how many and the job's runtime as they tell it apart
/// (`Bookings::runtime_seen`).
pub(in crate::decide::cycle) type WalkKey = (u64, Option<(usize, Option<i64>)>);

/// Walks kept per room index (gangs of several sizes share one).
const KEPT: usize = 8;

#[derive(Debug)]
struct Kept {
    key: WalkKey,
    /// How much of `touched` had been logged when it walked.
    at: usize,
    /// `None`: no group ever holds every member.
    walked: Option<Walked>,
}

/// The groups changed, in order, and the walks kept.
#[derive(Debug, Default)]
pub(in crate::decide::cycle) struct WalkMemo {
    touched: Vec<u32>,
    /// Per group, the epoch (walks remembered so far) in which it was last logged in
    /// `touched`: once per epoch is enough, as every kept walk starts at an epoch's start.
    logged_in: Vec<u32>,
    epoch: u32,
    kept: Vec<Kept>,
    /// Per group, whether it changed since the walk being reused (set only meanwhile).
    mask: Vec<bool>,
}

/// How the next walk can use the memo.
pub(in crate::decide::cycle) enum Reuse {
    /// Walk everything.
    Afresh,
    /// Nothing changed: kept walk `k` stands.
    Same(usize),
    /// Walk only the groups in [`WalkMemo::mask`], up to kept walk `k`'s winning event;
    /// it stands unless they beat it. [`WalkMemo::remember`] clears the mask.
    Changed(usize),
}

impl WalkMemo {
    pub fn new(groups: usize) -> WalkMemo {
        WalkMemo {
            mask: vec![false; groups],
            logged_in: vec![0; groups],
            epoch: 1,
            ..WalkMemo::default()
        }
    }

    /// Notes that a node of `group` changed.
    pub fn touch(&mut self, group: usize) {
        let Some(logged) = self.logged_in.get_mut(group) else {
            return;
        };
        if *logged != self.epoch {
            *logged = self.epoch;
            self.touched.push(u32::try_from(group).unwrap_or(u32::MAX));
        }
    }

    /// What a walk for `key` may reuse (marking the changed groups for
    /// [`Reuse::Changed`]).
    pub fn reuse(&mut self, key: &WalkKey) -> Reuse {
        let Some(k) = self.kept.iter().position(|e| e.key == *key) else {
            return Reuse::Afresh;
        };
        let Some(entry) = self.kept.get(k) else {
            return Reuse::Afresh;
        };
        let since = self.touched.get(entry.at..).unwrap_or(&[]);
        if since.is_empty() {
            return Reuse::Same(k);
        }
        let winner = entry.walked.as_ref().map(|w| w.group);
        if since.iter().any(|g| Some(*g as usize) == winner) {
            return Reuse::Afresh;
        }
        for g in since {
            if let Some(m) = self.mask.get_mut(*g as usize) {
                *m = true;
            }
        }
        Reuse::Changed(k)
    }

    /// The groups marked by [`WalkMemo::reuse`].
    pub fn mask(&self) -> &[bool] {
        &self.mask
    }

    /// Kept walk `k`'s result.
    pub fn walked(&self, k: usize) -> Option<&Walked> {
        self.kept.get(k).and_then(|e| e.walked.as_ref())
    }

    /// Keeps what a walk for `key` found (`None`: a walk from a later time, not kept)
    /// and clears the mask.
    pub fn remember(&mut self, key: Option<WalkKey>, walked: Option<Walked>) {
        if self.mask.iter().any(|m| *m) {
            self.mask.iter_mut().for_each(|m| *m = false);
        }
        let Some(key) = key else {
            return;
        };
        self.epoch = self.epoch.wrapping_add(1).max(1);
        let at = self.touched.len();
        match self.kept.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                e.at = at;
                e.walked = walked;
            }
            None => {
                if self.kept.len() == KEPT {
                    self.kept.remove(0);
                }
                self.kept.push(Kept { key, at, walked });
            }
        }
    }
}
