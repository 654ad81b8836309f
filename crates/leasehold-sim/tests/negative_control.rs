//! The negative controls: with `acquire_after` shorter than the lease validity (started
//! without validation), two nodes can hold one partition at once, and the single-owner check
//! must say so within a few seeds; with releases that do not wait for the work in flight, two
//! nodes work on one partition at once, and the work-overlap check must say so. If they did
//! not, the checks would be proving nothing.

use std::time::Duration;

use leasehold_sim::invariants::Invariant;
use leasehold_sim::{run_seed, FaultProfile, SimConfig};

#[test]
fn unsafe_timings_are_caught_by_the_single_owner_check() {
    let mut config = SimConfig::new(4, 16, Duration::from_secs(600), FaultProfile::All);
    config.unsafe_timings = true;
    let caught: Vec<_> = (0..8)
        .filter_map(|seed| run_seed(&config, seed).err())
        .collect();
    let first = caught
        .iter()
        .find(|v| v.invariant == Invariant::SingleOwner)
        .unwrap_or_else(|| panic!("no seed of 8 caught two owners: {caught:?}"));
    assert!(
        caught.len() >= 4,
        "only {} of 8 seeds caught it",
        caught.len()
    );
    assert!(first
        .replay
        .starts_with(&format!("leasehold sim --seed {}", first.seed)));
    assert!(first.replay.contains("--unsafe"));
    let replayed = run_seed(&config, first.seed).expect_err("a replay fails the same way");
    assert_eq!(replayed, *first);
    println!("{first}");
}

#[test]
fn releases_that_do_not_wait_for_work_are_caught_by_the_work_overlap_check() {
    let mut config = SimConfig::new(4, 16, Duration::from_secs(600), FaultProfile::All);
    config.unsafe_release = true;
    let caught: Vec<_> = (0..8)
        .filter_map(|seed| run_seed(&config, seed).err())
        .collect();
    let first = caught
        .iter()
        .find(|v| v.invariant == Invariant::WorkOverlap)
        .unwrap_or_else(|| panic!("no seed of 8 caught overlapping work: {caught:?}"));
    assert!(
        caught.len() >= 4,
        "only {} of 8 seeds caught it",
        caught.len()
    );
    assert!(first.replay.contains("--unsafe-release"));
    println!("{first}");
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
