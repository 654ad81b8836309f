//! The negative controls: with `acquire_after` shorter than the lease validity (started
//! without validation), two nodes can hold one partition at once, and the single-owner check
//! must say so within a few seeds; with releases that do not wait for the work in flight, two
//! nodes work on one partition at once, and the work-overlap check must say so. If they did
//! not, the checks would be proving nothing. Likewise for nodes restarted with timings unsafe
//! against the fleet's: refused by the group record, caught when they skip its check.

use std::time::Duration;

use leasehold_sim::invariants::Invariant;
use leasehold_sim::{run_seed, FaultProfile, SimConfig, Violation};

/// Runs seeds 0..8 of `config`, asserts that at least `at_least` of them break `invariant`
/// and that the replay command names `flag`, and returns the first violation.
fn caught(config: &SimConfig, invariant: Invariant, flag: &str, at_least: usize) -> Violation {
    let caught: Vec<_> = (0..8)
        .filter_map(|seed| run_seed(config, seed).err())
        .collect();
    let first = caught
        .iter()
        .find(|v| v.invariant == invariant)
        .unwrap_or_else(|| panic!("no seed of 8 broke {invariant:?}: {caught:?}"))
        .clone();
    assert!(
        caught.len() >= at_least,
        "only {} of 8 seeds caught it",
        caught.len()
    );
    assert!(first.replay.contains(flag), "{}", first.replay);
    println!("{first}");
    first
}

#[test]
fn unsafe_timings_are_caught_by_the_single_owner_check() {
    let mut config = SimConfig::new(4, 16, Duration::from_secs(600), FaultProfile::All);
    config.unsafe_timings = true;
    let first = caught(&config, Invariant::SingleOwner, "--unsafe", 4);
    assert!(first
        .replay
        .starts_with(&format!("leasehold sim --seed {}", first.seed)));
    let replayed = run_seed(&config, first.seed).expect_err("a replay fails the same way");
    assert_eq!(replayed, first);
}

#[test]
fn releases_that_do_not_wait_for_work_are_caught_by_the_work_overlap_check() {
    let mut config = SimConfig::new(4, 16, Duration::from_secs(600), FaultProfile::All);
    config.unsafe_release = true;
    caught(&config, Invariant::WorkOverlap, "--unsafe-release", 4);
}

#[test]
fn the_same_fleet_with_safe_timings_passes() {
    let config = SimConfig::new(4, 16, Duration::from_secs(600), FaultProfile::All);
    for seed in 0..8 {
        if let Err(violation) = run_seed(&config, seed) {
            panic!("{violation}");
        }
    }
}

/// Every crashed node restarts mis-set, with timings that let it serve a lease for longer
/// than the fleet waits before taking one.
fn mis_set_restarts() -> SimConfig {
    let mut config = SimConfig::new(4, 16, Duration::from_secs(600), FaultProfile::All);
    config.faults.misconfigured_restart_rate = 1.0;
    config
}

#[test]
fn mis_set_nodes_that_skip_the_group_record_are_caught_by_the_single_owner_check() {
    let mut config = mis_set_restarts();
    config.unsafe_mixed_timings = true;
    caught(&config, Invariant::SingleOwner, "--unsafe-mixed-timings", 2);
}

#[test]
fn mis_set_nodes_are_refused_by_the_group_record() {
    let config = mis_set_restarts();
    let mut mis_set = 0;
    for seed in 0..8 {
        match run_seed(&config, seed) {
            Ok(report) => mis_set += report.samples.faults.misconfigured,
            Err(violation) => panic!("{violation}"),
        }
    }
    assert!(mis_set >= 8, "only {mis_set} mis-set restarts in 8 seeds");
}
