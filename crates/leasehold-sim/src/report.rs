//! What runs return: a violation with its replay command, a seed's report, a summary of many.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::figures::{FaultCounts, Percentiles, Samples};
use crate::invariants::Invariant;
use crate::timings::Timings;

/// A broken invariant: which, where, and how to see it again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Violation {
    /// The invariant that failed.
    pub invariant: Invariant,
    /// The seed of the run.
    pub seed: u64,
    /// Simulated time since the start of the run when it was detected.
    #[serde(serialize_with = "seconds")]
    pub at: Duration,
    /// What was seen.
    pub details: String,
    /// The command that replays this run.
    pub replay: String,
    /// The latest events touching the partition concerned (or the latest events).
    pub recent_events: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invariant {} violated at {:.6}s of seed {}: {}\n  replay: {}",
            self.invariant,
            self.at.as_secs_f64(),
            self.seed,
            self.details,
            self.replay
        )
    }
}

impl std::error::Error for Violation {}

fn seconds<S: serde::Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(value.as_secs_f64())
}

/// One seed that ran to its end with every invariant kept.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Simulated time covered.
    #[serde(serialize_with = "seconds")]
    pub simulated: Duration,
    /// Wall-clock time it took.
    #[serde(serialize_with = "seconds")]
    pub wall: Duration,
    /// Hash of the event trace: two runs of one seed must agree.
    pub trace_hash: u64,
    /// Events in the trace.
    pub events: u64,
    /// What was measured.
    pub samples: Samples,
}

/// The figures of one or more runs, ready to print.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// Crash to re-acquisition of each partition the crashed node held.
    pub failover: Option<Percentiles>,
    /// Failover p50 and p99 as multiples of `acquire_after`.
    pub failover_in_acquire_after: Option<(f64, f64)>,
    /// Release (rebalance, drain, leave) to re-acquisition.
    pub handoff: Option<Percentiles>,
    /// Join to holding `⌊P/N⌋` partitions.
    pub join_to_fair_share: Option<Percentiles>,
    /// Membership changes measured (those with no other fault nearby).
    pub membership_changes: usize,
    /// Mean partitions moved per membership change.
    pub moved_per_change: Option<f64>,
    /// Mean ⌈P/N⌉ over those changes: the least a change can move.
    pub minimum_per_change: Option<f64>,
    /// Store read calls per node per heartbeat.
    pub reads_per_node_heartbeat: f64,
    /// Store write calls per node per heartbeat (a batch counts once).
    pub writes_per_node_heartbeat: f64,
    /// Records read per node per heartbeat.
    pub rows_read_per_node_heartbeat: f64,
    /// Records written per node per heartbeat.
    pub rows_written_per_node_heartbeat: f64,
    /// Work accepted by the fenced resources.
    pub fenced_accepted: u64,
    /// Work rejected as stale by the fenced resources.
    pub fenced_rejected: u64,
    /// Units of work under permits that ended.
    pub work_units: u64,
    /// Of those, units whose permit ran out before they ended.
    pub work_units_cut_short: u64,
    /// Sampling points at which the fleet had settled and balance was checked (besides the
    /// check at the end of every run).
    pub settled_balance_checks: u64,
    /// Simulated seconds per wall-clock second.
    pub simulated_per_wall_second: f64,
    /// Faults injected.
    pub faults: FaultCounts,
    /// With a load model: the highest ratio of a serving node's load to its fair share,
    /// over the samples after the fleet first came within the band.
    pub load_max_over_mean: Option<Ratios>,
    /// With a load model: from a shift of the load to the fleet being back within the band.
    pub load_back_in_band: Option<Percentiles>,
    /// With a load model: shifts the fleet had not recovered from by the next one or the end.
    pub load_unrecovered_shifts: u64,
    /// With a load model: partitions handed off per hour after convergence, and what the
    /// churn budget allows per hour.
    pub load_moves_per_hour: Option<(f64, f64)>,
    /// With a rolling restart: the share of partitions back with their holder afterwards.
    pub rolling_same_holder: Option<f64>,
    /// With a rolling restart: acquisitions per partition, from the first stop to the fleet
    /// settling after the last start.
    pub rolling_moves_per_partition: Option<f64>,
}

