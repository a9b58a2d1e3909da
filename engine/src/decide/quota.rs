//! Quotas with Kueue's semantics. A team's `guaranteed` GPUs (overall, or per pool) are
//! always available to it. Beyond them it borrows: first the idle guarantees of its cohort
//! (a lender lends at most its `lend`), then fleet capacity that no team is guaranteed;
//! never past its `burst`. What a team borrows is reclaimable: when an owner needs its
//! guarantee back, borrowers are preemption candidates. Amounts are milli-GPUs.
//!
//! A team without `burst` may borrow as much as is idle (Kueue's unset borrowing limit).
//! Lending is counted in GPUs, not per pool: a cohort lends idle guarantees in any pool.
//!
//! Teams are named by their index in the policy's teams (`TeamIx`): the ledger is read
//! for every placement tried, and an index beats a lookup by name there.

use super::bucket_map::BucketMap;
pub use super::quota_block::QuotaBlock;
use lang::ir::{Program, Team};

/// Which guarantee a placement counts against: a pool the team has a per-pool guarantee
/// in, or its overall guarantee (`None`).
type Bucket = Option<PoolIx>;

/// A pool as the ledger numbers it ([`Ledger::pool_ix`]): in name order, so buckets sort
/// as their names would. A bucket was the pool's name, and the merges and lookups that
/// run for every placement tried compared names.
pub type PoolIx = u32;

/// The number of every pool name neither the fleet nor a guarantee has: nothing is
/// charged to it, and no guarantee is in it.
const UNKNOWN_POOL: PoolIx = PoolIx::MAX;

/// A team as its index into the policy's teams; an index past them is no team the
/// ledger counts.
pub type TeamIx = usize;

#[derive(Debug, Clone)]
struct Book {
    name: String,
    cohort: Option<String>,
    /// The cohort as an index into the policy's cohort names, in order of appearance.
    cohort_ix: Option<usize>,
    guaranteed: BucketMap<Bucket>,
    /// The pools the team's guarantee names, in name order (an overall guarantee beside
    /// them leaves the book counted overall).
    named_pools: Vec<PoolIx>,
    per_pool: bool,
    burst: Option<u64>,
    lend: Option<u64>,
    used: BucketMap<Bucket>,
    /// Charged in a batch and not yet in `used` (books without guarantees per pool: one
    /// bucket takes it all at [`Ledger::settle`]); `None`: no charge.
    unsettled: Option<u64>,
    /// `borrowed()` and `lendable()` as of the last change to `used`: `excess()` runs
    /// for every placement tried and would otherwise walk every book's buckets.
    cached: (u64, u64),
    /// The idle guarantee before `lend` caps it, as of the same change.
    idle: u64,
}

impl Book {
    /// What `pool`'s bucket has used, if it has been charged.
    fn used_in(&mut self, pool: Option<PoolIx>) -> Option<&mut u64> {
        let per_pool = self.per_pool;
        self.used
            .iter_mut()
            .find(|(k, _)| in_bucket(per_pool, pool, k))
            .map(|(_, u)| u)
    }

    /// Adds `milli` to `pool`'s bucket in `used`, leaving the derived figures stale.
    fn add(&mut self, pool: Option<PoolIx>, milli: u64) {
        match self.used_in(pool) {
            Some(u) => *u += milli,
            None => {
                let bucket = self.bucket(pool);
                self.used.insert(bucket, milli);
            }
        }
    }

    fn recached(mut self) -> Book {
        self.recache();
        self
    }
    /// [`Book::borrowed`] and [`Book::lendable`] in one merge of the two sorted maps (no
    /// lookups: this runs at every charge).
    fn recache(&mut self) {
        let (mut borrowed, mut idle) = (0u64, 0u64);
        let mut guaranteed = self.guaranteed.iter().peekable();
        for (bucket, used) in self.used.iter() {
            while let Some((_, g)) = guaranteed.next_if(|(k, _)| *k < bucket) {
                idle += g;
            }
            let g = guaranteed
                .next_if(|(k, _)| *k == bucket)
                .map_or(0, |(_, g)| *g);
            borrowed += used.saturating_sub(g);
            idle += g.saturating_sub(*used);
        }
        idle += guaranteed.map(|(_, g)| *g).sum::<u64>();
        self.idle = idle;
        self.cached = (borrowed, self.lend.map_or(idle, |l| idle.min(l)));
        debug_assert_eq!(self.cached, (self.borrowed(), self.lendable()));
    }
    /// [`Book::cached`] as it would be with `milli` more used in `pool`'s bucket, without
    /// changing the book.
    fn cached_with(&self, pool: Option<PoolIx>, milli: u64) -> (u64, u64) {
        let used = self.entry_of(&self.used, pool).copied().unwrap_or(0);
        let guaranteed = self.entry_of(&self.guaranteed, pool).copied().unwrap_or(0);
        let borrowed = self.cached.0 - used.saturating_sub(guaranteed)
            + (used + milli).saturating_sub(guaranteed);
        let idle =
            self.idle - guaranteed.saturating_sub(used) + guaranteed.saturating_sub(used + milli);
        (borrowed, self.lend.map_or(idle, |l| idle.min(l)))
    }
    fn total_used(&self) -> u64 {
        self.used.values().sum()
    }
    fn total_guaranteed(&self) -> u64 {
        self.guaranteed.values().sum()
    }
    /// Usage beyond the guarantee, bucket by bucket.
    fn borrowed(&self) -> u64 {
        self.used
            .iter()
            .map(|(b, u)| u.saturating_sub(self.guaranteed.get(b).copied().unwrap_or(0)))
            .sum()
    }
    /// Unused guarantee this team lends (at most `lend`).
    fn lendable(&self) -> u64 {
        let idle: u64 = self
            .guaranteed
            .iter()
            .map(|(b, g)| g.saturating_sub(self.used.get(b).copied().unwrap_or(0)))
            .sum();
        self.lend.map_or(idle, |l| idle.min(l))
    }
    fn bucket(&self, pool: Option<PoolIx>) -> Bucket {
        if self.per_pool {
            pool
        } else {
            None
        }
    }
    /// `map`'s entry for `pool`'s bucket.
    fn entry_of<'m>(&self, map: &'m BucketMap<Bucket>, pool: Option<PoolIx>) -> Option<&'m u64> {
        let per_pool = self.per_pool;
        map.iter()
            .find(|(k, _)| in_bucket(per_pool, pool, k))
            .map(|(_, v)| v)
    }
}

