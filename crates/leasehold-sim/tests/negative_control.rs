//! The negative controls: one deliberately broken variant per invariant, each of which its
//! check must catch in about the share of seeds measured for it. If they were not caught,
//! the checks would be proving nothing; if they were caught less often, a check would have
//! lost some of its power unseen.
//!
//! - single owner: `acquire_after` shorter than the lease validity (started without
//!   validation), and nodes restarted with timings unsafe against the fleet's that skip the
//!   group record's check (refused by the group record otherwise);
//! - work overlap: releases that do not wait for the work in flight;
//! - epoch order: acquisitions that reuse the epoch their record carries;
//! - fencing: resources that accept stale epochs;
//! - liveness: nodes that stop taking partitions once the faults stop;
//! - balance: a node that counts no other member and so never hands off its surplus;
//! - exclusion: nodes that keep and take the partitions their own exclusion lists name;
//! - reservation: nodes that take a partition reserved for a node restarting in place at
//!   once, as any released one;
//! - session leases, single owner: takes, and operator commands, that change a lease without
//!   its holder's session, so the holder's next renewal succeeds and it keeps serving; and,
//!   with twins (a second process under a paused node's name), takes of leases held under a
//!   session that has ended with no wait, while the paused first process still serves them;
//! - a destroy on a live fleet that leaves the running nodes serving, followed by records
//!   created released.

use std::time::Duration;

use leasehold::{ConfigError, NodeId, ParticipantConfig};
use leasehold_sim::invariants::Invariant;
use leasehold_sim::{run_seed, FaultProfile, SimConfig, Violation};

const SEEDS: u64 = 8;

/// The fleet every control runs: small, so that debug builds run the controls quickly.
fn fleet() -> SimConfig {
    SimConfig::new(4, 16, Duration::from_secs(600), FaultProfile::All)
}

/// The default run, renewing by session.
fn by_session() -> SimConfig {
    SimConfig {
        lease_mode: leasehold::LeaseMode::Session,
        ..SimConfig::default()
    }
}

/// The default run by session, with twins.
fn by_session_with_twins() -> SimConfig {
    SimConfig {
        twins: true,
        ..by_session()
    }
}

/// Runs seeds `0..SEEDS` of `config` and asserts that every seed that failed broke
/// `invariant` (the control breaks nothing else), that at least `min_rate` of the seeds did,
/// and that the replay command names `flag`. Returns the violations.
///
/// Each `min_rate` is about three quarters of the rate measured for its control over 200
/// seeds of this fleet (TESTING.md lists them): a check that lost a quarter of its power to
/// catch what it is for fails here, not only one that lost all of it.
fn caught(config: &SimConfig, invariant: Invariant, flag: &str, min_rate: f64) -> Vec<Violation> {
    caught_in(config, invariant, flag, SEEDS, min_rate)
}

/// [`caught`] over seeds `0..seeds`, for a control that needs a rarer situation.
fn caught_in(
    config: &SimConfig,
    invariant: Invariant,
    flag: &str,
    seeds: u64,
    min_rate: f64,
) -> Vec<Violation> {
    let caught: Vec<Violation> = (0..seeds)
        .filter_map(|seed| run_seed(config, seed).err())
        .collect();
    for violation in &caught {
        assert_eq!(violation.invariant, invariant, "{violation}");
        assert!(violation.replay.contains(flag), "{}", violation.replay);
    }
    let at_least = (min_rate * seeds as f64).ceil() as usize;
    assert!(
        caught.len() >= at_least.max(1),
        "only {} of {seeds} seeds broke {invariant}, not {at_least} ({min_rate} of them)",
        caught.len()
    );
    println!("{} of {seeds} seeds caught; the first:", caught.len());
    println!("{}", caught[0]);
    caught
}

#[test]
fn unsafe_timings_are_caught_by_the_single_owner_check() {
    let mut config = fleet();
    config.unsafe_timings = true;
    let first = caught(&config, Invariant::SingleOwner, "--unsafe", 0.72).remove(0);
    assert!(first
        .replay
        .starts_with(&format!("leasehold sim --seed {}", first.seed)));
    let replayed = run_seed(&config, first.seed).expect_err("a replay fails the same way");
    assert_eq!(replayed, first);
}

