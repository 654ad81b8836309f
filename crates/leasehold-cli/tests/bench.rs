//! `leasehold bench` as a user runs it: real node processes on an SQLite file, every change
//! applied. Asserts that each change completes and no partition ever had two owners, never
//! how fast: timings belong in BENCHMARKS.md, not in a test on a shared machine.

mod common;

use common::Site;
use serde_json::Value;

/// The partitions of the bench's group: three nodes hold four each.
const PARTITIONS: u64 = 12;

/// Fails if a change never completes (the fleet does not settle, a node dies), if the
/// figures are not computed from the fence logs (no moves seen for a change that must move
/// partitions), or if any partition is acquired while another node holds it.
#[test]
fn every_change_completes_with_no_double_owner() {
    let site = Site::new();
    let run = site.run(&[
        "--group",
        "bench",
        "bench",
        "--runs",
        "2",
        "--nodes",
        "3",
        "--partitions",
        &PARTITIONS.to_string(),
        "--heartbeat",
        "100ms",
        "--validity",
        "400ms",
        "--acquire-after",
        "700ms",
        "--scan-interval",
        "100ms",
        "--json",
    ]);
    assert_eq!(run.code, 0, "bench failed: {run:?}");
    let report: Value = serde_json::from_str(&run.stdout).expect("bench --json is JSON");
    assert_eq!(report["clean"], true, "{report:#}");
    let changes = report["changes"].as_array().expect("changes");
    let names: Vec<&str> = changes
        .iter()
        .map(|c| c["change"].as_str().expect("a name"))
        .collect();
    assert_eq!(
        names,
        ["cold", "crash", "pause", "leave", "replace", "join", "rolling"]
    );
    for change in changes {
        let runs = change["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 2, "{change:#}");
        for figures in runs {
            assert!(figures["settled_s"].is_f64(), "settled: {figures:#}");
            assert_eq!(figures["double_owners"], 0, "{figures:#}");
            let (moves, fewest) = (
                figures["moves"].as_u64().expect("moves"),
                figures["min_moves"].as_u64().expect("min_moves"),
            );
            assert!(fewest > 0, "every change moves something: {change:#}");
            // The paused node's partitions move only if the others run during the pause.
            // SQLite stops every writer while the paused process holds the file's write
            // lock (it stopped inside a write, likelier when a busy machine slows writes):
            // then every lease in the group runs out, nobody takes over, and the paused
            // node takes its own partitions back when it continues.
            let fleet_stood_still = change["change"] == "pause"
                && moves == 0
                && figures["expiries"].as_u64().expect("expiries") >= PARTITIONS
                && figures["same_holder"].as_u64().expect("same_holder") == PARTITIONS;
            assert!(
                moves >= fewest || fleet_stood_still,
                "fewer moves than possible: {change:#}"
            );
        }
    }
    // Every run deleted its records.
    let status = site.run(&["--group", "bench", "status"]);
    assert_ne!(status.code, 0, "the group is gone: {status:?}");
}

/// Fails if the bench would run in (and then delete) a group that holds records.
#[test]
fn a_group_in_use_is_refused() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let run = site.run(&["bench", "--runs", "1"]);
    common::assert_clean_error(&run, &["group default already has records", "--group"]);
    assert_eq!(site.holders().len(), 4, "nothing was deleted");
}

/// Fails if settings that cannot work are accepted instead of named.
#[test]
fn bad_settings_are_named() {
    let site = Site::new();
    let run = site.run(&["--group", "b", "bench", "--nodes", "1"]);
    common::assert_clean_error(&run, &["--nodes 1"]);
    let run = site.run(&["--group", "b", "bench", "--pause", "1s"]);
    common::assert_clean_error(&run, &["--pause", "lease validity"]);
    let run = site.run(&[
        "--group",
        "b",
        "bench",
        "--validity",
        "3s",
        "--acquire-after",
        "2s",
    ]);
    common::assert_clean_error(&run, &["invalid node timings"]);
    let run = common::leasehold(&["--store", "memory:", "bench", "--runs", "1"]);
    common::assert_clean_error(&run, &["separate processes", "memory:"]);
}