/// Whether a charge in `pool` goes to `bucket` of a book counted per pool or not (no
/// bucket is built: this runs for every placement tried).
fn in_bucket(per_pool: bool, pool: Option<PoolIx>, bucket: &Bucket) -> bool {
    if per_pool {
        *bucket == pool
    } else {
        bucket.is_none()
    }
}

/// When every charge goes to one bucket of `b`: a pool of it and the charges' sum.
fn one_bucket(b: &Book, charges: &[(Option<PoolIx>, u64)]) -> Option<(Option<PoolIx>, u64)> {
    let (first, _) = charges.first()?;
    let same = |p: &Option<PoolIx>| !b.per_pool || p == first;
    charges
        .iter()
        .all(|(p, _)| same(p))
        .then(|| (*first, charges.iter().map(|c| c.1).sum()))
}

/// [`Ledger::within_guarantee`] by a merge of the book's buckets with the charges.
fn within_by_merge(b: &Book, charges: &[(Option<PoolIx>, u64)]) -> bool {
    // Usage per bucket after the charges, without copying the book: buckets the
    // charges touch get them added, the others are as they are.
    let added = |bucket: &Bucket| -> u64 {
        charges
            .iter()
            .filter(|(pool, _)| in_bucket(b.per_pool, *pool, bucket))
            .map(|(_, m)| *m)
            .sum()
    };
    // Both maps are sorted by bucket: one merge, no lookups.
    let mut guaranteed = b.guaranteed.iter().peekable();
    let used_ok = b.used.iter().all(|(k, u)| {
        while guaranteed.next_if(|(g, _)| *g < k).is_some() {}
        let g = guaranteed.next_if(|(g, _)| *g == k).map_or(0, |(_, g)| *g);
        u + added(k) <= g
    });
    // A charge to a bucket not used yet: the charges to it against its guarantee.
    let new_ok = charges.iter().all(|(pool, _)| {
        b.entry_of(&b.used, *pool).is_some() || {
            let to_it: u64 = charges
                .iter()
                .filter(|(other, _)| !b.per_pool || other == pool)
                .map(|(_, m)| *m)
                .sum();
            to_it <= b.entry_of(&b.guaranteed, *pool).copied().unwrap_or(0)
        }
    });
    used_ok && new_ok
}

/// A quota a charge breaks: the team's burst, or the fleet's capacity for borrowing.
enum Break {
    Burst(u64),
    /// The fleet's excess borrowing before and after the charge, and what the team
    /// borrows after it.
    Short {
        before: u64,
        after: u64,
        borrowed: u64,
    },
}

/// Quota accounting for one decision cycle.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// In the policy's team order.
    books: Vec<Book>,
    /// Pool names by [`PoolIx`]: the fleet's and the guarantees', sorted.
    pools: Vec<String>,
    cohorts: usize,
    /// Fleet GPUs no team is guaranteed, in milli-GPUs.
    unguaranteed: u64,
    /// No batch charge waits for [`Ledger::settle`]: every book's derived figures are
    /// current.
    settled: bool,
}

pub fn gpus(milli: u64) -> String {
    Gpus(milli).to_string()
}

/// Milli-GPUs as [`gpus`] prints them, written straight into a message (no string of
/// its own: quota messages are written for every blocked placement try).
#[derive(Debug, Clone, Copy)]
pub struct Gpus(pub u64);

impl std::fmt::Display for Gpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let milli = self.0;
        // In integers below 2^40 milli-GPUs (what f64 prints the same, far cheaper).
        if milli >= 1 << 40 {
            return f.write_str(&gpus_by_float(milli));
        }
        let (whole, frac) = (milli / 1000, milli % 1000);
        match frac {
            0 => write!(f, "{whole} gpu"),
            _ if frac % 100 == 0 => write!(f, "{whole}.{} gpu", frac / 100),
            _ if frac % 10 == 0 => write!(f, "{whole}.{:02} gpu", frac / 10),
            _ => write!(f, "{whole}.{frac:03} gpu"),
        }
    }
}