#[test]
fn releases_that_do_not_wait_for_work_are_caught_by_the_work_overlap_check() {
    let mut config = fleet();
    config.unsafe_release = true;
    caught(&config, Invariant::WorkOverlap, "--unsafe-release", 0.75);
}

#[test]
fn acquisitions_that_reuse_the_epoch_are_caught_by_the_epoch_order_check() {
    let mut config = fleet();
    config.unsafe_epoch_reuse = true;
    caught(&config, Invariant::EpochOrder, "--unsafe-epoch-reuse", 0.75);
}

#[test]
fn the_epoch_reuse_switch_is_refused_outside_the_simulator() {
    let mut config = ParticipantConfig::new(NodeId::new("n0").expect("valid"), 4);
    config.negative_controls_mut().reuse_epoch = true;
    assert_eq!(config.validate(), Err(ConfigError::UnsafeEpochReuse));
}

/// Caught only in seeds where a pause outlasts the takeover of its node's leases, so fewer.
#[test]
fn resources_that_accept_stale_epochs_are_caught_by_the_fencing_check() {
    let mut config = fleet();
    config.unsafe_stale_fencing = true;
    let caught = caught(&config, Invariant::Fencing, "--unsafe-stale-fencing", 0.45);
    assert!(
        caught[0].details.contains("accepted work of"),
        "{}",
        caught[0]
    );
}

#[test]
fn nodes_that_stop_taking_partitions_are_caught_by_the_liveness_check() {
    let mut config = fleet();
    config.unsafe_stop_acquiring = true;
    caught(
        &config,
        Invariant::Liveness,
        "--unsafe-stop-acquiring",
        0.74,
    );
}

/// Caught while the fleet is settled, not only by the check at the end of the run.
#[test]
fn a_node_that_never_hands_off_its_surplus_is_caught_by_the_balance_check() {
    let mut config = fleet();
    config.unsafe_ignore_members = true;
    // Sixteen seeds: over eight, a rate of about three in four (144 of 200 seeds) falls
    // below the bound one time in twenty by chance alone.
    let caught = caught_in(
        &config,
        Invariant::Balance,
        "--unsafe-ignore-members",
        16,
        0.53,
    );
    let settled = caught
        .iter()
        .filter(|v| v.details.starts_with("settled:") && v.at < config.duration)
        .count();
    assert!(settled >= caught.len() / 2, "{caught:#?}");
}

#[test]
fn nodes_that_ignore_their_exclusion_lists_are_caught_by_the_exclusion_check() {
    let mut config = fleet();
    config.unsafe_ignore_exclusions = true;
    // An exclusion comes from the operator's rarer commands: more seeds than the others.
    caught_in(
        &config,
        Invariant::Exclusion,
        "--unsafe-ignore-exclusions",
        16,
        0.31,
    );
}

#[test]
fn nodes_that_take_reserved_partitions_at_once_are_caught_by_the_reservation_check() {
    let mut config = fleet();
    config.unsafe_ignore_reservations = true;
    // A restart in place is one membership change of several: more seeds than most.
    caught_in(
        &config,
        Invariant::Reservation,
        "--unsafe-ignore-reservations",
        24,
        0.09,
    );
}

/// The same fleet, renewing by session.
fn session_fleet() -> SimConfig {
    let mut config = fleet();
    config.lease_mode = leasehold::LeaseMode::Session;
    config
}

/// Seeds for the session controls: a take or an operator command must catch a holder
/// that is paused or cut off, which a small fleet meets less often than the other controls'
/// situations.
const SESSION_SEEDS: u64 = 40;

#[test]
fn session_takes_that_leave_the_holder_alone_are_caught_by_the_single_owner_check() {
    let mut config = session_fleet();
    config.unsafe_session_take = true;
    let flag = "--unsafe-session-take";
    caught_in(&config, Invariant::SingleOwner, flag, SESSION_SEEDS, 0.39);
}

/// Operator commands that leave the holder's session alone are caught twice over: by the
/// holder's next listing of the table, and, with that check off as well, by nothing — the
/// single-owner check must then fire. An operator command must meet a holder cut off from
/// the store, in about one seed in twenty-five: more seeds than the others.
#[test]
fn session_operator_commands_that_leave_the_holder_alone_are_caught_by_the_single_owner_check() {
    let mut config = session_fleet();
    config.unsafe_session_operator = true;
    config.unsafe_unchecked_holdings = true;
    let flag = "--unsafe-unchecked-holdings";
    caught_in(&config, Invariant::SingleOwner, flag, 200, 0.03);
}

