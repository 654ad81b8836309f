//! The load model: per-partition load from a Zipf distribution over a random ranking that
//! shifts over time (some hot partitions cool, some cold ones heat), and node capacities
//! that differ. Nodes report it through [`leasehold::Callbacks::load`], as an application
//! would, and balance on what they read back from the table; the checks and figures judge
//! the true loads.

use std::time::Duration;

use leasehold::{PartitionId, SeededRng};

/// The shape of the load a run puts on its partitions.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadShape {
    /// The Zipf exponent s: the partition of rank k carries load ∝ 1 / k^s. At 0.6 on 1,024
    /// partitions the hottest carries 27 times the mean partition and a fortieth of the
    /// total, half a node's share at 20 nodes: skewed, yet balanceable without splitting.
    pub exponent: f64,
    /// How often the ranking shifts.
    pub shift_every: Duration,
    /// The fraction of partitions whose ranks are shuffled among themselves at each shift.
    pub shift_fraction: f64,
}

impl Default for LoadShape {
    fn default() -> Self {
        LoadShape {
            exponent: 0.6,
            shift_every: Duration::from_secs(600),
            shift_fraction: 0.1,
        }
    }
}

/// The loads of one run, fixed by its seed.
#[derive(Debug, Clone)]
pub struct LoadModel {
    shape: LoadShape,
    /// The load of rank k, scaled so that the mean partition carries 1.
    by_rank: Vec<f64>,
    /// Each partition's rank, one ranking per period of `shift_every`.
    rankings: Vec<Vec<u32>>,
}

impl LoadModel {
    /// The model for `partitions` over `duration`, from `seed`.
    pub fn new(shape: &LoadShape, partitions: u32, duration: Duration, seed: u64) -> LoadModel {
        let n = partitions.max(1) as usize;
        let raw: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-shape.exponent)).collect();
        let sum: f64 = raw.iter().sum();
        let by_rank = raw.iter().map(|w| w * n as f64 / sum).collect();
        let mut rng = SeededRng::new(seed ^ 0x10AD_5EED);
        let mut ranking: Vec<u32> = (0..n as u32).collect();
        shuffle(&mut ranking, &mut rng);
        let periods = if shape.shift_every.is_zero() {
            1
        } else {
            // One ranking per shift strictly within the run, and the first.
            (duration.as_secs_f64() / shape.shift_every.as_secs_f64()).ceil() as usize
        };
        let mut rankings = vec![ranking.clone()];
        let moved = ((n as f64 * shape.shift_fraction) as usize).min(n);
        for _ in 1..periods {
            // Shuffle the ranks of a random subset among themselves.
            let mut chosen: Vec<usize> = (0..n).collect();
            shuffle(&mut chosen, &mut rng);
            chosen.truncate(moved);
            let mut ranks: Vec<u32> = chosen.iter().map(|&p| ranking[p]).collect();
            shuffle(&mut ranks, &mut rng);
            for (&p, rank) in chosen.iter().zip(ranks) {
                ranking[p] = rank;
            }
            rankings.push(ranking.clone());
        }
        LoadModel {
            shape: shape.clone(),
            by_rank,
            rankings,
        }
    }

    /// The period `elapsed` falls in: the ranking in force.
    pub fn period(&self, elapsed: Duration) -> usize {
        if self.shape.shift_every.is_zero() {
            return 0;
        }
        let period = (elapsed.as_secs_f64() / self.shape.shift_every.as_secs_f64()) as usize;
        period.min(self.rankings.len() - 1)
    }

    /// When period `period` starts.
    pub fn shift_at(&self, period: usize) -> Duration {
        self.shape.shift_every * period as u32
    }

    /// How many periods the run has.
    pub fn periods(&self) -> usize {
        self.rankings.len()
    }

    /// The load of `partition` at `elapsed` into the run.
    pub fn load(&self, partition: PartitionId, elapsed: Duration) -> f64 {
        let ranking = &self.rankings[self.period(elapsed)];
        ranking
            .get(partition.0 as usize)
            .map_or(0.0, |rank| self.by_rank[*rank as usize])
    }

    /// The capacity of node `index`: 2, 3 or 4 in turn, so that fair shares differ.
    pub fn capacity(index: usize) -> f64 {
        f64::from(Self::weight(index))
    }

    /// The weight node `index` is given, equal to its capacity.
    pub fn weight(index: usize) -> u32 {
        2 + (index % 3) as u32
    }
}

