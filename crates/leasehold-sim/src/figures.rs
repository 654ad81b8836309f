//! What a run measures: failover and hand-off times, ramp-up of joining nodes, partitions
//! moved per membership change, and store traffic.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::PartitionId;
use serde::Serialize;
use tokio::time::Instant;

use crate::invariants::Holder;

/// Store traffic counted by the fault-injecting wrapper, over every node.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StoreTraffic {
    /// Read calls (list, get).
    pub read_calls: u64,
    /// Records returned by reads.
    pub rows_read: u64,
    /// Listings of the whole lease table answered (each also counted in `rows_read`).
    pub lease_listings: u64,
    /// Write calls (put, delete; a batch counts once).
    pub write_calls: u64,
    /// Records in those writes.
    pub rows_written: u64,
    /// Node-heartbeats lived: the sum over node processes of their lifetime divided by the
    /// heartbeat period.
    pub node_heartbeats: f64,
    /// Wall-clock seconds spent inside the in-memory store (copying records out of it for
    /// listings, mostly): a profile of where a large run's time goes.
    pub store_wall_seconds: f64,
}

impl StoreTraffic {
    /// Adds another run's counts.
    pub fn add(&mut self, other: &StoreTraffic) {
        self.read_calls += other.read_calls;
        self.rows_read += other.rows_read;
        self.lease_listings += other.lease_listings;
        self.write_calls += other.write_calls;
        self.rows_written += other.rows_written;
        self.node_heartbeats += other.node_heartbeats;
        self.store_wall_seconds += other.store_wall_seconds;
    }
}

/// How many faults of each kind were injected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FaultCounts {
    /// Node crashes.
    pub crashes: u64,
    /// Process pauses.
    pub pauses: u64,
    /// Store outages.
    pub outages: u64,
    /// Calls refused as throttled.
    pub throttled: u64,
    /// Calls refused during outages.
    pub unavailable: u64,
    /// Writes applied whose reply was lost (and reads whose reply was lost).
    pub lost_replies: u64,
    /// Writes held back and applied later.
    pub delayed_writes: u64,
    /// Calls applied whose reply came late, up to beyond the lease validity.
    pub slow_replies: u64,
    /// Calls lost before the store: a link cut both ways, or the store cut from every node.
    pub dropped: u64,
    /// Links from one node to the store that went slow and were then cut.
    pub link_faults: u64,
    /// Nodes joined.
    pub joins: u64,
    /// Nodes that left gracefully.
    pub leaves: u64,
    /// Drains and undrains.
    pub drains: u64,
    /// Operator commands on lease records: kicks, offline, online, prohibit, allow.
    pub operator: u64,
    /// Restarts with timings that break the safety rule against the fleet's.
    pub misconfigured: u64,
    /// Groups destroyed under the running fleet and built out again.
    pub rebuilds: u64,
    /// Windows in which one node could not decode another's member record.
    pub garbled_members: u64,
    /// Nodes stopped to restart in place (back within the restart window, late, or never).
    pub restarts_in_place: u64,
}

impl FaultCounts {
    /// Adds another run's counts.
    pub fn add(&mut self, other: &FaultCounts) {
        self.crashes += other.crashes;
        self.pauses += other.pauses;
        self.outages += other.outages;
        self.throttled += other.throttled;
        self.unavailable += other.unavailable;
        self.lost_replies += other.lost_replies;
        self.delayed_writes += other.delayed_writes;
        self.slow_replies += other.slow_replies;
        self.dropped += other.dropped;
        self.link_faults += other.link_faults;
        self.joins += other.joins;
        self.leaves += other.leaves;
        self.drains += other.drains;
        self.operator += other.operator;
        self.misconfigured += other.misconfigured;
        self.rebuilds += other.rebuilds;
        self.garbled_members += other.garbled_members;
        self.restarts_in_place += other.restarts_in_place;
    }
}