/// Fails without the holders' check of their listings: operator commands that leave the
/// holder's session alone, as any writer outside the protocol does (a restore, a hand
/// edit, a destroy and init), would leave it serving what another node then takes.
#[test]
fn the_listing_check_bounds_changes_made_behind_a_holders_back() {
    let mut config = session_fleet();
    config.unsafe_session_operator = true;
    for seed in 0..SESSION_SEEDS {
        if let Err(violation) = run_seed(&config, seed) {
            panic!("{violation}");
        }
    }
}

/// The session fleet with twins: now and then a second process starts under the name of a
/// node whose first process is paused, and the first resumes still holding what it held.
fn twin_fleet() -> SimConfig {
    let mut config = session_fleet();
    config.twins = true;
    config
}

#[test]
fn takes_of_ended_sessions_without_a_wait_are_caught_by_the_single_owner_check() {
    let mut config = twin_fleet();
    config.unsafe_session_identity = true;
    let caught: Vec<Violation> = (0..SESSION_SEEDS)
        .filter_map(|seed| run_seed(&config, seed).err())
        .filter(|violation| violation.invariant == Invariant::SingleOwner)
        .collect();
    // About three quarters of the rate measured over 200 seeds (TESTING.md).
    let at_least = (0.47 * SESSION_SEEDS as f64).ceil() as usize;
    assert!(
        caught.len() >= at_least,
        "only {} caught, not {at_least}",
        caught.len()
    );
    assert!(caught[0].replay.contains("--unsafe-session-identity"));
    println!(
        "{} of {SESSION_SEEDS} seeds caught; the first:",
        caught.len()
    );
    println!("{}", caught[0]);
}

/// Fails if a second process under a node's name breaks any invariant, safety or not, in
/// either lease mode. Drains and exclusion lists belong to the name: the second process
/// must be drained, and keep an exclusion, exactly while the name is (it once held nothing
/// for the rest of a run because the first process, stopped while drained, could not be
/// undrained; and kept an exclusion the operator had lifted from the first).
#[test]
fn fleets_with_twins_pass_every_invariant() {
    let mut per_partition = fleet();
    per_partition.twins = true;
    for config in [twin_fleet(), per_partition] {
        for seed in 0..SESSION_SEEDS {
            if let Err(violation) = run_seed(&config, seed) {
                panic!("{violation}");
            }
        }
    }
}

#[test]
fn the_same_fleet_renewing_by_session_passes() {
    let config = session_fleet();
    for seed in 0..SESSION_SEEDS {
        if let Err(violation) = run_seed(&config, seed) {
            panic!("{violation}");
        }
    }
}

/// Seeds of the session-mode run that once left partitions unowned past the liveness bound:
/// a node on its way out deleted its session while records whose hand-off had outlived the
/// drain timeout still named it, and the others waited `acquire_after` more from seeing the
/// session gone.
#[test]
fn session_seeds_that_once_left_a_leaving_nodes_partitions_unowned_pass() {
    let config = SimConfig {
        lease_mode: leasehold::LeaseMode::Session,
        explore: false,
        ..SimConfig::default()
    };
    for seed in [42588, 43755, 60512, 69640] {
        if let Err(violation) = run_seed(&config, seed) {
            panic!("{violation}");
        }
    }
}

#[test]
fn the_same_fleet_with_safe_timings_passes() {
    let config = fleet();
    for seed in 0..SEEDS {
        if let Err(violation) = run_seed(&config, seed) {
            panic!("{violation}");
        }
    }
}

/// Every crashed node restarts mis-set, with timings that let it serve a lease for longer
/// than the fleet waits before taking one.
fn mis_set_restarts() -> SimConfig {
    let mut config = fleet();
    config.faults.misconfigured_restart_rate = 1.0;
    config
}

#[test]
fn mis_set_nodes_that_skip_the_group_record_are_caught_by_the_single_owner_check() {
    let mut config = mis_set_restarts();
    config.unsafe_mixed_timings = true;
    // It needs a mis-set node paused or cut off while holding a lease, which some seeds of
    // this small fleet never bring (70 of 200 do, 7 of these 24).
    caught_in(
        &config,
        Invariant::SingleOwner,
        "--unsafe-mixed-timings",
        24,
        0.26,
    );
}

