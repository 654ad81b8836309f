//! The participants' timings in a simulation: the library's defaults, a fast set for short
//! runs, and the unsafe set of the negative control.

use std::time::Duration;

use leasehold::{NodeId, ParticipantConfig};

/// The participants' timings, shared by every simulated node.
#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    /// How often held leases are renewed.
    pub heartbeat: Duration,
    /// How long a renewal keeps a lease valid.
    pub lease_validity: Duration,
    /// How long a record must stay unchanged before another node takes it.
    pub acquire_after: Duration,
    /// How often each node lists the table.
    pub scan_interval: Duration,
    /// Time limit on each store call.
    pub store_timeout: Duration,
    /// The drift bound ρ each node is configured with; the simulated clocks stay within it.
    pub max_clock_drift: f64,
    /// The most partitions one node takes in one scan.
    pub max_acquires_per_scan: u32,
    /// How long a settled node goes without reading the lease table; `None` keeps the
    /// participant's default for the table's size.
    pub relist_after: Option<Duration>,
}

impl Default for Timings {
    /// The participant's own defaults: heartbeat 10 s, validity 30 s, take over after 45 s,
    /// scan every 10 s, store calls limited to 5 s, ρ = 0.01.
    fn default() -> Self {
        let defaults = ParticipantConfig::new(NodeId::new("defaults").expect("valid"), 1);
        Timings {
            heartbeat: defaults.heartbeat,
            lease_validity: defaults.lease_validity,
            acquire_after: defaults.acquire_after,
            scan_interval: defaults.scan_interval,
            store_timeout: defaults.store_timeout,
            max_clock_drift: defaults.max_clock_drift,
            max_acquires_per_scan: defaults.max_acquires_per_scan,
            relist_after: None,
        }
    }
}

impl Timings {
    /// The deliberately unsafe negative control: a node takes over a record unchanged for
    /// half a lease, while its holder may still be serving it.
    #[must_use]
    pub fn unsafe_takeover(mut self) -> Timings {
        self.acquire_after = self.lease_validity / 2;
        self
    }

    /// A mis-set node's timings: lease validity and wait both tripled. Valid alone, but the
    /// node serves a lease for twice as long as the fleet waits before taking it.
    pub fn mis_set(mut self) -> Timings {
        self.lease_validity *= 3;
        self.acquire_after *= 3;
        self
    }

    /// The participant configuration for `node` in a group of `partitions`. Member records
    /// are forgotten as soon as the configuration allows, so that paused and crashed nodes
    /// exercise coming back to a deleted record.
    pub fn participant_config(&self, node: NodeId, partitions: u32) -> ParticipantConfig {
        let config = ParticipantConfig::new(node, partitions)
            .with_heartbeat(self.heartbeat)
            .with_lease_validity(self.lease_validity)
            .with_acquire_after(self.acquire_after)
            .with_scan_interval(self.scan_interval)
            .with_store_timeout(self.store_timeout)
            .with_max_clock_drift(self.max_clock_drift)
            .with_max_acquires_per_scan(self.max_acquires_per_scan);
        let relist_after = self.relist_after.unwrap_or(config.relist_after);
        let forget_members_after = config.member_timeout() * 2;
        config
            .with_forget_members_after(forget_members_after)
            .with_relist_after(relist_after)
    }

    /// The longest a partition may stay unowned once faults stop: a scan to see its record,
    /// `acquire_after` (measured on a clock that may run slow by ρ) for the record to count as
    /// abandoned, a second scan to recompute targets, plus one heartbeat and one store timeout
    /// for calls still in flight or hung when the faults stopped.
    ///
    /// The second scan may be a backed-off one, whatever `relist_after`. A node whose scans
    /// failed up to the end of the faults while its heartbeats succeeded keeps its back-off
    /// (a store that answers writes and fails listings is the overload the back-off is for),
    /// and if it is the only node short of its share, the others, at theirs, take the
    /// partition only after the orphan grace of two scans; when settled nodes skip the lease
    /// table (`relist_after` above zero), a record its holder lost unawares (say, to a
    /// renewal whose reply never came) may be watched by that holder alone.
    pub fn liveness_bound(&self) -> Duration {
        let (backed_off, jitter) = self.backed_off_scan();
        self.acquire_after.div_f64(1.0 - self.max_clock_drift)
            + (self.scan_interval + backed_off).mul_f64(1.0 + jitter)
            + self.heartbeat
            + self.store_timeout
    }

    /// The longest a participant's scans back off to with these timings, and the jitter
    /// that spreads them (participants keep the default).
    fn backed_off_scan(&self) -> (Duration, f64) {
        let config = ParticipantConfig::new(NodeId::new("n").expect("valid"), 1)
            .with_scan_interval(self.scan_interval);
        (config.max_scan_backoff(), config.jitter)
    }

    /// How long the fleet must go without a change before its shares must be even: a node
    /// that joined is seen by each other node at its next member listing, which store
    /// faults may have backed off to `max_scan_backoff` (with jitter), and the one above its
    /// share then starts handing off within a store call; a drained node learns of its drain
    /// at its next heartbeat or listing. Once a hand-off starts, it shows, and the fleet is
    /// not settled until it is done.
    pub fn settle_delay(&self) -> Duration {
        let (backed_off, jitter) = self.backed_off_scan();
        self.heartbeat + backed_off.mul_f64(1.0 + jitter) + self.store_timeout
    }

    /// How long the others leave a node restarting in place its partitions: the group's
    /// default restart window, its `acquire_after` (the group adopts the fleet's timings).
    pub fn restart_window(&self) -> Duration {
        self.acquire_after
    }

    /// How long a hand-off waits for the work in flight: the participant's default, which
    /// simulated nodes keep.
    pub fn drain_timeout(&self) -> Duration {
        ParticipantConfig::new(NodeId::new("defaults").expect("valid"), 1).drain_timeout
    }

    /// How long a partition may be unowned during a cooperative hand-off once the fleet has
    /// settled: the taker hears of the release by a change notice or, at worst, its next scan.
    pub fn handoff_bound(&self) -> Duration {
        self.scan_interval.mul_f64(1.1) + self.store_timeout
    }
}
