//! Piecewise-constant quantities over simulated time (GPUs allocated per tier, team and
//! pool; GPUs up; nodes paid for; spend; queue length): their integrals, peaks, and a
//! bucketed timeline for charts.

use crate::sim::metrics::Timeline;
use std::collections::BTreeMap;

/// Buckets in the timeline (fewer for short runs: none is under a minute).
const BUCKETS: i64 = 240;

#[derive(Debug, Default)]
pub(super) struct Recorder {
    columns: BTreeMap<String, usize>,
    values: Vec<f64>,
    integrals: Vec<f64>,
    peaks: Vec<f64>,
    /// Values in force from each instant on, recorded when they change: the instant, where
    /// the step's entries start in `changes` and how many columns there were. Only the
    /// columns that differ from the step before are entries (a year's replay has
    /// millions of steps, each changing a few of dozens of columns).
    steps: Vec<(i64, u32, u32)>,
    changes: Vec<(u32, f64)>,
    /// The values of the last step.
    stepped: Vec<f64>,
    last: i64,
    start: i64,
}

impl Recorder {
    pub fn new(start: i64) -> Recorder {
        Recorder {
            last: start,
            start,
            ..Recorder::default()
        }
    }

    pub fn column(&mut self, name: &str) -> usize {
        if let Some(&c) = self.columns.get(name) {
            return c;
        }
        let c = self.values.len();
        self.columns.insert(name.to_string(), c);
        self.values.push(0.0);
        self.integrals.push(0.0);
        self.peaks.push(0.0);
        c
    }

    pub fn add(&mut self, column: usize, delta: f64) {
        if let (Some(v), Some(p)) = (self.values.get_mut(column), self.peaks.get_mut(column)) {
            *v += delta;
            // Sums of many small deltas drift; snap to zero.
            if v.abs() < 1e-9 {
                *v = 0.0;
            }
            *p = p.max(*v);
        }
    }

    pub fn set(&mut self, column: usize, value: f64) {
        let now = self.values.get(column).copied().unwrap_or(0.0);
        self.add(column, value - now);
    }

    /// Moves the clock to `t`, crediting every value for the time since the last move.
    pub fn advance(&mut self, t: i64) {
        if t <= self.last {
            return;
        }
        let dt = (t - self.last) as f64;
        for (i, v) in self.integrals.iter_mut().zip(&self.values) {
            *i += v * dt;
        }
        if self.steps.is_empty() || self.stepped != self.values {
            let at = u32::try_from(self.changes.len()).unwrap_or(u32::MAX);
            for (c, v) in self.values.iter().enumerate() {
                if self.stepped.get(c) != Some(v) {
                    self.changes
                        .push((u32::try_from(c).unwrap_or(u32::MAX), *v));
                }
            }
            let columns = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
            self.steps.push((self.last, at, columns));
            self.stepped.clone_from(&self.values);
        }
        self.last = t;
    }

    /// Value × seconds of a column so far.
    pub fn integral(&self, name: &str) -> f64 {
        self.columns
            .get(name)
            .and_then(|&c| self.integrals.get(c))
            .copied()
            .unwrap_or(0.0)
    }

    pub fn peak(&self, name: &str) -> f64 {
        self.columns
            .get(name)
            .and_then(|&c| self.peaks.get(c))
            .copied()
            .unwrap_or(0.0)
    }