/// Raw samples from one or more runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Samples {
    /// From a crash to the next acquisition of each partition the crashed node held.
    pub failover: Vec<Duration>,
    /// The same, each divided by its run's `acquire_after`: runs whose timings differ
    /// (drawn per seed) compare on this.
    pub failover_ratio: Vec<f64>,
    /// From a cooperative release (rebalance, drain, leave) to the next acquisition.
    pub handoff: Vec<Duration>,
    /// From a node's join to its holding its fair share `⌊P / N⌋`.
    pub join_to_fair_share: Vec<Duration>,
    /// Per membership change with no other fault nearby: (partitions moved, ⌈P/N⌉). A
    /// move is a partition handed off (released, then taken by another node) within
    /// `acquire_after` plus four scans of the change. A change is left out when another
    /// change, a crash, a pause or an outage happens in that window, when takeovers from an
    /// earlier crash are still due as it starts, or when a lease is taken over after an
    /// expiry during it.
    pub moves: Vec<(u64, u64)>,
    /// Store traffic.
    pub traffic: StoreTraffic,
    /// Submissions to fenced resources accepted and rejected as stale.
    pub fenced: (u64, u64),
    /// Units of work under permits that ended, and how many of them their permit ran out
    /// under (a pause, a lost lease).
    pub work_units: (u64, u64),
    /// Sampling points at which the fleet had settled, where balance was checked.
    pub settled_checks: u64,
    /// Faults injected.
    pub faults: FaultCounts,
    /// Load balancing, when the run models load.
    pub load: LoadSamples,
}

/// What runs with a load model record of their balance.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadSamples {
    /// At each sample after the fleet first came within the band: the highest ratio of a
    /// serving node's true load to its fair share.
    pub max_over_mean: Vec<f64>,
    /// For each shift of the load that put the fleet out of the band: the time from the
    /// shift until it was back within it.
    pub back_in_band: Vec<Duration>,
    /// Shifts after which the fleet was still out of the band at the next shift or the end.
    pub unrecovered: u64,
    /// Partitions handed off after the fleet first came within the band.
    pub moves: u64,
    /// Simulated time after the fleet first came within the band.
    pub observed: Duration,
    /// The churn budget's limit on moves over `observed`, summed over the fleet.
    pub budget: f64,
    /// Rolling restarts: partitions whose holder after the restart was the one before.
    pub returned: u64,
    /// Rolling restarts: partitions compared.
    pub compared: u64,
    /// Rolling restarts: acquisitions between the first stop and the fleet settling after
    /// the last start.
    pub rolling_moves: u64,
}

impl LoadSamples {
    fn add(&mut self, other: &LoadSamples) {
        self.max_over_mean.extend_from_slice(&other.max_over_mean);
        self.back_in_band.extend_from_slice(&other.back_in_band);
        self.unrecovered += other.unrecovered;
        self.moves += other.moves;
        self.observed += other.observed;
        self.budget += other.budget;
        self.returned += other.returned;
        self.compared += other.compared;
        self.rolling_moves += other.rolling_moves;
    }
}

impl Samples {
    /// Adds another run's samples.
    pub fn add(&mut self, other: &Samples) {
        self.failover.extend_from_slice(&other.failover);
        self.failover_ratio.extend_from_slice(&other.failover_ratio);
        self.handoff.extend_from_slice(&other.handoff);
        self.join_to_fair_share
            .extend_from_slice(&other.join_to_fair_share);
        self.moves.extend_from_slice(&other.moves);
        self.traffic.add(&other.traffic);
        self.fenced.0 += other.fenced.0;
        self.fenced.1 += other.fenced.1;
        self.work_units.0 += other.work_units.0;
        self.work_units.1 += other.work_units.1;
        self.settled_checks += other.settled_checks;
        self.faults.add(&other.faults);
        self.load.add(&other.load);
    }
}

#[derive(Debug)]
struct ChangeWindow {
    until: Instant,
    minimum: u64,
    moved: u64,
    clean: bool,
}

