//! Participant configuration and its validation.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::types::{GroupName, NodeId, PartitionId};

mod builder;
mod controls;
pub use controls::NegativeControls;

/// How one participant takes part in a group. Plain fields with documented defaults; call
/// [`ParticipantConfig::validate`] (done by [`crate::Participant::start`]) before use.
///
/// The defaults follow the classic parameterization: renew every 10 s, stop serving 30 s
/// after the last renewal was sent, take over a lease whose record has not changed for 45 s.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ParticipantConfig {
    /// This node's name, unique in the group.
    pub node: NodeId,
    /// The lease table to take part in. Default `default`.
    pub group: GroupName,
    /// How many partitions the group has (`0..partitions`).
    pub partitions: u32,
    /// How often held leases are renewed and the member record rewritten. Default 10 s.
    pub heartbeat: Duration,
    /// How long a renewal keeps a lease valid, counted from when it was sent. Default 30 s.
    pub lease_validity: Duration,
    /// How long a lease record must stay unchanged before another node may take it.
    /// Default 45 s. Must exceed `lease_validity` with the drift bound (see
    /// [`ParticipantConfig::validate`]).
    pub acquire_after: Duration,
    /// How often member records are read, and the lease table with them while this node
    /// has something to do (see `relist_after`). Default 10 s.
    pub scan_interval: Duration,
    /// The most partitions this node will hold. Default: no cap beyond `partitions`.
    pub max_partitions_per_node: u32,
    /// The most partitions taken in one scan, so a starting node ramps up gently. Default 16.
    /// With a non-zero `relist_after`, successive batches may come from one reading of the
    /// table.
    pub max_acquires_per_scan: u32,
    /// Bound ρ on the clock-rate drift between any two nodes, as a fraction. Default 0.01;
    /// at least [`ParticipantConfig::MIN_CLOCK_DRIFT`].
    pub max_clock_drift: f64,
    /// Time limit on every store call. Default 5 s; at most `heartbeat`.
    pub store_timeout: Duration,
    /// This node's relative capacity. Default 1.
    pub weight: u32,
    /// Fraction by which periods are randomly shortened or stretched, so a fleet does not
    /// hit the store in lock-step. Default 0.1.
    pub jitter: f64,
    /// How long a member's record may stay unchanged before it is deleted: a node that
    /// crashed and never came back under its name (a replaced container, say) would otherwise
    /// stay in every member listing for good. Until then operators see it as stale. Records
    /// marked draining are kept, so a drain outlives the node's absence. Default
    /// 1 h; at least twice [`ParticipantConfig::member_timeout`].
    pub forget_members_after: Duration,
    /// How long the fleet may go without reading the lease table while nothing signals a
    /// change. Zero: every node reads it on every scan. Otherwise a node at its target, with
    /// nothing free in sight, lists only the member records each scan, and reads the leases
    /// again when the membership changes, a member misses a heartbeat (with session leases:
    /// has been silent for `acquire_after`, when its leases may be free), a change notice
    /// arrives, an operator command changed the table (see [`crate::admin::nudge`]), it loses
    /// a lease, or after `relist_after × live members` (spread by half either way), so that
    /// some node of the fleet reads it about every `relist_after`, whatever the fleet's size.
    /// While taking its share batch by batch, a node also plans on its last reading for up to
    /// `acquire_after`, taking its own stripe of the table first ([`crate::planner::Stripe`]),
    /// and when a whole fleet starts together each node waits one scan for the others to
    /// register before taking anything. On a large table that is most of the store's
    /// read load gone; the price is that a crash is noticed by its missed heartbeat, a little
    /// later than by its unrenewed leases, and that a change made by other means than the
    /// notices and operator commands (a record edited by hand in the store) is found by some
    /// node in about this long. Safety does not depend on it: a take is still a
    /// compare-and-set on a version seen unchanged for `acquire_after`. Default: zero up to
    /// [`ParticipantConfig::LIST_EVERY_SCAN_UP_TO`] partitions, 5 minutes above.
    pub relist_after: Duration,
    /// How long giving a lease up (rebalancing, a drain, [`crate::Participant::release`],
    /// a shutdown) waits for the work in flight under it: the lease stops taking new
    /// [`crate::WorkPermit`]s at once, keeps being renewed, and is written released when its
    /// last permit is dropped. If permits are still held after this long, the node stops
    /// renewing and does not release: the lease expires, and the next holder waits
    /// `acquire_after` instead of one scan — slower, never overlapping. Default 30 s.
    pub drain_timeout: Duration,
    /// Partitions this node never takes or renews: its own exclusion list, for a partition
    /// it must not serve (a shard its host cannot reach, a tenant pinned elsewhere). Unlike
    /// [`crate::admin::prohibit`], which an operator writes into the table for everyone to
    /// see, it is this node's setting alone; change it while running with
    /// [`crate::Participant::set_excluded`], and a partition held when it becomes excluded
    /// is handed off as in a drain. Other nodes take what it excludes as any free partition.
    /// Default: none.
    pub excluded: BTreeSet<PartitionId>,
    /// The URL this node serves clients on, published in its member record so that a
    /// [`crate::Router`] can send a key's requests to its owner. Default: none.
    pub advertise: Option<String>,
    /// A few labels published with the member record (zone, version), within
    /// [`crate::MemberRecord::MAX_METADATA_ENTRIES`] entries. Default: none.
    pub metadata: BTreeMap<String, String>,
    /// This node's capacity for load, relative to the other members' (as `weight` is for
    /// partition counts): when the application reports load ([`crate::Callbacks::load`]),
    /// each node's fair share of the fleet's load is in proportion to it. Default: `weight`.
    pub capacity: Option<f64>,
    /// The load above which this node hands off its hottest partitions that another member
    /// has room for, even when the fleet is otherwise balanced; published so that the others
    /// do not send it more. Default: none.
    pub max_load: Option<f64>,
    /// How far a node's load may stray above its fair share before partitions move to
    /// balance it: 1.10 lets the most loaded node carry 10% more than its share. A node that
    /// crosses the band sheds down to its share, not just under the band, so that noise
    /// around the edge does not move partitions back and forth. Must be at least 1.
    /// Default 1.10.
    pub load_band: f64,
    /// The most partitions the fleet moves to balance load within any `churn_window`, as a
    /// fraction of the table: each node moves at most its even part of it (at least one),
    /// so with every node at 0.10 at most a tenth of the table moves per window. Moves
    /// forced by a crash, a drain, an exclusion or a nearly empty newcomer are not counted.
    /// Default 0.10.
    pub churn_budget: f64,
    /// The window `churn_budget` counts over. Default 10 minutes.
    pub churn_window: Duration,
    /// The simulator's negative controls, all off (see [`NegativeControls`]).
    pub(crate) controls: NegativeControls,
}

