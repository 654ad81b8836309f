//! Real faults on real processes: three `leasehold node` processes doing units of work under
//! permits, each reaching its store through a proxy of its own (`proxy.rs`), under a seeded
//! schedule of faults (`schedule.rs`): a node cut from the store both ways or for replies
//! only, latency on its path up to beyond the lease validity, packet loss, the store cut from
//! every node, pauses and kills. Their clocks run one percent slow and fast, at the drift
//! bound they are configured with. Afterwards the logs are checked (`checker.rs`): no two
//! nodes' units on one partition overlapped, nor their tenures as the fence log states
//! them, epochs only rose, every partition was worked again soon after the faults healed,
//! and no process exited by itself.
//!
//! The timings sit just inside the safety rule (`acquire_after` 3.07 s against a validity
//! of 3 s at ρ = 0.01, a margin of 9 ms), so that a holder keeping a lease a moment too long
//! shows: a path slowed to just under the store time-out and then cut catches a holder that
//! counted its lease from a renewal's late reply. Two negative controls show the checks
//! fire: a node whose clock runs three times too fast, and a node started with timings
//! that break the rule.
//!
//! The stores' schedules run side by side, each with a fleet, a group and proxies of its
//! own: they spend their time waiting on faults and lease timings, not on the CPU. The
//! negative controls run as tests of their own, beside at most one other.
//!
//! `NEMESIS_SECONDS` sets the schedule's length (40 s by default; `scripts/nemesis.sh --long`
//! runs ten minutes per store), `NEMESIS_SEED` its seed.

#[path = "../common/mod.rs"]
mod common;

mod checker;
mod handovers;
mod netns;
mod proxy;
mod schedule;

use std::time::Duration;

use common::Site;
use schedule::{Fleet, Timings};

/// The nemesis timings: a lease of 3 s renewed every second, taken over 3.07 s after its
/// record was last seen to change, store calls limited to a second: replies up to a second
/// late, against a margin of 9 ms.
const TIMINGS: Timings = Timings {
    heartbeat: "1s",
    validity: "3s",
    acquire_after: "3070ms",
    store_timeout: "1s",
};

/// A store the schedule runs against: its name, its `--store` URL, and the endpoints in it
/// that each node reaches through proxies of its own.
struct Target {
    name: &'static str,
    url: String,
    endpoints: Vec<String>,
}

fn postgres() -> Option<Target> {
    let url = leasehold::testing::service_env("LEASEHOLD_TEST_POSTGRES_URL", "PostgreSQL")?;
    let rest = url.split_once("://")?.1;
    let start = rest.find('@').map_or(0, |at| at + 1);
    let end = start + rest[start..].find('/')?;
    let endpoint = rest[start..end].to_owned();
    Some(Target {
        name: "postgres",
        url,
        endpoints: vec![endpoint],
    })
}

fn etcd() -> Option<Target> {
    let endpoints = leasehold::testing::service_env("LEASEHOLD_TEST_ETCD_ENDPOINTS", "etcd")?;
    Some(Target {
        name: "etcd",
        url: format!("etcd://{endpoints}/leasehold-nemesis"),
        endpoints: endpoints.split(',').map(str::to_owned).collect(),
    })
}

fn zookeeper() -> Option<Target> {
    let endpoint = leasehold::testing::service_env("LEASEHOLD_TEST_ZOOKEEPER", "ZooKeeper")?;
    Some(Target {
        name: "zookeeper",
        url: format!("zk://{endpoint}/leasehold-nemesis"),
        endpoints: vec![endpoint],
    })
}

