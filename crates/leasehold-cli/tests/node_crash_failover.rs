//! Three `leasehold node` processes on one store; one is killed with SIGKILL. The survivors
//! take its partitions, and the shared fence log shows, per partition, strictly increasing
//! epochs and never two holders at once. Run per partition on an SQLite file, and by session
//! on an SQLite file and on PostgreSQL.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{read_log, unix_ns_now, LogLine, Site};
use leasehold::LeaseMode;

const PARTITIONS: u32 = 12;

/// One tenure of a partition, from acquisition to its end (`None`: still open).
#[derive(Debug)]
struct Tenure {
    node: String,
    epoch: u64,
    start: u128,
    end: Option<u128>,
}

/// Pairs each `acquired` line with the `lost`/`released` line of the same node and epoch.
fn tenures(lines: &[LogLine], killed: &str, killed_at: u128) -> BTreeMap<u32, Vec<Tenure>> {
    let mut by_partition: BTreeMap<u32, Vec<Tenure>> = BTreeMap::new();
    for line in lines.iter().filter(|l| l.event == "acquired") {
        by_partition
            .entry(line.partition)
            .or_default()
            .push(Tenure {
                node: line.node.clone(),
                epoch: line.epoch,
                start: line.at,
                end: None,
            });
    }
    for line in lines.iter().filter(|l| l.event != "acquired") {
        let tenure = by_partition
            .get_mut(&line.partition)
            .and_then(|list| {
                list.iter_mut()
                    .find(|t| t.node == line.node && t.epoch == line.epoch)
            })
            .unwrap_or_else(|| panic!("{line:?} ends a tenure that was never acquired"));
        assert!(tenure.end.is_none(), "{line:?} ends a tenure twice");
        tenure.end = Some(line.at);
    }
    for tenure in by_partition.values_mut().flatten() {
        if tenure.node == killed && tenure.end.is_none() {
            tenure.end = Some(killed_at);
        }
    }
    by_partition
}

#[test]
fn killed_node_partitions_move_to_survivors_without_overlap() {
    killed_node_partitions_move_to_survivors(Site::new(), LeaseMode::PerPartition);
}

#[test]
fn killed_node_partitions_move_to_survivors_without_overlap_by_session() {
    killed_node_partitions_move_to_survivors(Site::new(), LeaseMode::Session);
}

#[test]
fn killed_node_partitions_move_to_survivors_without_overlap_by_session_on_postgres() {
    if let Some(site) = Site::postgres() {
        killed_node_partitions_move_to_survivors(site, LeaseMode::Session);
    }
}

fn killed_node_partitions_move_to_survivors(site: Site, mode: LeaseMode) {
    site.create_group(PARTITIONS, mode);
    let fence = site.path("fence.log");
    let fence_arg = fence.to_str().unwrap();
    let partitions = PARTITIONS.to_string();
    let mut nodes: Vec<_> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| site.node(id, &["--partitions", &partitions, "--fence-log", fence_arg]))
        .collect();

    site.wait_for(
        Duration::from_secs(20),
        "every node to hold partitions",
        || {
            let holders = site.holders();
            let owners: BTreeSet<_> = holders.values().flatten().collect();
            holders.len() == PARTITIONS as usize
                && holders.values().all(Option::is_some)
                && owners.len() == 3
        },
    );

    let mut victim = nodes.remove(0);
    victim.kill();
    let killed_at = unix_ns_now();
    site.wait_for(
        Duration::from_secs(20),
        "the survivors to hold every partition",
        || {
            site.holders()
                .values()
                .all(|h| matches!(h.as_deref(), Some("n2") | Some("n3")))
        },
    );
    if mode == LeaseMode::Session {
        site.assert_leases_renewed_by_sessions();
    }
    for node in &mut nodes {
        assert_eq!(
            node.terminate(Duration::from_secs(10)),
            0,
            "{}",
            site.node_stderr(&node.id)
        );
    }

    let lines = read_log(&fence);
    let by_partition = tenures(&lines, "n1", killed_at);
    assert_eq!(
        by_partition.len(),
        PARTITIONS as usize,
        "every partition was acquired"
    );
    let mut taken_from_victim = 0;
    for (partition, mut list) in by_partition {
        list.sort_by_key(|t| t.start);
        for pair in list.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            assert!(
                after.epoch > before.epoch,
                "partition {partition}: epoch {} acquired after epoch {}",
                after.epoch,
                before.epoch
            );
            let end = before
                .end
                .unwrap_or_else(|| panic!("partition {partition}: {before:?} never ended"));
            assert!(
                end <= after.start,
                "partition {partition}: {after:?} started before {before:?} ended"
            );
            if before.node == "n1" && after.node != "n1" {
                taken_from_victim += 1;
            }
        }
        // The survivors released everything on SIGTERM.
        let last = list.last().unwrap();
        assert!(
            last.end.is_some(),
            "partition {partition}: {last:?} never ended"
        );
    }
    assert!(
        taken_from_victim > 0,
        "the survivors took over the killed node's partitions"
    );
}