impl ParticipantConfig {
    /// Tables of up to this many partitions default to a zero
    /// [`ParticipantConfig::relist_after`]: reading them every scan costs the store little
    /// and notices crashes soonest.
    pub const LIST_EVERY_SCAN_UP_TO: u32 = 4096;

    /// The smallest drift bound ρ accepted: 0.001. Timers run on the monotonic clock, which
    /// NTP daemons slew by up to 500 ppm (ntpd's limit) to correct the wall clock, so two
    /// healthy, synchronized nodes can count time 1000 ppm apart on top of their oscillators'
    /// own error. A smaller bound, zero above all, would claim a margin the hardware and its
    /// time daemon do not give.
    pub const MIN_CLOCK_DRIFT: f64 = 0.001;

    /// The longest duration accepted for any timing: 365 days. Far beyond any sensible
    /// timing, and small enough that everything derived from the timings (sums, multiples,
    /// deadlines on the monotonic clock) stays far from overflowing.
    pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

    /// The default configuration for `node` in group `default` with `partitions` partitions.
    pub fn new(node: NodeId, partitions: u32) -> ParticipantConfig {
        ParticipantConfig {
            node,
            group: GroupName::new("default").expect("valid"),
            partitions,
            heartbeat: Duration::from_secs(10),
            lease_validity: Duration::from_secs(30),
            acquire_after: Duration::from_secs(45),
            scan_interval: Duration::from_secs(10),
            max_partitions_per_node: partitions,
            max_acquires_per_scan: 16,
            max_clock_drift: 0.01,
            store_timeout: Duration::from_secs(5),
            weight: 1,
            jitter: 0.1,
            forget_members_after: Duration::from_secs(3600),
            relist_after: if partitions > Self::LIST_EVERY_SCAN_UP_TO {
                Duration::from_secs(300)
            } else {
                Duration::ZERO
            },
            drain_timeout: Duration::from_secs(30),
            excluded: BTreeSet::new(),
            advertise: None,
            metadata: BTreeMap::new(),
            capacity: None,
            max_load: None,
            load_band: 1.10,
            churn_budget: 0.10,
            churn_window: Duration::from_secs(600),
            controls: NegativeControls::default(),
        }
    }

