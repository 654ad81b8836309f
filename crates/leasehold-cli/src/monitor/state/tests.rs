use leasehold::{
    Epoch, LeaseRecord, MemberRecord, PartitionId, RecordKey, StoreError, Stored, Version,
};

use super::*;
use leasehold::LeaseState;

const STALE: Duration = Duration::from_secs(10);

/// A table being edited between reads: versions rise on every write, as in a store.
struct Table {
    leases: Vec<(LeaseRecord, u64)>,
    members: BTreeMap<String, (MemberRecord, u64)>,
    versions: u64,
    corrupt: Vec<u32>,
    start: Instant,
    lease_mode: leasehold::LeaseMode,
    restart_window: Option<Duration>,
}

impl Table {
    fn new(partitions: u32) -> Table {
        Table {
            leases: (0..partitions)
                .map(|_| (LeaseRecord::released(), 1))
                .collect(),
            members: BTreeMap::new(),
            versions: 1,
            corrupt: Vec::new(),
            start: Instant::now(),
            lease_mode: leasehold::LeaseMode::PerPartition,
            restart_window: None,
        }
    }

    fn write(&mut self, partition: u32, change: impl FnOnce(&mut LeaseRecord)) {
        self.versions += 1;
        let (record, version) = &mut self.leases[partition as usize];
        change(record);
        *version = self.versions;
    }

    fn hold(&mut self, partition: u32, node: &str, epoch: u64) {
        self.write(partition, |r| {
            r.owner = Some(NodeId::new(node).unwrap());
            r.state = LeaseState::Held;
            r.epoch = Epoch(epoch);
            r.note = None;
        });
    }

    fn beat(&mut self, node: &str, change: impl FnOnce(&mut MemberRecord)) {
        self.versions += 1;
        let entry = self
            .members
            .entry(node.to_string())
            .or_insert((MemberRecord::default(), 0));
        entry.0.heartbeat += 1;
        change(&mut entry.0);
        entry.1 = self.versions;
    }

    fn reading(&self, seconds: u64) -> Reading {
        let mut leases: Listing<StoredLease> = self
            .leases
            .iter()
            .enumerate()
            .filter(|(p, _)| !self.corrupt.contains(&(*p as u32)))
            .map(|(p, (record, version))| {
                Ok(Stored {
                    key: PartitionId(p as u32),
                    value: record.clone(),
                    version: Version::from_number(*version),
                })
            })
            .collect();
        leases.corrupt = self
            .corrupt
            .iter()
            .map(|p| StoreError::Corrupt {
                key: RecordKey::Lease(PartitionId(*p)),
                reason: "bad".into(),
            })
            .collect();
        let members = self
            .members
            .iter()
            .map(|(node, (record, version))| {
                Ok(Stored {
                    key: NodeId::new(node).unwrap(),
                    value: record.clone(),
                    version: Version::from_number(*version),
                })
            })
            .collect();
        Reading {
            leases,
            members,
            lease_mode: self.lease_mode,
            restart_window: self.restart_window,
            expected: 0,
            at: self.start + Duration::from_secs(seconds),
            unix_ms: 1_000 * seconds,
        }
    }
}

fn kinds(update: &Update) -> Vec<(&'static str, Option<u32>, Option<String>)> {
    update
        .changes
        .iter()
        .map(|c| (c.kind, c.partition, c.node.clone()))
        .collect()
}

fn s(name: &str) -> Option<String> {
    Some(name.to_string())
}

#[test]
fn the_first_read_reports_the_table_without_changes() {
    let mut table = Table::new(4);
    table.hold(0, "a", 1);
    table.beat("a", |_| {});
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    let update = tracker.apply(table.reading(0));
    assert!(update.changed && update.reshaped);
    assert!(update.changes.is_empty());
    assert_eq!(tracker.sequence(), 1);
    let map = serde_json::to_value(tracker.map()).unwrap();
    assert_eq!(map["states"], "HRRR");
    assert_eq!(map["owners"], serde_json::json!([0, -1, -1, -1]));
    assert_eq!(map["nodes"], serde_json::json!(["a"]));
    assert_eq!(map["summary"]["unowned"], 3);
    assert_eq!(map["members"][0]["target"], 4);
}

