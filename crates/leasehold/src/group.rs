//! The group record: what every node of a group must agree on, kept once per group.
//!
//! Safety rests on a relation between two nodes' settings — every taker's `acquire_after`
//! must exceed every holder's `lease_validity` with the drift bound — and on fencing tokens
//! that never go back. Neither can be checked by one node from its own configuration, so the
//! group keeps one record with:
//!
//! - the **timings** every node must fit: no node may hold a lease longer than the group's
//!   `lease_validity` or take one sooner than its `acquire_after`, and the two are safe with
//!   the group's drift bound, so any two nodes that fit are safe against each other;
//! - the **record-format version**: a node that does not know the group's format refuses to
//!   start, rather than rewrite records from a struct that would strip fields it does not know;
//! - the **epoch floor**: every epoch issued in the group before its lease records were
//!   deleted, so that records created again start above it;
//! - the **lease mode**, and a change of it under way;
//! - the **generation**, raised by every destroy: a node that joined an earlier generation
//!   stops when it reads a later one, rather than take part in a group built again under it.
//!
//! Unknown fields are kept when the record is rewritten, so a newer version's additions
//! survive an older version's update.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::ParticipantConfig;
use crate::record::{MemberRecord, Stored};
use crate::types::{Epoch, GroupName, NodeId};

/// The record-format version this build reads and writes.
///
/// Raised when records gain fields that an older build would strip on rewriting them, or
/// would not obey; a node refuses to start in a group whose format is higher.
///
/// - 1: the group record with timings, epoch floor and lease mode.
/// - 2: the group's generation and a pending change of lease mode, which a node must obey
///   (stop when the generation changes, refuse to join while the mode changes). A group is
///   raised to 2 by the first command that uses them — `destroy` or `lease-mode` — so that a
///   node of an older build, which would ignore them, is refused from then on. A group of
///   format 1 is joined as it is: a rolling upgrade needs nothing more.
pub const FORMAT_VERSION: u32 = 2;

/// A stored group record, keyed by its group.
pub type StoredGroup = Stored<GroupName, GroupRecord>;

/// How leases are renewed in a group. Every node of a group follows the group's mode, read
/// from its record when it joins: a node renewing per partition would take leases that a
/// node renewing by session still holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LeaseMode {
    /// Each lease record is renewed on its own: one store write per partition held, per
    /// heartbeat.
    #[default]
    PerPartition,
    /// A node's member record is its session: renewing it renews every lease the node
    /// holds, so a node writes once per heartbeat however many partitions it holds. A
    /// change to a lease record that names a holder changes the holder's session in the
    /// same transaction ([`crate::LeaseStore::transact`]), and a taker waits on the
    /// holder's session as well as on the lease record.
    Session,
}

impl LeaseMode {
    /// The mode's name, as the command line and the group record spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseMode::PerPartition => "per_partition",
            LeaseMode::Session => "session",
        }
    }
}

impl fmt::Display for LeaseMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LeaseMode {
    type Err = String;

    /// Parses `per_partition` (or `per-partition`) and `session`.
    ///
    /// ```
    /// use leasehold::LeaseMode;
    /// assert_eq!("session".parse::<LeaseMode>(), Ok(LeaseMode::Session));
    /// assert_eq!("per-partition".parse::<LeaseMode>(), Ok(LeaseMode::PerPartition));
    /// assert!("sessions".parse::<LeaseMode>().is_err());
    /// ```
    fn from_str(text: &str) -> Result<LeaseMode, String> {
        match text {
            "per_partition" | "per-partition" => Ok(LeaseMode::PerPartition),
            "session" => Ok(LeaseMode::Session),
            other => Err(format!(
                "unknown lease mode {other:?}: use per-partition or session"
            )),
        }
    }
}