    /// Short timings for tests and demos: renew every 250 ms, validity 1 s, take over after
    /// 1.5 s, scan every 250 ms, store calls limited to 250 ms, hand-offs wait 1 s for work
    /// in flight.
    pub fn fast(node: NodeId, partitions: u32) -> ParticipantConfig {
        ParticipantConfig {
            heartbeat: Duration::from_millis(250),
            lease_validity: Duration::from_secs(1),
            acquire_after: Duration::from_millis(1500),
            scan_interval: Duration::from_millis(250),
            store_timeout: Duration::from_millis(250),
            drain_timeout: Duration::from_secs(1),
            ..ParticipantConfig::new(node, partitions)
        }
    }

    /// How long a member's record may stay unchanged before other nodes stop counting it
    /// live: `lease_validity` (by then its own leases have run out), but never less than a
    /// heartbeat plus two scans, the longest a live member can look unchanged to a reader.
    ///
    /// Shorter than `acquire_after`, so that after a crash the survivors raise their targets
    /// before the dead node's leases become takeable, and take them the moment they do.
    /// Liveness only steers balancing; no lease is taken on its account.
    pub fn member_timeout(&self) -> Duration {
        // Saturating, so that an unvalidated configuration cannot make this panic;
        // `validate` bounds every timing far below where it would saturate.
        self.lease_validity.max(
            self.heartbeat
                .saturating_add(self.scan_interval.saturating_mul(2)),
        )
    }

    /// The time limit on one listing of the lease table: `store_timeout` for every
    /// [`ParticipantConfig::LIST_EVERY_SCAN_UP_TO`] partitions (at least one), 80 s for
    /// 65,536 by default. Every other call keeps `store_timeout`.
    ///
    /// A listing is the one call whose work grows with the table. On a busy store a listing
    /// of a large table takes longer than a single record's read, and one cut off at
    /// `store_timeout` is abandoned by the node but not by the store's server, which reads
    /// and sends every row regardless: a fleet retrying such listings keeps its store busy
    /// with readings no node receives, and never settles. A long listing delays nothing
    /// else: renewals and heartbeats go on while it runs.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::{NodeId, ParticipantConfig};
    /// let node = NodeId::new("n1").unwrap();
    /// let small = ParticipantConfig::new(node.clone(), 1024);
    /// assert_eq!(small.listing_timeout(), small.store_timeout);
    /// let large = ParticipantConfig::new(node, 65_536);
    /// assert_eq!(large.listing_timeout(), Duration::from_secs(80));
    /// ```
    pub fn listing_timeout(&self) -> Duration {
        self.store_timeout.saturating_mul(self.table_blocks())
    }

    /// The longest scans back off to while the store fails or throttles them: four scan
    /// intervals, enough to shed most of the read load, short enough that partitions freed
    /// meanwhile are found within a few scans once the store recovers. Renewals keep their
    /// schedule throughout.
    pub fn max_scan_backoff(&self) -> Duration {
        self.scan_interval.saturating_mul(4)
    }

    /// The longest a node waits before listing the table again after listings that timed
    /// out or were throttled: [`ParticipantConfig::max_scan_backoff`] per 4,096 partitions
    /// (as [`ParticipantConfig::listing_timeout`] counts them), so that a node's retried
    /// listings cost its store about 100 rows a second whatever the table's size: 40 s up
    /// to 4,096 partitions, 640 s at 65,536 with the default timings. The first retry waits
    /// half of it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::{NodeId, ParticipantConfig};
    ///
    /// let small = ParticipantConfig::new(NodeId::new("a").unwrap(), 1024);
    /// assert_eq!(small.max_listing_backoff(), small.max_scan_backoff());
    /// let large = ParticipantConfig::new(NodeId::new("a").unwrap(), 65_536);
    /// assert_eq!(large.max_listing_backoff(), Duration::from_secs(640));
    /// ```
    pub fn max_listing_backoff(&self) -> Duration {
        self.max_scan_backoff().saturating_mul(self.table_blocks())
    }

