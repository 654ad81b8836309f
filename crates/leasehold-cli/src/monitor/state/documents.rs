//! What the monitor's page, its event stream and `/metrics` are given: the documents the
//! tracker's state is read out as.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// One change seen between two reads.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeEvent {
    /// Rises by one per change, for `id:` in the event stream.
    pub id: u64,
    /// When the read that saw it arrived.
    pub at_unix_ms: u64,
    /// What happened (see the module's kinds).
    pub kind: &'static str,
    /// The partition, for lease changes.
    pub partition: Option<u32>,
    /// The node it is about: the new owner, the releasing one, the member.
    pub node: Option<String>,
    /// The owner before, for acquisitions.
    pub previous: Option<String>,
    /// The record's epoch after the change, for lease changes.
    pub epoch: Option<u64>,
}

/// The kinds of lease change, in the order of `leasehold_monitor_ownership_changes_total`.
pub const OWNERSHIP_KINDS: [&str; 8] = [
    "acquired",
    "released",
    "lost",
    "kicked",
    "offline",
    "online",
    "prohibited",
    "allowed",
];
/// The kinds of member change.
pub const MEMBER_KINDS: [&str; 6] = ["joined", "left", "draining", "undrained", "dead", "alive"];

/// A member as the map shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MemberRow {
    pub(super) node: String,
    pub(super) held: u32,
    pub(super) target: u32,
    pub(super) weight: u32,
    pub(super) draining: bool,
    pub(super) live: bool,
    pub(super) load: Option<f64>,
    pub(super) heartbeat: u64,
    pub(super) last_change_ms_ago: u64,
}

/// Counts the page's summary bar and `/metrics` share.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Summary {
    /// Held records.
    pub held: u64,
    /// Released records.
    pub released: u64,
    /// Offline records.
    pub offline: u64,
    /// Partitions below the count with no record.
    pub missing: u64,
    /// Released, or held with no owner.
    pub unowned: u64,
    /// Unreadable lease and member records.
    pub corrupt: u64,
    /// Held records not renewed within the stale window.
    pub unrenewed: u64,
    /// Unowned partitions that no live, non-draining, permitted member below its cap can
    /// take.
    pub spillover: u64,
    /// Load that live members carry above their published `max_load`, summed: what they
    /// could not hand off because no other member had room for it. A node still handing off
    /// shows here until it has done so, which is why an alert on it waits.
    pub load_spillover: f64,
    /// Members that changed their record within the stale window.
    pub live_members: u64,
    /// Members marked draining.
    pub draining_members: u64,
    /// Members that did not change their record within the stale window.
    pub dead_members: u64,
    /// The longest any held record has gone unrenewed, in seconds.
    pub oldest_unrenewed_s: f64,
    /// Partitions whose epoch went back at the latest read.
    pub epochs_back: u64,
    /// (partition, node) prohibitions.
    pub prohibited_pairs: u64,
    /// Released records reserved for a node restarting in place (counted in `released` and
    /// `unowned` too).
    pub reserved: u64,
    /// Reserved records first seen more than twice the group's restart window ago: the node
    /// did not come back in time, and no other node has taken them since.
    pub reservations_run_out: u64,
}

/// Held counts per node at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct HistorySample {
    pub(super) at_unix_ms: u64,
    pub(super) held: BTreeMap<String, u32>,
}

/// The whole map: `/api/map`, and the first `map` event of a stream.
#[derive(Debug, Serialize)]
pub struct MapDocument<'a> {
    pub(super) group: &'a str,
    pub(super) sequence: u64,
    pub(super) read_at_unix_ms: u64,
    pub(super) interval_ms: u64,
    pub(super) stale_after_ms: u64,
    pub(super) actions: bool,
    pub(super) error: Option<&'a str>,
    pub(super) partitions_expected: u32,
    pub(super) nodes: &'a [String],
    pub(super) owners: Vec<i32>,
    pub(super) states: String,
    pub(super) epochs: Vec<u64>,
    pub(super) unrenewed: &'a [u32],
    pub(super) prohibited: Vec<(u32, &'a str)>,
    /// `[partition, unix ms]`: when each reservation for a node restarting in place runs out.
    pub(super) reserved_until: Vec<(u32, u64)>,
    pub(super) members: &'a [MemberRow],
    pub(super) summary: &'a Summary,
    pub(super) history: &'a VecDeque<HistorySample>,
    pub(super) changes: &'a VecDeque<ChangeEvent>,
}

/// What changed at one read: `delta` events.
#[derive(Debug, Serialize)]
pub struct Delta<'a> {
    pub(super) sequence: u64,
    pub(super) read_at_unix_ms: u64,
    pub(super) nodes: &'a [String],
    /// `[partition, owner index, state, epoch]` of each partition that changed.
    pub(super) partitions: Vec<(u32, i32, char, u64)>,
    pub(super) unrenewed: &'a [u32],
    pub(super) prohibited: Vec<(u32, &'a str)>,
    /// `[partition, unix ms]`: when each reservation for a node restarting in place runs out.
    pub(super) reserved_until: Vec<(u32, u64)>,
    pub(super) members: &'a [MemberRow],
    pub(super) summary: &'a Summary,
    pub(super) error: Option<&'a str>,
}

/// What one read changed, for the stream.
#[derive(Debug, Default)]
pub struct Update {
    /// The read changed something the page shows.
    pub changed: bool,
    /// The partition count changed: send the whole map, not a delta.
    pub reshaped: bool,
    /// The partitions whose cell changed.
    pub partitions: Vec<u32>,
    /// The changes seen, in order.
    pub changes: Vec<ChangeEvent>,
}
