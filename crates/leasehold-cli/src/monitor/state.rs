//! What the monitor knows of the table: the latest read, what changed since the one before,
//! and the health figures its `/metrics` exports. Pure: readings in, documents out, so every
//! rule is tested without a store or a clock.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use leasehold::planner::{fair_targets, MemberShare};
use leasehold::{LeaseState, Listing, NodeId, StoredLease, StoredMember, Version};
use serde::Serialize;
use tokio::time::Instant;

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
    node: String,
    held: u32,
    target: u32,
    weight: u32,
    draining: bool,
    live: bool,
    load: Option<f64>,
    heartbeat: u64,
    last_change_ms_ago: u64,
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
}

/// Held counts per node at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct HistorySample {
    at_unix_ms: u64,
    held: BTreeMap<String, u32>,
}

/// The whole map: `/api/map`, and the first `map` event of a stream.
#[derive(Debug, Serialize)]
pub struct MapDocument<'a> {
    group: &'a str,
    sequence: u64,
    read_at_unix_ms: u64,
    interval_ms: u64,
    stale_after_ms: u64,
    actions: bool,
    error: Option<&'a str>,
    partitions_expected: u32,
    nodes: &'a [String],
    owners: Vec<i32>,
    states: String,
    epochs: Vec<u64>,
    unrenewed: &'a [u32],
    prohibited: Vec<(u32, &'a str)>,
    members: &'a [MemberRow],
    summary: &'a Summary,
    history: &'a VecDeque<HistorySample>,
    changes: &'a VecDeque<ChangeEvent>,
}