    /// The table counted in blocks of [`ParticipantConfig::LIST_EVERY_SCAN_UP_TO`] rows, at
    /// least one: what a listing costs, relative to a table read every scan.
    fn table_blocks(&self) -> u32 {
        self.partitions.div_ceil(Self::LIST_EVERY_SCAN_UP_TO).max(1)
    }

    /// Whether this node keeps off `partition` (see [`ParticipantConfig::excluded`]).
    pub fn excludes(&self, partition: PartitionId) -> bool {
        !self.controls.ignore_exclusions && self.excluded.contains(&partition)
    }

    /// Checks an exclusion list against a partition count, naming partitions that
    /// do not exist (a typo in a list is better refused than silently ignored).
    pub fn check_excluded(
        partitions: u32,
        excluded: &BTreeSet<PartitionId>,
    ) -> Result<(), ConfigError> {
        let beyond: Vec<u32> = excluded
            .range(PartitionId(partitions)..)
            .map(|p| p.0)
            .collect();
        if beyond.is_empty() {
            return Ok(());
        }
        Err(ConfigError::ExcludedOutOfRange {
            count: beyond.len(),
            first: beyond.into_iter().take(10).collect(),
            partitions,
        })
    }

    /// Checks the configuration, naming the offending values on failure.
    ///
    /// The safety rule: a taker waits `acquire_after` on its clock after first seeing a record
    /// unchanged; the holder stops `lease_validity` on its clock after sending the renewal that
    /// wrote it. With clock rates within ρ of true time, the taker cannot start before the
    /// holder stopped if `acquire_after × (1 − ρ) > lease_validity × (1 + ρ)`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // forget_members_after, relist_after and drain_timeout may be zero: they switch a behaviour off or make it immediate.
        for (name, value, may_be_zero) in [
            ("heartbeat", self.heartbeat, false),
            ("lease_validity", self.lease_validity, false),
            ("acquire_after", self.acquire_after, false),
            ("scan_interval", self.scan_interval, false),
            ("store_timeout", self.store_timeout, false),
            ("forget_members_after", self.forget_members_after, true),
            ("relist_after", self.relist_after, true),
            ("drain_timeout", self.drain_timeout, true),
            ("churn_window", self.churn_window, false),
        ] {
            if value.is_zero() && !may_be_zero {
                return Err(ConfigError::ZeroDuration { name });
            }
            if value > Self::MAX_DURATION {
                return Err(ConfigError::DurationTooLong {
                    name,
                    value,
                    max: Self::MAX_DURATION,
                });
            }
        }
        if self.node.is_operator() {
            return Err(ConfigError::ReservedNode {
                node: self.node.clone(),
            });
        }
        if self.partitions == 0 {
            return Err(ConfigError::ZeroPartitions);
        }
        if self.max_partitions_per_node < 1 {
            return Err(ConfigError::ZeroCap);
        }
        if self.max_acquires_per_scan < 1 {
            return Err(ConfigError::ZeroAcquiresPerScan);
        }
        if self.weight < 1 {
            return Err(ConfigError::ZeroWeight);
        }
        if !(Self::MIN_CLOCK_DRIFT..0.5).contains(&self.max_clock_drift) {
            return Err(ConfigError::DriftOutOfRange {
                max_clock_drift: self.max_clock_drift,
            });
        }
        if !(0.0..0.5).contains(&self.jitter) {
            return Err(ConfigError::JitterOutOfRange {
                jitter: self.jitter,
            });
        }
        if self.heartbeat > self.lease_validity / 2 {
            return Err(ConfigError::HeartbeatTooLong {
                heartbeat: self.heartbeat,
                lease_validity: self.lease_validity,
            });
        }
        let rho = self.max_clock_drift;
        let taker_waits = self.acquire_after.as_secs_f64() * (1.0 - rho);
        let holder_serves = self.lease_validity.as_secs_f64() * (1.0 + rho);
        if taker_waits <= holder_serves {
            return Err(ConfigError::UnsafeAcquireAfter {
                acquire_after: self.acquire_after,
                lease_validity: self.lease_validity,
                max_clock_drift: rho,
            });
        }
        if self.store_timeout > self.heartbeat {
            return Err(ConfigError::StoreTimeoutTooLong {
                store_timeout: self.store_timeout,
                heartbeat: self.heartbeat,
            });
        }
        if self.controls.release_ignores_permits {
            return Err(ConfigError::UnsafeRelease);
        }
        if self.controls.skip_group_check {
            return Err(ConfigError::UnsafeGroupCheck);
        }
        if self.controls.reuse_epoch {
            return Err(ConfigError::UnsafeEpochReuse);
        }
        if self.controls.take_ignores_session || self.controls.take_ended_sessions {
            return Err(ConfigError::UnsafeSessionTake);
        }
        if self.controls.ignore_listed_changes {
            return Err(ConfigError::UnsafeListedChanges);
        }
        if self.controls.ignore_exclusions {
            return Err(ConfigError::UnsafeExclusions);
        }
        if self.controls.ignore_reservations {
            return Err(ConfigError::UnsafeReservations);
        }
        Self::check_excluded(self.partitions, &self.excluded)?;
        if !(self.load_band.is_finite() && self.load_band >= 1.0) {
            return Err(ConfigError::LoadBandOutOfRange {
                load_band: self.load_band,
            });
        }
        for (field, value) in [("capacity", self.capacity), ("max_load", self.max_load)] {
            if let Some(value) = value.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(ConfigError::Published {
                    field,
                    reason: format!("= {value} must be a positive number"),
                });
            }
        }
        if !(self.churn_budget.is_finite() && self.churn_budget > 0.0 && self.churn_budget <= 1.0) {
            return Err(ConfigError::ChurnBudgetOutOfRange {
                churn_budget: self.churn_budget,
            });
        }
        let published = crate::record::MemberRecord {
            address: self.advertise.clone(),
            metadata: self.metadata.clone(),
            capacity: self.capacity,
            max_load: self.max_load,
            ..crate::record::MemberRecord::default()
        };
        published
            .validate()
            .map_err(|invalid| ConfigError::Published {
                field: invalid.field,
                reason: invalid.reason,
            })?;
        if self.forget_members_after < self.member_timeout() * 2 {
            return Err(ConfigError::ForgetMembersTooSoon {
                forget_members_after: self.forget_members_after,
                member_timeout: self.member_timeout(),
            });
        }
        Ok(())
    }
}