fn gpus_by_float(milli: u64) -> String {
    let g = milli as f64 / 1000.0;
    if g.fract() == 0.0 {
        format!("{g:.0} gpu")
    } else {
        format!("{g} gpu")
    }
}

impl Ledger {
    /// The ledger of `program`'s teams on a fleet of `fleet_gpu_milli` whose nodes are in
    /// `fleet_pools` (names, repeats allowed).
    pub fn new<'p>(
        program: &'p Program,
        fleet_gpu_milli: u64,
        fleet_pools: impl IntoIterator<Item = &'p str>,
    ) -> Ledger {
        // Names borrowed, sorted and made distinct before any is copied: a cycle makes a
        // ledger, and the guarantees name their pools team by team.
        let mut names: Vec<&str> = fleet_pools.into_iter().collect();
        names.extend(
            program
                .teams
                .iter()
                .flat_map(|t| t.guaranteed.per_pool_milli.keys().map(String::as_str)),
        );
        names.sort_unstable();
        names.dedup();
        let pools: Vec<String> = names.into_iter().map(str::to_string).collect();
        let mut cohorts: Vec<&str> = Vec::new();
        let books: Vec<Book> = program
            .teams
            .iter()
            .map(|t| {
                let cohort_ix = t.cohort.as_deref().map(|c| {
                    cohorts.iter().position(|x| *x == c).unwrap_or_else(|| {
                        cohorts.push(c);
                        cohorts.len() - 1
                    })
                });
                book(t, cohort_ix, &pools)
            })
            .collect();
        let guaranteed: u64 = books.iter().map(Book::total_guaranteed).sum();
        Ledger {
            books,
            pools,
            cohorts: cohorts.len(),
            unguaranteed: fleet_gpu_milli.saturating_sub(guaranteed),
            settled: true,
        }
    }

    /// A pool's number; `UNKNOWN_POOL` for a name neither the fleet nor a guarantee has.
    pub fn pool_ix(&self, name: &str) -> PoolIx {
        pool_ix(&self.pools, name)
    }

    /// A pool's name by its number.
    pub fn pool_name(&self, pool: PoolIx) -> Option<&str> {
        let i = usize::try_from(pool).ok()?;
        self.pools.get(i).map(String::as_str)
    }

    /// The pools `team`'s guarantee names (per pool), in name order.
    pub fn guarantee_pools(&self, team: Option<TeamIx>) -> &[PoolIx] {
        self.book(team).map_or(&[], |b| b.named_pools.as_slice())
    }

    fn book(&self, team: Option<TeamIx>) -> Option<&Book> {
        team.and_then(|t| self.books.get(t))
    }

    pub fn has_team(&self, team: Option<TeamIx>) -> bool {
        self.book(team).is_some()
    }

    /// The team's name, for messages.
    pub fn name(&self, team: Option<TeamIx>) -> &str {
        self.book(team).map_or("-", |b| b.name.as_str())
    }

    /// The team's cohort, for messages.
    pub fn cohort_name(&self, team: Option<TeamIx>) -> Option<&str> {
        self.book(team).and_then(|b| b.cohort.as_deref())
    }

    /// Counts `milli` of `team`'s usage in `pool` (uncounted teams are ignored).
    pub fn charge(&mut self, team: Option<TeamIx>, pool: Option<PoolIx>, milli: u64) {
        if let Some(b) = team.and_then(|t| self.books.get_mut(t)) {
            b.add(pool, milli);
            b.recache();
        }
    }

    /// [`Ledger::charge`] for a batch (the running jobs at the start of a cycle): the
    /// derived figures are left stale until [`Ledger::settle`], and nothing may read them
    /// in between.
    pub fn charge_unsettled(&mut self, team: Option<TeamIx>, pool: Option<PoolIx>, milli: u64) {
        if let Some(b) = team.and_then(|t| self.books.get_mut(t)) {
            self.settled = false;
            if b.per_pool {
                b.add(pool, milli);
            } else {
                // One bucket takes every charge: summed here, added once when settled.
                *b.unsettled.get_or_insert(0) += milli;
            }
        }
    }

    /// Brings the derived figures up to date after [`Ledger::charge_unsettled`].
    pub fn settle(&mut self) {
        for b in &mut self.books {
            if let Some(unsettled) = b.unsettled.take() {
                b.add(None, unsettled);
            }
            b.recache();
        }
        self.settled = true;
    }

    pub fn uncharge(&mut self, team: Option<TeamIx>, pool: Option<PoolIx>, milli: u64) {
        if let Some(b) = team.and_then(|t| self.books.get_mut(t)) {
            if let Some(u) = b.used_in(pool) {
                *u = u.saturating_sub(milli);
            }
            b.recache();
        }
    }

    /// Milli-GPUs `team` uses beyond its guarantee, summed over its buckets (more than 0:
    /// it is borrowing).
    pub fn borrowed(&self, team: Option<TeamIx>) -> u64 {
        self.book(team).map_or(0, |b| b.cached.0)
    }

    /// Whether `team` uses more than its guarantee (it is borrowing).
    pub fn is_borrowing(&self, team: Option<TeamIx>) -> bool {
        self.book(team).is_some_and(|b| b.cached.0 > 0)
    }

    /// The team's cohort, as an index (teams of one cohort share it).
    pub fn cohort(&self, team: Option<TeamIx>) -> Option<usize> {
        self.book(team).and_then(|b| b.cohort_ix)
    }

    /// Whether `charges` (pool, milli) stay inside `team`'s own guarantee.
    pub fn within_guarantee(
        &self,
        team: Option<TeamIx>,
        charges: &[(Option<PoolIx>, u64)],
    ) -> bool {
        let Some(b) = self.book(team) else {
            return false;
        };
        // A team that borrows has a bucket past its guarantee already, which no charge
        // brings back inside it: no bucket is read.
        if self.settled && b.cached.0 > 0 {
            debug_assert!(!within_by_merge(b, charges));
            return false;
        }
        // Charges to one bucket (nearly every call: a job's members share a pool) need
        // no merge: that bucket's room must hold them.
        if let Some((pool, milli)) = self.settled.then(|| one_bucket(b, charges)).flatten() {
            let used = b.entry_of(&b.used, pool).copied().unwrap_or(0);
            let guaranteed = b.entry_of(&b.guaranteed, pool).copied().unwrap_or(0);
            let within = used + milli <= guaranteed;
            debug_assert_eq!(within, within_by_merge(b, charges));
            return within;
        }
        within_by_merge(b, charges)
    }

    /// Whether adding `charges` to `team` keeps every quota; if not, why and what would
    /// unblock it.
    pub fn check(
        &mut self,
        team: Option<TeamIx>,
        charges: &[(Option<PoolIx>, u64)],
    ) -> Result<(), QuotaBlock> {
        let need = charges.iter().map(|c| c.1).sum();
        if let Some((t, broken)) = self.quick_break(team, charges) {
            let used = self.books.get(t).map_or(0, Book::total_used);
            let verdict = match broken {
                None => Ok(()),
                Some(broken) => Err(self.block(t, used, need, broken)),
            };
            debug_assert_eq!(
                Some(&verdict),
                self.charged(team, charges, |l, t, before| l.verdict(t, need, before))
                    .as_ref(),
                "quick quota verdict for {charges:?}"
            );
            return verdict;
        }
        self.charged(team, charges, |ledger, t, before| {
            ledger.verdict(t, need, before)
        })
        .unwrap_or(Ok(()))
    }

    /// [`Ledger::allows`] without charging the book, when every charge goes to one bucket
    /// (nearly every call); `None` otherwise. Most placements tried pass: charging and
    /// uncharging the book re-merged its maps twice for each.
    fn allows_quickly(
        &self,
        team: Option<TeamIx>,
        charges: &[(Option<PoolIx>, u64)],
    ) -> Option<bool> {
        self.quick_break(team, charges).map(|(_, b)| b.is_none())
    }

    /// Which quota `charges` would break for `team` (as an index), from the book's
    /// cached figures with them added: the book is not charged. Only when every charge
    /// goes to one bucket of a settled ledger; `None` otherwise.
    fn quick_break(
        &self,
        team: Option<TeamIx>,
        charges: &[(Option<PoolIx>, u64)],
    ) -> Option<(TeamIx, Option<Break>)> {
        let t = team.filter(|t| *t < self.books.len())?;
        let b = self.books.get(t)?;
        let (pool, milli) = self.settled.then(|| one_bucket(b, charges)).flatten()?;
        if let Some(burst) = b.burst.filter(|burst| b.total_used() + milli > *burst) {
            return Some((t, Some(Break::Burst(burst))));
        }
        let cached = b.cached_with(pool, milli);
        let (before, after) = self.excess_before_after(t, cached);
        let short = after > self.unguaranteed && after > before;
        Some((
            t,
            short.then_some(Break::Short {
                before,
                after,
                borrowed: cached.0,
            }),
        ))
    }

    /// [`Ledger::allows_quickly`]; debug builds compare it with the charged verdict.
    fn allows_checked(
        &mut self,
        team: Option<TeamIx>,
        charges: &[(Option<PoolIx>, u64)],
    ) -> Option<bool> {
        let quick = self.allows_quickly(team, charges)?;
        debug_assert_eq!(
            Some(quick),
            self.charged(team, charges, |l, t, before| l.breaks(t, before).is_none()),
            "quick quota verdict for {charges:?}"
        );
        Some(quick)
    }

    /// `judge` on the ledger with `charges` added to team `team` (and the fleet's excess
    /// borrowing before them); `None` for a team the policy does not know.
    fn charged<R>(
        &mut self,
        team: Option<TeamIx>,
        charges: &[(Option<PoolIx>, u64)],
        judge: impl FnOnce(&Ledger, TeamIx, u64) -> R,
    ) -> Option<R> {
        let t = team.filter(|t| *t < self.books.len())?;
        let before = self.excess();
        for (pool, milli) in charges {
            self.charge(Some(t), *pool, *milli);
        }
        let judged = judge(self, t, before);
        for (pool, milli) in charges {
            self.uncharge(Some(t), *pool, *milli);
        }
        Some(judged)
    }

    /// Quotas hold for the current usage; team `t` just grew by `need`. Borrowing that was
    /// already over the limit before (a policy change) blocks only charges that add to it.
    fn verdict(&self, t: TeamIx, need: u64, excess_before: u64) -> Result<(), QuotaBlock> {
        let Some(b) = self.books.get(t) else {
            return Ok(());
        };
        match self.breaks(t, excess_before) {
            None => Ok(()),
            Some(broken) => Err(self.block(t, b.total_used() - need, need, broken)),
        }
    }

    /// Why `need` more for team `t`, which uses `used` without it, breaks `broken`.
    fn block(&self, t: TeamIx, used: u64, need: u64, broken: Break) -> QuotaBlock {
        match broken {
            Break::Burst(burst) => QuotaBlock::over_burst(t, used, burst, need),
            Break::Short {
                before,
                after,
                borrowed,
            } => self.short_block(t, borrowed == 0, after - self.unguaranteed.max(before)),
        }
    }

    /// Team `t` is `short` of what its cohort (or the fleet) can lend; `within`: it
    /// borrows nothing. Names a cohort peer whose withheld idle guarantee would cover it.
    fn short_block(&self, t: TeamIx, within: bool, short: u64) -> QuotaBlock {
        let Some(b) = self.books.get(t) else {
            return QuotaBlock::short(t, within, 0, short, None);
        };
        // A peer with idle guarantee it does not lend could cover the shortfall.
        let lender = b.cohort_ix.and_then(|c| {
            self.books
                .iter()
                .enumerate()
                .filter(|(i, p)| *i != t && p.cohort_ix == Some(c))
                .map(|(i, p)| {
                    let idle: u64 = p
                        .guaranteed
                        .iter()
                        .map(|(k, g)| g.saturating_sub(p.used.get(k).copied().unwrap_or(0)))
                        .sum();
                    // What it lends of that idle guarantee ([`Book::lendable`]).
                    let lendable = p.lend.map_or(idle, |l| idle.min(l));
                    (i, p.name.as_str(), idle.saturating_sub(lendable))
                })
                .filter(|(_, _, withheld)| *withheld >= short)
                .min_by(|a, b| a.2.cmp(&b.2).then_with(|| a.1.cmp(b.1)))
                .map(|(i, _, _)| i)
        });
        QuotaBlock::short(t, within, b.total_guaranteed(), short, lender)
    }

    /// Which quota team `t`'s usage now breaks, if any (`excess_before`: the fleet's
    /// excess borrowing before the charge).
    fn breaks(&self, t: TeamIx, excess_before: u64) -> Option<Break> {
        let b = self.books.get(t)?;
        if let Some(burst) = b.burst {
            if b.total_used() > burst {
                return Some(Break::Burst(burst));
            }
        }
        let excess = self.excess();
        (excess > self.unguaranteed && excess > excess_before).then_some(Break::Short {
            before: excess_before,
            after: excess,
            borrowed: b.cached.0,
        })
    }

    /// [`Ledger::check`] without working out why not: for trial placements whose reason
    /// nobody reads.
    pub fn allows(&mut self, team: Option<TeamIx>, charges: &[(Option<PoolIx>, u64)]) -> bool {
        if let Some(quick) = self.allows_checked(team, charges) {
            return quick;
        }
        self.charged(team, charges, |ledger, t, before| {
            ledger.breaks(t, before).is_none()
        })
        .unwrap_or(true)
    }

    /// Borrowing not covered by the lenders of the borrower's own cohort, summed over the
    /// fleet: it must fit in the unguaranteed capacity.
    fn excess(&self) -> u64 {
        self.excess_before_after(usize::MAX, (0, 0)).0
    }

    /// [`Ledger::excess`] now, and with book `t`'s (borrowed, lendable) taken as `cached`
    /// (only `t`'s cohort's term changes), in one pass over the books.
    fn excess_before_after(&self, t: TeamIx, cached: (u64, u64)) -> (u64, u64) {
        // (borrowed, lent) per cohort; this runs for every placement tried, so small
        // policies count on the stack.
        let mut few = [(0u64, 0u64); 8];
        let mut many: Vec<(u64, u64)>;
        let by_cohort: &mut [(u64, u64)] = match few.get_mut(..self.cohorts) {
            Some(s) => s,
            None => {
                many = vec![(0, 0); self.cohorts];
                &mut many
            }
        };
        let mut alone = 0u64;
        for b in &self.books {
            let (borrowed, lendable) = b.cached;
            match b.cohort_ix.and_then(|c| by_cohort.get_mut(c)) {
                Some(e) => {
                    e.0 += borrowed;
                    e.1 += lendable;
                }
                None => alone += borrowed,
            }
        }
        let before = alone
            + by_cohort
                .iter()
                .map(|(borrowed, lent)| borrowed.saturating_sub(*lent))
                .sum::<u64>();
        let Some(b) = self.books.get(t) else {
            return (before, before);
        };
        let (old, new) = (b.cached, cached);
        let after = match b.cohort_ix.and_then(|c| by_cohort.get(c)) {
            Some(&(borrowed, lent)) => {
                let (borrowed_after, lent_after) = (borrowed - old.0 + new.0, lent - old.1 + new.1);
                before - borrowed.saturating_sub(lent) + borrowed_after.saturating_sub(lent_after)
            }
            None => before - old.0 + new.0,
        };
        (before, after)
    }

    /// Milli-GPUs by which giving up `removed` (pool, milli) would take `team` further
    /// below its guarantee, bucket by bucket: 0 when the team keeps its guarantee (or has
    /// none the policy knows).
    pub fn breach(
        &self,
        team: Option<TeamIx>,
        removed: impl IntoIterator<Item = (Option<PoolIx>, u64)>,
    ) -> u64 {
        let Some(b) = self.book(team) else {
            return 0;
        };
        // Victim searches ask this for every candidate: the few buckets a set touches are
        // summed in place, not in a vector on the heap.
        let mut by_bucket: smallvec::SmallVec<[(Bucket, u64); 4]> = smallvec::SmallVec::new();
        for (pool, milli) in removed {
            let k = b.bucket(pool);
            match by_bucket.iter_mut().find(|e| e.0 == k) {
                Some(e) => e.1 += milli,
                None => by_bucket.push((k, milli)),
            }
        }
        by_bucket
            .iter()
            .map(|(k, milli)| {
                let g = b.guaranteed.get(k).copied().unwrap_or(0);
                let u = b.used.get(k).copied().unwrap_or(0);
                let short_before = g.saturating_sub(u);
                let short_after = g.saturating_sub(u.saturating_sub(*milli));
                short_after - short_before.min(short_after)
            })
            .sum()
    }

    /// Whether `team` now uses less than its guarantee in any bucket of `pools`.
    pub fn below_guarantee(&self, team: Option<TeamIx>, pools: &[Option<PoolIx>]) -> bool {
        let Some(b) = self.book(team) else {
            return false;
        };
        pools.iter().any(|p| {
            let k = b.bucket(*p);
            b.used.get(&k).copied().unwrap_or(0) < b.guaranteed.get(&k).copied().unwrap_or(0)
        })
    }

    /// Whether `team`'s guarantee is counted per pool (rather than overall).
    pub fn is_per_pool(&self, team: Option<TeamIx>) -> bool {
        self.book(team).is_some_and(|b| b.per_pool)
    }

    /// The pools a team's guarantee names, in name order (empty for an overall one).
    pub fn named_pools(&self, team: Option<TeamIx>) -> &[PoolIx] {
        self.book(team).map_or(&[], |b| b.named_pools.as_slice())
    }

    /// A team's burst limit in milli-GPUs, if the policy sets one.
    pub fn burst(&self, team: Option<TeamIx>) -> Option<u64> {
        self.book(team).and_then(|b| b.burst)
    }

    /// Whether `need` more would take `team` past its burst now.
    pub fn is_over_burst(&self, team: Option<TeamIx>, need: u64) -> bool {
        self.book(team)
            .is_some_and(|b| b.burst.is_some_and(|burst| b.total_used() + need > burst))
    }

    /// Why `need` more would take `team` past its burst now, if it would.
    pub fn over_burst(&self, team: Option<TeamIx>, need: u64) -> Option<QuotaBlock> {
        let t = team.filter(|t| *t < self.books.len())?;
        let b = self.books.get(t)?;
        let burst = b.burst?;
        let used = b.total_used();
        (used + need > burst).then(|| QuotaBlock::over_burst(t, used, burst, need))
    }

    /// `team`'s guaranteed buckets as (used, guaranteed) milli-GPUs, in key order.
    pub fn guaranteed_buckets(
        &self,
        team: Option<TeamIx>,
    ) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.book(team).into_iter().flat_map(|b| {
            b.guaranteed
                .iter()
                .map(|(k, g)| (b.used.get(k).copied().unwrap_or(0), *g))
        })
    }

    /// The position among [`Ledger::guaranteed_buckets`] of the bucket a charge to
    /// `pool` goes to; `None` where the team has no guarantee for it.
    pub fn guaranteed_bucket_of(
        &self,
        team: Option<TeamIx>,
        pool: Option<PoolIx>,
    ) -> Option<usize> {
        let b = self.book(team)?;
        b.guaranteed
            .iter()
            .position(|(k, _)| in_bucket(b.per_pool, pool, k))
    }

    /// Used and guaranteed milli-GPUs of a team, for reports.
    pub fn usage(&self, team: Option<TeamIx>) -> Option<(u64, u64)> {
        self.book(team)
            .map(|b| (b.total_used(), b.total_guaranteed()))
    }
}