/// How long the schedule runs: `NEMESIS_SECONDS`, 40 s by default.
fn schedule_length() -> Duration {
    let seconds = std::env::var("NEMESIS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    Duration::from_secs(seconds)
}

/// The schedule's seed: `NEMESIS_SEED`, or drawn and printed so that a failure can be rerun.
fn seed() -> u64 {
    std::env::var("NEMESIS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Runs the fault schedule against `target` and asserts every check.
fn survives(target: Option<Target>) {
    let Some(target) = target else {
        return;
    };
    let seed = seed();
    println!("nemesis on {}: NEMESIS_SEED={seed}", target.name);
    let site = Site::on_server(target.url.clone());
    let rates = ["0.99", "1.01", "1.0"];
    let mut fleet = Fleet::start(&site, &target.endpoints, &target.url, TIMINGS, &rates, &[]);
    let report = fleet.run_schedule(seed, schedule_length());
    println!("nemesis on {}:\n{report}", target.name);
    report.assert_all_held(&site);
}

/// Runs `scenarios` side by side, each in a thread of its own, and fails naming every one
/// that failed (each prints its own report and findings).
fn side_by_side(scenarios: &[(&str, fn())]) {
    let failed: Vec<&str> = std::thread::scope(|scope| {
        let running: Vec<_> = scenarios
            .iter()
            .map(|&(name, scenario)| (name, scope.spawn(scenario)))
            .collect();
        running
            .into_iter()
            .filter_map(|(name, thread)| thread.join().is_err().then_some(name))
            .collect()
    });
    assert!(failed.is_empty(), "failed: {}", failed.join(", "));
}

/// Every store under its seeded schedule, and late renewal replies over etcd.
#[test]
fn every_store_survives_the_fault_schedule() {
    side_by_side(&[
        ("postgres", || survives(postgres())),
        ("etcd", || survives(etcd())),
        ("zookeeper", || survives(zookeeper())),
        (
            "late renewal replies",
            late_renewal_replies_do_not_extend_a_lease,
        ),
    ]);
}

/// A negative control on PostgreSQL: three nodes, the last with its lease clock at
/// `rates[2]` and `last_extra` flags, the other two cut from the store in turn until the
/// work log shows an overlap, for up to twelve rounds; fails unless the overlap check finds
/// the early takes that `broken` names.
fn caught_by_the_overlap_check(rates: &[&str; 3], last_extra: &[&str], broken: &str) {
    let Some(target) = postgres() else {
        return;
    };
    let site = Site::on_server(target.url.clone());
    let mut fleet = Fleet::start(
        &site,
        &target.endpoints,
        &target.url,
        TIMINGS,
        rates,
        last_extra,
    );
    let report = fleet.cut_the_others_until_an_overlap(2, 12);
    println!("control, {broken}:\n{report}");
    assert!(
        !report.findings.overlaps.is_empty(),
        "no overlap with {broken}: {report}"
    );
}

/// Fails if the overlap check cannot fire: a node whose lease clock runs three times too
/// fast (beyond the drift bound of one percent) takes over the partitions of nodes cut from
/// the store while they still work on them.
#[test]
fn a_clock_running_too_fast_is_caught_by_the_overlap_check() {
    // Its clock makes every timing a third as long in real time, store calls included:
    // limited to 333 ms, they time out on a loaded machine and it takes nothing, which hides
    // the early takes the check must see. Its heartbeat and store time-out, as long as the
    // rule allows (half its validity), give its calls 500 ms.
    caught_by_the_overlap_check(
        &["1.0", "1.0", "3.0"],
        &["--heartbeat", "1500ms", "--store-timeout", "1500ms"],
        "a clock three times fast",
    );
}

/// Fails if the overlap check cannot fire: a node started with `acquire_after` shorter than
/// the lease validity (`--unsafe-timings`) takes over the partitions of nodes cut from the
/// store while they still work on them.
#[test]
fn timings_that_break_the_safety_rule_are_caught_by_the_overlap_check() {
    caught_by_the_overlap_check(
        &["1.0", "1.0", "1.0"],
        &["--unsafe-timings", "--acquire-after", "400ms"],
        "acquire_after below the validity",
    );
}

/// Fails if a holder counts its lease's validity from a renewal's reply rather than its
/// send: over etcd (one round trip per renewal), each node's path in turn slows to just
/// under the store time-out, so renewals succeed late, and is then cut; the others take its
/// partitions `acquire_after` after they saw its last renewal. Its tenures, as its fence log
/// states them, must have ended by then.
fn late_renewal_replies_do_not_extend_a_lease() {
    let Some(target) = etcd() else {
        return;
    };
    let site = Site::on_server(target.url.clone());
    let rates = ["1.0", "1.0", "1.0"];
    let mut fleet = Fleet::start(&site, &target.endpoints, &target.url, TIMINGS, &rates, &[]);
    let report = fleet.slow_then_cut_each(4);
    println!("late renewal replies:\n{report}");
    report.assert_all_held(&site);
}

/// An etcd cluster of its own, each member in a network namespace: the leader, cut from the
/// other two members three times while every node still reaches it, loses its quorum and
/// the others elect another. Nodes whose calls went to it cannot renew and must stop at
/// their deadline; the others take over no sooner. A test of its own, beside at most one
/// other, as it runs a cluster besides its fleet.
#[test]
fn the_etcd_leader_cut_from_its_peers_is_survived() {
    if !netns::Cluster::possible() {
        return;
    }
    let site = Site::new();
    let cluster = netns::Cluster::start(&site);
    let endpoints = cluster.endpoints();
    let url = format!("etcd://{}/leasehold-nemesis", endpoints.join(","));
    let rates = ["0.99", "1.01", "1.0"];
    let mut fleet = Fleet::start(&site, &endpoints, &url, TIMINGS, &rates, &[]);
    let report = fleet.cut_each_leader(&cluster, 3);
    println!("etcd leader cut from the others:\n{report}");
    report.assert_all_held(&site);
}
