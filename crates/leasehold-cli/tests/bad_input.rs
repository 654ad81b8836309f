//! Every bad input gives one clear line on stderr naming what was wrong, and exit code 2.

mod common;

use std::time::Duration;

use common::{assert_clean_error, leasehold, Site};

#[test]
fn unknown_store_scheme_is_named_with_the_supported_ones() {
    let run = leasehold(&["--store", "postgress://localhost/db", "status"]);
    assert_clean_error(
        &run,
        &[
            "leasehold: error:",
            "unknown scheme \"postgress\"",
            "sqlite:PATH",
            "memory:",
        ],
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
}

#[test]
fn missing_group_is_named() {
    let site = Site::new();
    for command in [
        &["status"][..],
        &["kick", "0"],
        &["offline", "3"],
        &["drain", "n1"],
    ] {
        let run = site.run(command);
        assert_clean_error(&run, &["group default does not exist"]);
    }
    // For `stale`, a check that cannot be made is UNKNOWN: exit 3.
    let run = site.run(&["--group", "orders", "stale", "--watch", "10ms"]);
    common::assert_clean_error_exiting(&run, 3, &["group orders does not exist"]);
}

#[test]
fn unknown_partition_and_node_are_named() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let run = site.run(&["kick", "9"]);
    assert_clean_error(
        &run,
        &["partition 9 does not exist in group default", "0 to 3"],
    );
    let run = site.run(&["status", "--partition", "7"]);
    assert_clean_error(&run, &["partition 7 does not exist"]);
    let run = site.run(&["drain", "ghost"]);
    assert_clean_error(&run, &["node ghost is not a member of group default"]);
    let run = site.run(&["status", "--node", "ghost"]);
    assert_clean_error(&run, &["node ghost is not a member"]);
}

#[test]
fn unreachable_store_is_named_with_its_cause() {
    let site = Site::new();
    let url = format!("sqlite://{}", site.path("no/such/dir/leases.db").display());
    let run = leasehold(&["--store", &url, "status"]);
    assert_clean_error(
        &run,
        &[
            "leasehold: error: cannot open store",
            "no/such/dir/leases.db",
        ],
    );
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
}

#[test]
fn invalid_node_timings_name_the_values() {
    let site = Site::new();
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["--heartbeat", "1s", "--validity", "1s"],
            &["heartbeat = 1s", "lease_validity = 1s"],
        ),
        (
            &[
                "--heartbeat",
                "500ms",
                "--validity",
                "2s",
                "--acquire-after",
                "2s",
            ],
            &["acquire_after = 2s", "lease_validity = 2s"],
        ),
        (&["--weight", "0"], &["weight must be at least 1"]),
        (
            &["--scan-interval", "3000000000000000h"],
            &["scan_interval = 10800000000000000000s must be at most 31536000s"],
        ),
    ];
    for (flags, needles) in cases {
        let mut args = vec!["node", "--id", "n1", "--partitions", "4"];
        args.extend_from_slice(flags);
        let run = site.run(&args);
        assert_clean_error(&run, needles);
        assert!(
            run.stderr.contains("invalid configuration for node n1"),
            "{run:?}"
        );
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    }
}

#[test]
fn malformed_arguments_are_refused() {
    let site = Site::new();
    let run = site.run(&["node", "--id", "n1", "--heartbeat", "2x"]);
    assert_clean_error(&run, &["\"2x\"", "unknown unit"]);
    let run = site.run(&["node", "--id", "bad name"]);
    assert_clean_error(&run, &["invalid node id \"bad name\""]);
    let run = site.run(&["--group", "a/b", "status"]);
    assert_clean_error(&run, &["invalid group name \"a/b\""]);
    let run = site.run(&["destroy"]);
    assert_clean_error(&run, &["--yes"]);
    let run = site.run(&["node", "--id", "n1"]);
    assert_clean_error(&run, &["group default does not exist", "--partitions"]);
}

/// Runs `leasehold` with its standard output going to a connection whose reading end is
/// already closed, as behind `| head` once head has exited: every write fails with a broken
/// pipe.
fn run_into_closed_pipe(site: &Site, args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(reader);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["--store", &site.store()])
        .args(args)
        .stdout(std::os::fd::OwnedFd::from(writer))
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_reader_that_stops_reading_is_not_an_error() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    for (args, code) in [
        (&["status"][..], 0),
        (&["status", "--json"], 0),
        (&["kick", "1"], 0),
        // The check's own verdict (no live nodes) survives the closed pipe.
        (&["stale", "--watch", "10ms"], 1),
        (&["sim", "--seed", "1", "--duration", "5m"], 0),
        (&["sim", "--seed", "1", "--duration", "5m", "--trace"], 0),
    ] {
        let (status, stderr) = run_into_closed_pipe(&site, args);
        assert_eq!(status, Some(code), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// A lease row that cannot be decoded, met by a running node, is skipped with one warning
/// naming it (not one per scan), and the node serves every other partition.
#[test]
fn a_node_skips_an_unreadable_lease_row_with_one_warning_and_serves_the_rest() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let connection = rusqlite::Connection::open(site.path("leases.db")).unwrap();
    let sql = "UPDATE leases SET state = 'bogus' WHERE partition = 1";
    assert_eq!(connection.execute(sql, []).unwrap(), 1, "{sql}");
    let mut node = site.node("n1", &[]);
    site.wait_for(
        Duration::from_secs(30),
        "partitions 0, 2 and 3 held",
        || {
            let holders = site.holders();
            [0, 2, 3]
                .iter()
                .all(|p| holders.get(p).is_some_and(|h| h.as_deref() == Some("n1")))
        },
    );
    // More scans, each meeting the row again.
    std::thread::sleep(Duration::from_secs(2));
    assert!(node.is_running(), "{}", site.node_stderr("n1"));
    let stderr = site.node_stderr("n1");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("skipping a record that cannot be read"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("lease 1") && warnings[0].contains("bogus"),
        "{}",
        warnings[0]
    );
    assert_eq!(node.terminate(Duration::from_secs(20)), 0);
}
