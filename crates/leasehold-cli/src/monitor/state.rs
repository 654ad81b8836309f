//! What the monitor knows of the table: the latest read, what changed since the one before,
//! and the health figures its `/metrics` exports. Pure: readings in, documents out, so every
//! rule is tested without a store or a clock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use leasehold::{Listing, NodeId, StoredLease, StoredMember, Version};
use tokio::time::Instant;

mod documents;
mod leases;
mod members;
mod summary;
pub use documents::{
    ChangeEvent, Delta, HistorySample, MapDocument, MemberRow, Summary, Update, MEMBER_KINDS,
    OWNERSHIP_KINDS,
};

/// Changes kept for a page that connects (`changes` in the map).
const CHANGES_KEPT: usize = 100;
/// One history sample per this long...
const HISTORY_EVERY: Duration = Duration::from_secs(5);
/// ...for the last ten minutes.
const HISTORY_KEPT: usize = 120;

/// One read of the table.
#[derive(Debug)]
pub struct Reading {
    /// The lease records.
    pub leases: Listing<StoredLease>,
    /// The member records, the operator's included (it is skipped here).
    pub members: Listing<StoredMember>,
    /// The partition count the group record or the listing gives.
    pub expected: u32,
    /// When the reply arrived, on the monitor's monotonic clock.
    pub at: Instant,
    /// The same moment by the wall clock, for people and scripts.
    pub unix_ms: u64,
    /// How the group renews its leases: with sessions, a held lease is renewed by its
    /// holder's member record.
    pub lease_mode: leasehold::LeaseMode,
    /// How long the group's nodes leave a partition reserved for a node restarting in place,
    /// if the group has timings to reckon it from.
    pub restart_window: Option<Duration>,
}

/// A partition as last read: one byte of state, its owner's index in the names table.
#[derive(Debug, Clone, PartialEq)]
struct Cell {
    state: u8,
    owner: i32,
    epoch: u64,
    version: Option<Version>,
    /// When its record was last seen to change (first sighting counts).
    changed_at: Instant,
    prohibited: Vec<NodeId>,
    kicked: bool,
    /// With session leases, the holder's session the lease was taken under.
    session: Option<u64>,
    /// For a partition reserved for a node restarting in place, when the reservation runs
    /// out by its writer's clock (its write time plus the group's restart window).
    reserved_until_unix_ms: Option<u64>,
}

impl Cell {
    fn missing(at: Instant) -> Cell {
        Cell {
            state: b'M',
            owner: -1,
            epoch: 0,
            version: None,
            changed_at: at,
            prohibited: Vec::new(),
            kicked: false,
            session: None,
            reserved_until_unix_ms: None,
        }
    }
}

#[derive(Debug, Clone)]
struct Member {
    version: Version,
    changed_at: Instant,
    /// The heartbeat count, write stamp and session of the member's last write of its own: with
    /// session leases, what others write back unchanged (a take, a drain) is no renewal.
    renewal: (u64, Option<u64>, Option<u64>),
    weight: u32,
    draining: bool,
    load: Option<f64>,
    heartbeat: u64,
    live: bool,
    max_partitions: Option<u32>,
    max_load: Option<f64>,
    /// With session leases, the session the record shows, and when it was first seen: a
    /// lease taken under an earlier session has not been renewed since.
    session: Option<u64>,
    session_since: Instant,
}

/// The monitor's view of one group.
#[derive(Debug)]
pub struct Tracker {
    group: String,
    stale_after: Duration,
    interval: Duration,
    actions: bool,
    /// One per partition, corrupt and missing ones included.
    cells: Vec<Cell>,
    members: BTreeMap<NodeId, Member>,
    names: Vec<String>,
    index: HashMap<String, i32>,
    rows: Vec<MemberRow>,
    unrenewed: Vec<u32>,
    summary: Summary,
    sequence: u64,
    next_change: u64,
    changes: VecDeque<ChangeEvent>,
    history: VecDeque<HistorySample>,
    last_sample: Option<Instant>,
    read_at_unix_ms: u64,
    error: Option<String>,
    first_read: bool,
    /// Cumulative change counts by kind, for `/metrics`.
    pub ownership_counts: [u64; OWNERSHIP_KINDS.len()],
    /// Cumulative member change counts by kind.
    pub member_counts: [u64; MEMBER_KINDS.len()],
    /// Cumulative count of epochs seen going back: a gauge of one read is easily missed
    /// between two scrapes.
    pub epochs_back_total: u64,
    /// Whether the group renews its leases by session, as of the last read.
    session: bool,
    /// The group's restart window, as of the last read.
    restart_window: Option<Duration>,
}