fn pool_ix(pools: &[String], name: &str) -> PoolIx {
    pools
        .binary_search_by(|p| p.as_str().cmp(name))
        .ok()
        .and_then(|i| PoolIx::try_from(i).ok())
        .unwrap_or(UNKNOWN_POOL)
}

fn book(t: &Team, cohort_ix: Option<usize>, pools: &[String]) -> Book {
    let per_pool = t.guaranteed.total_milli.is_none() && !t.guaranteed.per_pool_milli.is_empty();
    let named_pools: Vec<PoolIx> = t
        .guaranteed
        .per_pool_milli
        .keys()
        .map(|p| pool_ix(pools, p))
        .collect();
    let guaranteed: BucketMap<Bucket> = if per_pool {
        named_pools
            .iter()
            .zip(t.guaranteed.per_pool_milli.values())
            .map(|(p, m)| (Some(*p), *m))
            .collect()
    } else {
        [(None, t.guaranteed.total_milli.unwrap_or(0))]
            .into_iter()
            .collect()
    };
    Book {
        name: t.name.clone(),
        cohort: t.cohort.clone(),
        cohort_ix,
        guaranteed,
        named_pools,
        per_pool,
        burst: t.burst.as_ref().map(|q| q.effective_total_milli()),
        lend: t.lend.as_ref().map(|q| q.effective_total_milli()),
        used: BucketMap::default(),
        unsettled: None,
        cached: (0, 0),
        idle: 0,
    }
    .recached()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pools, a team with a guarantee in each and a team with one overall.
    const TWO_POOLS: &str = "use std.nodes.{dgx_h100}\nuse std.tiers\n\
         pool a { capacity = reserved; node = dgx_h100; nodes = 4 }\n\
         pool b { capacity = reserved; node = dgx_h100; nodes = 4 }\n\
         team per_pool { guaranteed = [8 gpu in a, 4 gpu in b] }\n\
         team overall { guaranteed = 12 gpu }\n";

    /// The program of a test policy, which must check and define `teams` teams.
    fn policy(source: &str, teams: usize) -> Program {
        let checked = lang::check(&[("p.gantry".to_string(), source.to_string())]);
        let program = checked.program.unwrap_or_default();
        assert_eq!(program.teams.len(), teams, "the test policy checks");
        program
    }

    /// Pools are numbered in name order, over the fleet's and the guarantees' names once
    /// each; a name neither has is the unknown pool.
    #[test]
    fn pools_are_numbered_in_name_order() {
        let program = policy(TWO_POOLS, 2);
        let ledger = Ledger::new(&program, 64_000, ["z", "b", "z"]);
        let ix = |p| ledger.pool_ix(p);
        assert_eq!((ix("a"), ix("b"), ix("z")), (0, 1, 2));
        assert_eq!(ix("c"), UNKNOWN_POOL);
        assert_eq!(ix(""), UNKNOWN_POOL);
    }

    /// The integer formatting prints what the float one does.
    #[test]
    fn gpus_prints_like_the_float_formatting() {
        let mut values: Vec<u64> = (0..20_000).collect();
        values.extend((0..2_000u64).map(|i| i * 7_919 + 1_000_000));
        values.extend([
            (1 << 40) - 1,
            (1 << 40) - 1_001,
            999_999_999_999,
            123_456_789_012,
        ]);
        for milli in values {
            assert_eq!(gpus(milli), gpus_by_float(milli), "{milli} milli-GPUs");
        }
        assert_eq!(gpus(2_500), "2.5 gpu");
        assert_eq!(gpus(3_000), "3 gpu");
        assert_eq!(gpus(1), "0.001 gpu");
    }

    /// The quick verdict and refusal (no charge to the book) are the charged ones, for
    /// books counted per pool and overall, with and without burst and lend, in and out of
    /// a cohort, over usages that cross guarantees, lend caps and bursts both ways.
    #[test]
    fn quick_quota_verdict_matches_the_charged_one() {
        let program = policy(
            "use std.nodes.{dgx_h100}\nuse std.tiers\n\
             pool a { capacity = reserved; node = dgx_h100; nodes = 4 }\n\
             pool b { capacity = reserved; node = dgx_h100; nodes = 4 }\n\
             cohort c {\n\
               team per_pool { guaranteed = [8 gpu in a, 4 gpu in b]; burst = 20 gpu; lend = 3 gpu }\n\
               team overall { guaranteed = 12 gpu; lend = 6 gpu }\n\
             }\n\
             team alone { guaranteed = 4 gpu; burst = 10 gpu }\n",
            3,
        );
        // Little capacity no team is guaranteed (2 GPUs): what the cohort lends decides.
        let mut ledger = Ledger::new(&program, 30_000, ["a", "b"]);
        // "c" is a pool no node and no guarantee has.
        let [a, b, c] = ["a", "b", "c"].map(|p| Some(ledger.pool_ix(p)));
        let pools = [a, b, c, None];
        let (mut yes, mut no) = (0, 0);
        for step in 0..600u64 {
            let team = Some((step % 3) as usize);
            let pool = pools.get((step / 3 % 4) as usize).copied().flatten();
            if step % 9 < 5 {
                ledger.charge(team, pool, 1_000 + step % 4 * 750);
            } else {
                ledger.uncharge(team, pool, 2_500);
            }
            for t in 0..3 {
                let t = Some(t);
                for p in pools {
                    for milli in [0, 500, 1_000, 4_000, 16_000] {
                        let charges = [(p, milli), (p, milli)];
                        let quick = ledger.allows_quickly(t, &charges);
                        let charged = ledger
                            .charged(t, &charges, |l, t, before| l.breaks(t, before).is_none());
                        assert_eq!(quick, charged, "step {step}, team {t:?}, {charges:?}");
                        // The refusal's words too, worked out without charging the book.
                        let need = milli * 2;
                        let words = ledger
                            .charged(t, &charges, |l, t, before| l.verdict(t, need, before))
                            .unwrap_or(Ok(()));
                        assert_eq!(ledger.check(t, &charges), words, "step {step}, {charges:?}");
                        if quick == Some(true) {
                            yes += 1;
                        } else {
                            no += 1;
                        }
                    }
                }
            }
        }
        assert!(yes > 500 && no > 500, "{yes} allowed, {no} not");
    }

    /// A refusal keeps numbers and team indexes, and reads as the words written at the
    /// check: the burst, a lender that withholds, the cohort, and the fleet.
    #[test]
    fn refusals_read_with_the_ledgers_names() {
        let program = policy(
            "use std.nodes.{dgx_h100}\nuse std.tiers\n\
             pool a { capacity = reserved; node = dgx_h100; nodes = 4 }\n\
             cohort c {\n\
               team borrower { guaranteed = 2 gpu; burst = 20 gpu }\n\
               team keeper { guaranteed = 12 gpu; lend = 2 gpu }\n\
             }\n\
             team alone { guaranteed = 4 gpu }\n",
            3,
        );
        // (change to borrower's usage first, team, asked, message, unblock, own to free),
        // in milli-GPUs; 6 GPUs no team is guaranteed.
        let cases = [
            (19_000i64, 0, 2_000, "team borrower uses 19 gpu and may burst to 20 gpu; this job needs 2 gpu more",
             "fits when borrower's running jobs free 1 gpu", Some(1_000)),
            // borrower borrows 8: the 6 unguaranteed and the 2 keeper lends.
            (-9_000, 0, 1_500, "team borrower is past its 2 gpu guarantee and cohort c has 1.5 gpu less idle capacity to lend than it needs",
             "fits if keeper lends 1.5 gpu more", None),
            (0, 1, 11_000, "team keeper is within its guarantee, but its idle guarantee is lent out; 1 gpu short",
             "fits when borrowers in cohort c free 1 gpu", None),
            (0, 2, 6_000, "team alone is past its 4 gpu guarantee and the fleet has 2 gpu less idle capacity to lend than it needs",
             "fits when other teams free 2 gpu of unguaranteed capacity", None),
        ];
        let mut ledger = Ledger::new(&program, 24_000, ["a"]);
        let a = Some(ledger.pool_ix("a"));
        for (change, team, milli, message, unblock, free) in cases {
            match change {
                0 => {}
                c if c > 0 => ledger.charge(Some(0), a, c as u64),
                c => ledger.uncharge(Some(0), a, c.unsigned_abs()),
            }
            let q = ledger.check(Some(team), &[(a, milli)]);
            let q = q.err().unwrap_or_else(QuotaBlock::unsaid);
            assert_eq!(q.message(&ledger), message);
            assert_eq!(q.unblock(&ledger), unblock);
            assert_eq!(q.own_to_free, free, "{message}");
        }
        assert_eq!(
            QuotaBlock::unsaid().message(&ledger),
            "",
            "a quiet trial writes nothing"
        );
    }

    /// The one-bucket shortcut of `within_guarantee` answers what the merge does, for
    /// books counted per pool and overall, over many usages (a team over its guarantee
    /// in one pool is not within it in another).
    #[test]
    fn within_guarantee_by_one_bucket_matches_the_merge() {
        let program = policy(TWO_POOLS, 2);
        let mut ledger = Ledger::new(&program, 64_000, ["b", "a", "b"]);
        let [a, b, c] = ["a", "b", "c"].map(|p| Some(ledger.pool_ix(p)));
        let pools = [a, b, c, None];
        let (mut within, mut outside) = (0, 0);
        for step in 0..400u64 {
            let team = Some((step % 2) as usize);
            let pool = pools.get((step / 2 % 4) as usize).copied().flatten();
            // Charges grow and shrink so that usage crosses the guarantees both ways.
            if step % 7 < 4 {
                ledger.charge(team, pool, 1_000 + step % 3 * 500);
            } else {
                ledger.uncharge(team, pool, 2_000);
            }
            for (t, book) in ledger.books.iter().enumerate() {
                let t = Some(t);
                for p in pools {
                    for milli in [0, 500, 1_000, 4_000] {
                        for charges in [vec![(p, milli)], vec![(p, milli), (p, milli)]] {
                            let fast = ledger.within_guarantee(t, &charges);
                            assert_eq!(fast, within_by_merge(book, &charges), "{charges:?}");
                            if fast {
                                within += 1;
                            } else {
                                outside += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(
            within > 100 && outside > 100,
            "{within} within, {outside} outside"
        );
    }
}