/// The timings safety depends on, as a group's bounds or as one node's settings.
///
/// Stored in whole nanoseconds, so a bound written from a node's settings admits exactly that
/// node.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GroupTimings {
    /// The longest any node may keep a lease after sending the renewal that wrote it.
    #[serde(rename = "lease_validity_ns", with = "nanos")]
    pub lease_validity: Duration,
    /// The shortest any node may wait, on a record seen unchanged, before taking it.
    #[serde(rename = "acquire_after_ns", with = "nanos")]
    pub acquire_after: Duration,
    /// The bound ρ on clock-rate drift that the two are checked with.
    pub max_clock_drift: f64,
}

impl GroupTimings {
    /// The timings of one node's configuration.
    pub fn of(config: &ParticipantConfig) -> GroupTimings {
        GroupTimings {
            lease_validity: config.lease_validity,
            acquire_after: config.acquire_after,
            max_clock_drift: config.max_clock_drift,
        }
    }

    /// Whether a taker waiting `acquire_after` cannot start before a holder keeping
    /// `lease_validity` has stopped: `acquire_after × (1 − ρ) > lease_validity × (1 + ρ)`,
    /// with ρ at least [`ParticipantConfig::MIN_CLOCK_DRIFT`].
    pub fn is_safe(&self) -> bool {
        let rho = self.max_clock_drift;
        (ParticipantConfig::MIN_CLOCK_DRIFT..0.5).contains(&rho)
            && self.acquire_after.as_secs_f64() * (1.0 - rho)
                > self.lease_validity.as_secs_f64() * (1.0 + rho)
    }

    /// Whether a node with these settings fits the group's `bounds`: it holds no longer and
    /// takes no sooner than they allow.
    pub fn fits(&self, bounds: &GroupTimings) -> bool {
        self.lease_validity <= bounds.lease_validity && self.acquire_after >= bounds.acquire_after
    }
}

impl fmt::Display for GroupTimings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lease_validity = {:?}, acquire_after = {:?}, ρ = {}",
            self.lease_validity, self.acquire_after, self.max_clock_drift
        )
    }
}

/// The longest restart window ([`GroupRecord::restart_window`]) a group may set, in
/// multiples of its `acquire_after`: a reserved partition is served by nobody until its
/// node comes back or the window ends.
pub const MAX_RESTART_WINDOW_FACTOR: u32 = 4;

/// What a group's nodes must agree on (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The record-format version of the group's lease and member records.
    pub format: u32,
    /// The bounds every node's timings must fit; `None` until set at `init` or adopted from
    /// the first node that joins.
    #[serde(default)]
    pub timings: Option<GroupTimings>,
    /// Timings being changed to: while set, a joining node must fit both these and
    /// `timings`, and the change is made only if every member fits these too
    /// ([`crate::admin::set_timings`]).
    #[serde(default)]
    pub pending_timings: Option<GroupTimings>,
    /// At least every epoch issued in the group whose lease record was since deleted:
    /// records created again start here, so the next acquisition issues a higher one.
    #[serde(default)]
    pub epoch_floor: Epoch,
    /// How leases are renewed.
    #[serde(default)]
    pub lease_mode: LeaseMode,
    /// The mode being changed to: while set, no node may join, and the change is made only
    /// if no node is a member ([`crate::admin::set_lease_mode`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_lease_mode: Option<LeaseMode>,
    /// Raised by every [`crate::admin::destroy`], before it deletes anything: a node that
    /// joined under another generation stops at its next check of this record, instead of
    /// registering again into a group that is being, or was, destroyed.
    #[serde(default)]
    pub generation: u64,
    /// How long the others leave a node's partitions reserved for it while it restarts in
    /// place ([`crate::Participant::restart`]), from when they first see each reserved
    /// record; `None` for the default, the group's `acquire_after`. Read through
    /// [`GroupRecord::restart_window`], which caps it.
    #[serde(
        default,
        rename = "restart_window_ns",
        with = "nanos::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub restart_window: Option<Duration>,
    /// Fields written by a newer version, kept as they are when this record is rewritten.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl Default for GroupRecord {
    fn default() -> Self {
        GroupRecord {
            format: FORMAT_VERSION,
            timings: None,
            pending_timings: None,
            epoch_floor: Epoch(0),
            lease_mode: LeaseMode::PerPartition,
            pending_lease_mode: None,
            generation: 0,
            restart_window: None,
            other: BTreeMap::new(),
        }
    }
}