impl Tracker {
    /// A view with nothing read yet.
    pub fn new(group: &str, interval: Duration, stale_after: Duration, actions: bool) -> Tracker {
        Tracker {
            group: group.to_string(),
            stale_after,
            interval,
            actions,
            cells: Vec::new(),
            members: BTreeMap::new(),
            names: Vec::new(),
            index: HashMap::new(),
            session: false,
            restart_window: None,
            rows: Vec::new(),
            unrenewed: Vec::new(),
            summary: Summary::default(),
            sequence: 0,
            next_change: 1,
            changes: VecDeque::new(),
            history: VecDeque::new(),
            last_sample: None,
            read_at_unix_ms: 0,
            error: None,
            first_read: true,
            ownership_counts: [0; OWNERSHIP_KINDS.len()],
            member_counts: [0; MEMBER_KINDS.len()],
            epochs_back_total: 0,
        }
    }

    /// The figures of the latest read.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Partitions held per member, by name, members without partitions included.
    pub fn held_per_member(&self) -> impl Iterator<Item = (&str, u32)> {
        self.rows.iter().map(|row| (row.node.as_str(), row.held))
    }

    /// The partition count.
    pub fn expected(&self) -> u32 {
        self.cells.len() as u32
    }

    /// The latest change's id, 0 before any.
    pub fn last_change_id(&self) -> u64 {
        self.next_change - 1
    }

    /// Moves on every read that changed something.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Whether the latest read failed.
    pub fn failing(&self) -> bool {
        self.error.is_some()
    }

    /// Records a failed read: the map stays as it was, marked with the error.
    pub fn read_failed(&mut self, error: String) -> bool {
        let changed = self.error.as_ref() != Some(&error);
        self.error = Some(error);
        if changed {
            self.sequence += 1;
        }
        changed
    }

