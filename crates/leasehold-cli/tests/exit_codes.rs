//! Exit codes once the store is open: 2 whenever a command fails, whatever it was doing, and
//! 1 only when a check ran to the end and found something wrong. Each failure is made
//! deterministic by changing the SQLite file under the binary.

mod common;

use common::{assert_clean_error, assert_clean_error_exiting, Site};

/// Runs SQL on the site's file behind leasehold's back.
fn alter(site: &Site, statements: &str) {
    let connection = rusqlite::Connection::open(site.path("leases.db")).unwrap();
    connection.execute_batch(statements).unwrap();
}

/// Fails if a write the store fails after it was opened (the file locked by another
/// connection for longer than `--timeout`) exits with anything but 2, or is reported as
/// something else than the failed write, such as contention.
#[test]
fn a_store_failing_after_it_was_opened_exits_2() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    let mut holder = rusqlite::Connection::open(site.path("leases.db")).unwrap();
    let lock = holder
        .transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)
        .unwrap();
    // SQLite stops waiting for the lock a quarter of the call's time before the limit, to
    // report the lock itself. With 300 ms that left 75 ms, which two busy loops beside the
    // suite outlasted: the call's own time limit answered first, naming nothing. Two seconds
    // leave half a second.
    let run = site.run(&["--timeout", "2s", "kick", "0"]);
    assert_clean_error(
        &run,
        &[
            "writing lease 0 of group default",
            "locked by another connection",
        ],
    );
    lock.rollback().unwrap();
    site.ok(&["kick", "0"]);
}

/// Fails if `stale` turns a store failure in the middle of its check into a verdict (exit 0,
/// 1 or 2) instead of exit 3, UNKNOWN: a probe that cannot read the group record cannot
/// know whether epochs went back.
#[test]
fn stale_exits_3_when_the_store_fails_mid_check() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    // The listings still work; the group record, read after them, cannot be read.
    alter(&site, "DROP TABLE groups");
    for json in [false, true] {
        let mut args = vec!["stale", "--watch", "10ms", "--min-nodes", "0"];
        args.extend(json.then_some("--json"));
        let run = site.run(&args);
        assert_clean_error_exiting(
            &run,
            3,
            &[
                "reading group record of group default",
                "no such table: groups",
            ],
        );
        assert_eq!(run.stdout, "", "no verdict without a check: {run:?}");
    }
}

/// Fails if an operator change that gives up on a record rewritten between every read and
/// write (`AdminError::Contended`) exits with anything but 2. The rewriting is simulated
/// deterministically: the lease table is replaced by a view whose versions are random, so
/// every compare-and-set finds a version other than the one it read.
#[test]
fn a_change_that_keeps_losing_the_race_exits_2() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    alter(
        &site,
        "ALTER TABLE leases RENAME TO lease_rows;
         CREATE VIEW leases AS SELECT grp, partition, owner, epoch, state, prohibited, load,
             note, written_at_unix_ms, (random() & 4611686018427387903) + 1 AS version,
             previous_owner, handed_to, session
         FROM lease_rows;",
    );
    let run = site.run(&["kick", "0"]);
    assert_clean_error(&run, &["lease 0 kept changing; gave up after 16 attempts"]);
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
}

/// Fails if `demo` exits 0 when one of its checks fails, or treats the failed check as an
/// error (exit 2). Here no node ever takes a partition — the group record left by an
/// earlier group of the same name admits none of the demo's timings — so the phase that
/// waits for the partitions to be spread runs out (after 10 s plus ten `acquire_after`).
#[test]
fn demo_exits_1_when_a_check_fails() {
    let site = Site::new();
    site.ok(&[
        "init",
        "--partitions",
        "1",
        "--lease-validity",
        "1s",
        "--acquire-after",
        "2s",
    ]);
    site.ok(&["destroy", "--yes"]);
    let run = site.run(&[
        "demo",
        "--nodes",
        "3",
        "--partitions",
        "4",
        "--heartbeat",
        "20ms",
        "--validity",
        "80ms",
        "--acquire-after",
        "100ms",
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    for needle in [
        "TIMED OUT after 11.00s: the partitions to be spread",
        "result:                FAILED",
    ] {
        assert!(run.stdout.contains(needle), "{needle:?}: {run:?}");
    }
    assert!(!run.stderr.contains("leasehold: error"), "{run:?}");
}

/// Fails if `--version` stops naming the commit the binary was built from (the one checked
/// out here, when the tests run from a git checkout) or the stores it can open.
#[test]
fn the_version_names_the_commit_and_the_stores() {
    let run = common::leasehold(&["--version"]);
    assert_eq!(run.code, 0, "{run:?}");
    let commit = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("commit: "))
        .unwrap_or_else(|| panic!("no commit line: {run:?}"));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    match head {
        Some(head) => assert_eq!(commit, head, "{run:?}"),
        None => assert_eq!(commit, "unknown", "{run:?}"),
    }
    assert!(
        run.stdout
            .lines()
            .any(|line| line.starts_with("stores: sqlite")),
        "{run:?}"
    );
}