/// What changed at one read: `delta` events.
#[derive(Debug, Serialize)]
pub struct Delta<'a> {
    sequence: u64,
    read_at_unix_ms: u64,
    nodes: &'a [String],
    /// `[partition, owner index, state, epoch]` of each partition that changed.
    partitions: Vec<(u32, i32, char, u64)>,
    unrenewed: &'a [u32],
    prohibited: Vec<(u32, &'a str)>,
    members: &'a [MemberRow],
    summary: &'a Summary,
    error: Option<&'a str>,
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
        let mut update = Update::default();
        let now = reading.at;
        let unix_ms = reading.unix_ms;
        let first = std::mem::take(&mut self.first_read);
        if self.error.take().is_some() {
            update.changed = true;
        }
        self.read_at_unix_ms = unix_ms;

        let expected = reading.expected.max(reading.leases.partition_count());
        if expected as usize != self.cells.len() {
            update.reshaped = true;
            self.cells.resize(expected as usize, Cell::missing(now));
        }

        // Lease records, then partitions with none.
        let mut present = vec![false; self.cells.len()];
        let mut corrupt = 0u64;
        for error in &reading.leases.corrupt {
            corrupt += 1;
            if let Some(partition) = error.key().and_then(|key| key.partition()) {
                if let Some(flag) = present.get_mut(partition.0 as usize) {
                    *flag = true;
                }
                self.set_cell(&mut update, partition.0, corrupt_cell(now));
            }
        }
        let mut epochs_back = 0;
        let mut pending = Vec::new();
        for lease in &reading.leases.records {
            let p = lease.key.0;
            let Some(flag) = present.get_mut(p as usize) else {
                continue;
            };
            *flag = true;
            let record = &lease.value;
            let owner = record.owner.as_ref().map(|o| self.name_index(o.as_str()));
            let old = self.cells[p as usize].clone();
            let state = match record.state {
                LeaseState::Held => b'H',
                LeaseState::Released => b'R',
                LeaseState::Offline => b'O',
            };
            let kicked = record.note.as_deref() == Some("kicked");
            let changed_at = if old.version.as_ref() == Some(&lease.version) {
                old.changed_at
            } else {
                now
            };
            let cell = Cell {
                state,
                owner: owner.unwrap_or(-1),
                epoch: record.epoch.0,
                version: Some(lease.version.clone()),
                changed_at,
                prohibited: record.prohibited.clone(),
                kicked,
                session: record.session,
            };
            if !first && old.version.is_some() {
                if cell.epoch < old.epoch {
                    epochs_back += 1;
                }
                pending.extend(self.lease_changes(p, &old, &cell));
            }
            self.set_cell(&mut update, p, cell);
        }
        for (p, seen) in present.iter().enumerate() {
            if !seen && self.cells[p].state != b'M' {
                self.set_cell(&mut update, p as u32, Cell::missing(now));
            }
        }
        for change in pending {
            self.emit(&mut update, unix_ms, change);
        }
        self.epochs_back_total += epochs_back;

        // Members.
        let mut members = BTreeMap::new();
        for stored in reading
            .members
            .records
            .iter()
            .filter(|m| !m.key.is_operator())
        {
            let old = self.members.get(&stored.key);
            let renewal = (
                stored.value.heartbeat,
                stored.value.written_at_unix_ms,
                stored.value.session,
            );
            let changed_at = match old {
                Some(old) if old.version == stored.version => old.changed_at,
                Some(old) if self.session && old.renewal == renewal => old.changed_at,
                _ => now,
            };
            let live = now.saturating_duration_since(changed_at) < self.stale_after;
            let session_since = match old {
                Some(old) if old.session == stored.value.session => old.session_since,
                _ => now,
            };
            let member = Member {
                version: stored.version.clone(),
                changed_at,
                renewal,
                weight: stored.value.weight,
                draining: stored.value.draining,
                load: stored.value.load,
                heartbeat: stored.value.heartbeat,
                live,
                max_partitions: stored.value.max_partitions,
                max_load: stored.value.max_load,
                session: stored.value.session,
                session_since,
            };
            if !first {
                let name = || Some(stored.key.to_string());
                let kinds: Vec<&'static str> = match old {
                    None => vec!["joined"],
                    Some(old) => {
                        let mut kinds = Vec::new();
                        if old.draining != member.draining {
                            kinds.push(if member.draining {
                                "draining"
                            } else {
                                "undrained"
                            });
                        }
                        if old.live != member.live {
                            kinds.push(if member.live { "alive" } else { "dead" });
                        }
                        kinds
                    }
                };
                for kind in kinds {
                    self.emit(&mut update, unix_ms, PendingChange::member(kind, name()));
                }
            }
            members.insert(stored.key.clone(), member);
        }
        if !first {
            let left: Vec<NodeId> = self
                .members
                .keys()
                .filter(|node| !members.contains_key(*node))
                .cloned()
                .collect();
            for node in left {
                self.emit(
                    &mut update,
                    unix_ms,
                    PendingChange::member("left", Some(node.to_string())),
                );
            }
        }
        for node in members.keys() {
            self.name_index(node.as_str());
        }
        let member_rows_before = std::mem::take(&mut self.rows);
        self.members = members;

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
        let visible = |c: &Cell| (c.state, c.owner, c.epoch, c.prohibited.clone());
        if visible(slot) != visible(&cell) {
            update.partitions.push(partition);
        }
        *slot = cell;
    }

    /// The changes between two readings of one lease record.
    fn lease_changes(&self, partition: u32, old: &Cell, new: &Cell) -> Vec<PendingChange> {
        let name = |index: i32| {
            usize::try_from(index)
                .ok()
                .and_then(|i| self.names.get(i).cloned())
        };
        let mut changes = Vec::new();
        let lease = |kind, node: Option<String>, previous: Option<String>| PendingChange {
            kind,
            partition: Some(partition),
            node,
            previous,
            epoch: Some(new.epoch),
        };
        match (old.state, new.state) {
            (b'O', b'O') => {}
            (_, b'O') => changes.push(lease("offline", name(old.owner), None)),
            (b'O', _) => changes.push(lease("online", None, None)),
            _ => {}
        }
        if new.state == b'H' && new.epoch > old.epoch && new.owner >= 0 {
            let previous = (old.owner >= 0).then(|| name(old.owner)).flatten();
            if old.state == b'H' && old.owner >= 0 {
                changes.push(lease("lost", name(old.owner), None));
            }
            changes.push(lease("acquired", name(new.owner), previous));
        } else if old.state == b'H' && new.state == b'R' {
            changes.push(lease("released", name(old.owner), None));
        }
        if new.kicked && !old.kicked && new.epoch == old.epoch {
            changes.push(lease("kicked", name(new.owner), None));
        }
        for node in new
            .prohibited
            .iter()
            .filter(|n| !old.prohibited.contains(n))
        {
            changes.push(lease("prohibited", Some(node.to_string()), None));
        }
        for node in old
            .prohibited
            .iter()
            .filter(|n| !new.prohibited.contains(n))
        {
            changes.push(lease("allowed", Some(node.to_string()), None));
        }
        changes
    }

    fn summarize(&mut self, now: Instant, corrupt: u64, epochs_back: u64) {
        let mut s = Summary {
            corrupt,
            epochs_back,
            ..Summary::default()
        };
        let mut held_by: HashMap<i32, u32> = HashMap::new();
        for cell in self
            .cells
            .iter()
            .filter(|c| c.state == b'H' && c.owner >= 0)
        {
            *held_by.entry(cell.owner).or_default() += 1;
        }
        let mut oldest = Duration::ZERO;
        // With session leases, a held lease is as fresh as its holder's last renewal.
        let renewed_at: HashMap<i32, &Member> = if self.session {
            self.members
                .iter()
                .filter_map(|(node, m)| Some((*self.index.get(node.as_str())?, m)))
                .collect()
        } else {
            HashMap::new()
        };
        // Members that could take another partition: live, not draining, below their cap.
        let takers: BTreeSet<&str> = self
            .members
            .iter()
            .filter(|(_, m)| m.live && !m.draining && m.weight > 0)
            .filter(|(node, m)| {
                let held = self
                    .index
                    .get(node.as_str())
                    .and_then(|i| held_by.get(i))
                    .copied()
                    .unwrap_or(0);
                m.max_partitions.is_none_or(|cap| held < cap)
            })
            .map(|(node, _)| node.as_str())
            .collect();
        for (p, cell) in self.cells.iter().enumerate() {
            s.prohibited_pairs += cell.prohibited.len() as u64;
            match cell.state {
                b'H' if cell.owner >= 0 => {
                    s.held += 1;
                    let since = match renewed_at.get(&cell.owner) {
                        // Taken under a session that has ended: renewed by none since the
                        // next one was first seen.
                        Some(member)
                            if cell.session.is_some()
                                && member.session.is_some()
                                && cell.session != member.session =>
                        {
                            cell.changed_at.max(member.session_since)
                        }
                        Some(member) => cell.changed_at.max(member.changed_at),
                        None => cell.changed_at,
                    };
                    let age = now.saturating_duration_since(since);
                    oldest = oldest.max(age);
                    if age >= self.stale_after {
                        s.unrenewed += 1;
                        self.unrenewed.push(p as u32);
                    }
                }
                b'H' | b'R' => {
                    if cell.state == b'H' {
                        s.held += 1;
                    } else {
                        s.released += 1;
                    }
                    s.unowned += 1;
                    let permitted = takers
                        .iter()
                        .any(|node| !cell.prohibited.iter().any(|p| p.as_str() == *node));
                    if !permitted {
                        s.spillover += 1;
                    }
                }
                b'O' => s.offline += 1,
                b'M' => s.missing += 1,
                _ => {}
            }
        }
        s.oldest_unrenewed_s = oldest.as_secs_f64();
        let shares: Vec<MemberShare> = self
            .members
            .iter()
            .filter(|(_, m)| m.live)
            .map(|(node, m)| MemberShare {
                node: node.clone(),
                weight: m.weight,
                draining: m.draining,
            })
            .collect();
        let available = (self.cells.len() as u64 - s.offline - s.missing) as u32;
        let targets = fair_targets(available, &shares, u32::MAX);
        self.rows = self
            .members
            .iter()
            .map(|(node, m)| MemberRow {
                node: node.to_string(),
                held: self
                    .index
                    .get(node.as_str())
                    .and_then(|i| held_by.get(i))
                    .copied()
                    .unwrap_or(0),
                target: targets.get(node).copied().unwrap_or(0),
                weight: m.weight,
                draining: m.draining,
                live: m.live,
                load: m.load,
                heartbeat: m.heartbeat,
                last_change_ms_ago: now.saturating_duration_since(m.changed_at).as_millis() as u64,
            })
            .collect();
        // A dead member's load is what it carried when it stopped; its partitions are on
        // their way to the others, whose own records will show any excess.
        s.load_spillover = self
            .members
            .values()
            .filter(|m| m.live)
            .filter_map(|m| Some((m.load? - m.max_load?).max(0.0)))
            .sum();
        s.live_members = self.members.values().filter(|m| m.live).count() as u64;
        s.dead_members = self.members.len() as u64 - s.live_members;
        s.draining_members = self.members.values().filter(|m| m.draining).count() as u64;
        self.summary = s;
    }

    fn sample_history(&mut self, now: Instant, unix_ms: u64) {
        if self
            .last_sample
            .is_some_and(|last| now.saturating_duration_since(last) < HISTORY_EVERY)
        {
            return;
        }
        self.last_sample = Some(now);
        if self.history.len() == HISTORY_KEPT {
            self.history.pop_front();
        }
        self.history.push_back(HistorySample {
            at_unix_ms: unix_ms,
            held: self
                .held_per_member()
                .map(|(node, held)| (node.to_string(), held))
                .collect(),
        });
    }

    fn prohibited(&self) -> Vec<(u32, &str)> {
        self.cells
            .iter()
            .enumerate()
            .flat_map(|(p, cell)| cell.prohibited.iter().map(move |n| (p as u32, n.as_str())))
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
            members: &self.rows,
            summary: &self.summary,
            error: self.error.as_deref(),
        }
    }
}

fn corrupt_cell(at: Instant) -> Cell {
    Cell {
        state: b'C',
        ..Cell::missing(at)
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
