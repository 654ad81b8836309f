//! Three `leasehold node` processes doing units of work longer than a lease, through a drain
//! and a SIGTERM. The shared work log shows, per partition, that no two nodes' units (from
//! `work` to `done`) ever overlapped: each hand-off waited for the unit in flight. Run per
//! partition on an SQLite file, and by session on an SQLite file and on PostgreSQL.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{read_log, read_log_so_far, LogLine, Site};
use leasehold::LeaseMode;

const PARTITIONS: u32 = 6;

/// One unit of work, from its `work` line to its `done` or `abandoned` line.
#[derive(Debug)]
struct Unit {
    node: String,
    epoch: u64,
    start: u128,
    end: Option<(u128, String)>,
}

/// Pairs each `work` line with the next end line of the same node and partition: a node runs
/// one unit at a time per partition.
fn units(lines: &[LogLine]) -> BTreeMap<u32, Vec<Unit>> {
    let mut by_partition: BTreeMap<u32, Vec<Unit>> = BTreeMap::new();
    for line in lines {
        let units = by_partition.entry(line.partition).or_default();
        match line.event.as_str() {
            "work" => units.push(Unit {
                node: line.node.clone(),
                epoch: line.epoch,
                start: line.at,
                end: None,
            }),
            "done" | "abandoned" => {
                let unit = units
                    .iter_mut()
                    .rev()
                    .find(|u| u.node == line.node && u.end.is_none())
                    .unwrap_or_else(|| panic!("{line:?} ends no unit"));
                assert_eq!(unit.epoch, line.epoch, "{line:?}");
                unit.end = Some((line.at, line.event.clone()));
            }
            other => panic!("unexpected work log line {other:?}"),
        }
    }
    by_partition
}

/// The last `lines` lines of `text`.
fn log_tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn done_units(log: &std::path::Path, node: &str) -> usize {
    read_log_so_far(log)
        .iter()
        .filter(|l| l.node == node && l.event == "done")
        .count()
}

#[test]
fn hand_offs_wait_for_units_in_flight_through_a_drain_and_a_sigterm() {
    hand_offs_wait_for_units_in_flight(Site::new(), LeaseMode::PerPartition);
}

#[test]
fn hand_offs_wait_for_units_in_flight_through_a_drain_and_a_sigterm_by_session() {
    hand_offs_wait_for_units_in_flight(Site::new(), LeaseMode::Session);
}

#[test]
fn hand_offs_wait_for_units_in_flight_through_a_drain_and_a_sigterm_by_session_on_postgres() {
    if let Some(site) = Site::postgres() {
        hand_offs_wait_for_units_in_flight(site, LeaseMode::Session);
    }
}

fn hand_offs_wait_for_units_in_flight(site: Site, mode: LeaseMode) {
    site.create_group(PARTITIONS, mode);
    let work = site.path("work.log");
    let work_arg = work.to_str().unwrap();
    let partitions = PARTITIONS.to_string();
    // Units of 2 s under leases of 1 s: every hand-off finds work in flight.
    let flags = [
        "--partitions",
        &partitions,
        "--work-log",
        work_arg,
        "--work-interval",
        "100ms",
        "--work-duration",
        "2s",
        "--drain-timeout",
        "5s",
    ];
    let mut nodes: Vec<_> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| site.node(id, &flags))
        .collect();
    site.wait_for(
        Duration::from_secs(20),
        "every node to hold and work",
        || {
            let holders = site.holders();
            let owners: BTreeSet<_> = holders.values().flatten().cloned().collect();
            owners.len() == 3 && ["n1", "n2", "n3"].iter().all(|n| done_units(&work, n) > 0)
        },
    );

    site.ok(&["drain", "n1"]);
    site.wait_for(Duration::from_secs(20), "n1 to hand everything off", || {
        let holders = site.holders();
        holders.len() == PARTITIONS as usize
            && holders
                .values()
                .all(|h| matches!(h.as_deref(), Some("n2") | Some("n3")))
    });
    let mut sigterm = nodes.remove(1);
    assert_eq!(
        sigterm.terminate(Duration::from_secs(15)),
        0,
        "{}",
        site.node_stderr("n2")
    );
    site.wait_for(Duration::from_secs(20), "n3 to hold everything", || {
        site.holders().values().all(|h| h.as_deref() == Some("n3"))
    });
    if mode == LeaseMode::Session {
        site.assert_leases_renewed_by_sessions();
    }
    std::thread::sleep(Duration::from_millis(1500));
    for node in &mut nodes {
        assert_eq!(
            node.terminate(Duration::from_secs(15)),
            0,
            "{}",
            site.node_stderr(&node.id)
        );
    }

    let by_partition = units(&read_log(&work));
    assert_eq!(by_partition.len(), PARTITIONS as usize);
    let mut moved = 0;
    for (partition, mut list) in by_partition {
        list.sort_by_key(|u| u.start);
        for unit in &list {
            let (_, how) = unit
                .end
                .as_ref()
                .unwrap_or_else(|| panic!("partition {partition}: {unit:?} never ended"));
            // A hand-off waits for the unit; only a lease lost under it otherwise (a store a
            // loaded machine kept from answering in time) ends it early, as the safety rule
            // requires.
            let stderr = site.node_stderr(&unit.node);
            assert!(
                how == "done"
                    || (how == "abandoned" && common::lost_under(&stderr, partition, unit.epoch)),
                "partition {partition}: {unit:?}; {}'s log ends:\n{}",
                unit.node,
                log_tail(&stderr, 40)
            );
        }
        for (i, unit) in list.iter().enumerate() {
            let end = unit.end.as_ref().unwrap().0;
            for other in &list[i + 1..] {
                if other.node != unit.node {
                    assert!(
                        end <= other.start,
                        "partition {partition}: {other:?} started while {unit:?} ran"
                    );
                }
            }
        }
        moved += list.windows(2).filter(|w| w[0].node != w[1].node).count();
    }
    assert!(moved >= 4, "partitions changed hands under work: {moved}");
}