/// Why a node or an operator command does not fit a group's record.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupMismatch {
    /// The group's records are in a format this build does not know.
    #[error(
        "group {group} uses record format {group_format}; this build knows formats up to \
         {FORMAT_VERSION}: upgrade leasehold before joining or changing it"
    )]
    UnknownFormat {
        /// The group.
        group: GroupName,
        /// The group's format.
        group_format: u32,
    },
    /// The node's timings are outside the group's bounds.
    #[error(
        "node {node} does not fit group {group}: it has lease_validity = {:?} and \
         acquire_after = {:?}, but the group allows lease_validity up to {:?} and \
         acquire_after from {:?}; start it with timings inside those, or change the group's \
         with `leasehold timings`",
        node_timings.lease_validity, node_timings.acquire_after,
        group_timings.lease_validity, group_timings.acquire_after
    )]
    UnsafeTimings {
        /// The group.
        group: GroupName,
        /// The node.
        node: NodeId,
        /// The node's timings.
        node_timings: GroupTimings,
        /// The group's bounds it failed.
        group_timings: GroupTimings,
    },
    /// The group runs in a lease mode this node does not use.
    #[error("group {group} uses lease mode {mode:?}, which this node does not")]
    LeaseMode {
        /// The group.
        group: GroupName,
        /// The group's mode.
        mode: LeaseMode,
    },
    /// A change of the group's lease mode is under way: no node joins until it is made or
    /// withdrawn.
    #[error(
        "group {group} is changing its lease mode to {to}; start the node again once the \
         change is made (`leasehold lease-mode` shows it; running it again finishes or \
         withdraws a change left half done)"
    )]
    LeaseModeChanging {
        /// The group.
        group: GroupName,
        /// The mode being changed to.
        to: LeaseMode,
    },
    /// The group was destroyed while this node was part of it.
    #[error(
        "group {group} was destroyed while this node ran (generation {joined}, now \
         {current}): the node stops rather than join what is built again under the name; \
         start it again to join the group as it is now"
    )]
    Destroyed {
        /// The group.
        group: GroupName,
        /// The generation the node joined.
        joined: u64,
        /// The generation the group record shows now.
        current: u64,
    },
    /// The group has lease or member records but no group record (it was deleted by hand):
    /// its lease mode and epoch floor are unknown, and a default record could be wrong on
    /// both.
    #[error(
        "group {group} has {leases} lease records and {members} member records but no group \
         record, so its lease mode and epoch floor are unknown: stop every node of the group, \
         then create the record again with `leasehold lease-mode <mode>`, which raises the \
         epoch floor to the highest epoch listed"
    )]
    MissingRecord {
        /// The group.
        group: GroupName,
        /// How many lease records it has.
        leases: usize,
        /// How many nodes are members of it (the operator's record aside), readable or not.
        members: usize,
    },
}

impl GroupRecord {
    /// A record for a new group, with the given bounds if any.
    pub fn new(timings: Option<GroupTimings>) -> GroupRecord {
        GroupRecord {
            timings,
            ..GroupRecord::default()
        }
    }

    /// How long the others leave a restarting node's reserved partitions to it: the
    /// group's setting, else its `acquire_after` (`own_acquire_after` for a group with no
    /// timings yet), at most [`MAX_RESTART_WINDOW_FACTOR`] times that `acquire_after`, so
    /// that no setting keeps a partition unserved for long.
    pub fn restart_window(&self, own_acquire_after: Duration) -> Duration {
        let acquire_after = self.timings.map_or(own_acquire_after, |t| t.acquire_after);
        self.restart_window
            .unwrap_or(acquire_after)
            .min(acquire_after * MAX_RESTART_WINDOW_FACTOR)
    }

    /// The restart window the group's nodes use, if the group has timings to reckon it from
    /// (a group with none yet leaves it to each node's own `acquire_after`).
    pub fn known_restart_window(&self) -> Option<Duration> {
        self.timings.map(|t| self.restart_window(t.acquire_after))
    }

