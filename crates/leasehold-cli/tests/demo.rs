//! The demo runs end to end with small timings and reports its measurements.

mod common;

use std::process::Command;

fn demo(extra: &[&str]) -> common::Run {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["demo", "--nodes", "3", "--partitions", "12"])
        .args([
            "--heartbeat",
            "100ms",
            "--validity",
            "400ms",
            "--acquire-after",
            "700ms",
        ])
        .args(extra)
        .env_remove("LEASEHOLD_STORE")
        .output()
        .expect("run the demo");
    common::Run::from(output)
}

fn assert_reports(run: &common::Run) {
    assert_eq!(run.code, 0, "{run:?}");
    for needle in [
        "failover: ",
        "hand-off: ",
        "failover after crash:  first",
        "hand-off after drain:  first",
        "overlaps:              0",
        "result:                OK",
    ] {
        assert!(
            run.stdout.contains(needle),
            "missing {needle:?}:\n{}",
            run.stdout
        );
    }
    // Not a terminal: plain snapshots, no cursor movement or colors.
    assert!(!run.stdout.contains('\x1b'), "{}", run.stdout);
    assert_balanced_before_the_crash(&run.stdout);
}

/// Fails if the demo crashes a node before the fleet is balanced: its first picture must
/// show every node at its even share (12 partitions over 3 nodes: 4 each).
fn assert_balanced_before_the_crash(stdout: &str) {
    let first = stdout
        .lines()
        .find(|line| line.trim_start().starts_with("nodes:"))
        .unwrap_or_else(|| panic!("no picture of the nodes:\n{stdout}"));
    let counts: Vec<&str> = first
        .split_whitespace()
        .filter_map(|word| word.split_once('=').map(|(_, count)| count))
        .collect();
    assert_eq!(counts, ["4", "4", "4"], "{first}\n{stdout}");
}

#[test]
fn demo_on_a_temporary_sqlite_file_reports_failover_and_hand_off() {
    let run = demo(&[]);
    assert_reports(&run);
    assert!(run.stdout.contains("(temporary)"), "{}", run.stdout);
}

#[test]
fn demo_in_memory_reports_failover_and_hand_off() {
    assert_reports(&demo(&["--store", "memory:"]));
}

#[test]
fn demo_refuses_too_few_nodes() {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["demo", "--nodes", "2", "--store", "memory:"])
        .output()
        .expect("run the demo");
    let run = common::Run::from(output);
    common::assert_clean_error(&run, &["--nodes 2"]);
}