#[test]
fn a_takeover_is_a_loss_then_an_acquisition_and_a_release_is_a_release() {
    let mut table = Table::new(2);
    table.hold(0, "a", 1);
    table.hold(1, "a", 1);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));

    table.hold(0, "b", 2);
    table.write(1, |r| {
        r.state = LeaseState::Released;
        r.owner = None;
    });
    let update = tracker.apply(table.reading(1));
    assert_eq!(
        kinds(&update),
        vec![
            ("lost", Some(0), s("a")),
            ("acquired", Some(0), s("b")),
            ("released", Some(1), s("a")),
        ]
    );
    assert_eq!(update.changes[1].previous, s("a"));
    assert_eq!(update.changes[1].epoch, Some(2));
    assert_eq!(update.partitions, vec![0, 1]);
    let delta = serde_json::to_value(tracker.delta(&update.partitions)).unwrap();
    assert_eq!(
        delta["partitions"],
        serde_json::json!([[0, 1, "H", 2], [1, -1, "R", 1]])
    );
    assert_eq!(tracker.ownership_counts[..3], [1, 1, 1]);
}

#[test]
fn operator_actions_are_named() {
    let mut table = Table::new(3);
    table.hold(0, "a", 1);
    table.hold(2, "a", 1);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));

    table.write(0, |r| r.note = Some("kicked".into()));
    table.write(1, |r| r.state = LeaseState::Offline);
    table.write(2, |r| r.prohibited.push(NodeId::new("a").unwrap()));
    let update = tracker.apply(table.reading(1));
    assert_eq!(
        kinds(&update),
        vec![
            ("kicked", Some(0), s("a")),
            ("offline", Some(1), None),
            ("prohibited", Some(2), s("a")),
        ]
    );
    table.write(1, |r| r.state = LeaseState::Released);
    table.write(2, |r| r.prohibited.clear());
    let update = tracker.apply(table.reading(2));
    assert_eq!(
        kinds(&update),
        vec![("online", Some(1), None), ("allowed", Some(2), s("a"))]
    );
}

#[test]
fn a_held_record_left_unchanged_past_the_window_is_unrenewed() {
    let mut table = Table::new(2);
    table.hold(0, "a", 1);
    table.hold(1, "b", 1);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    // b renews; a does not.
    for second in 1..=12 {
        table.write(1, |r| r.written_at_unix_ms = Some(second));
        tracker.apply(table.reading(second));
    }
    let summary = tracker.summary();
    assert_eq!(summary.unrenewed, 1);
    assert_eq!(summary.oldest_unrenewed_s, 12.0);
    assert_eq!(tracker.unrenewed, vec![0]);
    // Nine seconds is inside the window: not yet unrenewed.
    let mut fresh = Tracker::new("g", Duration::from_secs(1), STALE, false);
    fresh.apply(table.reading(0));
    fresh.apply(table.reading(9));
    assert_eq!(fresh.summary().unrenewed, 0);
    assert_eq!(fresh.summary().oldest_unrenewed_s, 9.0);
}

#[test]
fn missing_and_corrupt_records_are_counted_and_drawn() {
    let mut table = Table::new(4);
    table.corrupt.push(1);
    table.leases.truncate(3);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    let mut reading = table.reading(0);
    reading.expected = 6;
    tracker.apply(reading);
    let map = serde_json::to_value(tracker.map()).unwrap();
    assert_eq!(map["states"], "RCRMMM");
    assert_eq!(tracker.summary().missing, 3);
    assert_eq!(tracker.summary().corrupt, 1);
}

#[test]
fn members_join_die_come_back_drain_and_leave() {
    let mut table = Table::new(4);
    table.beat("a", |_| {});
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    table.beat("b", |m| m.weight = 3);
    let update = tracker.apply(table.reading(1));
    assert_eq!(kinds(&update), vec![("joined", None, s("b"))]);
    let map = serde_json::to_value(tracker.map()).unwrap();
    assert_eq!(map["members"][0]["target"], 1);
    assert_eq!(map["members"][1]["target"], 3);

    // a stops beating; b goes on.
    let mut last = Update::default();
    for second in 2..=10 {
        table.beat("b", |_| {});
        last = tracker.apply(table.reading(second));
    }
    assert_eq!(kinds(&last), vec![("dead", None, s("a"))]);
    assert_eq!(tracker.summary().live_members, 1);
    assert_eq!(tracker.summary().dead_members, 1);

    table.beat("a", |m| m.draining = true);
    let update = tracker.apply(table.reading(11));
    assert_eq!(
        kinds(&update),
        vec![("draining", None, s("a")), ("alive", None, s("a"))]
    );
    table.members.remove("a");
    let update = tracker.apply(table.reading(12));
    assert_eq!(kinds(&update), vec![("left", None, s("a"))]);
    assert_eq!(tracker.member_counts, [1, 1, 1, 0, 1, 1]);
}