/// Collects [`Samples`] as events happen during one run.
#[derive(Debug)]
pub struct Recorder {
    partitions: u32,
    window: Duration,
    /// The run's `acquire_after`, against which failovers are also measured.
    acquire_after: Option<Duration>,
    /// Partitions of crashed nodes, since the crash.
    failover_pending: BTreeMap<PartitionId, Instant>,
    /// Released partitions, since the release.
    handoff_pending: BTreeMap<PartitionId, Instant>,
    /// Joined nodes, since the join.
    join_pending: BTreeMap<usize, Instant>,
    last_holder: BTreeMap<PartitionId, usize>,
    windows: Vec<ChangeWindow>,
    /// The latest instant anything changed who holds what or who serves, or the store
    /// failed a call (see [`Recorder::settled`]).
    changed_at: Option<Instant>,
    /// What was measured so far.
    pub samples: Samples,
}

impl Recorder {
    /// A recorder for `partitions` partitions that attributes moves to a membership change
    /// for `window` after it.
    pub fn new(partitions: u32, window: Duration) -> Recorder {
        Recorder {
            partitions,
            window,
            acquire_after: None,
            failover_pending: BTreeMap::new(),
            handoff_pending: BTreeMap::new(),
            join_pending: BTreeMap::new(),
            last_holder: BTreeMap::new(),
            windows: Vec::new(),
            changed_at: None,
            samples: Samples::default(),
        }
    }

    /// Also measures each failover as a multiple of `acquire_after`
    /// ([`Samples::failover_ratio`]).
    pub fn measure_against(&mut self, acquire_after: Duration) {
        self.acquire_after = Some(acquire_after).filter(|wait| !wait.is_zero());
    }

    /// A node crashed at `now` while holding `held`.
    pub fn crashed(&mut self, held: &[PartitionId], now: Instant) {
        for partition in held {
            self.failover_pending.insert(*partition, now);
        }
        self.disturbed(now);
    }

    /// Something other than a membership change disturbed the fleet at `now`: moves it
    /// causes are not attributed to the change in progress.
    pub fn disturbed(&mut self, now: Instant) {
        self.changed(now);
        for window in &mut self.windows {
            window.clean = false;
        }
    }

    /// A membership change at `now` leaving `active` nodes serving.
    pub fn membership_changed(&mut self, now: Instant, active: usize) {
        self.disturbed(now);
        let minimum = u64::from(self.partitions).div_ceil(active.max(1) as u64);
        self.windows.push(ChangeWindow {
            until: now + self.window,
            minimum,
            moved: 0,
            // Takeovers still due from a crash would land in this window and count as its
            // moves.
            clean: self.failover_pending.is_empty(),
        });
    }

    /// A node joined at `now`.
    pub fn joined(&mut self, node: usize, now: Instant) {
        self.join_pending.insert(node, now);
    }

    /// `holder` released `partition` at `now`.
    pub fn released(&mut self, partition: PartitionId, now: Instant) {
        self.handoff_pending.insert(partition, now);
    }

    /// An operator command changed `partition`'s record: its next acquisition waits on the
    /// operator (an offline partition waits for `online`, and any change restarts the
    /// `acquire_after` wait), so it measures neither a failover nor a hand-off.
    pub fn operator_changed(&mut self, partition: PartitionId) {
        self.failover_pending.remove(&partition);
        self.handoff_pending.remove(&partition);
    }

    /// Node `node` stopped (crashed, left or was shut down).
    pub fn stopped(&mut self, node: usize) {
        self.join_pending.remove(&node);
    }

    /// `holder` holds `held` partitions at `now`, the fair share being `fair_share`: a
    /// joining node's ramp-up ends when it first holds its share.
    pub fn holds(&mut self, holder: Holder, now: Instant, held: usize, fair_share: usize) {
        if held >= fair_share {
            if let Some(joined) = self.join_pending.remove(&holder.node) {
                self.samples.join_to_fair_share.push(now - joined);
            }
        }
    }