    /// Refuses a group whose record format this build does not know.
    pub fn check_format(&self, group: &GroupName) -> Result<(), GroupMismatch> {
        if self.format > FORMAT_VERSION {
            return Err(GroupMismatch::UnknownFormat {
                group: group.clone(),
                group_format: self.format,
            });
        }
        Ok(())
    }

    /// Whether a node with `config` may take part: it knows the format, no change of lease
    /// mode is under way, and its timings fit the bounds and the pending bounds of a change
    /// under way. A group with no bounds yet admits any valid configuration. The node
    /// follows the group's lease mode.
    pub fn admits(&self, config: &ParticipantConfig) -> Result<(), GroupMismatch> {
        self.check_format(&config.group)?;
        if let Some(to) = self.pending_lease_mode {
            return Err(GroupMismatch::LeaseModeChanging {
                group: config.group.clone(),
                to,
            });
        }
        let node_timings = GroupTimings::of(config);
        for bounds in [self.timings, self.pending_timings].into_iter().flatten() {
            if !node_timings.fits(&bounds) {
                return Err(GroupMismatch::UnsafeTimings {
                    group: config.group.clone(),
                    node: config.node.clone(),
                    node_timings,
                    group_timings: bounds,
                });
            }
        }
        Ok(())
    }
}

impl MemberRecord {
    /// The timings this member published, if its version publishes them.
    pub fn timings(&self) -> Option<(Duration, Duration)> {
        Some((self.lease_validity?, self.acquire_after?))
    }

    /// Whether this member's published timings fit `bounds`; `None` when it published none
    /// (a node of an older version).
    pub fn fits(&self, bounds: &GroupTimings) -> Option<bool> {
        let (lease_validity, acquire_after) = self.timings()?;
        let published = GroupTimings {
            lease_validity,
            acquire_after,
            max_clock_drift: bounds.max_clock_drift,
        };
        Some(published.fits(bounds))
    }
}