#[test]
fn spillover_counts_unowned_partitions_no_live_member_may_take() {
    let mut table = Table::new(3);
    table.beat("a", |_| {});
    table.beat("b", |m| m.draining = true);
    table.write(0, |r| r.prohibited.push(NodeId::new("a").unwrap()));
    table.hold(2, "a", 1);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    // Partition 0: a is prohibited and b is draining; partition 1: a may take it.
    assert_eq!(tracker.summary().unowned, 2);
    assert_eq!(tracker.summary().spillover, 1);
    assert_eq!(tracker.summary().prohibited_pairs, 1);
}

#[test]
fn load_spillover_sums_what_live_members_carry_above_their_ceilings() {
    let mut table = Table::new(1);
    table.beat("dead", |m| {
        m.load = Some(100.0);
        m.max_load = Some(1.0);
    });
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    table.beat("above", |m| {
        m.load = Some(5.5);
        m.max_load = Some(4.0);
    });
    table.beat("below", |m| {
        m.load = Some(2.0);
        m.max_load = Some(3.0);
    });
    table.beat("unbounded", |m| m.load = Some(50.0));
    tracker.apply(table.reading(STALE.as_secs()));
    assert_eq!(tracker.summary().dead_members, 1);
    // The dead member would add 99; the one below its ceiling, counted without the floor at
    // zero, would take 1 off; a missing ceiling read as zero would add 50.
    assert_eq!(tracker.summary().load_spillover, 1.5);
    let map = serde_json::to_value(tracker.map()).unwrap();
    assert_eq!(map["summary"]["load_spillover"], 1.5);
}

#[test]
fn a_member_at_its_published_cap_takes_no_more() {
    let mut table = Table::new(3);
    table.beat("a", |m| m.max_partitions = Some(1));
    table.hold(0, "a", 1);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    assert_eq!(tracker.summary().spillover, 2);
    table.beat("a", |m| m.max_partitions = Some(2));
    tracker.apply(table.reading(1));
    assert_eq!(tracker.summary().spillover, 0);
}

#[test]
fn an_epoch_that_goes_back_is_counted() {
    let mut table = Table::new(1);
    table.hold(0, "a", 5);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    table.hold(0, "a", 3);
    tracker.apply(table.reading(1));
    assert_eq!(tracker.summary().epochs_back, 1);
    table.write(0, |_| {});
    tracker.apply(table.reading(2));
    assert_eq!(tracker.summary().epochs_back, 0);
    assert_eq!(tracker.epochs_back_total, 1);
}

#[test]
fn a_failed_read_keeps_the_map_and_says_why() {
    let mut table = Table::new(2);
    table.hold(0, "a", 1);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    let before = tracker.sequence();
    assert!(tracker.read_failed("store unavailable".into()));
    assert!(!tracker.read_failed("store unavailable".into()));
    assert_eq!(tracker.sequence(), before + 1);
    let map = serde_json::to_value(tracker.map()).unwrap();
    assert_eq!(map["error"], "store unavailable");
    assert_eq!(map["states"], "HR");
    assert!(tracker.failing());
    tracker.apply(table.reading(1));
    assert!(!tracker.failing());
}

#[test]
fn changes_and_history_are_bounded() {
    let mut table = Table::new(1);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    for second in 1..=(HISTORY_KEPT.max(CHANGES_KEPT) as u64 + 10) {
        table.hold(0, if second % 2 == 0 { "a" } else { "b" }, second);
        tracker.apply(table.reading(second * 10));
    }
    assert_eq!(tracker.changes.len(), CHANGES_KEPT);
    assert_eq!(tracker.history.len(), HISTORY_KEPT);
    assert_eq!(tracker.last_change_id(), tracker.changes.back().unwrap().id);
}