/// A distribution of ratios.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratios {
    /// Number of samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Ratios {
    /// The summary of `samples`, or `None` if there are none.
    pub fn of(samples: &[f64]) -> Option<Ratios> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[index]
        };
        Some(Ratios {
            count: sorted.len(),
            p50: at(0.50),
            p99: at(0.99),
            max: sorted[sorted.len() - 1],
        })
    }
}

/// The median and 99th percentile of `ratios`, if any.
fn ratio_percentiles(ratios: &[f64]) -> Option<(f64, f64)> {
    let mut sorted = ratios.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    (!sorted.is_empty()).then(|| (at(0.50), at(0.99)))
}

impl Figures {
    /// Derives the figures from `samples` gathered over `simulated` time in `wall` time.
    pub fn new(samples: &Samples, timings: &Timings, simulated: Duration, wall: Duration) -> Self {
        let failover = Percentiles::of(&samples.failover);
        let acquire_after = timings.acquire_after.as_secs_f64();
        let per_heartbeat = |count: u64| {
            let heartbeats = samples.traffic.node_heartbeats;
            if heartbeats > 0.0 {
                count as f64 / heartbeats
            } else {
                0.0
            }
        };
        let changes = samples.moves.len();
        let mean = |pick: fn(&(u64, u64)) -> u64| {
            (changes > 0)
                .then(|| samples.moves.iter().map(pick).sum::<u64>() as f64 / changes as f64)
        };
        let traffic = &samples.traffic;
        Figures {
            failover_in_acquire_after: ratio_percentiles(&samples.failover_ratio).or_else(|| {
                failover
                    .as_ref()
                    .map(|f| (f.p50_seconds / acquire_after, f.p99_seconds / acquire_after))
            }),
            failover,
            handoff: Percentiles::of(&samples.handoff),
            join_to_fair_share: Percentiles::of(&samples.join_to_fair_share),
            membership_changes: changes,
            moved_per_change: mean(|m| m.0),
            minimum_per_change: mean(|m| m.1),
            reads_per_node_heartbeat: per_heartbeat(traffic.read_calls),
            writes_per_node_heartbeat: per_heartbeat(traffic.write_calls),
            rows_read_per_node_heartbeat: per_heartbeat(traffic.rows_read),
            rows_written_per_node_heartbeat: per_heartbeat(traffic.rows_written),
            fenced_accepted: samples.fenced.0,
            fenced_rejected: samples.fenced.1,
            work_units: samples.work_units.0,
            work_units_cut_short: samples.work_units.1,
            settled_balance_checks: samples.settled_checks,
            simulated_per_wall_second: simulated.as_secs_f64() / wall.as_secs_f64().max(1e-9),
            faults: samples.faults.clone(),
            load_max_over_mean: Ratios::of(&samples.load.max_over_mean),
            load_back_in_band: Percentiles::of(&samples.load.back_in_band),
            load_unrecovered_shifts: samples.load.unrecovered,
            load_moves_per_hour: (!samples.load.observed.is_zero()).then(|| {
                let hours = samples.load.observed.as_secs_f64() / 3600.0;
                (
                    samples.load.moves as f64 / hours,
                    samples.load.budget / hours,
                )
            }),
            rolling_same_holder: (samples.load.compared > 0)
                .then(|| samples.load.returned as f64 / samples.load.compared as f64),
            rolling_moves_per_partition: (samples.load.compared > 0)
                .then(|| samples.load.rolling_moves as f64 / samples.load.compared as f64),
        }
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = |f: &mut fmt::Formatter<'_>, name: &str, p: &Option<Percentiles>| match p {
            Some(p) => writeln!(
                f,
                "  {name:<22} p50 {:>8.3}s  p99 {:>8.3}s  max {:>8.3}s  (n={})",
                p.p50_seconds, p.p99_seconds, p.max_seconds, p.count
            ),
            None => writeln!(f, "  {name:<22} no samples"),
        };
        line(f, "failover after crash", &self.failover)?;
        if let Some((p50, p99)) = self.failover_in_acquire_after {
            writeln!(
                f,
                "  {:<22} p50 {p50:>7.2}×  p99 {p99:>7.2}× acquire_after",
                ""
            )?;
        }
        line(f, "hand-off on release", &self.handoff)?;
        line(f, "join to fair share", &self.join_to_fair_share)?;
        if let Some(r) = &self.load_max_over_mean {
            writeln!(
                f,
                "  {:<22} p50 {:>8.3}   p99 {:>8.3}   max {:>8.3}   (n={}, after first within the band)",
                "load max/fair share", r.p50, r.p99, r.max, r.count
            )?;
            line(f, "load back in band", &self.load_back_in_band)?;
            writeln!(
                f,
                "  {:<22} {} shifts not recovered from by the next",
                "", self.load_unrecovered_shifts
            )?;
        }
        if let Some((moves, budget)) = self.load_moves_per_hour {
            writeln!(
                f,
                "  {:<22} {moves:.1} hand-offs per hour (churn budget {budget:.1})",
                "load moves"
            )?;
        }
        if let (Some(same), Some(moves)) =
            (self.rolling_same_holder, self.rolling_moves_per_partition)
        {
            writeln!(
                f,
                "  {:<22} {:.1}% back with their holder, {moves:.2} moves per partition",
                "rolling restart",
                same * 100.0
            )?;
        }
        match (self.moved_per_change, self.minimum_per_change) {
            (Some(moved), Some(minimum)) => writeln!(
                f,
                "  {:<22} {moved:.1} moved per change vs minimum ⌈P/N⌉ {minimum:.1} ({} changes)",
                "membership change", self.membership_changes
            )?,
            _ => writeln!(f, "  {:<22} no clean changes", "membership change")?,
        }
        writeln!(
            f,
            "  {:<22} {:.2} reads ({:.1} rows), {:.2} writes ({:.1} rows) per node per heartbeat",
            "store traffic",
            self.reads_per_node_heartbeat,
            self.rows_read_per_node_heartbeat,
            self.writes_per_node_heartbeat,
            self.rows_written_per_node_heartbeat
        )?;
        writeln!(
            f,
            "  {:<22} {} accepted, {} rejected as stale",
            "fenced work", self.fenced_accepted, self.fenced_rejected
        )?;
        writeln!(
            f,
            "  {:<22} {} ended, {} cut short by their permit running out",
            "work under permits", self.work_units, self.work_units_cut_short
        )?;
        writeln!(
            f,
            "  {:<22} checked at {} settled instants and at the end of every run",
            "balance", self.settled_balance_checks
        )?;
        let c = &self.faults;
        writeln!(
            f,
            "  {:<22} {} crashes, {} pauses, {} outages ({} calls refused), {} throttled, \
             {} lost replies, {} held-back writes, {} slow replies, {} dropped calls, \
             {} links slowed and cut, {} joins, {} leaves, {} drains/undrains, \
             {} operator commands, {} mis-set restarts, {} destroys and rebuilds, \
             {} member records one node could not read, {} restarts in place",
            "faults injected",
            c.crashes,
            c.pauses,
            c.outages,
            c.unavailable,
            c.throttled,
            c.lost_replies,
            c.delayed_writes,
            c.slow_replies,
            c.dropped,
            c.link_faults,
            c.joins,
            c.leaves,
            c.drains,
            c.operator,
            c.misconfigured,
            c.rebuilds,
            c.garbled_members,
            c.restarts_in_place
        )?;
        writeln!(
            f,
            "  {:<22} {:.0} simulated seconds per wall-clock second",
            "speed", self.simulated_per_wall_second
        )
    }
}

/// The outcome of many seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds that kept every invariant.
    pub passed: u64,
    /// The violations found, by seed.
    pub violations: Vec<Violation>,
    /// Simulated time over all seeds.
    #[serde(serialize_with = "seconds")]
    pub simulated: Duration,
    /// Wall-clock time for the whole batch.
    #[serde(serialize_with = "seconds")]
    pub wall: Duration,
    /// Figures over the seeds that passed.
    pub figures: Figures,
}

impl Summary {
    /// Whether every seed kept every invariant.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }
}