#[test]
fn mis_set_nodes_are_refused_by_the_group_record() {
    let config = mis_set_restarts();
    let mut mis_set = 0;
    for seed in 0..SEEDS {
        match run_seed(&config, seed) {
            Ok(report) => mis_set += report.samples.faults.misconfigured,
            Err(violation) => panic!("{violation}"),
        }
    }
    assert!(
        mis_set >= 8,
        "only {mis_set} mis-set restarts in {SEEDS} seeds"
    );
}

/// Seeds of the 100,000-seed session-mode run that once broke the single-owner check: a
/// holder's member record read before its lease was taken (1393), and a lease taken before
/// its taker's session was in the store (16618).
#[test]
fn session_seeds_that_once_took_a_lease_from_a_live_holder_pass() {
    let config = SimConfig {
        lease_mode: leasehold::LeaseMode::Session,
        explore: false,
        ..SimConfig::default()
    };
    for seed in [1393, 16618] {
        if let Err(violation) = run_seed(&config, seed) {
            panic!("{violation}");
        }
    }
}

/// Destroys and builds out again every minute or so, in either lease mode.
fn rebuilt(mut config: SimConfig) -> SimConfig {
    config.faults.rebuild_every = Duration::from_secs(60);
    config
}

/// Fails without the destroy's protections: a destroy that neither raises the group's
/// generation (so running nodes register again and carry on) nor ends the sessions of what
/// they hold, followed by records created released, lets a new owner in while an old one
/// still serves. The records created again also start their epochs over, which the
/// epoch-order check may catch first in a seed.
#[test]
fn a_destroy_that_leaves_running_nodes_serving_is_caught_by_the_single_owner_check() {
    for config in [rebuilt(fleet()), rebuilt(session_fleet())] {
        let mut config = config;
        config.unsafe_destroy = true;
        let caught: Vec<Violation> = (0..8)
            .filter_map(|seed| run_seed(&config, seed).err())
            .collect();
        for violation in &caught {
            let expected = [Invariant::SingleOwner, Invariant::EpochOrder];
            assert!(expected.contains(&violation.invariant), "{violation}");
            assert!(
                violation.replay.contains("--unsafe-destroy"),
                "{}",
                violation.replay
            );
        }
        let two_owners = caught
            .iter()
            .filter(|v| v.invariant == Invariant::SingleOwner)
            .count();
        println!(
            "{}: {two_owners} of 8 seeds broke single-owner",
            config.lease_mode
        );
        // 7 of 8 in either mode as measured: about three quarters of that.
        assert!(
            two_owners >= 5,
            "only {two_owners} of 8 seeds broke single-owner: {caught:?}"
        );
    }
}

/// The same destroys, made as `leasehold destroy --force` and `init` make them, pass every
/// invariant in both lease modes and with twins.
#[test]
fn destroys_on_a_live_fleet_pass_every_invariant() {
    let mut twins = rebuilt(session_fleet());
    twins.twins = true;
    for config in [rebuilt(fleet()), rebuilt(session_fleet()), twins] {
        for seed in 0..SEEDS {
            if let Err(violation) = run_seed(&config, seed) {
                panic!("{violation}");
            }
        }
    }
}