    /// `holder` acquired `partition` at `now`.
    pub fn acquired(&mut self, holder: Holder, partition: PartitionId, now: Instant) {
        if let Some(crash) = self.failover_pending.remove(&partition) {
            self.samples.failover.push(now - crash);
            if let Some(wait) = self.acquire_after {
                let ratio = (now - crash).as_secs_f64() / wait.as_secs_f64();
                self.samples.failover_ratio.push(ratio);
            }
        }
        let handed_off = self.handoff_pending.remove(&partition);
        if let Some(release) = handed_off {
            self.samples.handoff.push(now - release);
        }
        let previous = self.last_holder.insert(partition, holder.node);
        if previous.is_some_and(|node| node != holder.node) {
            if handed_off.is_some() {
                for window in self.windows.iter_mut().filter(|w| now <= w.until) {
                    window.moved += 1;
                }
            } else {
                // Taken after an expiry (a crash, a pause, an outage): recovery from a fault,
                // which a change's window must not be charged with.
                self.disturbed(now);
            }
        }
    }

    /// Something changed at `at` (or goes on changing until then): a node took, lost or
    /// released a lease, started, joined, stopped, paused or resumed, or the store failed a
    /// call or is down.
    pub fn changed(&mut self, at: Instant) {
        self.changed_at = Some(self.changed_at.map_or(at, |changed| changed.max(at)));
    }

    /// Whether, as far as the recorder saw, the fleet has settled by `now`: no failover or
    /// hand-off it measures is still waiting for its taker, and nothing has changed (see
    /// [`Recorder::changed`]) for `quiet_for`. A joiner still short of its share does not
    /// count: that is the imbalance the balance check is there to see. The world adds what
    /// only it can see: every partition held, every node running, joined and handing nothing
    /// off.
    pub fn settled(&self, now: Instant, quiet_for: Duration) -> bool {
        self.failover_pending.is_empty()
            && self.handoff_pending.is_empty()
            && self
                .changed_at
                .is_some_and(|changed| changed + quiet_for <= now)
    }

    /// Closes the windows that ended by `now`, keeping the clean ones as samples.
    pub fn settle(&mut self, now: Instant) {
        let (done, open): (Vec<ChangeWindow>, Vec<ChangeWindow>) =
            self.windows.drain(..).partition(|w| w.until <= now);
        self.windows = open;
        self.samples.moves.extend(
            done.into_iter()
                .filter(|w| w.clean)
                .map(|w| (w.moved, w.minimum)),
        );
    }
}

/// A distribution summary in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Percentiles {
    /// Number of samples.
    pub count: usize,
    /// Median, seconds.
    pub p50_seconds: f64,
    /// 99th percentile, seconds.
    pub p99_seconds: f64,
    /// Largest, seconds.
    pub max_seconds: f64,
}

impl Percentiles {
    /// The summary of `samples`, or `None` if there are none.
    pub fn of(samples: &[Duration]) -> Option<Percentiles> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort();
        let at = |q: f64| {
            let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted[index].as_secs_f64()
        };
        Some(Percentiles {
            count: sorted.len(),
            p50_seconds: at(0.50),
            p99_seconds: at(0.99),
            max_seconds: sorted[sorted.len() - 1].as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_settles_once_nothing_changed_for_a_while_and_no_taker_is_awaited() {
        let start = Instant::now();
        let s = |secs: u64| start + Duration::from_secs(secs);
        let quiet_for = Duration::from_secs(60);
        let mut recorder = Recorder::new(16, Duration::from_secs(85));
        assert!(!recorder.settled(s(100), quiet_for), "nothing happened yet");
        recorder.changed(s(0));
        assert!(!recorder.settled(s(59), quiet_for));
        assert!(recorder.settled(s(60), quiet_for));
        // A crash: its partitions await their taker, however long it takes.
        recorder.crashed(&[PartitionId(3)], s(100));
        assert!(!recorder.settled(s(200), quiet_for));
        recorder.acquired(
            Holder {
                node: 1,
                incarnation: 1,
            },
            PartitionId(3),
            s(150),
        );
        recorder.changed(s(150));
        assert!(!recorder.settled(s(209), quiet_for));
        assert!(recorder.settled(s(210), quiet_for));
        // An outage counts until it ends.
        recorder.changed(s(400));
        assert!(!recorder.settled(s(300), quiet_for));
        // A joiner short of its share does not count: that is what balance must catch.
        recorder.joined(7, s(470));
        assert!(recorder.settled(s(470), quiet_for));
    }
}