fn shuffle<T>(items: &mut [T], rng: &mut SeededRng) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i + 1);
        items.swap(i, j);
    }
}

/// The load figures of one run.
#[derive(Debug, Clone, Default)]
pub struct LoadRecord {
    /// max over nodes of load / fair share, at each sample after the fleet first came
    /// within the band.
    pub ratios: Vec<f64>,
    /// When the fleet first came within the band.
    pub converged_at: Option<Duration>,
    /// For each shift that put the fleet out of the band: how long it took to come back.
    pub recoveries: Vec<Duration>,
    /// Shifts after which the fleet had not come back within the band by the end.
    pub unrecovered: u32,
    /// The shift being recovered from: its time, if the fleet is out of the band since.
    pending: Option<Duration>,
    last_period: usize,
    /// Hand-offs (releases) seen, after convergence.
    pub moves: u64,
    /// How long after convergence the run went on.
    pub observed: Duration,
}

impl LoadRecord {
    /// Records a sample at `elapsed`, in `period`, of the fleet's worst ratio.
    pub fn sample(
        &mut self,
        elapsed: Duration,
        period: usize,
        shift_at: Duration,
        worst: f64,
        band: f64,
        all_held: bool,
    ) {
        let within = worst <= band && all_held;
        if self.converged_at.is_none() {
            if within {
                self.converged_at = Some(elapsed);
                self.last_period = period;
            }
            return;
        }
        self.ratios.push(worst);
        self.observed = elapsed - self.converged_at.unwrap_or_default();
        if period != self.last_period {
            self.last_period = period;
            if self.pending.is_some() {
                self.unrecovered += 1;
            }
            self.pending = (!within).then_some(shift_at);
        }
        if let Some(since) = self.pending {
            if within {
                self.recoveries.push(elapsed.saturating_sub(since));
                self.pending = None;
            }
        }
    }

    /// Counts a hand-off.
    pub fn moved(&mut self) {
        if self.converged_at.is_some() {
            self.moves += 1;
        }
    }

    /// Shifts still out of the band at the end count as unrecovered.
    pub fn finish(&mut self) {
        if self.pending.take().is_some() {
            self.unrecovered += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_average_one_and_shift_between_periods() {
        let shape = LoadShape::default();
        let model = LoadModel::new(&shape, 1024, Duration::from_secs(900), 7);
        let total: f64 = (0..1024)
            .map(|p| model.load(PartitionId(p), Duration::ZERO))
            .sum();
        assert!((total - 1024.0).abs() < 1e-6, "{total}");
        let hottest = (0..1024)
            .map(|p| model.load(PartitionId(p), Duration::ZERO))
            .fold(0.0, f64::max);
        assert!((20.0..40.0).contains(&hottest), "{hottest}");
        assert_eq!(model.periods(), 2);
        assert_eq!(
            model.period(Duration::from_secs(900)),
            1,
            "no shift at the end"
        );
        let later = Duration::from_secs(601);
        let changed = (0..1024)
            .filter(|p| {
                model.load(PartitionId(*p), Duration::ZERO) != model.load(PartitionId(*p), later)
            })
            .count();
        // A tenth of the ranks are shuffled among themselves; a few land where they were.
        assert!((80..=102).contains(&changed), "{changed}");
        let again = LoadModel::new(&shape, 1024, Duration::from_secs(900), 7);
        assert_eq!(
            again.load(PartitionId(5), later),
            model.load(PartitionId(5), later)
        );
    }

    #[test]
    fn recoveries_are_timed_from_the_shift() {
        let mut record = LoadRecord::default();
        let s = Duration::from_secs;
        record.sample(s(10), 0, s(0), 1.5, 1.1, true);
        record.sample(s(20), 0, s(0), 1.05, 1.1, true);
        assert_eq!(record.converged_at, Some(s(20)));
        record.sample(s(301), 1, s(300), 1.3, 1.1, true);
        record.sample(s(340), 1, s(300), 1.08, 1.1, true);
        record.sample(s(601), 2, s(600), 1.4, 1.1, true);
        record.finish();
        assert_eq!(record.recoveries, vec![s(40)]);
        assert_eq!(record.unrecovered, 1);
        assert_eq!(record.ratios.len(), 3);
    }
}