/// Seeds of the default run that once failed once destroys and unreadable member records
/// joined the fault mix: a node took the partitions of a member whose record it could not
/// decode as soon as a destroy deleted that record, because it counted the member gone from
/// when it became unreadable (36, 39, 1447; 103 with twins); a garbled record lasting into
/// the quiet period (221 with twins), or checked for balance while it lasted, when the
/// reader counts the member dead (72242); drains a destroy deleted still expected (1); a node
/// that could not decode its own record took its last readable copy's drain flag for the
/// operator's, and wrote the drain away (917 with twins, per partition); with session
/// leases, a take whose reply timed out landed after a listing still showed the record
/// before it, so its holder forgot the take's deadline and, its view of the record out of
/// date through a throttled store, released it only `acquire_after` after seeing it again
/// (90054: one partition unowned past the liveness bound); a hand-off for an exclusion
/// still renewed by its session after its drain limit, because the node, held up in slow
/// store calls, renewed before it marked the hand-off abandoned (32734), or started counting
/// the drain limit only when it first looked at the hand-off (54706); a node that, re-reading
/// its session, found its member record forgotten while it was cut off wrote it back with
/// the drain an operator had lifted meanwhile, so that it and the process after it held
/// nothing in a settled fleet (12782, 41893); a take sent before an exclusion, whose
/// outcome a node cut off from the store learnt only by a read-back 14 s later, started a
/// tenure on the partition it now excluded (16260); a restarted process freeing its crashed
/// predecessor's records, one transaction each with its member record, took its own
/// heartbeat's renewal in the middle of the batch for another process's and gave the rest
/// up, so that four partitions waited for scans past the liveness bound (23363); a node on
/// its way out, whose release of a partition the store had refused and whose record an
/// operator had since rewritten, freed it on exit with the version it had last read, failed,
/// and left it for the others to wait out `acquire_after` after its session was gone
/// (10940).
#[test]
fn seeds_that_once_failed_with_destroys_and_unreadable_members_pass() {
    let (session, twins) = (by_session(), by_session_with_twins());
    let per_partition_twins = SimConfig {
        twins: true,
        ..SimConfig::default()
    };
    let runs = [
        (SimConfig::default(), vec![1]),
        (per_partition_twins, vec![917]),
        (
            session,
            vec![36, 39, 1447, 72242, 90054, 32734, 54706, 12782, 41893],
        ),
        (twins, vec![103, 221]),
    ];
    let unexplored = runs.map(|(config, seeds)| {
        let config = SimConfig {
            explore: false,
            ..config
        };
        (config, seeds)
    });
    // Found with the timings explored, as `leasehold sim` runs by default.
    every_seed_passes(
        unexplored
            .into_iter()
            .chain([(by_session(), vec![16260, 23363, 10940])]),
    );
}

/// Panics with the first violation among `runs`' seeds.
fn every_seed_passes(runs: impl IntoIterator<Item = (SimConfig, Vec<u64>)>) {
    for (config, seeds) in runs {
        for seed in seeds {
            if let Err(violation) = run_seed(&config, seed) {
                panic!("{violation}");
            }
        }
    }
}

/// A seed of the session run with twins at which a process replaced while paused, whose
/// replies were then lost so that it never heard of its successor, released a record naming
/// its own name under the successor's live session (a record it took for one of its own
/// left behind), and took the partition while the successor served it (1443). Releases of
/// such records are now made only while the name's member record shows the releasing
/// process's own session.
#[test]
fn a_replaced_process_never_frees_what_its_successor_serves() {
    let config = by_session_with_twins();
    assert!(config.explore);
    every_seed_passes([(config, vec![1443])]);
}

/// Seeds at which a holder counting its lease's validity from the renewal's reply instead of
/// its send (in `participant/heartbeat.rs`, per partition and by session) breaks the
/// single-owner check: a renewal answered late over a slow link, then the link cut, with
/// `acquire_after` drawn just above the safety bound. They pass only while validity is
/// counted from the send; with the default timings' fifteen-second margin no seed catches it.
#[test]
fn seeds_near_the_bound_that_catch_validity_counted_from_the_reply_pass() {
    let session = by_session();
    let runs = [
        (SimConfig::default(), vec![1, 73, 110, 128]),
        (session, vec![91, 119, 198, 298]),
    ];
    assert!(runs.iter().all(|(config, _)| config.explore));
    every_seed_passes(runs);
}

/// Seeds of the session run at which a process ended its own session over its own last
/// write, each caught by the own-session check: refused renewals crowded the process's own
/// last write out of its window of stamps while its re-reads failed (171, 234), a heartbeat
/// wrote the member record while a write of the shutdown's waited for its reply (1222), and,
/// with twins, more renewals of unknown outcome than a window of sixteen stamps holds
/// followed the one that landed (268). Each was shown failing with its mechanism removed
/// while the window held 16 stamps; with 1,024, seeds 171 and 234 no longer reach an
/// overflow, and `session_hardening.rs` holds the refused stamps' removal on its own.
#[test]
fn seeds_at_which_a_process_ended_its_own_session_pass() {
    let (session, twins) = (by_session(), by_session_with_twins());
    assert!(session.explore);
    every_seed_passes([(session, vec![171, 234, 1222]), (twins, vec![268])]);
}