    fn name_index(&mut self, name: &str) -> i32 {
        if let Some(index) = self.index.get(name) {
            return *index;
        }
        let index = self.names.len() as i32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), index);
        index
    }

    fn emit(&mut self, update: &mut Update, at_unix_ms: u64, change: PendingChange) {
        if let Some(i) = OWNERSHIP_KINDS.iter().position(|k| *k == change.kind) {
            self.ownership_counts[i] += 1;
        }
        if let Some(i) = MEMBER_KINDS.iter().position(|k| *k == change.kind) {
            self.member_counts[i] += 1;
        }
        let event = ChangeEvent {
            id: self.next_change,
            at_unix_ms,
            kind: change.kind,
            partition: change.partition,
            node: change.node,
            previous: change.previous,
            epoch: change.epoch,
        };
        self.next_change += 1;
        if self.changes.len() == CHANGES_KEPT {
            self.changes.pop_front();
        }
        self.changes.push_back(event.clone());
        update.changes.push(event);
    }

    /// Takes in one read: updates the cells and members, and returns what changed.
    pub fn apply(&mut self, reading: Reading) -> Update {
        self.session = reading.lease_mode == leasehold::LeaseMode::Session;
        self.restart_window = reading.restart_window;
        let mut update = Update::default();
        let now = reading.at;
        let unix_ms = reading.unix_ms;
        let first = std::mem::take(&mut self.first_read);
        if self.error.take().is_some() {
            update.changed = true;
        }
        self.read_at_unix_ms = unix_ms;

        let (corrupt, epochs_back) = self.apply_leases(&reading, &mut update, first);
        self.apply_members(&reading, &mut update, first);
        let member_rows_before = std::mem::take(&mut self.rows);

        let summary_before = self.summary.clone();
        let unrenewed_before = std::mem::take(&mut self.unrenewed);
        self.summarize(
            now,
            corrupt + reading.members.corrupt.len() as u64,
            epochs_back,
        );
        self.sample_history(now, unix_ms);
        // Member rows carry ages that move every read; only what a person would notice
        // counts as a change worth a delta.
        let rows_changed = member_rows_before.len() != self.rows.len()
            || member_rows_before.iter().zip(&self.rows).any(|(a, b)| {
                (
                    &a.node, a.held, a.target, a.weight, a.draining, a.live, a.load,
                ) != (
                    &b.node, b.held, b.target, b.weight, b.draining, b.live, b.load,
                )
            });
        update.changed |= update.reshaped
            || !update.partitions.is_empty()
            || !update.changes.is_empty()
            || rows_changed
            || summary_before != self.summary
            || unrenewed_before != self.unrenewed
            || first;
        if update.changed {
            self.sequence += 1;
        }
        update
    }

    fn set_cell(&mut self, update: &mut Update, partition: u32, cell: Cell) {
        let slot = &mut self.cells[partition as usize];
        let visible = |c: &Cell| {
            (
                c.state,
                c.owner,
                c.epoch,
                c.prohibited.clone(),
                c.reserved_until_unix_ms,
            )
        };
        if visible(slot) != visible(&cell) {
            update.partitions.push(partition);
        }
        *slot = cell;
    }

    /// (partition, prohibited node) pairs.
    fn prohibited(&self) -> Vec<(u32, &str)> {
        self.cells
            .iter()
            .enumerate()
            .flat_map(|(p, cell)| cell.prohibited.iter().map(move |n| (p as u32, n.as_str())))
            .collect()
    }

    /// (partition, when its reservation runs out) for reserved partitions with a known window.
    fn reserved_until(&self) -> Vec<(u32, u64)> {
        self.cells
            .iter()
            .enumerate()
            .filter_map(|(p, cell)| Some((p as u32, cell.reserved_until_unix_ms?)))
            .collect()
    }

    /// The whole map.
    pub fn map(&self) -> MapDocument<'_> {
        MapDocument {
            group: &self.group,
            sequence: self.sequence,
            read_at_unix_ms: self.read_at_unix_ms,
            interval_ms: self.interval.as_millis() as u64,
            stale_after_ms: self.stale_after.as_millis() as u64,
            actions: self.actions,
            error: self.error.as_deref(),
            partitions_expected: self.cells.len() as u32,
            nodes: &self.names,
            owners: self.cells.iter().map(|c| c.owner).collect(),
            states: self.cells.iter().map(|c| char::from(c.state)).collect(),
            epochs: self.cells.iter().map(|c| c.epoch).collect(),
            unrenewed: &self.unrenewed,
            prohibited: self.prohibited(),
            reserved_until: self.reserved_until(),
            members: &self.rows,
            summary: &self.summary,
            history: &self.history,
            changes: &self.changes,
        }
    }

    /// What the latest read changed, as a delta of `partitions`.
    pub fn delta(&self, partitions: &[u32]) -> Delta<'_> {
        Delta {
            sequence: self.sequence,
            read_at_unix_ms: self.read_at_unix_ms,
            nodes: &self.names,
            partitions: partitions
                .iter()
                .filter_map(|p| {
                    let cell = self.cells.get(*p as usize)?;
                    Some((*p, cell.owner, char::from(cell.state), cell.epoch))
                })
                .collect(),
            unrenewed: &self.unrenewed,
            prohibited: self.prohibited(),
            reserved_until: self.reserved_until(),
            members: &self.rows,
            summary: &self.summary,
            error: self.error.as_deref(),
        }
    }
}

/// A change before it has an id.
#[derive(Debug)]
struct PendingChange {
    kind: &'static str,
    partition: Option<u32>,
    node: Option<String>,
    previous: Option<String>,
    epoch: Option<u64>,
}

impl PendingChange {
    fn member(kind: &'static str, node: Option<String>) -> PendingChange {
        PendingChange {
            kind,
            partition: None,
            node,
            previous: None,
            epoch: None,
        }
    }
}

#[cfg(test)]
mod tests;
