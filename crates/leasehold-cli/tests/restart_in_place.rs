//! `node --restart-in-place` with real processes on an SQLite file: a node stopped by SIGTERM
//! leaves its partitions reserved for its name; the process started next under the name
//! gets every one of them back under a higher epoch while the other node takes none; a node
//! that does not come back has its partitions taken once the group's restart window ends.

mod common;

use std::collections::BTreeMap;
use std::thread::sleep;
use std::time::Duration;

use common::{partitions, NodeProcess, Site};
use leasehold::LeaseMode;

/// Timings long enough that a process restarted on a loaded machine is back within the
/// window (at most four times acquire_after: 16 s).
const FLAGS: [&str; 9] = [
    "--heartbeat",
    "200ms",
    "--validity",
    "3s",
    "--acquire-after",
    "4s",
    "--scan-interval",
    "100ms",
    "--restart-in-place",
];

fn start(site: &Site, name: &str, id: &str) -> NodeProcess {
    let mut args = vec!["node", "--id", id];
    args.extend(FLAGS);
    site.process(name, &args)
}

fn group(site: &Site, mode: LeaseMode) {
    site.ok(&[
        "init",
        "--partitions",
        "8",
        "--lease-mode",
        mode.as_str(),
        "--validity",
        "3s",
        "--acquire-after",
        "4s",
    ]);
    site.ok(&["timings", "--restart-window", "16s"]);
}

/// Partition → epoch of what `node` holds, from `status --json`.
fn held_by(site: &Site, node: &str) -> BTreeMap<u64, u64> {
    partitions(&site.status())
        .into_iter()
        .filter(|p| p.holder.as_deref() == Some(node))
        .map(|p| (p.partition, p.epoch))
        .collect()
}

fn even_split(site: &Site) -> (BTreeMap<u64, u64>, BTreeMap<u64, u64>) {
    site.wait_for(Duration::from_secs(30), "four partitions each", || {
        held_by(site, "a").len() == 4 && held_by(site, "b").len() == 4
    });
    (held_by(site, "a"), held_by(site, "b"))
}

/// The partitions `status --json` shows reserved for `node`.
fn reserved_for(site: &Site, node: &str) -> Vec<u64> {
    site.status()["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter(|p| p["reserved_for"].as_str() == Some(node))
        .map(|p| p["partition"].as_u64().expect("partition"))
        .collect()
}

fn comes_back(mode: LeaseMode) {
    let site = Site::new();
    group(&site, mode);
    let mut a = start(&site, "a", "a");
    let _b = start(&site, "b", "b");
    let (before, of_b) = even_split(&site);
    assert_eq!(a.terminate(Duration::from_secs(20)), 0);
    let reserved = reserved_for(&site, "a");
    assert_eq!(
        reserved,
        before.keys().copied().collect::<Vec<_>>(),
        "a's partitions reserved for it"
    );
    let _again = start(&site, "a-again", "a");
    site.wait_for(
        Duration::from_secs(30),
        "a to hold its partitions again",
        || {
            let now = held_by(&site, "a");
            now.len() == before.len()
                && before
                    .iter()
                    .all(|(partition, epoch)| now.get(partition).is_some_and(|e| e > epoch))
        },
    );
    // b's tenures never changed: nothing moved to it, nothing came back from it.
    assert_eq!(held_by(&site, "b"), of_b, "{}", site.node_logs());
}

#[test]
fn a_node_restarted_in_place_gets_its_partitions_back_and_nothing_moves() {
    comes_back(LeaseMode::PerPartition);
}

#[test]
fn a_node_restarted_in_place_gets_its_partitions_back_and_nothing_moves_by_session() {
    comes_back(LeaseMode::Session);
}

#[test]
fn the_partitions_of_a_node_that_does_not_come_back_are_taken_after_the_window() {
    let site = Site::new();
    group(&site, LeaseMode::PerPartition);
    let mut a = start(&site, "a", "a");
    let _b = start(&site, "b", "b");
    let (before, of_b) = even_split(&site);
    assert_eq!(a.terminate(Duration::from_secs(20)), 0);
    // Well within the 16 s window: b has taken none of them (a plain stop would have
    // handed them all over by now).
    sleep(Duration::from_secs(2));
    assert_eq!(held_by(&site, "b"), of_b);
    assert_eq!(reserved_for(&site, "a").len(), before.len());
    site.wait_for(Duration::from_secs(60), "b to take everything", || {
        held_by(&site, "b").len() == 8
    });
}