    /// Names of the columns starting with `prefix`, without it.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.columns
            .keys()
            .filter_map(|k| k.strip_prefix(prefix).map(str::to_string))
            .collect()
    }

    /// Time-weighted mean of every column per bucket, from the start to `end`.
    pub fn timeline(&self, end: i64) -> Timeline {
        let span = (end - self.start).max(1);
        let bucket_s = nice_bucket(span);
        let n = usize::try_from((span + bucket_s - 1) / bucket_s)
            .unwrap_or(1)
            .max(1);
        let mut sums = vec![vec![0.0; n]; self.values.len()];
        let mut current = vec![0.0; self.values.len()];
        for (k, &(from, at, columns)) in self.steps.iter().enumerate() {
            let until = self
                .steps
                .get(k + 1)
                .map_or(self.changes.len(), |s| s.1 as usize);
            for &(c, v) in self.changes.get(at as usize..until).unwrap_or(&[]) {
                if let Some(slot) = current.get_mut(c as usize) {
                    *slot = v;
                }
            }
            let values = current.get(..columns as usize).unwrap_or(&current);
            let from = &from;
            let to = self
                .steps
                .get(k + 1)
                .map_or(self.last, |(t, _, _)| *t)
                .min(end);
            let mut t = *from;
            while t < to {
                let b = (t - self.start) / bucket_s;
                let bucket_end = (self.start + (b + 1) * bucket_s).min(to);
                let dt = (bucket_end - t) as f64;
                let b = usize::try_from(b).unwrap_or(0);
                for (c, v) in values.iter().enumerate() {
                    if let Some(slot) = sums.get_mut(c).and_then(|s| s.get_mut(b)) {
                        *slot += v * dt;
                    }
                }
                t = bucket_end;
            }
        }
        let series = self
            .columns
            .iter()
            .map(|(name, &c)| {
                let means = sums
                    .get(c)
                    .map(|s| {
                        s.iter()
                            .enumerate()
                            .map(|(b, sum)| {
                                let lo = self.start + b as i64 * bucket_s;
                                let width = ((lo + bucket_s).min(end) - lo).max(1);
                                round(sum / width as f64)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (name.clone(), means)
            })
            .collect();
        Timeline {
            start: self.start,
            bucket_s,
            series,
        }
    }
}

/// A bucket width that gives at most [`BUCKETS`] buckets, rounded up to a readable size.
fn nice_bucket(span: i64) -> i64 {
    let raw = (span + BUCKETS - 1) / BUCKETS;
    const NICE: [i64; 12] = [
        60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400,
    ];
    NICE.iter()
        .copied()
        .find(|&n| n >= raw)
        .unwrap_or_else(|| (raw + 86_399) / 86_400 * 86_400)
}

/// Six significant decimals keep the JSON short without changing any chart.
fn round(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test oracle: a failure should stop the test"
)]
mod tests {
    use super::*;

    #[test]
    fn integrates_and_buckets_steps() {
        let mut r = Recorder::new(0);
        let gpus = r.column("alloc");
        r.add(gpus, 4.0);
        r.advance(60);
        r.add(gpus, -4.0);
        r.advance(120);
        r.add(gpus, 2.0);
        r.advance(180);
        assert_eq!(r.integral("alloc"), 4.0 * 60.0 + 2.0 * 60.0);
        assert_eq!(r.peak("alloc"), 4.0);
        let t = r.timeline(180);
        assert_eq!(t.bucket_s, 60);
        assert_eq!(t.series.get("alloc"), Some(&vec![4.0, 0.0, 2.0]));
    }

    /// The timeline as it was computed when every step kept all the values: the sparse
    /// steps must give the same numbers, bit for bit.
    fn dense_timeline(r: &Recorder, dense: &[(i64, Vec<f64>)], end: i64) -> Vec<Vec<f64>> {
        let span = (end - r.start).max(1);
        let bucket_s = nice_bucket(span);
        let n = usize::try_from((span + bucket_s - 1) / bucket_s)
            .unwrap()
            .max(1);
        let mut sums = vec![vec![0.0; n]; r.values.len()];
        for (k, (from, values)) in dense.iter().enumerate() {
            let to = dense.get(k + 1).map_or(r.last, |(t, _)| *t).min(end);
            let mut t = *from;
            while t < to {
                let b = (t - r.start) / bucket_s;
                let bucket_end = (r.start + (b + 1) * bucket_s).min(to);
                let dt = (bucket_end - t) as f64;
                for (c, v) in values.iter().enumerate() {
                    sums[c][b as usize] += v * dt;
                }
                t = bucket_end;
            }
        }
        let mut by_name: Vec<(&String, usize)> = r.columns.iter().map(|(k, v)| (k, *v)).collect();
        by_name.sort();
        by_name
            .into_iter()
            .map(|(_, c)| {
                sums[c]
                    .iter()
                    .enumerate()
                    .map(|(b, sum)| {
                        let lo = r.start + b as i64 * bucket_s;
                        let width = ((lo + bucket_s).min(end) - lo).max(1);
                        round(sum / width as f64)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn sparse_steps_give_the_dense_timeline() {
        for seed in 0..40u64 {
            let mut rng = crate::core::rng::Rng::new(seed);
            let mut r = Recorder::new(1_000);
            let mut dense: Vec<(i64, Vec<f64>)> = Vec::new();
            let mut t = 1_000;
            for _ in 0..(50 + rng.below(400)) {
                // New columns appear over time, as pools and teams do.
                let name = format!("c{}", rng.below(3 + (t - 1_000) as usize / 5_000));
                let c = r.column(&name);
                match rng.below(4) {
                    0 => r.set(c, rng.below(9) as f64),
                    1 => r.add(c, rng.below(1000) as f64 / 7.0),
                    2 => r.add(c, -(rng.below(1000) as f64) / 7.0),
                    _ => {}
                }
                let next = t + rng.below(4_000) as i64;
                if next > t
                    && (dense.is_empty() || dense.last().is_some_and(|(_, v)| *v != r.values))
                {
                    dense.push((t, r.values.clone()));
                }
                r.advance(next);
                t = next;
            }
            let end = t + rng.below(10_000) as i64;
            let sparse: Vec<Vec<f64>> = r.timeline(end).series.into_values().collect();
            assert_eq!(sparse, dense_timeline(&r, &dense, end), "seed {seed}");
        }
    }
}