/// With session leases: fails if a lease whose holder keeps renewing its session counts as
/// unrenewed, or if one whose holder's session is only written back unchanged by others
/// does not.
#[test]
fn with_sessions_leases_are_as_fresh_as_their_holders_session() {
    let mut table = Table::new(2);
    table.lease_mode = leasehold::LeaseMode::Session;
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    table.hold(0, "alive", 1);
    table.hold(1, "dead", 1);
    table.beat("alive", |_| {});
    table.beat("dead", |_| {});
    tracker.apply(table.reading(0));
    for second in (5..=30).step_by(5) {
        table.beat("alive", |_| {});
        // Another node's take, or an operator's drain, rewrites the record as it was.
        table.versions += 1;
        table.members.get_mut("dead").unwrap().1 = table.versions;
        tracker.apply(table.reading(second));
    }
    assert_eq!(tracker.unrenewed, vec![1], "only the dead holder's lease");
    assert!(tracker.members[&NodeId::new("alive").unwrap()].live);
    assert!(!tracker.members[&NodeId::new("dead").unwrap()].live);
}

/// With session leases: fails if a lease taken under a session that has ended (its holder
/// restarted under the same name) counts as renewed by the new session's renewals.
#[test]
fn with_sessions_a_lease_of_an_ended_session_goes_unrenewed() {
    let mut table = Table::new(2);
    table.lease_mode = leasehold::LeaseMode::Session;
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    table.hold(0, "node", 1);
    table.hold(1, "node", 1);
    table.write(0, |r| r.session = Some(7));
    table.write(1, |r| r.session = Some(8));
    table.beat("node", |m| m.session = Some(7));
    tracker.apply(table.reading(0));
    for second in (5..=30).step_by(5) {
        // Restarted: the new process renews session 8.
        table.beat("node", |m| m.session = Some(8));
        tracker.apply(table.reading(second));
    }
    assert_eq!(tracker.unrenewed, vec![0], "only the ended session's lease");
}

#[test]
fn a_reservation_shows_its_deadline_and_runs_out_at_twice_the_window() {
    let mut table = Table::new(2);
    table.restart_window = Some(Duration::from_secs(10));
    table.hold(0, "a", 1);
    table.hold(1, "a", 1);
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    table.write(0, |r| {
        r.state = LeaseState::Released;
        r.reserve_for(&NodeId::new("a").unwrap());
        r.written_at_unix_ms = Some(3_000);
    });
    let update = tracker.apply(table.reading(3));
    assert_eq!(update.partitions, vec![0]);
    let map = serde_json::to_value(tracker.map()).unwrap();
    assert_eq!(map["states"], "RH");
    assert_eq!(map["owners"], serde_json::json!([0, 0]));
    assert_eq!(map["reserved_until"], serde_json::json!([[0, 13_000]]));
    assert_eq!(tracker.summary().reserved, 1);
    assert_eq!(tracker.summary().reservations_run_out, 0);

    // Within twice the window of first sight, the restart may still come back...
    tracker.apply(table.reading(23));
    assert_eq!(tracker.summary().reservations_run_out, 0);
    // ...past it, it did not, and nobody took the partition since.
    let update = tracker.apply(table.reading(24));
    assert!(update.changed);
    assert_eq!(tracker.summary().reservations_run_out, 1);

    // Taken by another node: neither reserved nor run out.
    table.hold(0, "b", 2);
    let update = tracker.apply(table.reading(25));
    assert_eq!(tracker.summary().reserved, 0);
    assert_eq!(tracker.summary().reservations_run_out, 0);
    let delta = serde_json::to_value(tracker.delta(&update.partitions)).unwrap();
    assert_eq!(delta["reserved_until"], serde_json::json!([]));
}

#[test]
fn a_group_without_timings_shows_reservations_with_no_deadline() {
    let mut table = Table::new(1);
    table.write(0, |r| {
        r.reserve_for(&NodeId::new("a").unwrap());
        r.written_at_unix_ms = Some(0);
    });
    let mut tracker = Tracker::new("g", Duration::from_secs(1), STALE, false);
    tracker.apply(table.reading(0));
    tracker.apply(table.reading(1_000));
    let map = serde_json::to_value(tracker.map()).unwrap();
    assert_eq!(map["reserved_until"], serde_json::json!([]));
    assert_eq!(tracker.summary().reserved, 1);
    assert_eq!(tracker.summary().reservations_run_out, 0);
}
