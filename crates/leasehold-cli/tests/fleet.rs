//! `leasehold fleet` at a small size: participants in one process take every partition and
//! report what they cost the store, and the group is gone afterwards.

mod common;

use common::Site;
use serde_json::Value;

#[test]
fn a_small_fleet_reports_its_store_costs_and_leaves_nothing_behind() {
    let site = Site::new();
    let run = site.run(&[
        "--group",
        "fleet-smoke",
        "fleet",
        "--nodes",
        "4",
        "--partitions",
        "32",
        "--duration",
        "4s",
        "--heartbeat",
        "500ms",
        "--validity",
        "3s",
        "--acquire-after",
        "4s",
        "--scan-interval",
        "250ms",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("fleet --json printed no JSON ({e}): {run:?}"));
    // Healthy or not, the exit code says the same as the report.
    let lost: u64 = report["leases_lost"]
        .as_array()
        .expect("leases_lost")
        .iter()
        .map(|n| n.as_u64().expect("a count"))
        .sum();
    let healthy = lost == 0 && report["owned_at_end"] == 32;
    assert_eq!(run.code, if healthy { 0 } else { 1 }, "{run:?}");
    assert_eq!(report["nodes"], 4);
    assert!(
        report["every_partition_owned_after"].as_f64().is_some(),
        "{report}"
    );
    let whole = &report["whole_run"]["counts"];
    assert!(whole["write_calls"].as_u64() > Some(0), "{report}");
    // Every partition was written at least once (taken), and the table read whole.
    assert!(whole["records_written"].as_u64() >= Some(32), "{report}");
    assert!(whole["records_read"].as_u64() >= Some(32), "{report}");
    assert!(report["scans_per_node"].as_f64() > Some(1.0), "{report}");
    // A table this small is read at every scan, and the report says so.
    let started = report["listings_started"]
        .as_object()
        .expect("listings_started");
    assert!(started["every_scan"].as_u64() > Some(0), "{report}");
    assert!(
        started.keys().all(|cause| cause == "every_scan"),
        "{report}"
    );
    // Every scan is counted by why it ran when it did: each node's first, then the rest.
    let scans = &report["scans_started"];
    assert_eq!(scans["start"], 4, "{report}");
    let scans_started: u64 = scans
        .as_object()
        .expect("scans_started")
        .values()
        .map(|n| n.as_u64().expect("a count"))
        .sum();
    let scans_done = report["scans_per_node"].as_f64().expect("scans_per_node") * 4.0;
    assert!(scans_started as f64 >= scans_done, "{report}");
    assert!(report["write_latency_ms"][1].as_f64().is_some(), "{report}");
    assert!(
        report["fleet_process"]["cpu_seconds"].as_f64() > Some(0.0),
        "{report}"
    );

    // The run's group is deleted; a group in use is refused.
    let status = site.run(&["--group", "fleet-smoke", "status"]);
    assert_eq!(status.code, 2, "{status:?}");
    assert!(status.stderr.contains("does not exist"), "{status:?}");
    site.ok(&["--group", "busy", "init", "--partitions", "2"]);
    let refused = site.run(&[
        "--group",
        "busy",
        "fleet",
        "--nodes",
        "1",
        "--duration",
        "1s",
    ]);
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("already has records"),
        "{refused:?}"
    );
}

/// A small fleet's `--json` report on `site`'s store.
fn small_fleet(site: &Site) -> Value {
    let run = site.run(&[
        "fleet",
        "--nodes",
        "3",
        "--partitions",
        "16",
        "--duration",
        "4s",
        "--heartbeat",
        "500ms",
        "--validity",
        "3s",
        "--acquire-after",
        "4s",
        "--scan-interval",
        "250ms",
        "--json",
    ]);
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("fleet --json printed no JSON ({e}): {run:?}"))
}

/// Fails if a fleet on PostgreSQL does not report the server's own row counts, or if they
/// miss the renewals the clients sent.
#[test]
fn on_postgres_the_servers_row_counts_are_reported() {
    let Some(site) = Site::postgres() else {
        return;
    };
    let report = small_fleet(&site);
    let whole = &report["server_counts"][0]["per_second"];
    // The 16 records were created by the run, and renewed every 500 ms since.
    assert!(whole["inserted"].as_f64() > Some(0.0), "{report}");
    assert!(whole["updated"].as_f64() > Some(0.0), "{report}");
    assert!(whole["read"].as_f64() > Some(0.0), "{report}");
}

/// Fails if a fleet on etcd does not report the members' own counts, or if the puts they
/// applied fall short of the records the clients wrote.
#[test]
fn on_etcd_the_members_counts_are_reported() {
    let Some(endpoints) = leasehold::testing::service_env("LEASEHOLD_TEST_ETCD_ENDPOINTS", "etcd")
    else {
        return;
    };
    let site = Site::on_server(format!("etcd://{endpoints}/leasehold-fleet-test"));
    let report = small_fleet(&site);
    let whole = &report["server_counts"][0]["per_second"];
    let written = report["whole_run"]["counts"]["records_written"]
        .as_f64()
        .unwrap();
    let seconds = report["whole_run"]["seconds"].as_f64().unwrap();
    // Every record written is a put the members applied (more, if a run overlapped).
    assert!(
        whole["puts"].as_f64() >= Some(written / seconds * 0.9),
        "{report}"
    );
    assert!(whole["ranges"].as_f64() > Some(0.0), "{report}");
}