/// A configuration that [`ParticipantConfig::validate`] refused, with the offending values.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration was zero.
    #[error("{name} must be greater than zero")]
    ZeroDuration {
        /// The field's name.
        name: &'static str,
    },
    /// A duration exceeded [`ParticipantConfig::MAX_DURATION`].
    #[error("{name} = {value:?} must be at most {max:?}")]
    DurationTooLong {
        /// The field's name.
        name: &'static str,
        /// The rejected value.
        value: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// The node took the name reserved for operator commands ([`NodeId::operator`]).
    #[error("node id {node} is reserved for operator commands; choose another name")]
    ReservedNode {
        /// The name.
        node: NodeId,
    },
    /// The simulator's negative control was switched on outside the simulator.
    #[error(
        "the negative control release_ignores_permits lets two nodes work on one partition at once"
    )]
    UnsafeRelease,
    /// The simulator's negative control for the group record was switched on outside it.
    #[error("the negative control skip_group_check lets nodes with unsafe timings take part")]
    UnsafeGroupCheck,
    /// The simulator's negative control for epochs was switched on outside it.
    #[error("the negative control reuse_epoch gives two tenures one fencing token")]
    UnsafeEpochReuse,
    /// The simulator's negative control for session takes was switched on outside it.
    #[error("the negative controls take_ignores_session and take_ended_sessions let a holder keep serving what was taken from it")]
    UnsafeSessionTake,
    /// The simulator's negative control for the holdings check was switched on outside it.
    #[error("the negative control ignore_listed_changes lets a holder keep serving a lease whose record was changed behind its back")]
    UnsafeListedChanges,
    /// The simulator's negative control for exclusion lists was switched on outside it.
    #[error("the negative control ignore_exclusions makes a node serve partitions it excludes")]
    UnsafeExclusions,
    /// The simulator's negative control for restart reservations was switched on outside it.
    #[error("the negative control ignore_reservations moves the partitions of a node restarting in place")]
    UnsafeReservations,
    /// What the node would publish in its member record (`advertise`, `metadata`) is
    /// refused by every store.
    #[error("{} {reason}", if *field == "address" { "advertise" } else { *field })]
    Published {
        /// The member record's field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The exclusion list names partitions the group does not have.
    #[error(
        "excluded partitions must be below the partition count {partitions}, but {count} are not: {}",
        first.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    )]
    ExcludedOutOfRange {
        /// How many listed partitions do not exist.
        count: usize,
        /// The first of them (up to ten).
        first: Vec<u32>,
        /// The group's partition count.
        partitions: u32,
    },
    /// The load band was below 1 or not a number.
    #[error("load_band = {load_band} must be at least 1 (1.10 lets a node carry 10% above its fair share)")]
    LoadBandOutOfRange {
        /// The rejected value.
        load_band: f64,
    },
    /// The churn budget was outside `(0, 1]`.
    #[error("churn_budget = {churn_budget} must be in (0, 1]: the fraction of the table the group may move per churn_window to balance load")]
    ChurnBudgetOutOfRange {
        /// The rejected value.
        churn_budget: f64,
    },
    /// `partitions` was zero.
    #[error("partitions must be at least 1")]
    ZeroPartitions,
    /// `max_partitions_per_node` was zero.
    #[error("max_partitions_per_node must be at least 1")]
    ZeroCap,
    /// `max_acquires_per_scan` was zero.
    #[error("max_acquires_per_scan must be at least 1")]
    ZeroAcquiresPerScan,
    /// `weight` was zero.
    #[error("weight must be at least 1")]
    ZeroWeight,
    /// The drift bound was outside `[ParticipantConfig::MIN_CLOCK_DRIFT, 0.5)`.
    #[error(
        "max_clock_drift = {max_clock_drift} must be in [{min}, 0.5)",
        min = ParticipantConfig::MIN_CLOCK_DRIFT
    )]
    DriftOutOfRange {
        /// The rejected value.
        max_clock_drift: f64,
    },
    /// The jitter fraction was outside `[0, 0.5)`.
    #[error("jitter = {jitter} must be in [0, 0.5)")]
    JitterOutOfRange {
        /// The rejected value.
        jitter: f64,
    },
    /// A lease must be renewable at least twice within its validity.
    #[error("heartbeat = {heartbeat:?} must be at most lease_validity / 2 (lease_validity = {lease_validity:?})")]
    HeartbeatTooLong {
        /// The rejected heartbeat.
        heartbeat: Duration,
        /// The lease validity it was checked against.
        lease_validity: Duration,
    },
    /// A taker could start before the holder stops: two owners at once.
    #[error(
        "unsafe timings: acquire_after × (1 − ρ) must exceed lease_validity × (1 + ρ), \
         but acquire_after = {acquire_after:?}, lease_validity = {lease_validity:?}, ρ = {max_clock_drift}"
    )]
    UnsafeAcquireAfter {
        /// The rejected wait before taking over.
        acquire_after: Duration,
        /// The lease validity.
        lease_validity: Duration,
        /// The drift bound ρ.
        max_clock_drift: f64,
    },
    /// A store call could outlast a heartbeat, delaying renewals.
    #[error("store_timeout = {store_timeout:?} must be at most heartbeat = {heartbeat:?}")]
    StoreTimeoutTooLong {
        /// The rejected time limit.
        store_timeout: Duration,
        /// The heartbeat it was checked against.
        heartbeat: Duration,
    },
    /// Member records would be deleted while their nodes may merely be slow.
    #[error(
        "forget_members_after = {forget_members_after:?} must be at least twice the member \
         timeout ({member_timeout:?}, the longer of lease_validity and heartbeat + 2 × scan_interval)"
    )]
    ForgetMembersTooSoon {
        /// The rejected delay.
        forget_members_after: Duration,
        /// The member timeout it was checked against.
        member_timeout: Duration,
    },
}

#[cfg(test)]
mod tests;