/// Durations as whole nanoseconds.
pub(crate) mod nanos {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        serializer.serialize_u64(nanos)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_nanos(u64::deserialize(deserializer)?))
    }

    /// The same for an optional duration, absent when `None`.
    pub mod option {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(
            value: &Option<Duration>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match value {
                Some(value) => super::serialize(value, serializer),
                None => serializer.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Duration>, D::Error> {
            Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_nanos))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_modes_read_back_what_they_print() {
        for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
            assert_eq!(mode.to_string(), mode.as_str());
            assert_eq!(mode.as_str().parse::<LeaseMode>(), Ok(mode));
        }
        assert_eq!(LeaseMode::PerPartition.as_str(), "per_partition");
        assert_eq!(LeaseMode::Session.as_str(), "session");
        assert_eq!("per-partition".parse(), Ok(LeaseMode::PerPartition));
        let unknown = "perpartition".parse::<LeaseMode>().unwrap_err();
        assert!(unknown.contains("per-partition or session"), "{unknown}");
    }

    #[test]
    fn timings_print_every_bound_and_members_publish_theirs_readably() {
        let timings = GroupTimings {
            lease_validity: Duration::from_secs(15),
            acquire_after: Duration::from_millis(20_500),
            max_clock_drift: 0.01,
        };
        assert_eq!(
            timings.to_string(),
            "lease_validity = 15s, acquire_after = 20.5s, ρ = 0.01"
        );
        // What `set_timings` checks every member against must read back as written.
        let record = crate::MemberRecord {
            lease_validity: Some(timings.lease_validity),
            acquire_after: Some(timings.acquire_after),
            ..crate::MemberRecord::default()
        };
        let json = serde_json::to_string(&record).unwrap();
        assert!(json.contains("\"lease_validity_ns\":15000000000"), "{json}");
        let read: crate::MemberRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(read, record);
        let older: crate::MemberRecord = serde_json::from_str(r#"{"weight":1}"#).unwrap();
        assert_eq!((older.lease_validity, older.acquire_after), (None, None));
    }

    #[test]
    fn timings_whose_waits_only_meet_are_unsafe() {
        // 5 s × (1 − 0.25) = 3 s × (1 + 0.25) exactly: the taker could start the instant the
        // holder stops, which the rule does not allow.
        let timings = |acquire_after: Duration| GroupTimings {
            lease_validity: Duration::from_secs(3),
            acquire_after,
            max_clock_drift: 0.25,
        };
        assert!(!timings(Duration::from_secs(5)).is_safe());
        assert!(timings(Duration::from_millis(5001)).is_safe());
        assert!(!timings(Duration::from_millis(4999)).is_safe());
    }

    fn config(lease_validity: u64, acquire_after: u64) -> ParticipantConfig {
        ParticipantConfig {
            lease_validity: Duration::from_secs(lease_validity),
            acquire_after: Duration::from_secs(acquire_after),
            ..ParticipantConfig::new(NodeId::new("n1").unwrap(), 8)
        }
    }

    #[test]
    fn a_node_fits_bounds_it_holds_no_longer_and_takes_no_sooner_than() {
        let group = GroupRecord::new(Some(GroupTimings::of(&config(30, 45))));
        assert!(group.admits(&config(30, 45)).is_ok());
        assert!(group.admits(&config(10, 45)).is_ok(), "shorter leases fit");
        assert!(group.admits(&config(10, 60)).is_ok(), "longer waits fit");
        let error = group.admits(&config(40, 60)).unwrap_err();
        assert!(matches!(error, GroupMismatch::UnsafeTimings { .. }));
        let message = error.to_string();
        assert!(
            message.contains("40s") && message.contains("30s"),
            "{message}"
        );
        assert!(group.admits(&config(10, 15)).is_err(), "takes too soon");
    }

    #[test]
    fn a_pending_change_must_be_fitted_too() {
        let group = GroupRecord {
            pending_timings: Some(GroupTimings::of(&config(10, 15))),
            ..GroupRecord::new(Some(GroupTimings::of(&config(30, 45))))
        };
        assert!(group.admits(&config(10, 45)).is_ok());
        assert!(group.admits(&config(30, 45)).is_err());
        assert!(group.admits(&config(10, 15)).is_err());
    }

    #[test]
    fn an_unknown_format_is_refused_and_no_bounds_admit_any_node() {
        let newer = GroupRecord {
            format: FORMAT_VERSION + 1,
            ..GroupRecord::default()
        };
        assert!(matches!(
            newer.admits(&config(30, 45)),
            Err(GroupMismatch::UnknownFormat { .. })
        ));
        assert!(GroupRecord::default().admits(&config(1, 2)).is_ok());
    }

    #[test]
    fn fields_of_a_newer_version_survive_a_rewrite() {
        let stored =
            br#"{"format":1,"epoch_floor":7,"lease_mode":"per_partition","quorum":{"size":3}}"#;
        let mut record: GroupRecord = serde_json::from_slice(stored).unwrap();
        assert_eq!(record.epoch_floor, Epoch(7));
        record.epoch_floor = Epoch(9);
        let written: serde_json::Value = serde_json::to_value(&record).unwrap();
        assert_eq!(written["quorum"]["size"], 3);
        assert_eq!(written["epoch_floor"], 9);
    }

    #[test]
    fn timings_round_trip_exactly_and_safety_uses_the_drift_bound() {
        let timings = GroupTimings {
            lease_validity: Duration::from_nanos(1_000_000_001),
            acquire_after: Duration::from_millis(1500),
            max_clock_drift: 0.01,
        };
        let json = serde_json::to_string(&timings).unwrap();
        assert!(json.contains("\"lease_validity_ns\":1000000001"), "{json}");
        assert_eq!(
            serde_json::from_str::<GroupTimings>(&json).unwrap(),
            timings
        );
        assert!(timings.is_safe());
        let tight = GroupTimings {
            acquire_after: Duration::from_millis(1010),
            ..timings
        };
        assert!(!tight.is_safe(), "1.01 s × 0.99 < 1 s × 1.01");
    }
}
